PYTHON ?= python3

.PHONY: setup quickstart test

setup:
	PYTHON=$(PYTHON) bash scripts/setup.sh

quickstart: setup
	$(PYTHON) -m fedlight fit --recipe recipes/quickstart_fmnist.yaml --overwrite

test: setup
	$(PYTHON) -m pytest tests
