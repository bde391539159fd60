# The exact commands CI runs. `make demo` and `make test` set everything up on a fresh clone.
VENV   ?= .venv
PY     := $(VENV)/bin/python
NCDC   := $(VENV)/bin/ncdc
STAMP  := $(VENV)/.ncdc-installed
DEMO   ?= diagrams/attention.yaml
DEMO_OUT ?= out/demo

.PHONY: demo test test-fast test-torch torch-env lint golden docs bench clean soak

$(STAMP): pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

# Cost, compile and a CPU-emulated run of the fused attention diagram. The emulated run
# uses small sizes (the CPU runs every GPU thread); the cost and the kernel are full size.
demo: $(STAMP)
	$(NCDC) cost $(DEMO)
	$(NCDC) compile $(DEMO) -o $(DEMO_OUT)
	$(NCDC) run $(DEMO) --backend cpu --set b=1 --set h=2 --set q=256 --set x=256

# The whole suite; pytest's exit code 5 ("no tests collected") is not a pass. The CPU
# backend's tests compile every kernel with the host C++ compiler: without one, stop with
# that reason rather than fail hundreds of tests (or skip the backend's correctness tests).
# The tests run on every core (pytest-xdist, -n auto): each test stands alone, and the
# compile and emulator caches are safe for concurrent processes.
test: $(STAMP)
	@command -v "$${CXX:-g++}" >/dev/null || { echo "make test: the CPU backend needs a C++ compiler: apt-get install g++, or set CXX" >&2; exit 2; }
	$(PY) -m pytest -q -ra -n auto

# The optional extras' tests, in a second environment with PyTorch and Ray (`make test`
# skips them: PyPI's torch brings ~3 GB of CUDA libraries, so pip here takes the CPU build
# where an index offers it): the torch op (tests/test_torch.py), the API on torch tensors,
# and `tune --ray` on a local Ray cluster (tests/measure/test_distribute.py). .ci/run runs
# both targets.
TORCH_VENV  ?= .venv-torch
TORCH_PY    := $(TORCH_VENV)/bin/python
TORCH_STAMP := $(TORCH_VENV)/.ncdc-installed

$(TORCH_STAMP): pyproject.toml
	test -x $(TORCH_PY) || python3 -m venv $(TORCH_VENV)
	$(TORCH_PY) -m pip install --quiet --upgrade pip
	$(TORCH_PY) -m pip install --quiet -e '.[dev,torch,ray]'
	touch $(TORCH_STAMP)

torch-env: $(TORCH_STAMP)

test-torch: $(TORCH_STAMP)
	$(TORCH_PY) -m pytest -q -ra -n 2 tests/test_torch.py tests/api tests/measure/test_distribute.py

# Regenerate tests/golden/*.cu after an intended change to what is generated.
golden: $(STAMP)
	$(PY) -m tests.test_render

# 16 concurrent compile, run and cost processes on one cache for 60 s, randomly interrupted
# and killed, then no corrupt cache entry and no partial output. Not part of `make test`.
soak: $(STAMP)
	$(PY) scripts/soak --seconds 60 --workers 16

lint: $(STAMP)
	$(VENV)/bin/ruff check ncdc tests scripts benchmarks
	$(VENV)/bin/ruff format --check ncdc tests
	$(VENV)/bin/mypy

# What README.md and docs/ show, made by ncdc itself: every marked command output
# (<!-- ncdc-output: COMMAND --> blocks, scripts/docs.py; tests/test_docs.py fails when one
# differs from what the tool prints now) and the pictures in docs/img, all with a private
# cache, so that what a page shows does not depend on what this machine compiled before.
docs: $(STAMP)
	$(PY) scripts/docs.py

clean:
	rm -rf $(VENV) build out *.egg-info
