# Two commands for a fresh machine: `make demo` and `make test`.
# Every target sets up what it needs first, idempotently.
SHELL := /bin/bash
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: setup system venv shim demo test test-unit bench clean down

setup: system venv shim

system:
	@scripts/setup-system.sh

$(STAMP): pyproject.toml scripts/setup-venv.sh
	@scripts/setup-venv.sh $(VENV)
	@touch $(STAMP)

venv: $(STAMP)

shim:
	@if [ -f shim/Makefile ]; then $(MAKE) -s -C shim; fi

demo: setup
	$(VENV)/bin/leveller demo

test: setup
	$(PY) -m pytest -q -ra

test-unit: venv
	$(PY) -m pytest -q -ra tests/unit

bench: setup
	$(VENV)/bin/leveller bench datapath

clean:
	rm -rf $(VENV) build *.egg-info
	@if [ -f shim/Makefile ]; then $(MAKE) -s -C shim clean; fi
