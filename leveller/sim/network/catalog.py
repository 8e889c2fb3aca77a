"""The model catalog of synthetic traces, derived once from real H200 profiles.

Source: ``h200-bf16.jsonl`` (one NVIDIA H200, PyTorch 2.11, bf16 autocast; per
model and per-GPU batch: iteration time, fp32 gradient bytes, gradient-ready
curve). Per entry the catalog keeps:

- ``compute_s``: the median forward + backward time of one iteration,
- ``bytes``: the gradient bytes a data-parallel all-reduce moves (4 x params),
- ``slack_s``: how long before compute ends the all-reduce may start: the part
  of the backward pass (taken as 2/3 of the iteration) left after half of the
  gradient bytes are ready (the grad-ready curve's 50% point). One all-reduce
  per iteration starting then is a coarse stand-in for DDP's buckets.

``catalog_data.py`` holds the result; re-create it with
    python -m leveller.sim.network.catalog PATH/h200-bf16.jsonl > leveller/sim/network/catalog_data.py
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from typing import Any

BACKWARD_SHARE = 2 / 3
READY_POINT = 0.5


def ready_fraction(curve: Sequence[Sequence[float]], bytes_fraction: float) -> float:
    """Backward fraction at which ``bytes_fraction`` of the gradient bytes are ready (linear between points)."""
    prev_x, prev_y = 0.0, 0.0
    for x, y in curve:
        if y >= bytes_fraction:
            if y == prev_y:
                return x
            return prev_x + (x - prev_x) * (bytes_fraction - prev_y) / (y - prev_y)
        prev_x, prev_y = x, y
    return 1.0


def derive_entry(profile: dict[str, Any]) -> dict[str, Any]:
    compute = float(profile["iter_s_median"])
    backward = BACKWARD_SHARE * compute
    slack = backward * (1 - ready_fraction(profile["grad_ready_curve"], READY_POINT))
    return {"model": f"{profile['model']}/b{profile['batch']}", "compute_s": round(compute, 6),
            "bytes": int(profile["grad_bytes"]), "slack_s": round(slack, 6)}


def derive_catalog(lines: Sequence[str]) -> list[dict[str, Any]]:
    return [derive_entry(json.loads(line)) for line in lines if line.strip()]


def render(entries: list[dict[str, Any]]) -> str:
    rows = "\n".join(f"    {e!r}," for e in entries)
    return f'''"""Model catalog of synthetic traces (derived by catalog.py, do not edit).

From h200-bf16.jsonl: real training-iteration profiles measured on one NVIDIA
H200 (PyTorch 2.11, CUDA 13, bf16 autocast). compute_s = median iteration time,
bytes = fp32 gradient bytes per all-reduce, slack_s = overlap window (catalog.py).
"""

MODELS: tuple[dict, ...] = (
{rows}
)
'''


if __name__ == "__main__":
    if len(sys.argv) != 2:
        print("usage: python -m leveller.sim.network.catalog PATH/h200-bf16.jsonl > catalog_data.py", file=sys.stderr)
        sys.exit(2)
    with open(sys.argv[1], encoding="utf-8") as fh:
        sys.stdout.write(render(derive_catalog(fh.readlines())))
