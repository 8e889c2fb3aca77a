"""The controller and the enforcement at cluster scale: decision time, 1,000 agents, map updates.

levels      A real Controller (leveller policy, K = 8, topology path provider)
            fed with the reports of the generated 1,024-GPU cluster
            (leveller.bench.workload) at each flow count. decide_ms = one full
            decision (Controller.step: rank, paths from the topology provider
            for flows not routed yet, prune, publish), median of several
            steps after the first (which routes every flow once; shown apart).
            Each flow count runs in a fresh process: rss_mb is its peak RSS.
agents      A real Controller serving gRPC on loopback and A emulated agents
            (one gRPC channel each, spread over a few processes, asyncio),
            each reporting F flows of the generated cluster every tau with
            the real wire format, signature and validation, on one
            ReportStream call as the agent's client does, at phases spread
            over tau. The controller decides every tau (ticks at start +
            i * tau). After a warm-up (the first decision routes every flow),
            a window of ``duration`` seconds is measured: report latency as
            the agent sees it (send -> signed reply), step time, and missed
            steps (a step that ends after the next tick). A failed report
            counts with the time it took to fail. The agents' last replies
            must carry a level for every flow they reported. The emulating
            processes run at nice EMULATION_NICE: on a real cluster the agents
            are on other hosts, here they share the controller's CPUs and
            must not take them from it (1,000 agents use 0.6 of 2 cores; two
            interleaved pairs on a host whose hypervisor stole a fifth to a
            third of the CPU: report p50 505 and 691 ms at nice 0, 20 and
            106 ms at nice 19).
map_update  10,000 flows change DSCP through BpfEnforcer.apply (change
            detection, then the new marks stored into the mmap'd mark array:
            the flows already hold slots, so no map-update syscall; the lease
            renewal is one) on the real kernel maps of bpf/flow_marker.c
            loaded detached, read back through bpf() at the end; median.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import resource
import statistics
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from leveller.bench.levels_latency import percentile

Progress = Callable[[str], None]
SECRET = b"bench-controller-0123456789abcdef"
LEVELS_K = 8
MAP_ENTRIES = 10000
EMULATION_NICE = 19  # the emulated agents yield the CPU to the controller measured (see the module doc)


# ---- levels: one decision over N flows --------------------------------------------------------------

def _reports(workload: Any, now: float, hosts: dict[str, list[Any]]) -> list[Any]:
    """One Report per host: its flows and their jobs, with iterations giving each job its rate R
    (ideal time 1 s, started 100 s ago)."""
    from leveller.rpc.schema import FlowReport, JobReport, Report

    out = []
    for host, flows in hosts.items():
        jobs = sorted({job for _, job in flows})
        out.append(Report(host, tuple(JobReport(j, round(workload.rates[j] * 100), now - 100.0, 1.0) for j in jobs),
                          tuple(FlowReport(key, job, 1 << 20) for key, job in flows)))
    return out


def decide_figures(flows: int, seed: int = 1, runs: int = 7) -> dict[str, Any]:
    """decide_ms (median of ``runs`` warm steps), first_ms (the step that routes every flow),
    rss_mb (peak of this process plus the peak of its pruning worker, as `leveller controller` runs:
    leveller.controller.prune_worker) and jobs, for the generated cluster with ``flows`` flows."""
    from leveller.bench.workload import generate
    from leveller.controller.prune_worker import PruneWorker

    workload = generate(flows, seed)
    now = time.time()
    with PruneWorker() as pruner:
        return _decide_with(workload, now, pruner, runs)


def _decide_with(workload: Any, now: float, pruner: Any, runs: int) -> dict[str, Any]:
    """decide_figures' measurement, its controller pruning through ``pruner`` (a PruneWorker)."""
    from leveller.controller.app import ControllerConfig, build_controller
    from leveller.controller.paths import TopologyPaths
    from leveller.core.qos import default_level_map

    flows = len(workload.flows)
    # the controller `leveller controller` builds (leveller.controller.app), reports kept for the whole run
    ctl = build_controller(ControllerConfig(tau=1.0, levels=LEVELS_K, stale_after=3600.0),
                           TopologyPaths(workload.topology), default_level_map(LEVELS_K), pruner=pruner)
    for report in _reports(workload, now, workload.by_host()):
        ctl.report(report, now)
    t0 = time.perf_counter()
    decision = ctl.step(now)
    first_ms = (time.perf_counter() - t0) * 1e3
    if len(decision.levels) != flows:
        raise RuntimeError(f"the decision set {len(decision.levels)} of {flows} flows: benchmark invalid")
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        ctl.step(now)
        times.append((time.perf_counter() - t0) * 1e3)
    pruner.close()  # reaps the worker: its peak RSS is then counted among the children's
    rss_mb = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
              + resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss) / 1024
    return {"decide_ms": round(statistics.median(times), 2), "rss_mb": round(rss_mb, 1),
            "jobs": len(decision.order or ()), "first_ms": round(first_ms, 1)}


