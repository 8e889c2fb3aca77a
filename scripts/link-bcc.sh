#!/usr/bin/env bash
# Expose Debian's bcc (not on PyPI) to the venv through a .pth that points at a
# directory holding only a `bcc` symlink, so the rest of dist-packages stays out.
# Run by every `make venv`, not only when the venv is made: a venv can predate the
# Debian packages (`make torch` on a fresh machine makes it before `make system`).
set -euo pipefail
VENV=${1:-.venv}
BCC=${LEVELLER_BCC_DIR:-/usr/lib/python3/dist-packages/bcc}

site=$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
if [ -d "$BCC" ]; then
  mkdir -p "$VENV/bcc-only"
  ln -sfn "$BCC" "$VENV/bcc-only/bcc"
  pth="$(cd "$VENV/bcc-only" && pwd)"
  [ "$(cat "$site/leveller-bcc.pth" 2>/dev/null)" = "$pth" ] || echo "$pth" > "$site/leveller-bcc.pth"
fi
