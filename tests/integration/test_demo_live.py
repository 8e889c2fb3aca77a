"""The live demo, shortened: the paper's Figure 3 pair on the real cluster (OVS driven by the
os-ken app, controller and agents as processes, eBPF DSCP marking, TCP jobs in namespaces)
under `crux` and `leveller`. Lowest-R-first must lift the worse job well above Crux's static
priority, close to the model optimum; and nothing privileged may be left behind."""

from __future__ import annotations

import uuid

import pytest

from leveller.experiments.demo.orchestrate import run_demo
from leveller.experiments.shared.policy_run import LiveSettings

pytestmark = pytest.mark.privileged


def test_pair_leveller_beats_crux_on_real_packets(tmp_path) -> None:
    from pyroute2 import netns

    name = "dm" + uuid.uuid4().hex[:8]
    runs, ideal = run_demo(["pair"], ["crux", "leveller"], LiveSettings(seconds=40.0), out_dir=tmp_path / "out",
                           name=name, run_dir=tmp_path / "run")
    by = {r.policy: r for r in runs}
    crux, lev = by["crux"], by["leveller"]
    print(f"ideal {ideal}; crux {crux.rates}; leveller {lev.rates} ({lev.switches} top-job changes)")
    # profiled alone: the model's C+M (0.5 s and 0.75 s at 0.25 s per unit) plus a little TCP (quiet:
    # 0.50-0.53 and 0.75-0.79; under two CPU burners 0.552 and 0.833), less up to the switch queues' burst
    # (10 ms of the link sent at once after an idle compute phase: 0.496 / 0.746 quiet); a profile taken while
    # the other job ran, or of the wrong job, would be far off (1:1 beside 1:2 under fair sharing: about 0.67)
    assert 0.49 <= ideal["1:1"] < 0.6 and 0.74 <= ideal["1:2"] < 0.9
    # Crux: static priority for job 1 (higher GPU intensity); job 2 waits behind it. Job 1 runs near its
    # best and well ahead of job 2 (flow-fair TCP gives both about 0.74): on a host whose hypervisor stole a
    # sixth of the CPU over the suite, 0.782 against 0.612 (the jobs' compute waits for the CPU too)
    assert crux.switches == 0 and crux.rates[0] > 0.75 and crux.rates[0] - crux.rates[1] > 0.12
    # LEVELLER: priorities follow R, both jobs near the 0.857 optimum. The controller's default switching
    # rule (hysteresis 0.02, dwell 2 s: docs/switching.md) lets the top change at most once per dwell; the
    # fluid model of the pair with it changes the top about 7 times in 40 s (the paper's rule: about 100,
    # once per iteration end), a static order never. On a loaded
    # machine every R drops, so the optimum is judged against the best R the machine gives a job
    # right now, Crux's top job (model 1.0): leveller ~0.86 of it on a quiet machine, 0.81 with two
    # CPU burners and a third busy process (every top-job change waits for the CPU); flow-fair TCP
    # (no priority, a broken marker) ~0.74
    top = crux.rates[0]
    from leveller.core.switching import DEFAULT

    assert 3 <= lev.switches <= 40.0 / DEFAULT.dwell + 1, lev.switches
    assert lev.min >= 0.78 * top, (lev.rates, top)
    assert lev.min > crux.min + 0.05
    # the picture: both jobs' R lines, and both jobs holding the top level in turn (shaded spans)
    from tests.helpers.pictures import colour_pixels, cycle_colours, over_white

    c1, c2 = cycle_colours(2)
    png = tmp_path / "out" / "pair-leveller-timeline.png"
    lines = colour_pixels(png, {"r1": c1, "r2": c2}, tolerance=0.1)  # thin lines: anti-aliased
    spans = colour_pixels(png, {"top1": over_white(c1, 0.35), "top2": over_white(c2, 0.35)})
    assert lines["r1"] > 100 and lines["r2"] > 100, lines
    assert min(spans.values()) > 0.2 * max(spans.values()) > 0, spans
    assert not [ns for ns in netns.listnetns() if ns.startswith(f"lvtb-{name}-")]
    assert not (tmp_path / "run").exists() and not (tmp_path / "run.work").exists()
