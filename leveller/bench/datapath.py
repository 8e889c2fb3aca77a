"""eBPF DSCP marking vs the paper's iptables rules: throughput and update time.

On a fresh veth pair between two namespaces (sender ns_a -> receiver ns_b):
- iperf3 throughput of one TCP stream with no marker, with our tc program
  holding N flow entries, and with N iptables mangle `-j DSCP` rules (one per
  5-tuple, the paper's method). The iperf3 flow is one of the N and is
  re-marked by both markers; its iptables rule sits in the middle of the
  chain (the average position). Modes are interleaved, rotating the order
  each round; medians are reported.
- time to change the DSCP of 1, 1,000 and N flows: our map update
  (Datapath.set_dscp, Python encoding included; the flows already hold
  slots, so the new marks are stores into the mmap'd mark array) vs one
  `iptables-restore --noflush` transaction, either with one `-R` (replace)
  line per changed rule or rewriting the whole chain; "iptables" is the
  faster of the two.
Everything (namespaces, rules, filters, iperf3) is removed on exit, also on
Ctrl-C: iptables rules live in the sender namespace and die with it.
"""

from __future__ import annotations

import ipaddress
import json
import shutil
import statistics
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from leveller.errors import UserError
from leveller.model.flow import FlowKey, flow_key
from leveller.procs import stop_process

IPERF_PORT = 5201
IPERF_CPORT = 40000
CHAIN = "LEVELLER_BENCH"
UPDATE_SIZES = (1, 1000, 10000)
MAX_FLOWS = 200_000
TOOLS = ("ip", "iperf3", "iptables", "iptables-restore")
BENCH_LEASE_S = 3600.0  # the marks must act during a run: a lease no run outlives

Progress = Callable[[str], None]


@dataclass
class DatapathBenchResult:
    flows: int
    throughput_runs_gbps: dict[str, list[float]] = field(default_factory=dict)
    update_runs_ms: dict[str, dict[str, list[float]]] = field(default_factory=dict)
    seconds_per_run: float = 0.0
    elapsed_s: float = 0.0
    loader: str = ""  # which loader loaded our program (libbpf, bcc)

    @property
    def throughput_gbps(self) -> dict[str, float]:
        return {mode: statistics.median(v) for mode, v in self.throughput_runs_gbps.items()}

    def update_ms(self, method: str) -> dict[str, float]:
        return {size: statistics.median(v) for size, v in self.update_runs_ms[method].items()}

    def to_json(self) -> dict[str, Any]:
        """The contract of `leveller bench datapath --json` (plus detail keys)."""
        ipt = {size: min(self.update_ms("iptables_replace_rules")[size],
                         self.update_ms("iptables_rewrite_chain")[size])
               for size in self.update_runs_ms["ebpf"]}
        return {
            "flows": self.flows,
            "loader": self.loader,
            "throughput_gbps": {k: round(v, 3) for k, v in self.throughput_gbps.items()},
            "update_ms": {"ebpf": _rounded(self.update_ms("ebpf")), "iptables": _rounded(ipt)},
            "iptables_update_methods_ms": {
                "replace_rules": _rounded(self.update_ms("iptables_replace_rules")),
                "rewrite_chain": _rounded(self.update_ms("iptables_rewrite_chain")),
            },
            "throughput_runs_gbps": {k: [round(x, 3) for x in v] for k, v in self.throughput_runs_gbps.items()},
            "seconds_per_run": self.seconds_per_run,
            "elapsed_s": round(self.elapsed_s, 1),
        }


def _rounded(d: dict[str, float]) -> dict[str, float]:
    return {k: round(v, 3) for k, v in d.items()}


def check_tools() -> None:
    """Fail with a clear message when a needed program is missing."""
    missing = [t for t in TOOLS if shutil.which(t) is None]
    if missing:
        raise UserError(f"missing programs: {', '.join(missing)} (Debian packages iproute2, iperf3, "
                        "iptables; `make setup` installs them)")


