"""The paper-scale model catalog (``models=paper``): an extrapolation, kept apart from measured rows.

GPT-style decoder models of 1.3B, 2.7B, 6.7B and 13B parameters (the GPT-3 paper's sizes),
each trained with DDP or FSDP full sharding. Nothing here was measured at these sizes:

- **Compute** per iteration = ``COST_PER_PARAM_TOKEN`` x params x tokens, the training cost
  6 x params x tokens FLOPs at the rate the measured H200 rows reach. ``COST_PER_PARAM_TOKEN``
  is the median, over the GPT-style rows of ``h200-bf16.jsonl`` (gpt2_medium, gpt2_xl,
  llama_1b; 1024, 1024, 2048 tokens per sequence), of ``iter_s_median / (params x batch x
  sequence)`` (:func:`derive_cost`; 3.09e-14 s, i.e. 194 TFLOP/s, from gpt2_xl/b4). Every model
  processes ``TOKENS`` tokens per GPU per iteration (4 accumulated micro-batches of 8 x
  2048 tokens; communication once per iteration).
- **Communication**: ``bytes`` = params x bytes per element. DDP all-reduces fp32 gradients
  (4 bytes, as the measured rows); each rank sends 2(n-1)/n x bytes per iteration. FSDP
  all-gathers bf16 parameters for the forward pass and again for the backward pass and
  reduce-scatters bf16 gradients (2 bytes): (n-1)/n x bytes per phase, 3(n-1)/n x bytes per
  iteration (:func:`leveller.sim.network.jobs.phase_volume`).
- **Overlap**: DDP's all-reduce may start ``slack`` before compute ends, the same fraction of
  compute as the measured gpt2_xl/b4 row (``SLACK_FRACTION``, catalog.py's rule). FSDP's three
  phases each overlap one third of the compute (``JobSpec.stages``).
- DDP keeps a full replica of weights, gradients and Adam state (16 bytes per parameter), so
  13B does not fit one 141 GB H200 and has only an FSDP entry.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Sequence
from typing import Any

TOKENS = 4 * 8 * 2048  # tokens per GPU per iteration (4 micro-batches of 8 x 2048, gradient accumulation)
DDP_BYTES_PER_PARAM = 4  # fp32 gradients
FSDP_BYTES_PER_PARAM = 2  # bf16 parameters and gradients
COST_PER_PARAM_TOKEN = 3.0858e-14  # s; derive_cost(h200-bf16.jsonl)
SLACK_FRACTION = 0.056352 / 0.196876  # gpt2_xl/b4 in catalog_data.py: slack_s / compute_s
SIZES = {"gpt-1.3b": 1.3e9, "gpt-2.7b": 2.7e9, "gpt-6.7b": 6.7e9, "gpt-13b": 13e9}
DDP_MAX_PARAMS = 7e9  # larger models only with FSDP (see above)
GPT_ROWS = {"gpt2_medium": 1024, "gpt2_xl": 1024, "llama_1b": 2048}  # measured rows used, sequence length


def derive_cost(lines: Sequence[str]) -> float:
    """Seconds per parameter and token: the median over the GPT-style measured rows."""
    costs = []
    for line in lines:
        if not line.strip():
            continue
        row = json.loads(line)
        seq = GPT_ROWS.get(row["model"])
        if seq is not None:
            costs.append(float(row["iter_s_median"]) / (row["params"] * row["batch"] * seq))
    if not costs:
        raise ValueError(f"no GPT-style rows ({', '.join(GPT_ROWS)}) in the profiles")
    return statistics.median(costs)


def paper_models() -> tuple[dict[str, Any], ...]:
    """Catalog entries shaped like ``catalog_data.MODELS`` plus ``collective`` and ``params``."""
    out = []
    for name, params in SIZES.items():
        compute = round(COST_PER_PARAM_TOKEN * params * TOKENS, 6)
        if params <= DDP_MAX_PARAMS:
            out.append({"model": f"{name}/ddp", "collective": "ddp", "params": params, "compute_s": compute,
                        "bytes": int(params * DDP_BYTES_PER_PARAM), "slack_s": round(SLACK_FRACTION * compute, 6)})
        out.append({"model": f"{name}/fsdp", "collective": "fsdp", "params": params, "compute_s": compute,
                    "bytes": int(params * FSDP_BYTES_PER_PARAM), "slack_s": 0.0})
    return tuple(out)


PAPER_MODELS: tuple[dict[str, Any], ...] = paper_models()
