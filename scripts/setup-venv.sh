#!/usr/bin/env bash
# Create .venv with the project installed editable, and expose Debian's bcc
# (not on PyPI) through a .pth that points at a directory holding only a
# `bcc` symlink, so the rest of dist-packages stays out of the venv.
set -euo pipefail
VENV=${1:-.venv}
PY=${PYTHON:-python3}

[ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
# This machine's pip config lists local mirrors that may be absent; hide only those warnings.
"$VENV/bin/python" -m pip install -q --disable-pip-version-check -e ".[dev]" \
  2> >(grep -v "^WARNING: Location 'file:" >&2)

site=$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
if [ -d /usr/lib/python3/dist-packages/bcc ]; then
  mkdir -p "$VENV/bcc-only"
  ln -sfn /usr/lib/python3/dist-packages/bcc "$VENV/bcc-only/bcc"
  echo "$(cd "$VENV/bcc-only" && pwd)" > "$site/leveller-bcc.pth"
fi
