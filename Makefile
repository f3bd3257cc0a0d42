# kvbench: `make run` sets up and runs the embedded quick-start; `make test` sets up and runs every test.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
PLUGINS := plugins/kvbench_nvme plugins/kvbench_redis plugins/kvbench_s3 plugins/kvbench_workloads plugins/kvbench_gds plugins/kvbench_blktrace plugins/kvbench_nixl
PYTEST_ARGS ?=

.PHONY: run test test-fast venv test-venv system-deps template-check lint clean

## What a user needs to run kvbench: the core, every plugin, the report writers.
$(VENV)/.installed: pyproject.toml $(wildcard plugins/*/pyproject.toml)
	scripts/ensure-python-venv.sh $(PYTHON)
	$(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	$(PIP) install -q -e '.[reports]' $(foreach p,$(PLUGINS),-e $(p))
	touch $@

## What the tests need on top: pytest and hypothesis, mpi4py, the S3-protocol server (moto), and torch so
## the gpu tier's logic runs on torch's CPU device (torch==2.13.0: a CPU wheel on this project's machines).
$(VENV)/.test-installed: $(VENV)/.installed
	$(PIP) install -q -e '.[test,mpi,gpu]' 'moto[server]'
	@# NIXL's wheel (~235 MB) requires torch: installed after the gpu extra's torch==2.13.0, so pip keeps that CPU build
	$(PIP) install -q -e 'plugins/kvbench_nixl[nixl]'
	touch $@

venv: $(VENV)/.installed
test-venv: $(VENV)/.test-installed

## The embedded default: DRAM -> local directory tier, no external server (~30 s).
run: venv
	$(VENV)/bin/kvbench run specs/quickstart.yaml

## Everything: system packages (redis-server, fio, Open MPI), the venv, the template plugin, the suite.
test: system-deps test-venv template-check
	$(VENV)/bin/pytest -q -m 'not gpu' $(PYTEST_ARGS)

## The fast subset for the edit-test loop (no slow tests; servers still start when a test needs them).
test-fast: test-venv
	$(VENV)/bin/pytest -q -m 'not slow and not gpu' $(PYTEST_ARGS)

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