def _decide_child(flows: int, seed: int, runs: int, conn: Any) -> None:
    try:
        conn.send(("ok", decide_figures(flows, seed, runs)))
    except BaseException as exc:  # reported to the parent
        conn.send(("error", f"{type(exc).__name__}: {exc}"))
    finally:
        conn.close()


def _spawn() -> Any:
    return multiprocessing.get_context("spawn")


def decide_in_fresh_process(flows: int, seed: int = 1, runs: int = 7, timeout_s: float = 600.0) -> dict[str, Any]:
    """decide_figures in a new interpreter, so that its peak RSS is this flow count's alone."""
    ctx = _spawn()
    parent, child = ctx.Pipe(duplex=False)
    # not a daemon: it starts the pruning worker, as the controller does (daemons may not have children);
    # _reap kills it if it outlives its result
    proc = ctx.Process(target=_decide_child, args=(flows, seed, runs, child), daemon=False)
    proc.start()
    child.close()
    try:
        if not parent.poll(timeout_s):
            raise RuntimeError(f"the decision benchmark at {flows} flows took longer than {timeout_s:.0f} s")
        status, value = parent.recv()
    finally:
        _reap(proc)
    if status != "ok":
        raise RuntimeError(f"the decision benchmark at {flows} flows failed: {value}")
    return value


def _reap(proc: Any) -> None:
    proc.join(timeout=10)
    if proc.is_alive():
        proc.kill()
        proc.join()


# ---- agents: many reporting agents against a live controller ------------------------------------------

@dataclass
class AgentsResult:
    count: int
    flows_per_agent: int
    tau_s: float
    window_s: float
    report_ms: list[float] = field(default_factory=list)  # in the window
    report_sent: list[float] = field(default_factory=list)  # when each of those left (unix time)
    report_errors: int = 0
    step_ms: list[float] = field(default_factory=list)  # steps in the window
    missed_steps: int = 0
    warmup_steps_ms: list[float] = field(default_factory=list)
    controller_cpu: float = 0.0  # cores the controller's process used in the window (with the steps)
    steal_s: float | None = None  # CPU seconds the host took from this machine in the window (/proc/stat)
    agents_cpu_s: float = 0.0  # CPU seconds of the emulating processes, whole run
    emulation_nice: int | None = None  # the emulating processes' niceness (EMULATION_NICE unless capped)

    def to_json(self) -> dict[str, Any]:
        xs, steps = sorted(self.report_ms), sorted(self.step_ms)
        return {"count": self.count, "flows_per_agent": self.flows_per_agent, "tau_s": self.tau_s,
                "report_ms": {"p50": round(percentile(xs, 50), 3), "p99": round(percentile(xs, 99), 3)},
                "step_ms": {"p50": round(percentile(steps, 50), 3), "max": round(steps[-1], 3)},
                "missed_steps": self.missed_steps}


def _agent_flows(count: int, per_agent: int, seed: int) -> list[list[tuple[Any, str]]]:
    """The generated cluster's flows cut into ``count`` agents of ``per_agent`` flows, by sending NIC."""
    from leveller.bench.workload import generate

    flows = sorted(generate(count * per_agent, seed).flows, key=lambda kf: (kf[0].src, kf[0]))
    return [flows[i * per_agent:(i + 1) * per_agent] for i in range(count)]


