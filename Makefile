# kvbench: `make run` sets up and runs the embedded quick-start; `make test` sets up and runs every test.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
## Set-up prints a few lines, not pages: pip -q (no progress, no "Successfully installed" lists) and
## PYTHONWARNINGS=ignore for setuptools' build-backend notices (the editable-install warning, one per
## package); errors still print in full.  The editable packages build with the venv's own setuptools
## (--no-build-isolation, after installing setuptools>=77 once) instead of a fresh build environment
## per package: about twice as fast on a fresh machine, and no slower than uv (docs/DEVELOPING.md).
PIP := PYTHONWARNINGS=ignore $(PY) -m pip
INSTALL := $(PIP) install -q --no-build-isolation
PLUGINS := plugins/kvbench_nvme plugins/kvbench_redis plugins/kvbench_s3 plugins/kvbench_workloads plugins/kvbench_gds plugins/kvbench_blktrace plugins/kvbench_nixl
PYTEST_ARGS ?=

.PHONY: run test test-fast venv test-venv system-deps template-check lint clean specs-smoke

## What a user needs to run kvbench: the core, every plugin, the report writers.
$(VENV)/.installed: pyproject.toml $(wildcard plugins/*/pyproject.toml)
	@scripts/ensure-python-venv.sh $(PYTHON)
	@echo "== creating $(VENV) and installing kvbench with its plugins"
	@$(PYTHON) -m venv $(VENV)
	@$(PIP) install -q --upgrade pip 'setuptools>=77'
	@$(INSTALL) -e '.[reports]' $(foreach p,$(PLUGINS),-e $(p))
	@touch $@

## What the tests need on top: pytest and hypothesis, mpi4py, the S3-protocol server (moto), pyarrow and
## prometheus-client (kvbench export, output.metrics), and torch so
## the gpu tier's logic runs on torch's CPU device (torch==2.13.0: a CPU wheel on this project's machines).
$(VENV)/.test-installed: $(VENV)/.installed
	@echo "== installing the test tools (pytest, hypothesis, mpi4py, moto, cramjam, pyarrow, prometheus-client, simpy, greenlet, torch CPU)"
	@$(PIP) install -q -e '.[test,mpi,gpu,codecs,export,metrics,forecast]' 'moto[server]'
	@# NIXL's wheel (~235 MB) requires torch: installed after the gpu extra's torch==2.13.0, so pip keeps that CPU build
	@$(PIP) install -q -e 'plugins/kvbench_nixl[nixl]'
	@# LMCache 0.5.6 CPU-only (~160 MB) for tests/kvio/test_lmcache_io.py, after that torch too, so pip keeps the CPU build
	@$(PIP) install -q -e '.[lmcache]'
	@touch $@

venv: $(VENV)/.installed
test-venv: $(VENV)/.test-installed

## The embedded default: DRAM -> local directory tier, no external server (~30 s).
run: venv
	@echo "== kvbench run specs/quickstart.yaml"
	@$(VENV)/bin/kvbench run specs/quickstart.yaml

## Everything: system packages (redis-server, fio, Open MPI), the venv, the template plugin, the suite.
test: system-deps test-venv template-check
	$(VENV)/bin/pytest -q -m 'not gpu' $(PYTEST_ARGS)

## The fast subset for the edit-test loop (no slow tests; servers still start when a test needs them).
test-fast: test-venv
	$(VENV)/bin/pytest -q -m 'not slow and not gpu' $(PYTEST_ARGS)

## Every shipped spec as users run it: its own model, users and tiers, duration, warm-up and capacities cut to
## this machine; each must complete requests and store bytes on every tier (docs/RELIABILITY.md).
specs-smoke: test-venv
	KVBENCH_SPECS_SMOKE=1 $(VENV)/bin/pytest -q -m slow -rA tests/shipped/test_specs_smoke.py $(PYTEST_ARGS)

system-deps:
	scripts/install-system-deps.sh

## A vendor's view: install the out-of-tree template plugin from its folder and run kvbench on it.
template-check: venv
	$(PIP) install -q ./examples/kvbench-plugin-template
	$(VENV)/bin/kvbench run examples/kvbench-plugin-template/spec.yaml --quiet --output $(CURDIR)/results/template-check

lint: test-venv
	$(VENV)/bin/ruff check .

clean:
	rm -rf $(VENV) results kvcache .pytest_cache
