"""A real PyTorch data-parallel training job (torch.distributed, gloo over TCP, CPU).

    python -m leveller.jobs.torch_ddp --rank 0 --world-size 2 --master 10.0.0.1:29500 --job ddp --iterations 50
    python -m leveller.jobs.torch_ddp --rank 1 --world-size 2 --master 10.0.0.1:29500 --job ddp --iterations 50

Every rank trains the same MLP (DistributedDataParallel) on its own synthetic
regression data (a fixed random "teacher" network plus noise, so the loss
really goes down). The MLP is sized so that one gradient all-reduce moves
``--grad-mb`` MB of float32 gradients; with the ring all-reduce of gloo and two
ranks, each rank sends about that many bytes per iteration. After every
optimizer step the script calls the project's one-line hook
(``leveller.jobs.hook.iteration_done``), so a host agent following ``--log``
counts the iterations of this real job exactly like an emulated one.

Rank 0 hosts the rendezvous store at ``--master``; every rank binds gloo to the
interface that routes to the master (``--iface`` or $GLOO_SOCKET_IFNAME to
override), which is what works inside network namespaces. Torch uses one
thread (``--threads``) so a 2-core host can run a rank per core. The job stops
after ``--iterations`` or, with ``--duration``, at the first iteration end at
which some rank is past its deadline (ranks agree through a one-element
all-reduce, so none is left waiting in a collective). At the end each rank
prints one line ``leveller-ddp-done {json}`` with its iterations, first and
last loss, gradient bytes per all-reduce, mean iteration time and a checksum
of the parameters (equal on all ranks when the all-reduces kept them in sync).
Defaults (8 MB of gradients, batch 1280) give ~0.25-0.4 s per iteration on a
2-core machine with one thread per rank.

Needs the optional extra: ``make torch``.
"""

from __future__ import annotations

import argparse
import ipaddress
import json
import math
import os
import socket
import sys
import time
from dataclasses import asdict, dataclass
from datetime import timedelta
from typing import Any

from leveller.errors import UserError
from leveller.jobs.logline import check_job_name

BYTES_PER_PARAM = 4  # float32 gradients


@dataclass(frozen=True)
class Shape:
    """MLP in -> hidden -> hidden -> out (ReLU between)."""

    inputs: int
    hidden: int
    outputs: int

    @property
    def params(self) -> int:
        i, h, o = self.inputs, self.hidden, self.outputs
        return (i * h + h) + (h * h + h) + (h * o + o)

    @property
    def grad_bytes(self) -> int:
        return self.params * BYTES_PER_PARAM


def shape_for(grad_mb: float, inputs: int = 256, outputs: int = 16) -> Shape:
    """The MLP whose gradients are closest to ``grad_mb`` MB (10^6 bytes) of float32."""
    if not (math.isfinite(grad_mb) and 0.01 <= grad_mb <= 1024):
        raise UserError(f"--grad-mb {grad_mb}: allowed is 0.01..1024 MB")
    target = grad_mb * 1e6 / BYTES_PER_PARAM
    # params = h^2 + h (inputs + outputs + 2) + outputs: take the positive root
    b = inputs + outputs + 2
    h = max(1, round((-b + math.sqrt(b * b + 4 * max(0.0, target - outputs))) / 2))
    return Shape(inputs, h, outputs)


@dataclass
class Summary:
    """What a rank prints at the end (leveller-ddp-done {json})."""

    job: str
    rank: int
    world_size: int
    iterations: int
    first_loss: float | None
    last_loss: float | None
    grad_bytes: int
    params: int
    mean_iteration_s: float | None
    elapsed_s: float
    param_checksum: float  # sum of all parameters: equal on every rank iff DDP kept the replicas in sync


def parse_master(text: str) -> tuple[str, int]:
    """``ADDR:PORT`` or ``[V6ADDR]:PORT`` -> (addr, port); UserError naming the field otherwise."""
    host, sep, port_text = text.rpartition(":")
    host = host.strip("[]")
    try:
        port = int(port_text)
        ipaddress.ip_address(host)
    except ValueError:
        port = -1
    if not sep or not 0 < port <= 65535:
        raise UserError(f"--master {text!r}: expected ADDR:PORT (IPv4) or [ADDR]:PORT (IPv6), port 1..65535")
    return host, port


