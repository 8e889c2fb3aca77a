"""A job's communication alone on the network: the reference for its ideal iteration time.

The flows of one all-reduce, with nothing else on the network, under the same
water-filling as the full simulation. Returns the breakpoints of the remaining
bytes, so the simulator can fast-forward a job that nothing contends with and
later rebuild its exact state at any instant.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from leveller.sim.network.fluid import Incidence, max_min_rates


@dataclass(frozen=True)
class AloneProfile:
    """``times[k]``: start of phase k; ``remaining[k]``, ``rates[k]``: per flow during it."""

    times: tuple[float, ...]
    remaining: tuple[np.ndarray, ...]
    rates: tuple[np.ndarray, ...]
    duration: float  # time until the last flow ends

    def remaining_at(self, elapsed: float) -> np.ndarray:
        """Remaining bytes per flow ``elapsed`` seconds after the all-reduce started alone."""
        if not self.times:
            return np.zeros(0)
        k = int(np.searchsorted(np.asarray(self.times), elapsed, side="right")) - 1
        k = max(k, 0)
        rem = self.remaining[k] - self.rates[k] * (elapsed - self.times[k])
        return np.maximum(rem, 0.0)


def alone_profile(paths: list[tuple[int, ...]], volumes: np.ndarray, capacity: np.ndarray) -> AloneProfile:
    """Simulate the flows (``paths`` of directed link ids, bytes ``volumes``) alone on ``capacity``."""
    if not paths:
        return AloneProfile((), (), (), 0.0)
    links = sorted({lk for p in paths for lk in p})
    loc = {lk: i for i, lk in enumerate(links)}
    inc = Incidence.from_paths([[loc[lk] for lk in p] for p in paths], len(links))
    cap = capacity[np.asarray(links)]
    rem = np.asarray(volumes, dtype=float).copy()
    level = np.zeros(len(paths), dtype=np.int64)
    t = 0.0
    times, rems, rates = [], [], []
    while True:
        active = rem > 0
        if not active.any():
            break
        rate = max_min_rates(inc, cap, level, active)
        times.append(t)
        rems.append(rem.copy())
        rates.append(rate.copy())
        with np.errstate(divide="ignore"):
            dt = float(np.min(np.where(active & (rate > 0), rem / np.where(rate > 0, rate, 1), np.inf)))
        rem = np.where(active, rem - rate * dt, 0.0)
        rem[rem <= np.asarray(volumes) * 1e-12] = 0.0
        t += dt
    return AloneProfile(tuple(times), tuple(rems), tuple(rates), t)
