#!/bin/sh
# Issue 39: hdet against the tools a user would pick instead of it (lr_find,
# Prodigy, Schedule-Free, D-Adaptation, a sweep), on the MLP twin (AdamW and
# SGD), the examples' ConvNet (AdamW), the Hugging Face Trainer example
# (hf) and, with SETUPS=mlp-adamw,mlp-sgd,convnet-adamw,hf,gpt, the
# byte-level GPT.
# `make bench-peers` runs it after `make build data venv`; the markdown
# tables go to stdout and runs/peers/peers.md, every run's record under
# runs/peers/SETUP/ (an unchanged finished run is reused: delete runs/peers
# to start from scratch). On 2 busy cores the two MLP setups take about
# 2-3 hours (24 hdet runs of 4 ranks), the ConvNet and the Trainer about
# 30-40 minutes each; the GPT adds more. Each setup also runs issue 51's
# like-for-like rows: the same 4 ranks without the search at each start
# and at lr_find's suggestion (benchmarks.md, "Like for like"). Then the
# no-harm rows.
set -eu
cd "$(dirname "$0")/../.."
PYTHON=${PYTHON:-.venv/bin/python}
for f in bin/hdet bin/plugins/hdet-explorer-lr data/mnist/t10k-labels-idx1-ubyte.gz "$PYTHON"; do
	[ -e "$f" ] || { echo "bench/peers/run.sh: $f is missing; run make build data venv first" >&2; exit 2; }
done
"$PYTHON" bench/peers/run.py --setups "${SETUPS:-mlp-adamw,mlp-sgd,convnet-adamw,hf}" --heldout "${HELDOUT:-4,5}" \
	--hdet bin/hdet --python "$PYTHON" --runs "${RUNS:-runs/peers}" "$@"
# Issue 51's no-harm rows (benchmarks.md, "No harm"): the attach line
# alone, with a probe, and the same ranks without the search, against the
# script run plainly, on the regression MLP (about an hour).
exec "$PYTHON" bench/noharm/run.py --runs "${RUNS:-runs/peers}/noharm" --hdet bin/hdet --python "$PYTHON"
