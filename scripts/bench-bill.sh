#!/usr/bin/env bash
# The whole bill (issue 52): one hdet run of the GPT with the default search
# pass (hdet run --worker, no config: search, commit, restart, main pass)
# against one torchrun run of the same script on the same ranks, in
# interleaved pairs, the order alternating. Usage:
#   scripts/bench-bill.sh [PAIRS]
# Environment: NP (ranks, 4), STEPS (300), GPT_ARGS (the script's other
# arguments), OUT (runs/bill). Both launchers run the workers with
# OMP_NUM_THREADS=1 and --threads 1 (torch.set_num_threads), printed below;
# bench/bill/report.py prints the table (per pair: each side's wall time,
# hdet's search pass, restart and main pass, the main pass's training loop
# per step against torchrun's; medians and ranges).
set -euo pipefail
pairs=${1:-6}
np=${NP:-4}
steps=${STEPS:-300}
read -r -a gpt <<<"${GPT_ARGS:---layers 2 --width 64 --max-lr 0.003 --seed 1}"
out=${OUT:-runs/bill}
py=${HDET_PYTHON:-.venv/bin/python}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
rm -rf "$out"
mkdir -p "$out"
args=(--steps "$steps" --threads 1 "${gpt[@]}")
{
	echo "threads: OMP_NUM_THREADS=$OMP_NUM_THREADS in both launchers' environment (mpirun -x), --threads 1"
	echo "torchrun: $(dirname "$py")/torchrun --standalone --nproc_per_node $np examples/pytorch/gpt.py ${args[*]}"
	echo "hdet: mpirun -np $np --oversubscribe --bind-to none -x OMP_NUM_THREADS bin/hdet run --run-dir RUN --progress none --worker -- $py examples/pytorch/gpt_hdet.py ${args[*]}"
	echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg); $(grep -c ^processor /proc/cpuinfo) cores"
} >"$out/setup.txt"
side() { # side NAME PAIR: one run, its wall time in DIR/wall
	local dir=$out/$1-$2 t0
	mkdir -p "$dir"
	t0=$(date +%s.%N)
	if [ "$1" = torchrun ]; then
		"$(dirname "$py")/torchrun" --standalone --nproc_per_node "$np" examples/pytorch/gpt.py "${args[@]}" >"$dir/out.log" 2>&1
	else
		mpirun -np "$np" --oversubscribe --bind-to none -x OMP_NUM_THREADS bin/hdet run --run-dir "$dir/run" --progress none \
			--worker -- "$py" examples/pytorch/gpt_hdet.py "${args[@]}" >"$dir/out.log" 2>&1
	fi
	echo "$(date +%s.%N) - $t0" | bc >"$dir/wall"
	echo "$(cut -d' ' -f1 /proc/loadavg)" >"$dir/load"
}
for p in $(seq 0 $((pairs - 1))); do
	if [ $((p % 2)) = 0 ]; then
		side torchrun "$p" && side hdet "$p"
	else
		side hdet "$p" && side torchrun "$p"
	fi
done
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)" >>"$out/setup.txt"
"$py" bench/bill/report.py "$out"