def bench_flows(src: ipaddress.IPv4Address, dst: ipaddress.IPv4Address, n: int) -> tuple[list[FlowKey], int]:
    """n distinct TCP flows src -> dst; the iperf3 data flow is at index n // 2 (returned)."""
    measured = flow_key(src, dst, IPERF_CPORT, IPERF_PORT)
    others: list[FlowKey] = []
    i = 0
    while len(others) < n - 1:
        sport, dport = 1024 + i % 30000, 6000 + i // 30000
        i += 1
        if (sport, dport) != (IPERF_CPORT, IPERF_PORT):
            others.append(flow_key(src, dst, sport, dport))
    pos = n // 2
    return others[:pos] + [measured] + others[pos:], pos


def _rule(key: FlowKey, dscp: int) -> str:
    return (f"-s {key.src}/32 -d {key.dst}/32 -p tcp -m tcp --sport {key.sport} --dport {key.dport} "
            f"-j DSCP --set-dscp {dscp}")


def _restore(ns: str, lines: list[str]) -> float:
    """Apply one iptables-restore --noflush transaction in ns; seconds taken."""
    text = "*mangle\n" + "\n".join(lines) + "\nCOMMIT\n"
    t0 = time.perf_counter()
    r = subprocess.run(["ip", "netns", "exec", ns, "iptables-restore", "--noflush"], input=text,
                       text=True, capture_output=True, timeout=120)
    dt = time.perf_counter() - t0
    if r.returncode != 0:
        raise RuntimeError(f"iptables-restore failed: {r.stderr.strip()[:500]}")
    return dt


def _iptables(ns: str, *args: str) -> str:
    r = subprocess.run(["ip", "netns", "exec", ns, "iptables", "-w", "-t", "mangle", *args],
                       text=True, capture_output=True, timeout=60)
    if r.returncode != 0:
        raise RuntimeError(f"iptables {' '.join(args)} failed: {r.stderr.strip()[:500]}")
    return r.stdout


def _chain(keys: list[FlowKey], dscps: list[int]) -> list[str]:
    return [f":{CHAIN} - [0:0]"] + [f"-A {CHAIN} {_rule(k, d)}" for k, d in zip(keys, dscps)]


def _iperf(pair: Any, seconds: float) -> float:
    """One iperf3 run ns_a -> ns_b from the known client port; Gbit/s received."""
    argv = pair.exec_in(pair.ns_a, ["iperf3", "-c", str(pair.ip_b), "-p", str(IPERF_PORT),
                                    "--cport", str(IPERF_CPORT), "-t", str(seconds), "-J"])
    for _attempt in range(20):  # the server may still be starting (connection refused)
        r = subprocess.run(argv, text=True, capture_output=True, timeout=seconds + 30)
        try:
            out = json.loads(r.stdout)
        except json.JSONDecodeError:
            out = {"error": r.stderr.strip() or r.stdout.strip()}
        if "error" not in out:
            return float(out["end"]["sum_received"]["bits_per_second"]) / 1e9
        if "refused" not in str(out["error"]) and "in use" not in str(out["error"]):
            raise RuntimeError(f"iperf3 failed: {out['error']}")
        time.sleep(0.2)
    raise RuntimeError(f"iperf3 failed: {out['error']}")