def _agents_child(address: str, indices: list[int], count: int, per_agent: int, seed: int, start_at: float,
                  tau_s: float, until: float, conn: Any) -> None:
    try:
        import gc

        from leveller.bench.workload import generate

        nice = os.nice(EMULATION_NICE)
        rates = generate(1, seed).rates
        flows = _agent_flows(count, per_agent, seed)
        # the emulation's own heap (every agent's flows) stays out of collections, and only the youngest
        # generation is collected: a full collection here paused 500 agents at once (seconds of latency
        # that the controller did not cause)
        gc.freeze()
        gc.set_threshold(700, 1_000_000_000, 1_000_000_000)
        out = asyncio.run(_agents_main(address, [(i, flows[i]) for i in indices], rates, count, start_at,
                                       tau_s, until))
        out["nice"] = nice
        conn.send(("ok", out))
    except BaseException as exc:  # reported to the parent
        conn.send(("error", f"{type(exc).__name__}: {exc}"))
    finally:
        conn.close()


async def _agents_main(address: str, agents: list[tuple[int, list[tuple[Any, str]]]], rates: dict[str, float],
                       count: int, start_at: float, tau_s: float, until: float) -> dict[str, Any]:
    import grpc

    from leveller.codec import decode, encode
    from leveller.rpc import auth
    from leveller.rpc import leveller_pb2 as pb
    from leveller.rpc.replay import new_run_id
    from leveller.rpc.schema import FlowReport, JobReport, Report, reply_from_wire, report_to_wire
    from leveller.rpc.transport import REPORT_STREAM

    sent: list[float] = []
    latency: list[float] = []
    failed: list[bool] = []
    incomplete: list[str] = []
    first_error: list[str] = []
    timeout_s = max(5.0, 3 * tau_s)

    async def one_agent(index: int, flows: list[tuple[Any, str]]) -> None:
        host = f"agent{index:04d}"
        jobs = sorted({job for _, job in flows})
        start = start_at - 100.0
        last: bytes | None = None
        body_of = _ReportBody(host, flows)
        run = new_run_id()  # as a real agent process: reports numbered 1, 2, ... (replay protection)
        async with grpc.aio.insecure_channel(address) as channel:
            # as ControllerClient: every report a signed message on one ReportStream call
            call: Any = None
            t = start_at + tau_s * index / count
            n = 0
            while t < until:
                await asyncio.sleep(max(0.0, t - time.time()))
                n += 1
                now = time.time()
                report = Report(host, tuple(JobReport(j, int(rates[j] * (now - start)), start, 1.0) for j in jobs),
                                (), run, n)
                body = body_of(report, n << 20)
                if n == 1:  # the emulation speaks the real wire format, byte for byte
                    full = Report(host, report.jobs, tuple(FlowReport(k, j, n << 20) for k, j in flows), run, n)
                    if body != encode(report_to_wire(full)):
                        raise RuntimeError("the emulated report differs from the real encoding")
                t0 = time.perf_counter()
                ok = True
                try:
                    if call is None:
                        call = channel.stream_stream(REPORT_STREAM)()
                    md = dict(auth.metadata(SECRET, REPORT_STREAM, time.time(), body))
                    await asyncio.wait_for(call.write(pb.SignedMessage(
                        body=body, time=md[auth.TIME_KEY], mac=md[auth.SIGNATURE_KEY]).SerializeToString()), timeout_s)
                    raw = await asyncio.wait_for(call.read(), timeout_s)
                    if raw is grpc.aio.EOF:
                        raise RuntimeError("the controller ended the report stream")
                    last = pb.SignedMessage.FromString(raw).body
                except (TimeoutError, grpc.aio.AioRpcError, RuntimeError) as exc:
                    ok = False
                    if not first_error:
                        first_error.append(f"{exc.code().name}: {exc.details()}" if isinstance(
                            exc, grpc.aio.AioRpcError) else f"{type(exc).__name__}: {exc}")
                    if call is not None:
                        call.cancel()
                    call = None  # as the real client: a failed stream is dropped, the next report opens one
                latency.append((time.perf_counter() - t0) * 1e3)
                sent.append(now)
                failed.append(not ok)
                t = next_tick(t, tau_s, time.time())
            if call is not None:
                await call.done_writing()
        if last is None or len(reply_from_wire(decode(last), jobs).flows) != len(flows):
            incomplete.append(host)

    await asyncio.gather(*(one_agent(i, f) for i, f in agents))
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return {"sent": sent, "latency_ms": latency, "failed": failed, "incomplete": incomplete,
            "first_error": first_error[0] if first_error else None,
            "cpu_s": ru.ru_utime + ru.ru_stime}


