# hdet — build, test, run. `make test` and `make run` install what they need
# (Open MPI, OpenBLAS, Slurm, Chromium from Debian's packages; PyTorch in the
# project venv .venv, from python/requirements.lock) when it is missing, or
# say what to install where they cannot.
GO      ?= go
BIN     := bin
DATA    := data/mnist
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
export CGO_CFLAGS ?= -Wno-deprecated-declarations
export OMPI_ALLOW_RUN_AS_ROOT := 1
export OMPI_ALLOW_RUN_AS_ROOT_CONFIRM := 1
# The project venv's Python (scripts/deps.sh venv makes .venv): the tests'
# PyTorch scripts run under it (internal/testenv reads HDET_PYTHON).
PYTHON  := $(CURDIR)/.venv/bin/python
export HDET_PYTHON := $(PYTHON)
NP      ?= 4
MPIRUN  ?= mpirun -np $(NP) --oversubscribe --bind-to none
EXPLORERS := lr dropout weight-decay
# staticcheck, pinned; `go run` fetches it through the module proxy.
STATICCHECK := honnef.co/go/tools/cmd/staticcheck@v0.8.2
# Packages that must build without cgo (the engine sees MPI only through
# interfaces; hparam and its subpackages do no I/O).
NOCGO   := ./internal/engine ./internal/bridge ./internal/watchdog ./hparam/... ./internal/controller ./internal/plan ./mpi/reduce ./internal/faults

.PHONY: all build deps venv bench-peers test test-go test-python test-faults test-multihost test-chaos test-chaos-long test-chaos-pytorch test-resume-4 run data bench bench-quick bench-run bench-allreduce bench-bill bench-pytorch bench-gpt bench-gpt-quick allreduce-bins lint proto gpu-check clean

all: build

deps:
	scripts/deps.sh mpi blas

# .venv: PyTorch, the client's tools and python/hdet (editable), from
# python/requirements.lock; remade when the lock or python/pyproject.toml
# changes, else a no-op.
venv:
	scripts/deps.sh venv

build: deps
	$(GO) build -ldflags "-X github.com/hdet-dev/hdet/internal/cli.Version=$(VERSION)" -o $(BIN)/hdet ./cmd/hdet
	@mkdir -p $(BIN)/plugins
	for e in $(EXPLORERS); do $(GO) build -o $(BIN)/plugins/hdet-explorer-$$e ./cmd/hdet-explorer-$$e || exit 1; done

data: $(DATA)/t10k-labels-idx1-ubyte.gz

$(DATA)/t10k-labels-idx1-ubyte.gz:
	scripts/mnist-data.sh $(DATA)

# The embedded default: 4 replicas on MNIST, lr + dropout + weight decay
# explored; a fresh run directory each time, the report at the end.
run: build data
	$(MPIRUN) $(BIN)/hdet run --run-dir runs/mnist-$$(date +%Y%m%d-%H%M%S)

# The fault suite and the multi-host suite spend most of their 3 and 8
# minutes waiting (killed ranks, frozen hosts, links down, watchdogs: 1.5
# and 2 CPU-minutes), so they run beside test-go, which keeps both cores
# busy; -Otarget prints each one's output whole when it ends. deps.sh has
# installed everything first, so no two apt-get runs meet.
test: deps data
	scripts/deps.sh slurm venv chromium netns
	$(MAKE) lint
	$(MAKE) test-python
	$(MAKE) -j3 -Otarget test-go test-faults test-multihost

# The fault suite runs in directory mode, where go test shows a passing
# test's output: its closing lines list each fault and "N passed, N failed".
FAULTS  := TestFaults|TestBadInput
# Multi-host tests need root and the netns test bed (scripts/testbed.sh).
MULTI   := TestMultiHost|TestLarge

# Every package under the race detector, cgo ones included; package signals
# again with the test pauses that tests/ builds hdet with (-tags testhooks).
test-go: venv
	$(GO) test -race -count=1 -timeout 60m -skip '$(FAULTS)|$(MULTI)' ./...
	$(GO) test -race -count=1 -tags testhooks ./internal/signals

test-faults: venv
	cd tests && $(GO) test -count=1 -timeout 35m -run '$(FAULTS)'

