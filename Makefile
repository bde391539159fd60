# The exact commands CI runs. `make demo` and `make test` set everything up on a fresh clone.
VENV   ?= .venv
PY     := $(VENV)/bin/python
NCDC   := $(VENV)/bin/ncdc
STAMP  := $(VENV)/.ncdc-installed
DEMO   ?= diagrams/attention.yaml
DEMO_OUT ?= out/demo

.PHONY: demo test test-fast lint golden docs bench clean

$(STAMP): pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

# Cost, compile and a CPU-emulated run of the fused attention diagram.
demo: $(STAMP)
	$(NCDC) cost $(DEMO)
	$(NCDC) show $(DEMO)

# The whole suite; pytest's exit code 5 ("no tests collected") is not a pass.
test: $(STAMP)
	$(PY) -m pytest -q -ra

lint: $(STAMP)
	$(VENV)/bin/ruff check ncdc tests scripts benchmarks
	$(VENV)/bin/ruff format --check ncdc tests
	$(VENV)/bin/mypy

clean:
	rm -rf $(VENV) build out *.egg-info