class _ReportBody:
    """encode(report_to_wire(...)) of one agent's reports, whose flows stay and whose byte counters
    grow: the flow entries are encoded once (sorted keys put "bytes" first), so that a few processes
    can emulate 1,000 agents without taking the CPU the controller is measured on."""

    def __init__(self, host: str, flows: list[tuple[Any, str]]) -> None:
        from leveller.codec import encode
        from leveller.rpc.schema import FlowReport, Report, report_to_wire

        self.encode, self.to_wire = encode, report_to_wire
        entries = [encode(e)[len(b'{"bytes":0'):] for e in
                   report_to_wire(Report(host, (), tuple(FlowReport(k, j, 0) for k, j in flows)))["flows"]]
        # every entry after its byte count, and the comma before the next one: the flow list of a report
        # whose flows all counted N bytes is b'{"bytes":N'.join(self.parts), one join
        self.parts = [b""] + [e + b"," for e in entries[:-1]] + entries[-1:] if entries else []

    def __call__(self, report: Any, nbytes: int) -> bytes:
        head = self.encode(self.to_wire(report))  # no flows: ..."flows":[]...
        flows = b'{"bytes":%d' % nbytes
        return head.replace(b'"flows":[]', b'"flows":[' + flows.join(self.parts) + b"]", 1)


def agents_figures(count: int = 1000, flows_per_agent: int = 100, tau_s: float = 1.0, duration_s: float = 30.0,
                   processes: int = 2, seed: int = 1, warmup_s: float | None = None,
                   progress: Progress | None = None) -> AgentsResult:
    """Run the agents scenario (see the module doc); everything it starts ends with it."""
    from leveller.bench.workload import generate
    from leveller.controller.app import ControllerConfig, start
    from leveller.controller.paths import TopologyPaths
    from leveller.core.qos import default_level_map

    say = progress or (lambda _msg: None)
    _raise_fd_limit(2 * count + 256)
    say("generating the cluster")
    workload = generate(count * flows_per_agent, seed)
    # the controller as `leveller controller` builds and serves it (GC pacing, pruning worker included), on
    # the generated cluster's paths; this loop steps it on its own ticks (_step_loop)
    app = start(ControllerConfig(listen="127.0.0.1:0", levels=LEVELS_K, tau=tau_s),
                paths=TopologyPaths(workload.topology), secret=SECRET, level_map=default_level_map(LEVELS_K))
    ctl, port = app.controller, app.port
    ctx = _spawn()
    procs: list[tuple[Any, Any]] = []
    stop = threading.Event()
    try:
        # the start is not the steady state: the first decision routes every flow (about 1.3 s at 100,000
        # flows), every agent's first report takes the full checks, and the reports queued meanwhile are
        # answered late (up to the 5 s timeout at 1,000 agents here, settled 6-7 s after the start);
        # a window that still holds that backlog is refused below
        warmup = warmup_s if warmup_s is not None else 3 * tau_s + 1e-4 * count * flows_per_agent
        start_at = time.time() + 3.0 + 0.004 * count  # time for the processes to start
        window = (start_at + tau_s + warmup, start_at + tau_s + warmup + duration_s)
        groups = [list(range(p, count, processes)) for p in range(processes)]
        for g in groups:
            parent, child = ctx.Pipe(duplex=False)
            proc = ctx.Process(target=_agents_child, args=(f"127.0.0.1:{port}", g, count, flows_per_agent, seed,
                                                           start_at, tau_s, window[1] + 2 * tau_s, child),
                               daemon=True)
            proc.start()
            child.close()
            procs.append((proc, parent))
        steps: list[tuple[float, float, float]] = []  # (tick, start, end)
        # the agents go on two more tau after the window (the end of the emulation, its channels closing,
        # is no part of the measured reports) and so do the decisions
        end_at = window[1] + 2 * tau_s
        stepper = threading.Thread(target=_step_loop, args=(ctl, start_at + tau_s, tau_s, end_at, stop, steps),
                                   name="bench-steps", daemon=True)
        stepper.start()
        cpu_at_window: float | None = None
        cpu_at_end: float | None = None
        steal: list[float | None] = []  # at the window's start and end
        while (now := time.time()) < end_at:
            if cpu_at_window is None and now >= window[0]:
                cpu_at_window = _cpu_s()
                steal.append(steal_seconds())
            if cpu_at_end is None and now >= window[1]:
                cpu_at_end = _cpu_s()
                steal.append(steal_seconds())
            phase = "warm-up" if now < window[0] else "measuring" if now < window[1] else "ending"
            say(f"{count} agents x {flows_per_agent} flows, tau {tau_s:g} s: {phase}, {end_at - now:.0f} s left")
            time.sleep(min(1.0, max(0.05, end_at - now)))
        outs = []
        for _proc, parent in procs:
            if not parent.poll(30 + 3 * tau_s):
                raise RuntimeError("an emulated agent process did not finish in time")
            status, value = parent.recv()
            if status != "ok":
                raise RuntimeError(f"an emulated agent process failed: {value}")
            outs.append(value)
        stop.set()
        stepper.join(timeout=30)
        controller_cpu = ((cpu_at_end if cpu_at_end is not None else _cpu_s()) - cpu_at_window) / duration_s \
            if cpu_at_window is not None else 0.0
    finally:
        stop.set()
        for proc, _ in procs:
            _reap(proc)
        app.close()
    stolen = steal[1] - steal[0] if len(steal) == 2 and steal[0] is not None and steal[1] is not None else None
    incomplete = sorted(h for o in outs for h in o["incomplete"])
    errors = [o["first_error"] for o in outs if o["first_error"]]
    if incomplete:
        why = f"a report failed with {errors[0]}" if errors else f"e.g. {incomplete[0]}"
        raise RuntimeError(f"{len(incomplete)} agents got no level for some of their flows ({why}): benchmark "
                           f"invalid{machine_load(controller_cpu, stolen, duration_s, os.cpu_count() or 1)}")
    result = AgentsResult(count, flows_per_agent, tau_s, duration_s, controller_cpu=controller_cpu,
                          agents_cpu_s=sum(o["cpu_s"] for o in outs), emulation_nice=min(o["nice"] for o in outs),
                          steal_s=stolen)
    for o in outs:
        for t, ms, bad in zip(o["sent"], o["latency_ms"], o["failed"]):
            if window[0] <= t < window[1]:
                result.report_ms.append(ms)
                result.report_sent.append(t)
                result.report_errors += bad
    for tick, begin, end in steps:
        ms = (end - begin) * 1e3
        if window[0] <= tick < window[1]:
            result.step_ms.append(ms)
            result.missed_steps += end > tick + tau_s
        elif tick < window[0]:
            result.warmup_steps_ms.append(ms)
    if any(tick < window[0] < end < float("inf") for tick, _, end in steps):
        raise RuntimeError("a warm-up decision ran into the measured window: benchmark invalid (raise --warmup)")
    backlog = start_backlog(result.report_ms, result.report_sent, window[0], tau_s)
    if backlog is not None:
        raise RuntimeError(f"{backlog}: the start's backlog ran into the measured window, benchmark invalid "
                           "(raise --warmup)")
    if not result.report_ms or not result.step_ms:
        raise RuntimeError("no report or no step in the measured window: benchmark invalid")
    return result