def run(flows: int = 10000, rounds: int = 6, seconds: float = 3.0,
        progress: Progress | None = None, loader: str = "auto") -> DatapathBenchResult:
    """Run the whole benchmark; see the module docstring. ``loader``: how our program is loaded
    (leveller.agent.bpfload: auto, libbpf, bcc)."""
    from leveller.agent.bpfload import check_loader
    from leveller.agent.datapath import Datapath
    from leveller.testbed.vethpair import VethPair

    if isinstance(flows, bool) or not isinstance(flows, int) or not 1 <= flows <= MAX_FLOWS:
        raise UserError(f"--flows={flows!r}: allowed is an integer in 1..{MAX_FLOWS}")
    check_loader(loader)
    check_tools()
    say = progress or (lambda _msg: None)
    t_start = time.monotonic()
    result = DatapathBenchResult(flows=flows, seconds_per_run=seconds)
    sizes = sorted({min(s, flows) for s in UPDATE_SIZES})  # capped at --flows

    with VethPair(prefix="lvb") as pair:
        keys, _pos = bench_flows(pair.ip_a, pair.ip_b, flows)
        server = subprocess.Popen(pair.exec_in(pair.ns_b, ["iperf3", "-s", "-B", str(pair.ip_b),
                                                           "-p", str(IPERF_PORT)]),
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            say(f"loading {flows} iptables rules")
            _restore(pair.ns_a, _chain(keys, [10] * flows))
            dp_kwargs: dict[str, Any] = {"max_marked_flows": flows, "loader": loader}

            # ---- throughput, interleaved --------------------------------
            modes = ["none", "ebpf", "iptables"]
            result.throughput_runs_gbps = {m: [] for m in modes}
            for rnd in range(rounds):
                order = modes[rnd % 3:] + modes[:rnd % 3]
                for mode in order:
                    say(f"throughput round {rnd + 1}/{rounds}: {mode}")
                    if mode == "none":
                        gbps = _iperf(pair, seconds)
                    elif mode == "ebpf":
                        with Datapath(pair.if_a, netns=pair.ns_a, **dp_kwargs) as dp:
                            dp.set_lease(BENCH_LEASE_S)  # marks act (the lease check is part of the cost)
                            dp.set_dscp(dict.fromkeys(keys, 10))
                            gbps = _iperf(pair, seconds)
                            _check_ebpf_marked(dp, keys[flows // 2])
                            result.loader = dp.loader_used or ""
                    else:
                        _iptables(pair.ns_a, "-A", "POSTROUTING", "-j", CHAIN)
                        try:
                            gbps = _iperf(pair, seconds)
                        finally:
                            _iptables(pair.ns_a, "-D", "POSTROUTING", "-j", CHAIN)
                        _check_iptables_marked(pair.ns_a, flows // 2 + 1)
                    result.throughput_runs_gbps[mode].append(gbps)

            # ---- update time: eBPF ---------------------------------------
            say("update time: eBPF map")
            ebpf_runs: dict[str, list[float]] = {str(s): [] for s in sizes}
            with Datapath(pair.if_a, netns=pair.ns_a, **dp_kwargs) as dp:
                dp.set_lease(BENCH_LEASE_S)
                expected = dict.fromkeys(keys, 10)
                dp.set_dscp(expected)
                for rep in range(7):
                    for size in sizes:
                        change = dict.fromkeys(keys[:size], 12 + 2 * (rep % 2))
                        t0 = time.perf_counter()
                        dp.set_dscp(change)
                        ebpf_runs[str(size)].append((time.perf_counter() - t0) * 1e3)
                        expected.update(change)
                if dp.read_dscp() != expected:
                    raise RuntimeError("the DSCP map does not hold what the benchmark wrote")
            result.update_runs_ms["ebpf"] = ebpf_runs

            # ---- update time: iptables -----------------------------------
            replace: dict[str, list[float]] = {str(s): [] for s in sizes}
            rewrite: dict[str, list[float]] = {str(s): [] for s in sizes}
            for rep in range(3):
                for size in sizes:
                    dscp = 16 + 2 * rep
                    say(f"update time: iptables, {size} rules, run {rep + 1}/3")
                    lines = [f"-R {CHAIN} {i + 1} {_rule(keys[i], dscp)}" for i in range(size)]
                    replace[str(size)].append(_restore(pair.ns_a, lines) * 1e3)
                    dscps = [dscp + 1] * size + [10] * (flows - size)
                    rewrite[str(size)].append(_restore(pair.ns_a, _chain(keys, dscps)) * 1e3)
            result.update_runs_ms["iptables_replace_rules"] = replace
            result.update_runs_ms["iptables_rewrite_chain"] = rewrite
        finally:
            stop_process(server)
    result.elapsed_s = time.monotonic() - t_start
    return result


def _check_ebpf_marked(dp: Any, measured: FlowKey) -> None:
    st = dp.read_stats().get(measured)
    if st is None or st.bytes < 1_000_000:
        raise RuntimeError(f"our program did not see the iperf3 flow {measured.label()}: the benchmark is invalid")


def _check_iptables_marked(ns: str, rulenum: int) -> None:
    # -L CHAIN N prints one rule; with -v -x the first column is its packet count.
    out = _iptables(ns, "-L", CHAIN, str(rulenum), "-v", "-x", "-n").split()
    if not out or not out[0].isdigit() or int(out[0]) == 0:
        raise RuntimeError("the iptables rule for the iperf3 flow matched no packet: "
                           f"the benchmark is invalid ({out[:3]})")
