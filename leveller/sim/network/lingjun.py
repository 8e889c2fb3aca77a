"""Derive the Lingjun switch hierarchy table from the dataset's topo.csv.

The CSV (alibaba/alibaba-lingjun-dataset-2023, Apache License 2.0) has one row
per host: ``ip`` (hashed), ``DSW`` (core), ``PSW`` (aggregation), ``ASW`` (ToR).
ASW names repeat under different PSWs, so a ToR is the pair (PSW, ASW). The
simulator needs only the hierarchy and the number of hosts per ToR, which
``lingjun_data.py`` holds; re-create it with

    python -m leveller.sim.network.lingjun PATH/topo.csv > leveller/sim/network/lingjun_data.py
"""

from __future__ import annotations

import csv
import io
import re
import sys
from collections import Counter

from leveller.errors import UserError

COLUMNS = ("ip", "DSW", "PSW", "ASW")
SWITCH_RE = re.compile(r"^[A-Za-z][A-Za-z0-9]{0,5}$")


def parse_topo_csv(text: str) -> tuple[str, list[tuple[str, str, int]]]:
    """(DSW, [(PSW, ASW, hosts), ...] sorted by PSW then ASW number) from the CSV text; UserError naming the
    line and column of a bad row (also a field over the csv module's 128 KiB or a NUL)."""
    reader = csv.DictReader(io.StringIO(text), restval="")
    tors: Counter[tuple[str, str]] = Counter()
    dsws: set[str] = set()
    seen: set[str] = set()
    try:
        if reader.fieldnames is None or tuple(reader.fieldnames) != COLUMNS:
            shown = repr(reader.fieldnames)
            raise UserError(f"lingjun topo.csv: header {shown[:80]}; expected {','.join(COLUMNS)}")
        for row in reader:
            line = reader.line_num
            for col in COLUMNS[1:]:
                if not SWITCH_RE.match(row[col] or ""):
                    raise UserError(f"lingjun topo.csv line {line}: {col} = {row[col][:40]!r} is not a switch name")
            if row["ip"] in seen:
                raise UserError(f"lingjun topo.csv line {line}: host {row['ip'][:80]!r} appears twice")
            seen.add(row["ip"])
            dsws.add(row["DSW"])
            tors[(row["PSW"], row["ASW"])] += 1
    except csv.Error as exc:
        raise UserError(f"lingjun topo.csv line {reader.line_num + 1}: not valid CSV ({exc})") from None
    if len(dsws) != 1:
        raise UserError(f"lingjun topo.csv: expected one DSW (core switch), found {sorted(dsws)}")

    def key(item: tuple[tuple[str, str], int]) -> tuple:
        (psw, asw), _ = item
        return (int(re.sub(r"\D", "", psw) or 0), psw, int(re.sub(r"\D", "", asw) or 0), asw)

    return dsws.pop(), [(psw, asw, n) for (psw, asw), n in sorted(tors.items(), key=key)]


def render_table(dsw: str, tors: list[tuple[str, str, int]]) -> str:
    """Python source of lingjun_data.py."""
    rows = "\n".join(f"    ({psw!r}, {asw!r}, {n})," for psw, asw, n in tors)
    hosts = sum(n for _, _, n in tors)
    return f'''"""Alibaba Lingjun 2023 topology: switch hierarchy and hosts per ToR (derived, do not edit).

Derived by leveller/sim/network/lingjun.py from topo.csv of the public dataset
alibaba/alibaba-lingjun-dataset-2023 (Apache License 2.0; Cao et al., "Crux:
GPU-Efficient Communication Scheduling for Deep Learning Training", SIGCOMM 2024).
{hosts} hosts, {len(tors)} ToRs (ASW, keyed by (PSW, ASW)), {len({p for p, _, _ in tors})} PSWs, one DSW.
"""

DSW = {dsw!r}

# (PSW, ASW, hosts under this ToR)
TORS: tuple[tuple[str, str, int], ...] = (
{rows}
)
'''


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m leveller.sim.network.lingjun PATH/topo.csv > lingjun_data.py", file=sys.stderr)
        return 2
    with open(argv[0], encoding="utf-8") as fh:
        dsw, tors = parse_topo_csv(fh.read())
    sys.stdout.write(render_table(dsw, tors))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