def machine_load(controller_cores: float, stolen_s: float | None, window_s: float, cpus: int) -> str:
    """What an invalid agents run tells of the machine: the controller's cores and the CPU time the host
    stole in the window (a saturated machine queues reports past the agents' timeout, whatever the code)."""
    if stolen_s is None:
        return f" (the controller used {controller_cores:.2f} cores in the window)"
    return (f" (in the window the controller used {controller_cores:.2f} cores and the host stole {stolen_s:.1f} "
            f"of {cpus} x {window_s:g} CPU s; on a machine this busy, fewer --agents or a quieter time)")


def next_tick(t: float, tau_s: float, now: float) -> float:
    """The tick after ``t`` of an agent reporting every ``tau_s``, skipping ticks already past at ``now``:
    an agent late by more than a period (its last report waited long) does not send the missed reports
    back to back, it reports at its next tick."""
    t += tau_s
    while t + tau_s <= now:
        t += tau_s
    return t


def start_backlog(report_ms: list[float], sent: list[float], window_start: float, tau_s: float) -> str | None:
    """Why the window still holds the start's backlog, or None: more than 1% of the reports sent in its
    first tau took longer than tau (a controller keeping up answers within a period)."""
    first = [ms for ms, t in zip(report_ms, sent) if window_start <= t < window_start + tau_s]
    late = sum(1 for ms in first if ms > tau_s * 1e3)
    return f"{late} of the {len(first)} reports of the window's first tau took longer than tau" \
        if late > 0.01 * len(first) else None


