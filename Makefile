# make test          - create .venv, install cugemm8 with its CUDA extra and test extras, run the tests
#                      (CPU tier everywhere; the GPU tier runs where a Hopper GPU is present)
# make bench         - the benchmark tables on the GPU (python -m benchmarks; JSON + PNG under bench/results/)
# make check-install - build the wheel, install it with each CUDA extra in a fresh venv outside the checkout,
#                      and compile kernels there with NVRTC (scripts/check_install.py; no GPU needed)
# CUDA=cu12 picks the CUDA 12.8+ stack for .venv (default cu13).
# On a machine without network whose python already has the dependencies (the lent GPU machine):
#   make test SYSTEM_PYTHON=1 / make bench SYSTEM_PYTHON=1   (no venv, runs from the checkout)
PYTHON ?= python3
VENV ?= .venv
CUDA ?= cu13
CHECK_EXTRAS ?= cu13 cu12

ifdef SYSTEM_PYTHON
PY := PYTHONPATH=$(CURDIR) $(PYTHON)
SETUP :=
BENCH_SETUP :=
else
PY := $(VENV)/bin/python
SETUP := $(VENV)/.installed
BENCH_SETUP := $(VENV)/.installed-bench
endif

.PHONY: test bench check-install clean

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/python -m pip install -q --upgrade pip
	$(VENV)/bin/python -m pip install -q -e ".[$(CUDA),test]"
	touch $@

$(VENV)/.installed-bench: $(VENV)/.installed
	$(VENV)/bin/python -m pip install -q -e ".[$(CUDA),test,bench]"
	touch $@

test: $(SETUP)
	$(PY) -m pytest -q tests

bench: $(BENCH_SETUP)
	$(PY) -m benchmarks

# The wheel is built from a copy of what it is made of, so nothing in the checkout (build/, egg-info) leaks in.
check-install:
	@set -e; tmp=$$(mktemp -d); trap 'rm -rf "$$tmp"' EXIT; \
	mkdir "$$tmp/src" "$$tmp/run"; \
	cp -r pyproject.toml README.md LICENSE cugemm8 cuda_src "$$tmp/src/"; \
	cp scripts/check_install.py "$$tmp/run/"; \
	t0=$$(date +%s); \
	$(PYTHON) -m pip wheel -q --no-deps -w "$$tmp/dist" "$$tmp/src"; \
	whl=$$(ls "$$tmp"/dist/cugemm8-*.whl); \
	echo "check-install: built $$(basename $$whl) in $$(( $$(date +%s) - t0 )) s"; \
	for extra in $(CHECK_EXTRAS); do \
		t0=$$(date +%s); \
		$(PYTHON) -m venv "$$tmp/venv-$$extra"; \
		"$$tmp/venv-$$extra/bin/python" -m pip install -q "$$whl[$$extra]"; \
		t1=$$(date +%s); \
		echo "check-install [$$extra]: installed in $$(( t1 - t0 )) s"; \
		(cd "$$tmp/run" && "$$tmp/venv-$$extra/bin/python" check_install.py); \
		echo "check-install [$$extra]: checked in $$(( $$(date +%s) - t1 )) s"; \
	done

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .hypothesis
