# Quick start: `make demo` and `make test`. Both bootstrap .venv from nothing.
# In an existing environment, `pip install .` instead (README.md); `make check-install` checks it.
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
export VIRTUAL_ENV := $(abspath $(VENV))
export PATH := $(abspath $(VENV))/bin:$(PATH)
# The venv's interpreter: Python 3.12 where installed (megatron-core 0.17 and later need it; the
# tests then cover megatron-core 0.16 and the newest release), else python3 (>= 3.10: megatron-core
# 0.16 only, the newer-release tests skip). pyenv's python3.12 shim answers only where pyenv selects
# 3.12, hence the look into its versions too. `make PYTHON=python3.13 test` picks another.
ifeq ($(origin PYTHON),undefined)
PYTHON := $(firstword $(foreach p,python3.12 $(wildcard $(or $(PYENV_ROOT),$(HOME)/.pyenv)/versions/3.12*/bin/python3.12),\
  $(shell $(p) -c 'print("$(p)")' 2>/dev/null)) python3)
endif
export PYTHON
# megatron-core's oldest supported release, beside the venv's newest: tests/test_moe_megatron_versions.py
# puts this folder first on PYTHONPATH in a subprocess (the wheel is ~3 MB; its deps are the newest's).
MEGATRON_OLDEST := 0.16.1
MEGATRON_OLDEST_DIR := $(VENV)/side/megatron-core-$(MEGATRON_OLDEST)
# The installer of .venv's dependencies (the .deps recipe).
UV_PIN := uv==0.13.9
UV := $(VENV)/bin/uv pip install -q --no-cache --system-certs --python $(PY)
# Python writes each module's .pyc on its first import (uv installs none): a
# PYTHONDONTWRITEBYTECODE=1 in the caller's environment would make every process of the tests
# compile torch's ~900 modules again (seconds each).
unexport PYTHONDONTWRITEBYTECODE
RUST_SRC := $(shell find crates -name '*.rs' -o -name '*.json' -o -name Cargo.toml) Cargo.toml pyproject.toml

.PHONY: demo test test-rust test-python build bench clean check-install wheel check-wheel

$(VENV)/.deps: requirements-dev.txt
	@# A venv of another Python (PYTHON changed): start afresh rather than mix two site-packages.
	[ "$$($(PY) -V 2>&1)" = "$$($(PYTHON) -V 2>&1)" ] || rm -rf $(VENV)
	$(PYTHON) -m venv $(VENV)
	@# uv (from PyPI, into the venv) installs the ~5.5 GB of wheels: parallel downloads, and no
	@# byte-compiling of all ~8 000 modules (pip's default, most of its time on 2 cores): Python
	@# writes the .pyc of the modules the tests import (~900 for torch) on first use (see unexport above).
	@# No cache kept (--no-cache: a clean clone installs the same way every time); the system's
	@# certificate store, as pip's (behind a TLS-inspecting proxy too).
	$(PY) -m pip install -q $(UV_PIN)
	$(UV) -r requirements-dev.txt
	# tests/test_moe_torchtitan.py: torchtitan without its training extras (datasets, wandb,
	# tensorboard: ~500 MB the tests never import; docs/torchtitan.md, "Install"). tyro (which
	# torchtitan imports) goes first: a pip install with dependencies after the --no-deps one
	# would print a resolver ERROR listing torchtitan's missing extras.
	$(UV) tyro
	$(UV) --no-deps torchtitan==0.3.0 spmd_types==0.2.3
	rm -rf $(MEGATRON_OLDEST_DIR)
	$(UV) --no-deps --target $(MEGATRON_OLDEST_DIR) megatron-core==$(MEGATRON_OLDEST)
	touch $@

# maturin builds the Rust extension (profile `ext`: release with LTO, see Cargo.toml) and
# installs the package in editable mode.
$(VENV)/.built: $(VENV)/.deps $(RUST_SRC)
	$(VENV)/bin/maturin develop --profile ext -q
	touch $@

build: $(VENV)/.built

# As root the demo builds a network-namespace testbed (and removes it); DEMO_ARGS=--no-testbed skips it.
DEMO_ARGS ?=
demo: build
	$(VENV)/bin/collsched demo $(DEMO_ARGS)

test-rust:
	cargo test -p collsched-core --release -q

test-python: build
	$(PY) -m pytest -q -p no:cacheprovider

test: build test-rust test-python

# `pip install .` from a clean clone into a fresh venv, then `collsched --version` (.ci/check-install).
check-install: build
	.ci/check-install

# The release wheel (docs/release.md) in dist/: abi3, so one wheel serves every CPython >= 3.10
# on the platform; maturin audits the extension's glibc symbols and names the oldest manylinux
# it complies with. Same profile, target/ and interpreter (-i: pyo3's build script reruns when
# PYO3_PYTHON changes, and everything above it recompiles) as `build`, so after `make build` it
# only repackages. WHEEL_ARGS="--zig --compatibility manylinux2014" builds for older glibc
# (needs `pip install ziglang`).
WHEEL_ARGS ?=
wheel: $(VENV)/.deps
	rm -f dist/collsched-*.whl
	$(VENV)/bin/maturin build --profile ext -q -i $(VIRTUAL_ENV)/bin/python -o dist $(WHEEL_ARGS)

# `make wheel`, then install it into a fresh venv with no Rust or compiler on PATH and run it.
check-wheel: build
	.ci/check-wheel

bench: build
	cargo bench -p collsched-bench
	for f in benchmarks/*.py; do echo "== $$f"; $(PY) $$f || exit 1; done

clean:
	rm -rf $(VENV) target dist
