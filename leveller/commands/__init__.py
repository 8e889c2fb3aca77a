"""Sub-commands of the `leveller` CLI, one module each.

Each module defines ``configure(parser: argparse.ArgumentParser) -> None``,
which adds its options and sets ``func`` (a callable taking the parsed
namespace and returning an exit code) with ``parser.set_defaults``.
Modules must not import heavy or privileged dependencies (bcc, os_ken,
pyroute2, matplotlib) at module level: import them inside the handler, so
``leveller --help`` and pure commands work everywhere.
"""
