"""The measured paper-scale catalog (models=paper): its numbers against the raw H200 rows, the GPU
scaling, FSDP's stages from the forward time, and bad input.

tests/golden/gpu-profiles/h200-paper-gpt-rows.jsonl: the four rows the catalog uses, copied verbatim
from h200-paper-gpt.jsonl (one NVIDIA H200, PyTorch 2.11; per model the largest batch measured). The
expected values below are computed here from those raw fields, not by the catalog's code.
"""

import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from leveller.errors import UserError
from leveller.model.job import JobSpec
from leveller.sim.network import catalog_paper
from leveller.sim.network.catalog import ready_fraction
from leveller.sim.network.catalog_paper_data import ROWS
from leveller.sim.network.runjob import RunJob
from leveller.sim.network.topology import load_network
from leveller.sim.network.trace import synthetic

GOLDEN = Path(__file__).parent.parent / "golden" / "gpu-profiles" / "h200-paper-gpt-rows.jsonl"
RAW = [json.loads(line) for line in GOLDEN.read_text(encoding="utf-8").splitlines()]
NAME = {"gpt_1.3b": "gpt-1.3b", "gpt_2.7b": "gpt-2.7b", "gpt_6.7b": "gpt-6.7b", "gpt_13b": "gpt-13b"}
H200_OVER_A100 = 989.4 / 312.0  # peak dense BF16 tensor TFLOP/s, NVIDIA datasheets


def by_hand(raw: dict, scale: float = 1.0) -> dict:
    """compute, forward, slack and bytes of one raw row, as docs/simulator.md states the rules."""
    micro = 32 // raw["batch"]  # 32 sequences of 2048 tokens per GPU per iteration
    bucket = 25 * 2**20 / raw["grad_bytes_fp32"]  # DDP's first 25 MiB bucket, as a share of fp32 gradients
    (x0, y0), (x1, y1) = raw["grad_ready_curve"][:2]
    assert y0 == 0 and y1 > bucket  # the bucket fills between the curve's first two points
    ready = x0 + (x1 - x0) * bucket / y1
    return {"compute_s": (raw["forward_s_median"] + raw["backward_s_median"]) * micro * scale,
            "forward_s": raw["forward_s_median"] * micro * scale,
            "slack_s": raw["backward_s_median"] * (1 - ready) * scale,
            "ddp_bytes": raw["grad_bytes_fp32"], "fsdp_bytes": raw["grad_bytes_bf16"]}


def test_rows_are_the_golden_raw_rows() -> None:
    assert [r["model"] for r in RAW] == list(NAME) and [r["batch"] for r in RAW] == [4, 4, 4, 2]
    lines = GOLDEN.read_text(encoding="utf-8").splitlines()
    assert catalog_paper.select_rows(lines) == list(ROWS)
    for raw, row in zip(RAW, ROWS, strict=True):
        assert row["forward_s_median"] == raw["forward_s_median"]
        assert row["backward_s_median"] == raw["backward_s_median"]
        assert row["grad_ready_curve"] == raw["grad_ready_curve"] and row["params"] == raw["params"]


def test_h200_catalog_against_the_raw_rows() -> None:
    entries = {m["model"]: m for m in catalog_paper.PAPER_MODELS}
    assert set(entries) == {"gpt-1.3b/ddp", "gpt-1.3b/fsdp", "gpt-2.7b/ddp", "gpt-2.7b/fsdp", "gpt-6.7b/ddp",
                            "gpt-6.7b/fsdp", "gpt-13b/fsdp"}  # 13B: 16 B/param = 206 GB, more than 141 GB
    for raw in RAW:
        want = by_hand(raw)
        fsdp = entries[f"{NAME[raw['model']]}/fsdp"]
        assert fsdp["compute_s"] == pytest.approx(want["compute_s"], abs=1e-6)
        assert fsdp["forward_s"] == pytest.approx(want["forward_s"], abs=1e-6)
        assert fsdp["bytes"] == want["fsdp_bytes"] and fsdp["slack_s"] == 0.0
        ddp = entries.get(f"{NAME[raw['model']]}/ddp")
        if ddp is not None:
            assert ddp["compute_s"] == fsdp["compute_s"] and ddp["bytes"] == want["ddp_bytes"]
            assert ddp["slack_s"] == pytest.approx(want["slack_s"], abs=1e-6)
    # one figure written out: 1.3B, 8 micro-batches of 4 x 2048 tokens at 0.0639 + 0.1101 s
    assert entries["gpt-1.3b/ddp"]["compute_s"] == pytest.approx(8 * (0.06387806100000404 + 0.11011139099999667))
    assert entries["gpt-13b/fsdp"]["compute_s"] == pytest.approx(16 * 0.6345386299999944, rel=1e-6)


