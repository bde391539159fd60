# The exact commands CI runs. `make demo` and `make test` set everything up on a fresh clone.
VENV   ?= .venv
PY     := $(VENV)/bin/python
NCDC   := $(VENV)/bin/ncdc
STAMP  := $(VENV)/.ncdc-installed
DEMO   ?= diagrams/attention.yaml
DEMO_OUT ?= out/demo

.PHONY: demo test test-fast lint golden docs bench clean soak

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

# Regenerate tests/golden/*.cu after an intended change to what is generated.
golden: $(STAMP)
	$(PY) tests/test_render.py

# 16 concurrent compile, run and cost processes on one cache for 60 s, randomly interrupted
# and killed, then no corrupt cache entry and no partial output. Not part of `make test`.
soak: $(STAMP)
	$(PY) scripts/soak --seconds 60 --workers 16

lint: $(STAMP)
	$(VENV)/bin/ruff check ncdc tests scripts benchmarks
	$(VENV)/bin/ruff format --check ncdc tests
	$(VENV)/bin/mypy

# The pictures in README.md and docs/draw.md, drawn by ncdc itself.
docs: $(STAMP)
	$(NCDC) draw diagrams/attention.yaml -o docs/img/attention.svg
	$(NCDC) draw diagrams/attention.yaml --plain --hardware napkin -o docs/img/attention-napkin.svg
	$(NCDC) draw diagrams/attention.yaml --roofline -o docs/img/attention-roofline.svg
	$(NCDC) draw diagrams/attention.yaml --tiles -o docs/img/attention-tiles.svg
	$(NCDC) draw diagrams/matmul.yaml --tiles -o docs/img/matmul-tiles.svg

clean:
	rm -rf $(VENV) build out *.egg-info
