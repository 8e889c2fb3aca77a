"""The choice of the water-filling backend (fluid.backend): LEVELLER_SIM_KERNEL, and numpy when numba
cannot be imported. Runs with or without numba installed."""

import os
import subprocess
import sys

import numpy as np
import pytest

from leveller.sim.network import fluid
from leveller.sim.network.fluid import Incidence, Refill, max_min_rates


@pytest.fixture
def numpy_backend():  # type: ignore[no-untyped-def]
    """The numpy code for the test's duration, the backend chosen from the environment back after."""
    fluid.set_backend("numpy")
    yield
    fluid.set_backend(os.environ.get(fluid.ENV, "auto"))


def test_the_environment_forces_numpy(numpy_backend) -> None:  # type: ignore[no-untyped-def]
    assert fluid.backend() == "numpy"
    assert Refill(Incidence.from_paths([[0]], 1), np.ones(1)).kernel is None
    # two flows on link 0 (capacity 4), one also on link 1 (capacity 1): 1 and 3
    rates = max_min_rates(Incidence.from_paths([[0, 1], [0]], 2), np.array([4.0, 1.0]), np.zeros(2, dtype=int),
                          np.ones(2, dtype=bool))
    assert rates.tolist() == [1.0, 3.0]


def test_a_bad_choice_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match="LEVELLER_SIM_KERNEL='cuda'.*auto, numba, numpy"):
        fluid.set_backend("cuda")


def backend_without_numba(choice: str) -> subprocess.CompletedProcess:
    """A fresh interpreter where ``import numba`` fails (as when it is not installed)."""
    code = ("import sys; sys.modules['numba'] = None\n"
            "from leveller.sim.network import fluid\n"
            "print(fluid.backend())\n")
    env = {**os.environ, fluid.ENV: choice}
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)


def test_numpy_is_chosen_when_numba_cannot_be_imported() -> None:
    done = backend_without_numba("auto")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "numpy"


def test_asking_for_numba_without_it_says_so() -> None:
    done = backend_without_numba("numba")
    assert done.returncode != 0
    assert "LEVELLER_SIM_KERNEL=numba: numba cannot be imported" in done.stderr


def test_numpy_fallback_simulates_without_numba() -> None:
    """A whole (small) simulation in an interpreter where numba is missing."""
    code = ("import sys; sys.modules['numba'] = None\n"
            "from leveller.sim.network import fluid\n"
            "from leveller.sim.network.engine import Simulation\n"
            "from leveller.sim.network.policies import make_net_policy\n"
            "from leveller.sim.network.topology import load_network\n"
            "from leveller.sim.network.trace import synthetic\n"
            "net = load_network('fabric:gpus=64,nics_per_host=1,gbps=100,oversub=2')\n"
            "jobs, placer = synthetic('contended:jobs=8,seed=1,min_s=30,max_s=90,max_hosts=4', net)\n"
            "r = Simulation(net, jobs, make_net_policy('leveller', 0.0), 4, 60.0, placer=placer).run()\n"
            "print(fluid.backend(), r.events)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                          env={**os.environ, fluid.ENV: "auto"})
    assert done.returncode == 0, done.stderr
    name, events = done.stdout.split()
    assert name == "numpy" and int(events) > 10
