#!/usr/bin/env bash
# deps.sh COMPONENT...: makes sure what hdet's build, tests and demo need is
# installed. On Debian/Ubuntu as root it installs what is missing with
# apt-get; elsewhere (a cluster login node, another distribution, no root) it
# stops and names exactly what to install or load.
#   mpi       Open MPI with headers (mpicc, mpirun, pkg-config ompi)
#   blas      OpenBLAS (cblas_sgemm for the built-in MNIST workload)
#   slurm     slurmctld, slurmd, slurm-client, munge (the test cluster)
#   torch     Debian's PyTorch under /usr/bin/python3 (the PyTorch bridge)
#   chromium  headless Chromium (the report page test)
#   protoc    protoc (make proto)
#   netns     ip, nsenter, unshare, flock (the multi-host test bed, scripts/testbed.sh)
set -euo pipefail

updated=
apt_install() {
	if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
		return 1
	fi
	if [ -z "$updated" ]; then
		apt-get update -qq >/dev/null
		updated=1
	fi
	echo "deps: apt-get install $*" >&2
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}

# need NAME CHECK PACKAGES HINT: run CHECK; when it fails install PACKAGES
# (Debian names) or stop with HINT.
need() {
	local name=$1 check=$2 pkgs=$3 hint=$4
	if eval "$check" >/dev/null 2>&1; then
		return 0
	fi
	# shellcheck disable=SC2086
	if apt_install $pkgs && eval "$check" >/dev/null 2>&1; then
		return 0
	fi
	cat >&2 <<MSG
deps: $name is missing and could not be installed here (apt-get needs root on Debian or Ubuntu).
      Install it yourself: $hint
MSG
	exit 1
}

for c in "$@"; do
	case $c in
	mpi)
		need "Open MPI" "command -v mpicc && command -v mpirun && pkg-config --exists ompi" \
			"openmpi-bin libopenmpi-dev pkg-config" \
			"apt-get install openmpi-bin libopenmpi-dev pkg-config, or on a cluster 'module load openmpi' (any MPI whose pkg-config file is ompi.pc, or set CGO_CFLAGS/CGO_LDFLAGS from 'mpicc --showme:compile' and '--showme:link')" ;;
	blas)
		need "OpenBLAS" "test -e /usr/include/x86_64-linux-gnu/cblas.h -o -e /usr/include/cblas.h -o -e /usr/include/openblas/cblas.h" \
			"libopenblas-dev" "apt-get install libopenblas-dev, or 'module load openblas'" ;;
	slurm)
		need "Slurm" "command -v slurmctld && command -v slurmd && command -v sbatch && command -v munged" \
			"slurmctld slurmd slurm-client munge" "apt-get install slurmctld slurmd slurm-client munge" ;;
	torch)
		need "PyTorch" "/usr/bin/python3 -c 'import torch'" "python3-torch" "apt-get install python3-torch" ;;
	chromium)
		need "Chromium" "command -v chromium" "chromium" "apt-get install chromium" ;;
	netns)
		need "the test bed's tools" "command -v ip && command -v nsenter && command -v unshare && command -v flock" \
			"iproute2 util-linux" "apt-get install iproute2 util-linux" ;;
	protoc)
		need "protoc" "command -v protoc" "protobuf-compiler" "apt-get install protobuf-compiler" ;;
	*)
		echo "deps.sh: unknown component '$c' (allowed: mpi blas slurm torch chromium protoc netns)" >&2
		exit 2 ;;
	esac
done
