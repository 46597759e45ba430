# make test   - create .venv, install cugemm8 with its test extras, run the tests
#               (CPU tier everywhere; the GPU tier runs where a Hopper GPU is present)
# make bench  - the benchmark tables on the GPU (python -m benchmarks; JSON + PNG under bench/results/)
# On a machine without network whose python already has the dependencies (the lent GPU machine):
#   make test SYSTEM_PYTHON=1 / make bench SYSTEM_PYTHON=1   (no venv, runs from the checkout)
PYTHON ?= python3
VENV ?= .venv

ifdef SYSTEM_PYTHON
PY := PYTHONPATH=$(CURDIR) $(PYTHON)
SETUP :=
BENCH_SETUP :=
else
PY := $(VENV)/bin/python
SETUP := $(VENV)/.installed
BENCH_SETUP := $(VENV)/.installed-bench
endif

.PHONY: test bench clean

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/python -m pip install -q --upgrade pip
	$(VENV)/bin/python -m pip install -q -e ".[test]"
	touch $@

$(VENV)/.installed-bench: $(VENV)/.installed
	$(VENV)/bin/python -m pip install -q -e ".[test,bench]"
	touch $@

test: $(SETUP)
	$(PY) -m pytest -q tests

bench: $(BENCH_SETUP)
	$(PY) -m benchmarks

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .hypothesis