# The PyTorch resume tests (docs/pytorch.md#resume: the attach line local
# and DDP, replica groups, the Trainer and Lightning callbacks, each stopped
# in the search pass, at the commit and in the main pass) on 4 ranks; make
# test runs them on 2 (FSDP2 replica groups on 4, DDP ones only here).
# About 35 minutes on 2 cores.
RESUME := TestWorkerResumesAtTheStep|TestWorkerWithoutStateStartsOver|TestIntegrations(HuggingFace|Lightning)Resumes
test-resume-4: deps data venv
	cd tests && HDET_RESUME_RANKS=4 $(GO) test -count=1 -timeout 60m -v -run '$(RESUME)' .

# hdet across 3 fake hosts (network namespaces, one slurmd each): mpirun
# --hostfile, srun -N 3, sbatch, a dead or frozen host, buffers past 2 GiB,
# and the CI-sized chaos soaks (TestMultiHostChaos, 25 faults;
# TestMultiHostChaosPyTorch, 8 faults of a PyTorch script).
# The bed is torn down after the tests even when go test itself timed out.
test-multihost: deps data venv
	scripts/deps.sh netns slurm
	cd tests && $(GO) test -count=1 -timeout 40m -v -run '$(MULTI)' .; rc=$$?; \
		../scripts/testbed.sh down >/dev/null 2>&1; exit $$rc

# The chaos soak alone (docs/chaos.md): one run on the bed's 3 hosts through
# HDET_CHAOS_FAULTS random faults (25; 200 for the nightly kind of soak),
# relaunched after every failure; HDET_CHAOS_SEED replays a schedule.
# Root and the netns test bed; about 6 s a fault on 2 cores (200 faults:
# about 20 minutes). test-chaos-long is the 200-fault soak.
CHAOS_MINUTES = $(shell echo $$(( 20 + $${HDET_CHAOS_FAULTS:-25} )))
test-chaos: deps data
	scripts/deps.sh netns
	cd tests && $(GO) test -count=1 -timeout $(CHAOS_MINUTES)m -v -run 'TestMultiHostChaos$$' .; rc=$$?; \
		../scripts/testbed.sh down >/dev/null 2>&1; exit $$rc

test-chaos-long:
	HDET_CHAOS_FAULTS=200 $(MAKE) test-chaos

# The same soak of a PyTorch script under `hdet run --worker` with the attach
# line (tests/testdata/chaos_mlp.py, 3 hosts x 1 rank; docs/chaos.md): 8
# faults by default (the CI size, in make test-multihost: about 3 minutes).
# The script gives hdet its state (attach(..., state=...)), so a relaunch
# resumes at hdet's last checkpoint, written at every window end: a fault
# that ends a launch costs at most that window plus the restart (Python with
# torch started on every rank, twice for a launch that commits), and the
# soak's time grows linearly with its faults (the timeout: 2 minutes a fault).
CHAOS_PYTORCH_MINUTES = $(shell echo $$(( 20 + 2 * $${HDET_CHAOS_FAULTS:-8} )))
test-chaos-pytorch: deps data venv
	scripts/deps.sh netns
	cd tests && $(GO) test -count=1 -timeout $(CHAOS_PYTORCH_MINUTES)m -v -run 'TestMultiHostChaosPyTorch$$' .; rc=$$?; \
		../scripts/testbed.sh down >/dev/null 2>&1; exit $$rc


# The same in-place MPI_Allreduce through the Go binding and in C.
allreduce-bins: deps
	@mkdir -p $(BIN)
	mpicc -O2 -o $(BIN)/allreduce-c bench/allreduce-c/allreduce.c
	$(GO) build -o $(BIN)/allreduce-go ./bench/allreduce-go

bench-allreduce: allreduce-bins
	scripts/bench-allreduce.sh $(BIN)

# The whole bill (issue 52): one hdet run of the GPT with the default search
# pass against one torchrun run, interleaved pairs (PAIRS, 6): wall time,
# hdet's search pass, restart and main pass, the main pass per step.
PAIRS ?= 6
bench-bill: build venv
	scripts/bench-bill.sh $(PAIRS)

