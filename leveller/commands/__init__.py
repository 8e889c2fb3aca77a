"""Sub-commands of the `leveller` CLI, one module each.

Each module defines ``configure(parser: argparse.ArgumentParser) -> None``,
which adds its options and sets ``func`` (a callable taking the parsed
namespace and returning an exit code) with ``parser.set_defaults``.
Modules must not import heavy or privileged dependencies (bcc, os_ken,
pyroute2, matplotlib) at module level: import them inside the handler, so
``leveller --help`` and pure commands work everywhere.
"""

from pathlib import Path

from leveller.errors import UserError


def output_dir(text: str, option: str = "--out") -> Path:
    """The directory ``text`` (created if needed) for a command's results; UserError naming ``option``."""
    out = Path(text)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UserError(f"{option} {text}: cannot create it ({exc.strerror})") from None
    return out
