#!/usr/bin/env bash
# deps.sh COMPONENT...: makes sure what hdet's build, tests and demo need is
# installed. On Debian/Ubuntu as root it installs what is missing with
# apt-get; elsewhere (a cluster login node, another distribution, no root) it
# stops and names exactly what to install or load.
#   mpi       Open MPI with headers (mpicc, mpirun, pkg-config ompi)
#   blas      OpenBLAS (cblas_sgemm for the built-in MNIST workload)
#   slurm     slurmctld, slurmd, slurm-client, munge (the test cluster)
#   venv      the project's Python environment .venv/ (PyTorch and the client's
#             tools from python/requirements.lock, python/hdet editable), made
#             with uv from python3 (CPython 3.11); remade when the lock or
#             python/pyproject.toml changes
#   chromium  headless Chromium (the report page test)
#   protoc    protoc (make proto)
#   netns     ip, nsenter, unshare, flock (the multi-host test bed, scripts/testbed.sh)
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

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

# find_uv: the path of uv, on PATH or where pip installed it for python3
# (uv's Python package knows: the user's or python3's scripts folder).
find_uv() {
	command -v uv 2>/dev/null ||
		python3 -c 'import uv; print(uv.find_uv_bin())' 2>/dev/null
}

# venv: makes .venv at the repository root when it is missing, broken or
# stale: .venv/hdet-stamp holds the sha256 of python/requirements.lock and
# python/pyproject.toml it was made from. uv makes it from python3 on PATH,
# installs the lock with its hashes (uv's cache, ~/.cache/uv, makes a remake
# quick) and the client python/ editable, so python/hdet edits are live
# (compat mode: a path entry after PYTHONPATH, so the copy hdet hands a
# worker first on its PYTHONPATH is the one it imports).
venv() {
	local dir=$ROOT/.venv stamp=$ROOT/.venv/hdet-stamp want uv py start
	want=$(cd "$ROOT" && sha256sum python/requirements.lock python/pyproject.toml)
	fresh() { [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] && "$dir/bin/python" -c '' >/dev/null 2>&1; }
	if fresh; then
		return 0
	fi
	# One maker at a time (parallel makes): the second finds it made.
	if command -v flock >/dev/null 2>&1; then
		exec 9<"$ROOT/python/requirements.lock"
		flock 9
		if fresh; then
			return 0
		fi
	fi
	start=$(date +%s.%N)
	need "Python 3" "command -v python3" "python3" \
		"CPython 3.11 as python3 on PATH (Debian 12's python3, pyenv, or 'module load python/3.11')"
	if ! python3 -c 'import sys; sys.exit(not (sys.implementation.name == "cpython" and sys.version_info[:2] == (3, 11)))' 2>/dev/null; then
		cat >&2 <<MSG
deps: .venv needs CPython 3.11 as python3 on PATH (python/requirements.lock is compiled for it); python3 here is $(python3 -V 2>&1) ($(command -v python3)).
      Put a CPython 3.11 first on PATH: Debian 12's python3, pyenv ('pyenv install 3.11'), 'uv python install 3.11', or 'module load python/3.11'.
MSG
		exit 1
	fi
	py=$(python3 -c 'import sys; print(sys.executable)')
	if ! uv=$(find_uv); then
		need "pip" "python3 -m pip --version" "python3-pip" \
			"apt-get install python3-pip, or install uv yourself (https://docs.astral.sh/uv/getting-started/installation/)"
		echo "deps: python3 -m pip install --user uv" >&2
		# The user's site, even where the distribution manages python3's (PEP 668):
		# uv is one program that imports nothing of the system's.
		PIP_BREAK_SYSTEM_PACKAGES=1 PIP_ROOT_USER_ACTION=ignore python3 -m pip install --user --quiet uv >&2 || true
		if ! uv=$(find_uv); then
			cat >&2 <<MSG
deps: uv is missing and 'python3 -m pip install --user uv' did not install it.
      Install it yourself: https://docs.astral.sh/uv/getting-started/installation/ (or 'pipx install uv'), then run this again.
MSG
			exit 1
		fi
	fi
	rm -rf "$dir"
	if ! "$uv" venv --quiet --python "$py" "$dir" ||
		! "$uv" pip sync --quiet --python "$dir/bin/python" --require-hashes "$ROOT/python/requirements.lock" ||
		! "$uv" pip install --quiet --python "$dir/bin/python" --no-deps -C editable_mode=compat -e "$ROOT/python"; then
		cat >&2 <<MSG
deps: could not make .venv (above: $uv failed). It downloads python/requirements.lock's wheels from PyPI
      (torch with its CUDA libraries: 5.5 GB installed) unless uv's cache (~/.cache/uv) holds them; behind a mirror set UV_INDEX_URL.
MSG
		exit 1
	fi
	echo "$want" >"$stamp"
	echo "deps: made .venv ($("$dir/bin/python" -V), python/requirements.lock) in $(awk -v s="$start" -v e="$(date +%s.%N)" 'BEGIN { printf "%.1f", e - s }') s" >&2
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
	venv)
		venv ;;
	chromium)
		need "Chromium" "command -v chromium" "chromium" "apt-get install chromium" ;;
	netns)
		need "the test bed's tools" "command -v ip && command -v nsenter && command -v unshare && command -v flock" \
			"iproute2 util-linux" "apt-get install iproute2 util-linux" ;;
	protoc)
		need "protoc" "command -v protoc" "protobuf-compiler" "apt-get install protobuf-compiler" ;;
	*)
		echo "deps.sh: unknown component '$c' (allowed: mpi blas slurm venv chromium protoc netns)" >&2
		exit 2 ;;
	esac
done
