# Two commands do all set-up on a fresh machine:
#   make demo   run the main job on the built-in default
#   make test   run the whole test suite (ruff included)
# Both create what they need when it is missing.
#
# Environments, both installed by uv from one lock file (requirements/lock.txt):
#   .venv          the default: the newest Python >= 3.12 here (3.13, else 3.12; PATH, then pyenv),
#                  LeRobot 0.6; with no such Python, Python 3.11 with LeRobot 0.4.4 (said in one line)
#   .venv-lerobot04  Python 3.11 with LeRobot 0.4.4: `make test` runs the LeRobot tests on it too
#                  (COMPAT=0 leaves it out)

VENV ?= .venv
COMPAT_VENV ?= .venv-lerobot04
COMPAT ?= 1
# pytest workers (pytest-xdist); most tests wait on real subprocesses, so 2 workers fill 2 cores
TEST_JOBS ?= 2
LOCK := requirements/lock.txt
EXTRAS := --extra dev --extra gym --extra report --extra lerobot --extra maniskill
UV_VERSION := 0.13.8
TOOLS := .tools
UV := $(TOOLS)/bin/uv
export UV_PYTHON_DOWNLOADS := never

NEW_PYTHON := $(shell tools/find-python 3.13 3.12)
OLD_PYTHON := $(shell tools/find-python 3.11)
DEFAULT_PYTHON ?= $(or $(NEW_PYTHON),$(OLD_PYTHON))
COMPAT_TESTS := $(if $(and $(NEW_PYTHON),$(filter 1,$(COMPAT))),compat-test)

.PHONY: venv compat-venv demo test compat-test lint lock schemas clean-venv vulkan

$(UV):
	@test -n "$(DEFAULT_PYTHON)" || { echo "odsd: no Python 3.11, 3.12 or 3.13 found (PATH or pyenv)"; exit 1; }
	$(DEFAULT_PYTHON) -m venv $(TOOLS)
	$(TOOLS)/bin/python -m pip install --quiet "uv==$(UV_VERSION)"

venv: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml $(LOCK) | $(UV)
	@$(if $(NEW_PYTHON),,echo "odsd: no Python >= 3.12 here; the default environment is Python 3.11 with LeRobot 0.4.4")
	$(UV) venv --quiet --clear --python $(DEFAULT_PYTHON) $(VENV)
	$(UV) pip sync --quiet --python $(VENV)/bin/python $(LOCK)
	$(UV) pip install --quiet --python $(VENV)/bin/python --no-deps -e .
	touch $@

compat-venv: $(COMPAT_VENV)/.installed

$(COMPAT_VENV)/.installed: pyproject.toml $(LOCK) | $(UV)
	@test -n "$(OLD_PYTHON)" || { echo "odsd: the LeRobot 0.4.4 tests need Python 3.11 (or run make test COMPAT=0)"; exit 1; }
	$(UV) venv --quiet --clear --python $(OLD_PYTHON) $(COMPAT_VENV)
	$(UV) pip sync --quiet --python $(COMPAT_VENV)/bin/python $(LOCK)
	$(UV) pip install --quiet --python $(COMPAT_VENV)/bin/python --no-deps -e .
	touch $@

demo: venv
	$(VENV)/bin/odsd demo

lint: venv
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

# A Vulkan device for SAPIEN (the ManiSkill tasks) on CPU-only Debian 12: Mesa's lavapipe unpacked
# into .tools/mesa (tools/vulkan-cpu; tests/conftest.py points VK_ICD_FILENAMES at it). A no-op
# with an NVIDIA GPU or once unpacked; where it cannot be had the ManiSkill tests skip, saying why.
vulkan:
	@tools/vulkan-cpu --if-needed >/dev/null || echo "odsd: no Vulkan device for ManiSkill (tools/vulkan-cpu failed); its tests skip"

test: venv lint vulkan $(if $(COMPAT_TESTS),compat-venv)
	$(VENV)/bin/python -m pytest -q -n $(TEST_JOBS)
	$(if $(COMPAT_TESTS),$(MAKE) --no-print-directory compat-test)

# The LeRobot tests (reader, export, ACT, Diffusion, lerobot-train) on Python 3.11 with LeRobot
# 0.4.4; the store-damage battery reads through odsd's own code and runs once, above.
compat-test: compat-venv
	$(COMPAT_VENV)/bin/python -m pytest -q -n $(TEST_JOBS) tests/lerobot --ignore=tests/lerobot/test_lerobot_damage.py

# Re-resolve requirements/lock.txt after a change to the dependencies in pyproject.toml.
lock: | $(UV)
	$(UV) pip compile --quiet --universal --python-version 3.11 $(EXTRAS) --override requirements/overrides.txt pyproject.toml \
		--custom-compile-command "make lock" -o $(LOCK)

schemas: venv
	$(VENV)/bin/python -m odsd.schema.export schemas

clean-venv:
	rm -rf $(VENV) $(COMPAT_VENV) $(TOOLS)
