#!/usr/bin/env bash
# `make bench-run`: what `make run` buys, seed by seed. The embedded default
# (examples/mnist.yaml: AdamW from the untuned max_lr 1e-3, lr, dropout and
# weight decay searched and committed) against plain synchronous DP at the
# same start (the same config with every explorer's spread 0 and its auto
# phase off: lr 1e-3, dropout 0.1, weight decay 0.01 throughout). Prints a
# markdown table of test accuracy per seed and how many seeds HDET ends at
# or above plain DP.
#
# usage: scripts/bench-make-run.sh BIN RUNS [SEED...]   (default seeds 1..10)
set -euo pipefail
bin=$1 runs=$2
shift 2
seeds=("$@")
[ ${#seeds[@]} -gt 0 ] || seeds=(1 2 3 4 5 6 7 8 9 10)
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
mpirun=(mpirun -np 4 --oversubscribe --bind-to none)
plain=()
for e in lr dropout weight_decay; do
	plain+=(--set "explorers.$e.config.spread.alpha=0" --set "explorers.$e.config.auto.enabled=false")
done

# run KIND SEED [ARGS...] prints the run's test accuracy, its wall time in
# seconds and its committed line (empty for plain runs), tab-separated.
run() {
	local kind=$1 seed=$2 dir=$runs/$1-$2
	shift 2
	rm -rf "$dir"
	local out t0=$SECONDS
	out=$("${mpirun[@]}" "$bin/hdet" run examples/mnist.yaml --run-dir "$dir" --progress none \
		--set "train.seed=$seed" "$@" 2>&1) || { echo "$kind seed $seed failed:" >&2; tail -5 <<<"$out" >&2; exit 1; }
	printf '%s\t%s\t%s\n' "$(grep -oP 'test accuracy \K[0-9.]+' <<<"$out" | tail -1)" $((SECONDS - t0)) \
		"$(grep -oP '^committed .*' <<<"$out" | tail -1)"
}

echo "| seed | HDET (make run) | plain sync DP at 1e-3 | HDET - plain | wall time HDET / plain | committed |"
echo "|---:|---:|---:|---:|---:|---|"
wins=0
for s in "${seeds[@]}"; do
	IFS=$'\t' read -r h ht committed < <(run hdet "$s")
	IFS=$'\t' read -r p pt _ < <(run plain "$s" "${plain[@]}")
	[ -n "$h" ] && [ -n "$p" ] || { echo "seed $s: a run failed (see above)" >&2; exit 1; }
	d=$(awk -v h="$h" -v p="$p" 'BEGIN { printf "%+.2f", 100 * (h - p) }')
	awk -v h="$h" -v p="$p" 'BEGIN { exit !(h >= p) }' && wins=$((wins + 1))
	printf '| %s | %.2f %% | %.2f %% | %s points | %s s / %s s | %s |\n' "$s" "$(awk -v x="$h" 'BEGIN{print 100*x}')" \
		"$(awk -v x="$p" 'BEGIN{print 100*x}')" "$d" "$ht" "$pt" "${committed#committed }"
done
echo
echo "HDET at or above plain synchronous DP on $wins of ${#seeds[@]} seeds."
