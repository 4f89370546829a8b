#!/usr/bin/env bash
# gpu-check.sh [NP]: the GPU checks CI cannot run, for a machine with an
# NVIDIA GPU and driver. Builds hdet, lists the GPUs, runs the GPU tests
# (NVML, CUDA driver, the end-to-end TestGPU under mpirun, and a PyTorch
# --worker script as 2 replicas of 2 ranks on the GPUs: TestGPUWorkerGroups), then
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
step gpu-tests go test -count=1 -v -run 'TestGPU$|TestDiscover|TestSystemDriver' ./device/... ./tests
# A --worker script on the GPUs (replica groups, DDP over NCCL inside a
# replica): PyTorch from the project's venv, made here where PyPI is
# reachable, else a python3 that has torch.
if [ -z "${HDET_PYTHON:-}" ] && ! scripts/deps.sh venv >"$out/venv.txt" 2>&1; then
	export HDET_PYTHON=$(command -v python3)
fi
step gpu-worker go test -count=1 -v -run 'TestGPUWorkerGroups' ./tests

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
