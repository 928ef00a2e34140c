# `make quickstart` and `make test` set up a project-local environment (.venv) first; see
# scripts/setup.sh for what each installs. PYTHON=<interpreter> uses an existing one instead
# (`make test PYTHON=python3`), TORCH=cpu installs a CPU-only PyTorch, PYTEST_ARGS picks tests.
VENV ?= .venv
PYTHON ?= $(VENV)/bin/python
TORCH ?= default
PYTEST_ARGS ?= tests
SETUP = VENV=$(VENV) PYTHON=$(PYTHON) TORCH=$(TORCH) bash scripts/setup.sh
# a wrong PYTHON or TORCH is one line as make starts, before anything runs
SETUP_PROBLEM := $(shell $(SETUP) check 2>&1)
ifneq ($(SETUP_PROBLEM),)
$(error $(SETUP_PROBLEM))
endif

.PHONY: setup quickstart test

setup:
	$(SETUP) quickstart

quickstart:
	$(SETUP) quickstart
	$(PYTHON) -m fedlight fit --recipe recipes/quickstart_fmnist.yaml --overwrite

test:
	$(SETUP) test
	$(PYTHON) -m pytest $(PYTEST_ARGS)
