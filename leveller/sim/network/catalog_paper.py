"""The paper-scale model catalog (``models=paper``), derived from measured H200 rows.

GPT-3-family decoder models of 1.3B, 2.7B, 6.7B and 13B parameters (sequence 2048), each
trained with DDP or FSDP full sharding. Source: ``h200-paper-gpt.jsonl``, measured on one
NVIDIA H200 (PyTorch 2.11, CUDA 13, bf16 weights and gradients, SDPA attention; median of 5
after 2 warm-ups, one run). ``catalog_paper_data.py`` holds the rows used, copied verbatim
(per model the largest per-GPU batch measured: 4, 4, 4, 2). Per entry:

- **Compute** per iteration = (forward + backward of one micro-batch) x ``micro_batches``, the
  micro-batches being as many as make ``SEQUENCES`` sequences per GPU per iteration (65,536
  tokens, as the earlier extrapolated catalog; gradient accumulation, one communication round
  per iteration).
- **DDP** all-reduces fp32 gradients (4 bytes per parameter). With gradient accumulation the
  all-reduce overlaps only the last micro-batch's backward: its buckets start once the first
  ``BUCKET_BYTES`` (DDP's default ``bucket_cap_mb`` = 25 MiB) of gradients are ready, read off
  the row's gradient-ready curve (linear between points). ``slack_s`` = that backward left
  after the first bucket is ready. One all-reduce starting then stands for the buckets when the
  network is slower than gradients become ready (all-reduce alone longer than one backward pass:
  at 100 Gbit/s 0.84 s for 1.3B against a 0.11 s backward), the contended cases' regime.
- **FSDP** moves bf16 parameters and gradients (2 bytes per parameter) in three phases:
  all-gather | forward, all-gather | first half of the backward, reduce-scatter | second half
  (``JobSpec.stages`` with ``forward`` = the forward of all micro-batches): the measured
  forward and backward times bound the overlap.
- DDP keeps weights, gradients and Adam state (``DDP_STATE_BYTES_PER_PARAM`` = 16 bytes per
  parameter) on every GPU: a size gets a DDP entry only if they fit the GPU's memory (13B does
  not fit a 141 GB H200; 6.7B does not fit an 80 GB A100). Activations are not counted.

``gpu=NAME`` scales every time by ``GPUS[h200] / GPUS[NAME]`` peak dense BF16 tensor TFLOP/s
(NVIDIA datasheets: H200 SXM 989.4, as the H100 SXM; A100 312): the same fraction of peak on
both, which the measured rows reach at 33-50 % (326-498 TFLOP/s).

Re-create the data module with
    python -m leveller.sim.network.catalog_paper PATH/h200-paper-gpt.jsonl > leveller/sim/network/catalog_paper_data.py
"""

from __future__ import annotations

import json
import pprint
import sys
import textwrap
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any

from leveller.errors import UserError
from leveller.sim.network.catalog import ready_fraction
from leveller.sim.network.catalog_paper_data import ROWS

SEQUENCES = 32  # sequences of 2048 tokens per GPU per iteration (65,536 tokens)
BUCKET_BYTES = 25 * 2**20  # DDP's default bucket_cap_mb = 25 (MiB)
DDP_BYTES_PER_PARAM = 4  # fp32 gradients
FSDP_BYTES_PER_PARAM = 2  # bf16 parameters and gradients
DDP_STATE_BYTES_PER_PARAM = 16  # fp32 weights and gradients, Adam's two moments


@dataclass(frozen=True)
class Gpu:
    """A GPU the catalog can be scaled to: peak dense BF16 tensor TFLOP/s and memory (GB)."""

    tflops: float
    memory_gb: float


GPUS: dict[str, Gpu] = {"h200": Gpu(989.4, 141.0), "a100": Gpu(312.0, 80.0)}  # datasheets; h200 = measured
MEASURED_ON = "h200"
NAMES = {"gpt_1.3b": "gpt-1.3b", "gpt_2.7b": "gpt-2.7b", "gpt_6.7b": "gpt-6.7b", "gpt_13b": "gpt-13b"}
ROW_FIELDS = ("model", "batch", "seq", "params", "forward_s_median", "backward_s_median", "grad_ready_curve")


def compute_scale(gpu: str) -> float:
    """Factor on the measured H200 times for ``gpu``: the ratio of peak dense BF16 TFLOP/s."""
    if gpu not in GPUS:
        raise UserError(f"gpu = {gpu!r} is unknown; allowed: {', '.join(GPUS)}")
    return GPUS[MEASURED_ON].tflops / GPUS[gpu].tflops


