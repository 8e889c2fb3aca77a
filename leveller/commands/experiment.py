"""Experiments on the emulated cluster that run the whole live system; `--json` for machine-readable output.

  leveller experiment soak       the live system for a long run; memory and open files of every service
  leveller experiment tenants    the paper's testbed experiments: 2-4 tenants on a leaf-spine (Fig. 10), --fig9
  leveller experiment chaos      the live pair while OVS, the SDN app, the controller and an agent are killed
  leveller experiment churn      jobs arrive and leave (Poisson), registered by themselves, under every policy
  leveller experiment recovery   after a disturbance: cumulative vs windowed vs decayed R (simulators, testbed)
"""

from __future__ import annotations

import argparse
import contextlib
from collections.abc import Callable, Iterator

# name -> (module, help); each module has configure(parser) like a command.
EXPERIMENTS: dict[str, tuple[str, str]] = {
    "soak": ("leveller.commands.experiment_soak", "long live run; RSS and open fds of every service, growth"),
    "tenants": ("leveller.commands.experiment_tenants", "2-4 tenants on the leaf-spine under every policy (Fig. 10)"),
    "chaos": ("leveller.commands.experiment_chaos", "live pair under killed and restarted parts; recovery, "
              "stale marks, min R vs undisturbed"),
    "churn": ("leveller.commands.experiment_churn",
              "jobs of the catalog arrive and leave (Poisson), registered by themselves, under every policy"),
    "recovery": ("leveller.commands.experiment_recovery",
                 "a job starved for a while: recovery of min R per kind of R (network/link sim, testbed)"),
}


def configure(parser: argparse.ArgumentParser) -> None:
    from leveller.commands import add_commands

    add_commands(parser.add_subparsers(dest="experiment", metavar="EXPERIMENT"), EXPERIMENTS)
    def usage(_args: argparse.Namespace) -> int:
        parser.print_help()
        return 2

    parser.set_defaults(func=usage)


@contextlib.contextmanager
def live_progress(width: int = 34, log_notes: bool = False) -> Iterator[tuple[Callable[[float], None],
                                                                              Callable[[str], None]]]:
    """For a live experiment: SIGTERM / Ctrl-C unwind its context managers (everything is torn down), and
    a progress bar on a terminal (stderr). Yields (progress(fraction done), note(what runs now)); with
    ``log_notes`` every note is also logged above the bar."""
    from leveller.commands.progress import Bar
    from leveller.experiments.shared.interrupts import unwind_on_signals

    with unwind_on_signals(), Bar([f"{{task.description:<{width}}}", "bar", "elapsed", "remaining"],
                                  description="setting up the cluster", log_path=False) as bar:
        def note(message: str) -> None:
            bar.note(message)
            if log_notes:
                bar.log(message)

        yield (lambda f: bar.update(completed=f)), note


def add_live_options(parser: argparse.ArgumentParser, name: str, out_help: str, plot_help: str,
                     json_help: str = "print one JSON object (and nothing else) on stdout",
                     between: Callable[[], None] | None = None) -> None:
    """--out DIR (default out/NAME), --no-plot, --name (the testbed's), [what ``between`` adds], --json:
    the options every live experiment shares."""
    parser.add_argument("--out", default=f"out/{name}", metavar="DIR", help=out_help)
    parser.add_argument("--no-plot", dest="plot", action="store_false", help=plot_help)
    parser.add_argument("--name", default=name, help=f"testbed name, namespaces lvtb-NAME-* (default {name})")
    if between is not None:
        between()
    parser.add_argument("--json", action="store_true", help=json_help)
