# llmgw's two entry points for a fresh Debian machine (see README):
#   make demo   the main job on the embedded default: the lab fleet of local containers
#   make test   the whole test suite, installing and starting everything it needs
# Expensive builds are cached outside git in $(LLMGW_CACHE) and reused when present.

SHELL := /bin/bash
VENV ?= .venv
export LLMGW_CACHE ?= $(HOME)/.cache/llmgw
PY := $(VENV)/bin/python
BIN := $(VENV)/bin
export PATH := $(abspath $(BIN)):$(PATH)

.PHONY: all venv setup test lint typecheck pytest demo clean

all: test

# The virtualenv, reinstalled whenever pyproject.toml changes.
$(VENV)/.installed: pyproject.toml
	@test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev]'
	@touch $@

venv: $(VENV)/.installed

# Host set-up the tests need (podman, the base image, the engine, PostgreSQL, Chromium).
setup: venv
	bash scripts/setup-host

lint: venv
	$(BIN)/ruff check llmgw tests bench scripts collections roles molecule

typecheck: venv
	$(BIN)/mypy

pytest: setup
	$(BIN)/pytest

test: lint typecheck pytest

demo: setup
	bash scripts/demo

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
