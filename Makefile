# Two commands for a fresh machine: `make demo` and `make test`.
# Every target sets up what it needs first, idempotently.
SHELL := /bin/bash
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: setup system venv shim bpf torch image demo lint test test-under-load test-unit bench mutants clean

setup: system venv shim bpf

system:
	@scripts/setup-system.sh

$(STAMP): pyproject.toml scripts/setup-venv.sh
	@scripts/setup-venv.sh $(VENV)
	@touch $(STAMP)

# The bcc link is checked on every run (cheap): the venv may predate the Debian packages.
venv: $(STAMP)
	@scripts/link-bcc.sh $(VENV)

shim:
	@if [ -f shim/Makefile ]; then $(MAKE) -s -C shim; fi

# The eBPF datapath's CO-RE object (clang + bpftool, against this kernel's BTF): the agent loads it with
# libbpf and needs no compiler at run time (bpf/Makefile).
bpf:
	@$(MAKE) -s -C bpf

# Optional extra: PyTorch (CPU build) for the real torch.distributed training job.
# Pinned to the release this kind of machine keeps on disk; elsewhere pip downloads it.
TORCH := torch==2.13.0
torch: venv
	@$(PY) -c "import torch" 2>/dev/null || $(PY) -m pip install -q --disable-pip-version-check $(TORCH) \
		2> >(grep -v "^WARNING: Location 'file:" >&2)

# The container image of the agent, controller and SDN app (localhost/leveller:VERSION), from a debootstrap root
# file system of Debian's packages (cached in /var/cache/leveller/image) and the wheel; needs root
# (scripts/build-image.sh, docs/operations.md "Container image"). Built by .ci/run, tested by
# tests/integration/test_container_image.py.
image: system venv bpf
	@scripts/build-image.sh $(PY)

demo: setup
	$(VENV)/bin/leveller demo

# Static checks: ruff (pycodestyle, pyflakes, import order, bugbear, pyupgrade) over the tree and
# mypy (strict on leveller/core and leveller/model); configured in pyproject.toml.
lint: venv
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy

# The unit tests on both cores (pytest-xdist: 195 s -> 133 s here), then the integration tests one at a
# time: they measure live systems on the machine's CPUs and must not share them with each other. A failed
# integration test runs once more (pytest-rerunfailures, like Open vSwitch's `make check RECHECK=yes`);
# failing twice fails the run, and every rerun is listed with its first failure (a defect to fix). Unit
# tests never rerun.
test: setup lint
	$(PY) -m pytest -q -ra -n 2 tests/unit
	$(PY) -m pytest -q -ra --durations=25 --reruns 1 --ignore=tests/unit

# The live suite three times, each under two CPU burners (about 50 minutes; not part of `make test`)
test-under-load: setup
	scripts/under-load.sh 3 2

test-unit: venv
	$(PY) -m pytest -q -ra tests/unit

# Mutation testing of leveller/core, leveller/sim and the wire validation against the unit tests
# (about 1.5 hours on 2 cores, not part of `make test`). Report: mutants/report.md. MUTANTS=--survivors reruns
# only the last run's survivors, MUTANTS=--no-run rewrites the report.
mutants: venv
	@$(PY) -c "import mutmut" 2>/dev/null || $(PY) -m pip install -q --disable-pip-version-check -e ".[dev,mutants]" \
		2> >(grep -v "^WARNING: Location 'file:" >&2)
	$(PY) scripts/mutants.py $(MUTANTS)

bench: setup
	$(VENV)/bin/leveller bench datapath
	$(VENV)/bin/leveller bench controller

clean:
	rm -rf $(VENV) build *.egg-info
	@if [ -f shim/Makefile ]; then $(MAKE) -s -C shim clean; fi
	@$(MAKE) -s -C bpf clean