# hdet under mpirun against plain DDP + OneCycleLR on the PyTorch example.
bench-pytorch: build data venv
	$(GO) test -v -run XXX -bench BenchmarkPyTorchOverhead -benchtime 6x -timeout 60m ./tests

# One training step of the built-in MLP against its GEMMs alone, AdamW and
# SGD, with the AVX2 and the Go element-wise kernels (issue 15 item 6).
bench-trainer:
	$(GO) test -run XXX -bench BenchmarkTrainerGemmShare -benchtime 60x -cpu 1 ./internal/workload/mnist

# Regenerates plugins/contract/proto with pinned generators.
proto:
	scripts/deps.sh protoc
	sh scripts/gen-proto.sh

# The GPU end-to-end test and device allreduce figures, on a GPU node.
gpu-check: deps
	scripts/gpu-check.sh

# The Python client (python/hdet, python/tests) in the venv: ruff, mypy,
# pytest; configured in python/pyproject.toml.
test-python: venv
	$(PYTHON) -m ruff check python
	$(PYTHON) -m mypy --config-file python/pyproject.toml python/hdet
	$(PYTHON) -m pytest -q python/tests

lint: deps
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(GO) vet -tags faults,testhooks ./cmd/hdet ./internal/faults ./internal/signals
	CGO_ENABLED=0 $(GO) build $(NOCGO)
	$(GO) run $(STATICCHECK) ./...
	$(GO) run ./internal/tools/funclen .

clean:
	rm -rf $(BIN) runs

# Benchmarks (issues 11, 14, 29): bench/hdetbench runs five studies under
# mpirun, prints one table each, replaces their generated blocks (and the
# summary at the top) in docs/benchmarks.md (hand-written sections stay) and
# writes docs/sweep-<setup>.png. Study 1 needs PyTorch for its ConvNet setup
# (`-setups adamw,sgd` leaves it out). Finished runs under runs/bench are
# reused while their key holds (see docs/benchmarks.md). bench-quick is the
# short variant: one sweep seed and one held-out seed, 7 sweep points, a tiny
# ConvNet.
bench bench-quick: build data allreduce-bins venv
	$(GO) run ./bench/hdetbench -np $(NP) -bin $(BIN) $(if $(filter bench-quick,$@),-quick)

# What `make run` buys (issue 29): the embedded default against plain
# synchronous DP at the same start, seeds 1-10 (SEEDS="1 2" for fewer); a
# markdown table of test accuracy per seed (docs/benchmarks.md, "make run
# against plain synchronous DP"). About 4 minutes a seed on 2 cores.
SEEDS ?=
bench-run: build data
	scripts/bench-make-run.sh $(BIN) runs/bench/make-run $(SEEDS)

# Study 1 on the PyTorch GPT (gpt: hdet compares the replicas by training
# loss; gpt-probe: by a probe on fixed validation windows; one shared plain
# sweep) and study 8, hdet against torchrun on the GPT. Their own doc blocks
# (summary-gpt, study1-gpt, study8); no MNIST data needed. bench-gpt-quick:
# 150-step 1-layer GPT, 1 sweep seed, 1 held-out seed, 7 points, 2 pairs. BENCH_FLAGS
# adds flags (e.g. BENCH_FLAGS="-seeds 1 -heldout 4,5"); GPT_SETUPS=gpt-cosine,gpt-cosine-probe
# runs study 1 with the warm-up + cosine schedule set by hand (blocks
# summary-gpt-cosine, study1-gpt-cosine).
GPT_SETUPS ?= gpt,gpt-probe
bench-gpt bench-gpt-quick: build venv
	$(GO) run ./bench/hdetbench -np $(NP) -bin $(BIN) -studies 1,8 -setups $(GPT_SETUPS) $(if $(filter bench-gpt-quick,$@),-quick) $(BENCH_FLAGS)

# Issue 39: hdet against lr_find, Prodigy, Schedule-Free, D-Adaptation and a
# sweep (bench/peers); SETUPS=mlp-adamw,mlp-sgd,convnet-adamw,hf,gpt HELDOUT=4,5
bench-peers: build data venv
	bench/peers/run.sh
