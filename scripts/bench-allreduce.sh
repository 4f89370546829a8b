#!/usr/bin/env bash
# Compares hdet's Go MPI binding with plain C on the same in-place float32
# MPI_Allreduce: 4 ranks, alternating C and Go runs in one invocation, the
# median over rounds of each program's per-size median. Usage:
#   scripts/bench-allreduce.sh BIN_DIR [ROUNDS] [REPS]
set -euo pipefail
bin=${1:?usage: bench-allreduce.sh BIN_DIR [ROUNDS] [REPS]}
rounds=${2:-5}
reps=${3:-15}
np=${NP:-4}
sizes="1000 10000 100000 1000000 4000000 16000000"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for r in $(seq "$rounds"); do
	for side in c go; do
		mpirun -np "$np" --oversubscribe --bind-to none "$bin/allreduce-$side" "$reps" $sizes |
			sed "s/^/$side /" >>"$tmp/all"
	done
done
echo "MPI_Allreduce in place, float32, $np ranks on $(nproc) cores ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')), $rounds rounds x $reps reps"
printf '%12s %14s %14s %8s\n' floats "C (us)" "Go (us)" "Go/C"
for n in $sizes; do
	c=$(awk -v n="$n" '$1=="c" && $2==n {print $3}' "$tmp/all" | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}')
	g=$(awk -v n="$n" '$1=="go" && $2==n {print $3}' "$tmp/all" | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}')
	awk -v n="$n" -v c="$c" -v g="$g" 'BEGIN {printf "%12d %14.1f %14.1f %8.3f\n", n, c*1e6, g*1e6, g/c}'
done
