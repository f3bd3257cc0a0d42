# kvbench: `make run` sets up and runs the embedded quick-start; `make test` sets up and runs every test.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
PLUGINS := plugins/kvbench_nvme plugins/kvbench_redis plugins/kvbench_s3 plugins/kvbench_traces plugins/kvbench_gds plugins/kvbench_trace
PYTEST_ARGS ?=

.PHONY: run test test-fast venv system-deps template-check lint clean

$(VENV)/.installed: pyproject.toml $(wildcard plugins/*/pyproject.toml)
	scripts/ensure-python-venv.sh $(PYTHON)
	$(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	$(PIP) install -q -e '.[test,reports,mpi]' $(foreach p,$(PLUGINS),-e $(p)) 'moto[server]'
	touch $@

venv: $(VENV)/.installed

## The embedded default: DRAM -> local directory tier, no external server (~30 s).
run: venv
	$(VENV)/bin/kvbench run specs/quickstart.yaml

## Everything: system packages (redis-server, fio, Open MPI), the venv, the template plugin, the suite.
test: system-deps venv template-check
	$(VENV)/bin/pytest -q -m 'not gpu' $(PYTEST_ARGS)

## The fast subset for the edit-test loop (no slow tests; servers still start when a test needs them).
test-fast: venv
	$(VENV)/bin/pytest -q -m 'not slow and not gpu' $(PYTEST_ARGS)

system-deps:
	scripts/install-system-deps.sh

## A vendor's view: install the out-of-tree template plugin from its folder and run kvbench on it.
template-check: venv
	$(PIP) install -q ./examples/kvbench-plugin-template
	$(VENV)/bin/kvbench run examples/kvbench-plugin-template/spec.yaml --quiet --output $(CURDIR)/results/template-check

lint: venv
	$(VENV)/bin/ruff check .

clean:
	rm -rf $(VENV) results kvcache .pytest_cache
