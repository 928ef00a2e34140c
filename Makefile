# `make quickstart` and `make test` set up a project-local environment (.venv) first; see
# scripts/setup.sh for what each installs. PYTHON=<interpreter> uses an existing one instead
# (`make test PYTHON=python3`), TORCH=cpu installs a CPU-only PyTorch, PYTEST_ARGS picks tests,
# PYTEST_WORKERS sets how many pytest-xdist workers share the tests (0: one process, no workers).
# `make docs` serves the documentation site at http://127.0.0.1:8000 as you edit docs/ (MkDocs, installed as
# `make test` installs it); `make docs MKDOCS=build` writes it to site/ instead, warnings as errors.
VENV ?= .venv
PYTHON ?= $(VENV)/bin/python
TORCH ?= default
PYTEST_ARGS ?= tests
PYTEST_WORKERS ?= 2
MKDOCS ?= serve
SETUP = VENV=$(VENV) PYTHON=$(PYTHON) TORCH=$(TORCH) bash scripts/setup.sh
# a wrong PYTHON or TORCH is one line as make starts, before anything runs
SETUP_PROBLEM := $(shell $(SETUP) check 2>&1)
ifneq ($(SETUP_PROBLEM),)
$(error $(SETUP_PROBLEM))
endif

# fedlight and tensorboard land in $(VENV)/bin, on PATH only where the venv is active: say so last
ifeq ($(PYTHON),$(VENV)/bin/python)
ACTIVATE = @echo "fedlight and tensorboard are in $(VENV)/bin: run 'source $(VENV)/bin/activate' to put them on PATH in this shell"
endif

.PHONY: setup quickstart test docs

setup:
	$(SETUP) quickstart
	$(ACTIVATE)

quickstart:
	$(SETUP) quickstart
	$(PYTHON) -m fedlight fit --recipe recipes/quickstart_fmnist.yaml --overwrite
	$(ACTIVATE)

test:
	$(SETUP) test
	$(PYTHON) -m pytest -n $(PYTEST_WORKERS) --dist worksteal $(PYTEST_ARGS)

docs:
	$(SETUP) test
	NO_MKDOCS_2_WARNING=1 $(PYTHON) -m mkdocs $(MKDOCS)$(if $(filter build,$(MKDOCS)), --strict)