def derive_entries(row: dict[str, Any], gpu: str = MEASURED_ON) -> list[dict[str, Any]]:
    """The DDP (if its state fits ``gpu``) and FSDP entries of one measured row."""
    scale = compute_scale(gpu)
    params = int(row["params"])
    batch = int(row["batch"])
    micro = SEQUENCES // batch
    forward, backward = float(row["forward_s_median"]), float(row["backward_s_median"])
    compute = (forward + backward) * micro * scale
    name = NAMES[row["model"]]
    common = {"params": params, "micro_batch": batch, "micro_batches": micro, "compute_s": round(compute, 6),
              "forward_s": round(forward * micro * scale, 6)}
    out = []
    if params * DDP_STATE_BYTES_PER_PARAM <= GPUS[gpu].memory_gb * 1e9:
        ddp_bytes = params * DDP_BYTES_PER_PARAM
        first = ready_fraction(row["grad_ready_curve"], BUCKET_BYTES / ddp_bytes)
        out.append({"model": f"{name}/ddp", "collective": "ddp", **common, "bytes": ddp_bytes,
                    "slack_s": round(backward * scale * (1 - first), 6)})
    out.append({"model": f"{name}/fsdp", "collective": "fsdp", **common, "bytes": params * FSDP_BYTES_PER_PARAM,
                "slack_s": 0.0})
    return out


@cache
def paper_models(gpu: str = MEASURED_ON) -> tuple[dict[str, Any], ...]:
    """Catalog entries shaped like ``catalog_data.MODELS`` plus ``collective``, ``params``, ``forward_s``
    (FSDP's first stage) and the micro-batching, for ``gpu``."""
    return tuple(e for row in ROWS for e in derive_entries(row, gpu))


PAPER_MODELS: tuple[dict[str, Any], ...] = paper_models()


def _check_row(row: Any, where: str) -> dict[str, Any]:
    """One profile line as the data module keeps it; UserError naming the line, field and value."""
    if not isinstance(row, dict):
        raise UserError(f"{where}: expected a JSON object with {', '.join(ROW_FIELDS)}")
    for key in ROW_FIELDS:
        if key not in row:
            raise UserError(f"{where}: missing field {key!r}; needed: {', '.join(ROW_FIELDS)}")
    if row["model"] not in NAMES:
        raise UserError(f"{where}: model = {row['model']!r} is unknown; allowed: {', '.join(NAMES)}")
    batch = row["batch"]
    if isinstance(batch, bool) or not isinstance(batch, int) or batch < 1 or SEQUENCES % batch:
        raise UserError(f"{where}: batch = {batch!r} is invalid; a divisor of {SEQUENCES}")
    for key in ("params", "forward_s_median", "backward_s_median"):
        value = row[key]
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < 1e300:
            raise UserError(f"{where}: {key} = {value!r} is invalid; a number > 0")
    curve = row["grad_ready_curve"]
    ok = isinstance(curve, list) and curve and all(
        isinstance(p, list) and len(p) == 2 and all(isinstance(v, (int, float)) and 0 <= v <= 1 for v in p)
        for p in curve)
    if not ok or [p[1] for p in curve] != sorted(p[1] for p in curve) or curve[-1][1] != 1:
        raise UserError(f"{where}: grad_ready_curve is invalid; [[backward fraction, bytes fraction], ...] "
                        "in [0, 1], bytes fraction rising to 1")
    return {k: row[k] for k in ROW_FIELDS}


def select_rows(lines: Sequence[str], source: str = "profiles") -> list[dict[str, Any]]:
    """Per model, the row of the largest per-GPU batch measured, with the fields the catalog needs."""
    best: dict[str, dict[str, Any]] = {}
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        where = f"{source} line {number}"
        try:
            parsed = json.loads(line)
        except json.JSONDecodeError as exc:
            raise UserError(f"{where}: not JSON ({exc.msg})") from None
        row = _check_row(parsed, where)
        if row["model"] not in best or row["batch"] > best[row["model"]]["batch"]:
            best[row["model"]] = row
    missing = [m for m in NAMES if m not in best]
    if missing:
        raise UserError(f"{source}: no row for model {missing[0]!r}; needed: {', '.join(NAMES)}")
    return [best[m] for m in NAMES]


def render(rows: list[dict[str, Any]]) -> str:
    body = "\n".join(textwrap.indent(pprint.pformat(r, width=112, compact=True, sort_dicts=False), "    ") + ","
                     for r in rows)
    return f'''"""Measured rows of the paper-scale catalog (copied by catalog_paper.py, do not edit).

From h200-paper-gpt.jsonl: one NVIDIA H200, PyTorch 2.11.0+cu130, bf16 weights and gradients,
SDPA attention, random weights; median of 5 iterations after 2 warm-ups, one run. Per model the
row of the largest per-GPU batch measured; fields as measured: forward_s_median and
backward_s_median (unhooked, seconds; their sum is the iteration), grad_ready_curve
([fraction of backward elapsed, fraction of gradient bytes ready], from a hooked backward).
"""

ROWS: tuple[dict, ...] = (
{body}
)
'''


if __name__ == "__main__":
    if len(sys.argv) != 2:
        print("usage: python -m leveller.sim.network.catalog_paper PATH/h200-paper-gpt.jsonl > catalog_paper_data.py",
              file=sys.stderr)
        sys.exit(2)
    with open(sys.argv[1], encoding="utf-8") as fh:
        sys.stdout.write(render(select_rows(fh.readlines(), sys.argv[1])))
