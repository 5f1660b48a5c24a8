# The two set-up commands of the README: `make demo` and `make test`.
# Both create .venv when missing, install torch before the package with a plain `pip install torch==2.13.0`
# (whatever the index serves: the CPU build from a local wheel house that holds it, but the multi-GB CUDA build
# from PyPI on Linux; TORCH_INDEX=https://download.pytorch.org/whl/cpu takes PyTorch's CPU index instead, and
# TORCH=torch keeps a build already in .venv), install the package with its test extras, and fetch Debian's
# Fashion-MNIST when they can.

PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
TORCH  ?= torch==2.13.0
TORCH_INDEX ?=
STAMP  := $(VENV)/.uncurated-installed
# The suite runs in pytest-xdist's worker processes: a test that dies in native code (a segmentation fault, an
# abort) is reported as that test's failure, its worker is replaced, and the other tests still run.
TEST_WORKERS ?= 2
PYTEST := $(PY) -m pytest -n $(TEST_WORKERS) --max-worker-restart=16
LINT   := $(VENV)/.uncurated-lint-installed

.PHONY: demo test test-slow test-all bench bench-scaling data clean

demo: $(STAMP) data
	$(VENV)/bin/uncurated bench --preset quick

test: $(STAMP) data
	$(PYTEST) -m "not slow" -q

test-slow: $(STAMP) data
	$(PYTEST) -m slow -q

test-all: $(STAMP) data
	$(PYTEST) -q

# Every fault test, slow ones included (kills, checkpoints, bad data, NaN, disk, locks, peers, fuzz), then a
# table of the faults injected and handled; `make test` runs the fast ones.
.PHONY: test-faults
test-faults: $(STAMP) data
	$(PYTEST) -q $(wildcard tests/test_faults_*.py)

# The interleaved timing tables in one run (27 minutes on 2 idle cores, more under load): CLIP tiled / dense / open_clip / matmul
# floor, bf16 and the global objectives' ratios, interleaved, with 1 thread and torch's default; then the
# micro-batch memory curve. `make bench-scaling`: each loss's time and peak memory in its own process, B up to
# 65,536 (25 minutes on 2 idle cores, more under load).
bench: $(STAMP)
	$(PY) benchmarks/interleaved_speed.py
	$(PY) benchmarks/micro_batch_memory.py

bench-scaling: $(STAMP)
	$(PY) benchmarks/tiled_speed.py

# ruff, ruff format, mypy and lint-imports (the layout's contracts in pyproject.toml), at the versions the `lint`
# extra pins (CI runs this target); `make typecheck` is mypy alone. `ruff check --fix` and `ruff format` repair most
# findings.
.PHONY: lint typecheck
lint: $(LINT)
	$(VENV)/bin/ruff check
	$(VENV)/bin/ruff format --check
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports

typecheck: $(LINT)
	$(VENV)/bin/mypy

# The package as a user installs it (scripts/install_check.py): the sdist and its wheel built once; the wheel alone
# in a fresh environment beside torch runs --help, a training with its progress bar, the README's first example
# and reads its package data; then each extra alone runs one command. A few minutes (torch installed once).
.PHONY: install-check
install-check:
	$(PYTHON) scripts/install_check.py

# The oldest and the newest torch and triton the package is tested with (pyproject.toml's floors and the newest pair
# the registry serves; uncurated.versions.TESTED spans them), each in an environment of its own, .venv-oldest and
# .venv-newest: `make test-oldest`, `make test-newest`. Each runs the whole fast suite (the fused kernels under
# Triton's interpreter, the checkpoints, the sharding and the rest), the kernels' sm_90 compile, and a short training
# whose objective runs on the kernels; PAIR_TESTS=<files> narrows the suite for a quicker look. Both torch builds the
# registry serves are CUDA builds (about 4 GB with their libraries; nothing here needs a GPU); a constraints file
# keeps the test extras from moving either package. CI runs both after `make test`.
VERSION_PAIRS := oldest newest
PAIR_oldest   ?= torch==2.11.0 triton==3.6.0
PAIR_newest   ?= torch==2.14.1 triton==3.8.0
PAIR_TESTS    ?= tests
# The kernels compiled for sm_90 by the pair's triton compiler and ptxas (no GPU needed; marked slow in `make test`).
PAIR_COMPILE  := tests/test_triton_kernels.py::test_clip_kernels_compile_for_an_h100

.PHONY: $(VERSION_PAIRS:%=test-%)
$(VERSION_PAIRS:%=test-%): test-%: .venv-%/.uncurated-installed
	.venv-$*/bin/python -m pytest -n $(TEST_WORKERS) --max-worker-restart=16 -m "not slow" -q $(PAIR_TESTS)
	.venv-$*/bin/python -m pytest -q $(PAIR_COMPILE)
	rm -rf .venv-$*/smoke
	TRITON_INTERPRET=1 .venv-$*/bin/python -m uncurated train preset=digits out=.venv-$*/smoke name=smoke \
		epochs=0.5 progress=false objective.tiling=triton objective.block_size=64
	test -f .venv-$*/smoke/smoke/report.json

$(VERSION_PAIRS:%=.venv-%/.uncurated-installed): .venv-%/.uncurated-installed: pyproject.toml
	$(PYTHON) -m venv .venv-$*
	printf '%s\n' $(PAIR_$*) > .venv-$*/constraints.txt
	.venv-$*/bin/python -m pip install --quiet --disable-pip-version-check -c .venv-$*/constraints.txt $(PAIR_$*)
	.venv-$*/bin/python -m pip install --quiet --disable-pip-version-check -c .venv-$*/constraints.txt -e ".[test]"
	touch $@

$(PY):
	$(PYTHON) -m venv $(VENV)

$(STAMP): pyproject.toml | $(PY)
	$(PY) -m pip install --quiet --disable-pip-version-check "$(TORCH)" $(if $(TORCH_INDEX),--index-url $(TORCH_INDEX))
	$(PY) -m pip install --quiet --disable-pip-version-check -e ".[test]"
	touch $@

$(LINT): $(STAMP)
	$(PY) -m pip install --quiet --disable-pip-version-check -e ".[test,lint]"
	touch $@

data:
	@sh scripts/ensure-fashion-mnist.sh

clean:
	rm -rf $(VENV) $(VERSION_PAIRS:%=.venv-%) build src/*.egg-info .pytest_cache .hypothesis

# The check to run first on any CUDA GPU (benchmarks/gpu_check.py): every objective on every engine (the fused
# Triton kernels included) against the float64 reference at d = 128 and 512, the bf16 contract, tiled and fused CLIP
# and NUCLR speed and memory at B = 16,384 and 65,536 in bf16 and float32 against open_clip and the matmul floor, a
# ResNet-50 + DistilBERT step, device hygiene, NCCL at world size 1; a JSON with the device's name (rewritten after
# every check) and a PNG, within an 8-minute budget (GPU_CHECK_ARGS="--budget-minutes 15" for more). Without CUDA it
# refuses. `make gpu-check PY=python3` runs it with a Python that already has a CUDA torch (a GPU machine's own),
# installing nothing; `make gpu-check` alone installs into .venv first.
GPU_CHECK_ARGS ?=
.PHONY: gpu-check
ifeq ($(origin PY),command line)
gpu-check:
	PYTHONPATH=src $(PY) benchmarks/gpu_check.py $(GPU_CHECK_ARGS)
else
gpu-check: $(STAMP)
	$(PY) benchmarks/gpu_check.py $(GPU_CHECK_ARGS)
endif
