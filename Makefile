# Two commands do all set-up on a fresh machine:
#   make demo   run the main job on the built-in default
#   make test   run the whole test suite (ruff included)
# Both create .venv when it is missing.

PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
# The dev environment has every extra: lerobot 0.4.4 pins torch<2.11 and brings torch 2.10
# (runs on CPU or CUDA). For a lighter environment without LeRobot, e.g. on a CPU-only box:
#   make venv EXTRAS=dev,gym,report TORCH_SPEC=torch==2.13.0
EXTRAS ?= dev,gym,report,lerobot
TORCH_SPEC ?=

.PHONY: venv demo test lint schemas clean-venv

venv: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(if $(TORCH_SPEC),$(PY) -m pip install --quiet "$(TORCH_SPEC)")
	$(PY) -m pip install --quiet -e ".[$(EXTRAS)]"
	touch $@

demo: venv
	$(VENV)/bin/odsd demo

lint: venv
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

test: venv lint
	$(VENV)/bin/python -m pytest -q

schemas: venv
	$(PY) -m odsd.schema.export schemas

clean-venv:
	rm -rf $(VENV)