def local_interface_towards(addr: str) -> str:
    """Name of the interface this host would use to reach ``addr`` (where gloo must bind)."""
    family = socket.AF_INET6 if ":" in addr else socket.AF_INET
    with socket.socket(family, socket.SOCK_DGRAM) as s:
        s.connect((addr, 9))  # UDP connect sends nothing: it only picks the route and source address
        local = s.getsockname()[0]
    if ipaddress.ip_address(local).is_loopback:
        return "lo"
    from pyroute2 import IPRoute

    with IPRoute() as ipr:
        for msg in ipr.get_addr(family=family):
            if msg.get_attr("IFA_ADDRESS") == local:
                return str(ipr.get_links(msg["index"])[0].get_attr("IFLA_IFNAME"))
    raise UserError(f"--master {addr}: no local interface holds the source address {local}; give --iface")


def _parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m leveller.jobs.torch_ddp", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rank", type=int, required=True, help="this process's rank, 0..world-size-1")
    p.add_argument("--world-size", type=int, required=True, help="number of ranks (>= 1)")
    p.add_argument("--master", required=True, metavar="ADDR:PORT", help="rank 0's rendezvous address")
    p.add_argument("--job", required=True, help="job name in the iteration log (letters, digits, _.:-)")
    stop = p.add_mutually_exclusive_group(required=True)
    stop.add_argument("--iterations", type=int, help="train this many iterations")
    stop.add_argument("--duration", type=float, metavar="S", help="train for about S seconds")
    p.add_argument("--log", help="append iteration lines here (default: stderr)")
    p.add_argument("--grad-mb", type=float, default=8.0, help="gradient MB per all-reduce (default 8)")
    p.add_argument("--batch", type=int, default=1280, help="samples per rank per iteration (default 1280)")
    p.add_argument("--lr", type=float, default=0.15, help="SGD learning rate (default 0.15, momentum 0.9)")
    p.add_argument("--threads", type=int, default=1, help="torch CPU threads per rank (default 1)")
    p.add_argument("--iface", help="interface gloo binds to (default: the one routing to --master)")
    p.add_argument("--timeout", type=float, default=60.0, help="rendezvous and collective timeout, s (default 60)")
    p.add_argument("--seed", type=int, default=0, help="seed of the model, the teacher and the data")
    return p.parse_args(argv)


def _check(a: argparse.Namespace) -> None:
    if a.world_size < 1:
        raise UserError(f"--world-size {a.world_size}: must be >= 1")
    if not 0 <= a.rank < a.world_size:
        raise UserError(f"--rank {a.rank}: allowed is 0..{a.world_size - 1} (--world-size {a.world_size})")
    check_job_name(a.job)
    if a.iterations is not None and a.iterations < 0:
        raise UserError(f"--iterations {a.iterations}: must be >= 0")
    if a.duration is not None and not (math.isfinite(a.duration) and a.duration > 0):
        raise UserError(f"--duration {a.duration}: must be > 0 seconds")
    for name in ("batch", "threads"):
        if getattr(a, name) < 1:
            raise UserError(f"--{name} {getattr(a, name)}: must be >= 1")
    if not (math.isfinite(a.lr) and a.lr > 0):
        raise UserError(f"--lr {a.lr}: must be > 0")
    if not (math.isfinite(a.timeout) and a.timeout > 0):
        raise UserError(f"--timeout {a.timeout}: must be > 0 seconds")
    shape_for(a.grad_mb)
    parse_master(a.master)


