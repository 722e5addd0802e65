# Quick start: `make demo` and `make test`. Both bootstrap .venv from nothing.
# In an existing environment, `pip install .` instead (README.md); `make check-install` checks it.
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
export VIRTUAL_ENV := $(abspath $(VENV))
export PATH := $(abspath $(VENV))/bin:$(PATH)
RUST_SRC := $(shell find crates -name '*.rs' -o -name '*.json' -o -name Cargo.toml) Cargo.toml pyproject.toml

.PHONY: demo test test-rust test-python build bench clean check-install wheel check-wheel

$(VENV)/.deps: requirements-dev.txt
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -r requirements-dev.txt
	# tests/test_moe_torchtitan.py: torchtitan without its training extras (datasets, wandb,
	# tensorboard: ~500 MB the tests never import; docs/torchtitan.md, "Install"). tyro (which
	# torchtitan imports) goes first: a pip install with dependencies after the --no-deps one
	# would print a resolver ERROR listing torchtitan's missing extras.
	$(PY) -m pip install -q tyro
	$(PY) -m pip install -q --no-deps torchtitan==0.3.0 spmd_types==0.2.3
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
	cargo bench -p collsched-core
	for f in benchmarks/*.py; do echo "== $$f"; $(PY) $$f || exit 1; done

clean:
	rm -rf $(VENV) target dist
