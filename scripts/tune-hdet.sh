#!/usr/bin/env bash
# Reproducible tuning runs for the revision-2 meta-update's defaults
# (issue 14): plain max_lr sweep points and HDET runs on the built-in MNIST
# workload, one line per run appended to a TSV.
#
#   scripts/tune-hdet.sh OUT.tsv SETUP MODE "SEEDS" "MAX_LRS" [--set k=v ...]
#
#   SETUP  adamw | sgd   (sgd: workload.optimizer sgd, workload.momentum 0.9)
#   MODE   sweep (bench/configs/sweep.yaml: alpha 0, no auto) | hdet
#          (bench/configs/hdet.yaml) | a label for hdet with the extra --set
#          flags (e.g. "paper" with --set explorers.lr.config.auto.form=paper)
#   SEEDS, MAX_LRS  space-separated lists
#
# Columns: setup mode seed max_lr test_loss test_accuracy extra_flags.
# Needs `make build`; runs mpirun -np 4 (set NP to change), epochs 3.
set -euo pipefail
out=$1 setup=$2 mode=$3 seeds=$4 lrs=$5
shift 5
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
cfg=bench/configs/hdet.yaml
[ "$mode" = sweep ] && cfg=bench/configs/sweep.yaml
opt=()
case $setup in
adamw) ;;
sgd) opt=(--set workload.optimizer=sgd --set workload.momentum=0.9) ;;
*) echo "setup must be adamw or sgd, got $setup" >&2; exit 2 ;;
esac
tmp=${TMPDIR:-/tmp}/tune-hdet.$$
mkdir -p "$tmp"
trap 'rm -rf "$tmp"' EXIT
for seed in $seeds; do
	for lr in $lrs; do
		log=$tmp/run.log
		if ! mpirun -np "${NP:-4}" --oversubscribe --bind-to none bin/hdet run "$cfg" --run-dir "$tmp/run" --progress none \
			--set train.epochs=3 --set train.seed="$seed" --set explorers.lr.config.schedule.max_lr="$lr" \
			"${opt[@]}" "$@" >"$log" 2>&1; then
			printf '%s\t%s\t%s\t%s\tFAILED\t-\t%s\n' "$setup" "$mode" "$seed" "$lr" "$*" >>"$out"
			tail -3 "$log" >&2
			continue
		fi
		# "test accuracy 0.9806, test loss 0.0645 after 702 steps on 4 ranks"
		line=$(grep -m1 '^test accuracy' "$log")
		acc=$(sed -E 's/^test accuracy ([0-9.]+),.*/\1/' <<<"$line")
		loss=$(sed -E 's/.*test loss ([0-9.]+) .*/\1/' <<<"$line")
		printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$setup" "$mode" "$seed" "$lr" "$loss" "$acc" "$*" >>"$out"
		rm -rf "$tmp/run"
	done
done
