# make test   - create .venv, install cugemm8 with its test extras, run the tests
#               (CPU tier everywhere; the GPU tier runs where a Hopper GPU is present)
# make bench  - the benchmark tables on the GPU (JSON + PNG under bench/results/)
# On a machine without network whose python already has the dependencies (the lent GPU machine):
#   make test SYSTEM_PYTHON=1 / make bench SYSTEM_PYTHON=1   (no venv, runs from the checkout)
PYTHON ?= python3
VENV ?= .venv

ifdef SYSTEM_PYTHON
PY := PYTHONPATH=$(CURDIR) $(PYTHON)
SETUP :=
else
PY := $(VENV)/bin/python
SETUP := $(VENV)/.installed
endif

.PHONY: test bench clean

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/python -m pip install -q --upgrade pip
	$(VENV)/bin/python -m pip install -q -e ".[test]"
	touch $@

test: $(SETUP)
	$(PY) -m pytest -q tests

bench: $(SETUP)
	$(PY) -m cugemm8 bench

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .hypothesis