def train(a: argparse.Namespace) -> Summary:
    """Rendezvous, train, tear the process group down; returns this rank's summary."""
    try:
        import torch
        import torch.distributed as dist
        from torch import nn
        from torch.nn.parallel import DistributedDataParallel
    except ImportError as exc:
        raise UserError(f"PyTorch is not installed ({exc}): run `make torch` (the optional extra)") from None
    from leveller.jobs.hook import default_reporter, iteration_done

    shape = shape_for(a.grad_mb)
    host, port = parse_master(a.master)
    torch.set_num_threads(a.threads)
    torch.set_num_interop_threads(1)
    # The hook is configured by the environment (as for any training script); set it from our options.
    os.environ["LEVELLER_JOB"], os.environ["LEVELLER_RANK"] = a.job, str(a.rank)
    if a.log:
        os.environ["LEVELLER_ITER_LOG"] = a.log
    default_reporter()  # writes iter=0 (the job's start) now, not at the first iteration's end
    os.environ.setdefault("GLOO_SOCKET_IFNAME", a.iface or local_interface_towards(host))

    init = f"tcp://[{host}]:{port}" if ":" in host else f"tcp://{host}:{port}"
    dist.init_process_group("gloo", init_method=init, rank=a.rank, world_size=a.world_size,
                            timeout=timedelta(seconds=a.timeout))
    try:
        torch.manual_seed(a.seed)  # same initial model everywhere (DDP also broadcasts rank 0's)
        model = nn.Sequential(nn.Linear(shape.inputs, shape.hidden), nn.ReLU(),
                              nn.Linear(shape.hidden, shape.hidden), nn.ReLU(),
                              nn.Linear(shape.hidden, shape.outputs))
        teacher = torch.randn(shape.inputs, shape.outputs) / math.sqrt(shape.inputs)
        ddp = DistributedDataParallel(model, bucket_cap_mb=max(25.0, a.grad_mb * 2))  # few, large all-reduces
        opt = torch.optim.SGD(ddp.parameters(), lr=a.lr, momentum=0.9)
        gen = torch.Generator().manual_seed(a.seed * 1000 + a.rank + 1)  # each rank its own data
        x_all = torch.randn(a.batch * 8, shape.inputs, generator=gen)
        y_all = torch.tanh(x_all @ teacher) + 0.01 * torch.randn(a.batch * 8, shape.outputs, generator=gen)
        loss_fn = nn.MSELoss()
        deadline = time.monotonic() + a.duration if a.duration is not None else None
        stop_flag = torch.zeros(1)
        losses: list[float] = []
        started = time.monotonic()
        done = 0
        while a.iterations is None or done < a.iterations:
            lo = (done % 8) * a.batch
            x, y = x_all[lo:lo + a.batch], y_all[lo:lo + a.batch]
            opt.zero_grad(set_to_none=True)
            loss = loss_fn(ddp(x), y)
            loss.backward()  # DDP all-reduces the gradients here (gloo, TCP)
            opt.step()
            done += 1
            losses.append(loss.item())
            iteration_done()
            if deadline is not None:
                stop_flag.fill_(1.0 if time.monotonic() >= deadline else 0.0)
                dist.all_reduce(stop_flag, op=dist.ReduceOp.MAX)
                if stop_flag.item() > 0:
                    break
        elapsed = time.monotonic() - started
        checksum = float(sum(p.detach().double().sum() for p in model.parameters()))
        dist.barrier()  # nobody closes its connections while a peer still needs them
    finally:
        dist.destroy_process_group()
    return Summary(a.job, a.rank, a.world_size, done, losses[0] if losses else None,
                   losses[-1] if losses else None, shape.grad_bytes, shape.params,
                   elapsed / done if done else None, elapsed, checksum)


def main(argv: list[str] | None = None) -> int:
    a = _parse(argv)
    try:
        _check(a)
        summary = train(a)
    except UserError as exc:
        print(f"leveller torch_ddp: {exc}", file=sys.stderr)
        return 2
    except RuntimeError as exc:  # torch.distributed errors (rendezvous timeout, peer gone) derive from it
        print(f"leveller torch_ddp {a.job}/{a.rank}: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    out: dict[str, Any] = asdict(summary)
    print("leveller-ddp-done " + json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