def _step_loop(ctl: Any, first_tick: float, tau_s: float, until: float, stop: threading.Event,
               out: list[tuple[float, float, float]]) -> None:
    """Decide at every tick first_tick + i * tau (at once when late), as the controller's run loop does."""
    tick = first_tick
    while tick < until and not stop.is_set():
        stop.wait(max(0.0, tick - time.time()))
        begin = time.time()
        try:
            ctl.step(begin)
        except Exception:  # a failed step still took its time
            pass
        out.append((tick, begin, time.time()))
        tick += tau_s
        while tick + tau_s <= time.time():  # ticks that passed during the step are not run twice
            out.append((tick, time.time(), float("inf")))
            tick += tau_s


def steal_seconds(stat: str | None = None) -> float | None:
    """CPU seconds the hypervisor ran something else while this machine's CPUs wanted to run (the steal
    column of /proc/stat's "cpu" line, all CPUs), or None where there is no such column. On the noisy
    virtual machines of this project it decided the report p99 more than the code did."""
    if stat is None:
        try:
            with open("/proc/stat") as f:
                stat = f.readline()
        except OSError:
            return None
    fields = stat.split()
    if len(fields) < 9 or fields[0] != "cpu":
        return None
    return int(fields[8]) / os.sysconf("SC_CLK_TCK")


def _cpu_s() -> float:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def _raise_fd_limit(needed: int) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < needed:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, max(needed, soft)), hard))


# ---- map update: 10,000 DSCP changes into the real BPF map ----------------------------------------------

def map_update_ms(entries: int = MAP_ENTRIES, runs: int = 21) -> float:
    """Median time of BpfEnforcer.apply changing the DSCP of ``entries`` flows (root: BPF)."""
    from leveller.agent.datapath import load_detached
    from leveller.agent.enforce_bpf import BpfEnforcer
    from leveller.model.flow import FlowKey

    keys = [FlowKey("10.0.0.1", f"10.{1 + i // 62500}.{i // 250 % 250}.{i % 250 + 1}", 1024 + i % 60000,
                    4791, 17) for i in range(entries)]
    dp = load_detached(max_flows=1024, max_marked_flows=entries)
    try:
        enforcer = BpfEnforcer(dp)
        enforcer.apply(dict.fromkeys(keys, 8), 60.0)  # first: new rows and new kernel entries
        times = []
        for run in range(runs):
            marks = dict.fromkeys(keys, 16 if run % 2 == 0 else 8)  # every entry changes
            t0 = time.perf_counter()
            enforcer.apply(marks, 60.0)  # with the lease renewal, as an agent does
            times.append((time.perf_counter() - t0) * 1e3)
        held = dp.read_dscp()
        if len(held) != entries or set(held.values()) != {16 if (runs - 1) % 2 == 0 else 8}:
            raise RuntimeError("the DSCP map does not hold what the benchmark wrote: benchmark invalid")
        enforcer.clear()
    finally:
        dp.detach()
    return round(statistics.median(times), 3)


def all_figures(flow_counts: list[int], agents: int, flows_per_agent: int, tau_s: float, duration_s: float,
                processes: int, seed: int, warmup_s: float | None, say: Progress) -> dict[str, Any]:
    """Every figure of `leveller bench controller`: one decision per flow count (each in a fresh process),
    the BPF map update, and the agents scenario; its JSON's "levels", "agents", "map_update_ms" and the
    "detail" its tables show."""
    levels, detail = {}, {}
    for n in flow_counts:
        say(f"levels: one decision over {n} flows (fresh process)")
        fig = decide_in_fresh_process(n, seed)
        detail[str(n)] = fig
        levels[str(n)] = {k: fig[k] for k in ("decide_ms", "rss_mb", "jobs")}
    say("map update: 10,000 DSCP changes into the BPF map (compiling the program)")
    map_ms = map_update_ms(MAP_ENTRIES)
    result = agents_figures(agents, flows_per_agent, tau_s, duration_s, processes, seed, warmup_s, say)
    return {"levels": levels, "agents": result.to_json(), "map_update_ms": {str(MAP_ENTRIES): map_ms},
            "detail": {"levels": detail, "report_errors": result.report_errors, "reports": len(result.report_ms),
                       "warmup_steps_ms": [round(x, 1) for x in result.warmup_steps_ms],
                       "controller_cpu": result.controller_cpu, "agents_cpu_s": result.agents_cpu_s,
                       "steal_s": result.steal_s, "emulation_nice": result.emulation_nice,
                       "window_s": result.window_s}}
