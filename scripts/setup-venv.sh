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