def test_a100_scaling_by_peak_bf16() -> None:
    assert catalog_paper.compute_scale("a100") == pytest.approx(H200_OVER_A100)
    assert catalog_paper.compute_scale("h200") == 1.0
    entries = {m["model"]: m for m in catalog_paper.paper_models("a100")}
    assert "gpt-6.7b/ddp" not in entries  # 6.66e9 x 16 B = 107 GB > 80 GB
    assert "gpt-2.7b/ddp" in entries  # 42 GB
    for raw in RAW:
        want = by_hand(raw, H200_OVER_A100)
        fsdp = entries[f"{NAME[raw['model']]}/fsdp"]
        assert fsdp["compute_s"] == pytest.approx(want["compute_s"], abs=1e-6)
        assert fsdp["forward_s"] == pytest.approx(want["forward_s"], abs=1e-6)
        ddp = entries.get(f"{NAME[raw['model']]}/ddp")
        if ddp is not None:
            assert ddp["slack_s"] == pytest.approx(want["slack_s"], abs=1e-6)


def test_trace_gpu_option_scales_both_catalogs() -> None:
    net = load_network("fabric:gpus=256,nics_per_host=1,gbps=100")
    jobs, _ = synthetic("contended:jobs=40,seed=2,gpu=a100", net)
    raw = {NAME[r["model"]]: r for r in RAW}
    for job in jobs:
        want = by_hand(raw[job.model.split("/")[0]], H200_OVER_A100)
        assert job.compute == pytest.approx(want["compute_s"], abs=1e-6)
        assert job.forward == pytest.approx(want["forward_s"], abs=1e-6)
    assert {j.collective for j in jobs} == {"ddp", "fsdp"}
    assert all(j.model != "gpt-6.7b/ddp" for j in jobs)
    plain, _ = synthetic("synthetic:jobs=20,seed=2", net)
    scaled, _ = synthetic("synthetic:jobs=20,seed=2,gpu=a100", net)
    for a, b in zip(plain, scaled, strict=True):
        assert a.model == b.model and b.compute == pytest.approx(a.compute * H200_OVER_A100, abs=1e-6)
        assert b.slack == pytest.approx(a.slack * H200_OVER_A100, abs=1e-6)


def test_fsdp_stages_follow_the_forward_time() -> None:
    spec = JobSpec("f", ("h1", "h2"), compute=3.0, bytes=250e6, size=2, collective="fsdp", forward=1.2)
    assert spec.stages() == ((1.2, 0.0), (0.9, 0.0), (0.9, 0.0))
    assert JobSpec("g", None, compute=3.0, bytes=1.0, collective="fsdp").stages() == ((1.0, 0.0),) * 3
    net = load_network("dumbbell")  # h1-h2 at 1 Gbit/s: a phase of (2-1)/2 x 250 MB takes 1 s
    job = RunJob(spec, ("h1", "h2"), 0.0, net)
    assert job.ideal == pytest.approx(1.2 + 1.0 + 1.0)  # the backward halves (0.9 s) are shorter than a phase


@pytest.mark.parametrize("line,message", [
    ("[1]", "expected a JSON object"),
    ("{bad", "not JSON"),
    ('{"model": "gpt_1.3b"}', "missing field 'batch'"),
    (json.dumps({**RAW[0], "model": "gpt_175b"}), "model = 'gpt_175b' is unknown; allowed: gpt_1.3b"),
    (json.dumps({**RAW[0], "batch": 3}), "batch = 3 is invalid; a divisor of 32"),
    (json.dumps({**RAW[0], "forward_s_median": -1}), "forward_s_median = -1 is invalid"),
    (json.dumps({**RAW[0], "grad_ready_curve": [[0.5, 0.9], [1.0, 0.2]]}), "grad_ready_curve is invalid"),
])
def test_profile_line_errors_name_line_and_field(line: str, message: str) -> None:
    with pytest.raises(UserError, match=message) as err:
        catalog_paper.select_rows([line], "p.jsonl")
    assert "p.jsonl line 1" in str(err.value)


def test_missing_model_and_unknown_gpu() -> None:
    with pytest.raises(UserError, match="no row for model 'gpt_2.7b'"):
        catalog_paper.select_rows([json.dumps(RAW[0])])
    with pytest.raises(UserError, match="gpu = 'v100' is unknown; allowed: h200, a100"):
        catalog_paper.paper_models("v100")
    with pytest.raises(UserError, match="gpu = 'b200'; allowed: h200, a100"):
        synthetic("contended:gpu=b200", load_network("fabric:gpus=256"))


@given(st.lists(st.floats(0.001, 1.0), min_size=1, max_size=8), st.floats(0.0, 1.0))
def test_ready_fraction_inverts_the_interpolated_curve(steps: list[float], share: float) -> None:
    xs = [sum(steps[: i + 1]) / sum(steps) for i in range(len(steps))]
    ys = [(i + 1) / len(steps) for i in range(len(steps))]
    x = ready_fraction(list(zip(xs, ys, strict=True)), share)
    # the curve, linear from (0, 0) through the points, reaches ``share`` at x
    prev = (0.0, 0.0)
    for px, py in zip(xs, ys, strict=True):
        if py >= share:
            assert prev[0] - 1e-12 <= x <= px + 1e-12
            assert prev[1] + (py - prev[1]) * (x - prev[0]) / (px - prev[0]) == pytest.approx(share, abs=1e-9)
            break
        prev = (px, py)
