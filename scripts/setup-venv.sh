#!/usr/bin/env bash
# Create .venv with the project installed editable (Debian's bcc is linked in
# by scripts/link-bcc.sh, which `make venv` runs every time).
set -euo pipefail
VENV=${1:-.venv}
PY=${PYTHON:-python3}

[ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
# This machine's pip config lists local mirrors that may be absent; hide only those warnings.
"$VENV/bin/python" -m pip install -q --disable-pip-version-check -e ".[dev]" \
  2> >(grep -v "^WARNING: Location 'file:" >&2)
# The simulator's compiled water-filling (optional: without a numba wheel for this Python, the numpy
# code runs instead, with the same results).
"$VENV/bin/python" -m pip install -q --disable-pip-version-check -e ".[dev,fast]" \
  2> >(grep -v "^WARNING: Location 'file:" >&2) \
  || echo "setup-venv: numba not installed; the network simulator uses its numpy water-filling" >&2
