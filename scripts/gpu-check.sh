#!/usr/bin/env bash
# gpu-check.sh [NP]: the GPU checks CI cannot run, for a machine with an
# NVIDIA GPU and driver. Builds hdet, lists the GPUs, runs the GPU tests
# (NVML, CUDA driver, and the end-to-end TestGPU under mpirun), then
# `hdet bench allreduce` with NP ranks (default: one per GPU, at least 2) on
# device buffers (staged, and direct when the MPI is CUDA-aware) and on host
# buffers for comparison. Everything is kept in $OUT (default ./gpu-check-out);
# the exit status is 1 if any step failed.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-gpu-check-out}
mkdir -p "$out"
scripts/deps.sh mpi || exit 1
export CGO_CFLAGS=-Wno-deprecated-declarations OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
bin=$(mktemp -d)/hdet
go build -o "$bin" ./cmd/hdet || exit 1

failed=0
step() { # step NAME COMMAND...: run, show and keep its output
	echo "== $1" | tee -a "$out/summary.txt"
	"${@:2}" 2>&1 | tee "$out/$1.txt"
	local rc=${PIPESTATUS[0]}
	echo "== $1: exit $rc" | tee -a "$out/summary.txt"
	[ "$rc" = 0 ] || failed=1
}

step nvidia-smi nvidia-smi
step devices "$bin" devices
"$bin" devices --json >"$out/devices.json"
gpus=$(grep -c '"uuid": "GPU-' "$out/devices.json")
step gpu-tests go test -count=1 -v -run 'TestGPU|TestDiscover|TestSystemDriver' ./device/... ./tests

np=${1:-$((gpus > 2 ? gpus : 2))}
share=()
[ "$np" -gt "$gpus" ] && share=(--share-gpus)
bench() { mpirun -np "$np" --oversubscribe --bind-to none "$bin" bench allreduce "$@"; }
step bench-staged bench --path staged "${share[@]}"
if grep -q 'MPI CUDA-aware: true' "$out/bench-staged.txt"; then
	step bench-device bench --path device "${share[@]}"
else
	echo "MPI is not CUDA-aware: no direct device path" | tee -a "$out/summary.txt"
fi
step bench-host bench --path host
exit "$failed"
