#!/bin/sh
# Regenerate leveller/rpc/leveller_pb2.py(+.pyi) from leveller/rpc/leveller.proto with grpcio-tools.
# Usage: scripts/gen-proto.sh [OUT_ROOT]   (default: the repository, i.e. the checked-in copy;
# tests/unit/test_rpc_proto.py generates into a temporary OUT_ROOT and compares)
set -eu
cd "$(dirname "$0")/.."
out="${1:-.}"
"${PYTHON:-.venv/bin/python}" -m grpc_tools.protoc -I . --python_out="$out" --pyi_out="$out" \
    leveller/rpc/leveller.proto
