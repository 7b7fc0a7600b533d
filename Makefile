# `make demo` and `make test` each create .venv when missing and install what they need.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
JOBS ?= auto

.PHONY: demo test bench docs device-test clean

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	# the CPU build of torch first (served from the local disk): nothing may pull a CUDA build
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e '.[gpu,test,dist]'
	touch $(STAMP)

demo: $(STAMP)
	$(PY) examples/demo.py

test: $(STAMP)
	$(PY) -m pytest -q -n $(JOBS) tests

# on a GPU machine, with its system python3 (no venv): tests/run_device_tests.sh says what runs
device-test:
	bash tests/run_device_tests.sh

bench: $(STAMP)
	$(PY) -m pip install -q -e '.[bench]'
	$(PY) benchmarks/run_all.py

# the documentation site (docs/, mkdocs.yml) into site/, strict: a warning (a broken link, a
# docstring that does not parse) fails it. It needs only the `docs` extra, not .venv's GPU and test
# packages: the API reference is read from the sources. (VENV=.docs-venv keeps it apart.)
DOCS_STAMP := $(VENV)/.docs-installed

$(DOCS_STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q -e '.[docs]'
	touch $(DOCS_STAMP)

docs: $(DOCS_STAMP)
	NO_MKDOCS_2_WARNING=1 $(PY) -m mkdocs build --strict

clean:
	rm -rf $(VENV) site .pytest_cache .hypothesis build *.egg-info
