"""How busy the switch-to-switch links were in a run's measurement window, from the switch's own counters.

The fluid model keeps a saturated bottleneck nearly always busy; the emulated cluster can fall short
of it (docs/switching.md, "Where the bottleneck's capacity goes"). A sampler thread reads the transmit
byte counter of every switch port that faces another switch (the kernel's, on the veth end in the
switch namespace: the bytes of whole frames, what the HTB shaper counts) a few times a second; after
the run, each direction's busy share is its bytes in the window over what the link's rate carries in
that time, interpolated at the window's ends.
"""

from __future__ import annotations

import bisect
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from types import TracebackType

from leveller.core.topology import Topology

SAMPLE_S = 0.25


@dataclass(frozen=True)
class Direction:
    """One direction of a switch-to-switch link: frames leave ``port`` (a veth end in the switch netns)."""

    label: str  # "s1->s2"
    port: str
    rate_mbps: float


def fabric_directions(topo: Topology, port_name: Callable[[str, int], str]) -> list[Direction]:
    """Both directions of every link between two switches. ``port_name(switch, port)`` names the
    switch-side interface (leveller.testbed.cluster.port_name)."""
    switches = {s.name for s in topo.switches}
    out = []
    for lk in topo.links:
        if lk.a in switches and lk.b in switches:
            out.append(Direction(f"{lk.a}->{lk.b}", port_name(lk.a, lk.a_port), lk.rate_mbps))
            out.append(Direction(f"{lk.b}->{lk.a}", port_name(lk.b, lk.b_port), lk.rate_mbps))
    return out


def bytes_between(times: Sequence[float], counts: Sequence[int], t0: float, t1: float) -> float:
    """Bytes a monotone counter sampled at ``times`` gained over [t0, t1], linearly interpolated between
    samples (the window must lie within the samples)."""
    if not times or t0 < times[0] or t1 > times[-1] or t1 < t0:
        raise ValueError(f"window [{t0}, {t1}] is outside the samples [{times[0] if times else None}, "
                         f"{times[-1] if times else None}]")

    def at(t: float) -> float:
        i = bisect.bisect_left(times, t)
        if times[i] == t or i == 0:
            return float(counts[i])
        ta, tb = times[i - 1], times[i]
        return counts[i - 1] + (counts[i] - counts[i - 1]) * (t - ta) / (tb - ta)

    return at(t1) - at(t0)


def busy_share(nbytes: float, rate_mbps: float, seconds: float) -> float:
    """The share of a link's rate that ``nbytes`` of frames fill in ``seconds``."""
    return nbytes * 8 / (rate_mbps * 1e6 * seconds) if seconds > 0 else 0.0


@dataclass
class LinkSampler:
    """``with LinkSampler(netns, directions):`` samples the ports' tx bytes every ``SAMPLE_S`` until exit;
    then :meth:`busy` gives each direction's busy share over a window of wall-clock times."""

    netns: str
    directions: Sequence[Direction]
    interval_s: float = SAMPLE_S
    times: list[float] = field(default_factory=list)
    counts: dict[str, list[int]] = field(default_factory=dict)
    _stop: threading.Event = field(default_factory=threading.Event)
    _ready: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None
    error: BaseException | None = None

    def _sample(self, ns: object) -> None:
        ports = {d.port for d in self.directions}
        got = {}
        for msg in ns.get_links():  # type: ignore[attr-defined]
            name = msg.get_attr("IFLA_IFNAME")
            if name in ports:
                got[name] = int(msg.get_attr("IFLA_STATS64")["tx_bytes"])
        if set(got) == ports:
            self.times.append(time.time())
            for port, value in got.items():
                self.counts.setdefault(port, []).append(value)

    def _loop(self) -> None:
        from pyroute2 import NetNS

        try:
            with NetNS(self.netns) as ns:
                while True:
                    self._sample(ns)
                    self._ready.set()
                    if self._stop.wait(self.interval_s):
                        self._sample(ns)  # one past the jobs' end, so the window is covered
                        return
        except BaseException as exc:  # a failed sample must not stop the run; busy() then gives {}
            self.error = exc
        finally:
            self._ready.set()

    def context(self) -> LinkSampler:
        """Itself, as the context manager run_policy's ``background()`` returns."""
        return self

    def __enter__(self) -> LinkSampler:
        self._thread = threading.Thread(target=self._loop, name="link-sampler", daemon=True)
        self._thread.start()
        self._ready.wait(timeout=10)  # the first sample precedes what the caller starts next
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)

    def busy(self, t0: float, t1: float) -> dict[str, float]:
        """Each direction's busy share over [t0, t1] (wall-clock seconds); {} when sampling failed or
        did not cover the window."""
        try:
            return {d.label: round(busy_share(bytes_between(self.times, self.counts[d.port], t0, t1),
                                              d.rate_mbps, t1 - t0), 4)
                    for d in self.directions}
        except (KeyError, ValueError):
            return {}
