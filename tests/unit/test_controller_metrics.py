"""leveller.controller.metrics: the number of series stays bounded whatever hosts report (issue 26, finding 16:
one secret holder reporting thousands of host names made as many leveller_reports_total series)."""

from __future__ import annotations

import time

from prometheus_client import generate_latest

from leveller.controller.metrics import MAX_HOST_SERIES, OTHER_HOSTS
from leveller.controller.paths import SingleLinkPaths
from leveller.controller.service import Controller
from leveller.core.policies import make_policy
from leveller.core.qos import default_level_map
from leveller.model.messages import JobReport, Report


def _controller(flow_claims: bool = False, stale_after_s: float | None = None) -> Controller:
    return Controller(SingleLinkPaths(), make_policy("leveller"), default_level_map(2), tau_s=1.0,
                      stale_after_s=stale_after_s, flow_claims=flow_claims)


def test_thousands_of_invented_hosts_make_a_bounded_number_of_series() -> None:
    ctl, now = _controller(), time.time()
    for i in range(3000):
        ctl.report(Report(f"h{i}", (JobReport("j", 1, now - 10),), (), "00112233aabbccdd", 1), now)
    text = generate_latest(ctl.metrics.registry).decode()
    series = [line for line in text.splitlines() if line.startswith("leveller_reports_total{")]
    assert len(series) == MAX_HOST_SERIES + 1, len(series)
    assert f'leveller_reports_total{{host="{OTHER_HOSTS}"}} {3000 - MAX_HOST_SERIES}.0' in series
    assert 'leveller_reports_total{host="h0"} 1.0' in series  # the first hosts keep their own series
