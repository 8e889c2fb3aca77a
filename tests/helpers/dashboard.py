"""The Grafana dashboard in examples/grafana/: its PromQL expressions and the metric names they use."""

from __future__ import annotations

import json
import re
from pathlib import Path

DASHBOARD = Path(__file__).resolve().parents[2] / "examples" / "grafana" / "leveller.json"
KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "bool", "and", "or", "unless",
            "offset", "inf", "nan"}


def dashboard_exprs(path: Path = DASHBOARD) -> list[str]:
    """Every target expression of every panel (rows included)."""
    def panels(items: list[dict]) -> list[dict]:
        return [p for item in items for p in [item, *panels(item.get("panels", []))]]
    return [t["expr"] for p in panels(json.loads(path.read_text())["panels"]) for t in p.get("targets", [])]


def metric_names(expr: str) -> set[str]:
    """Metric names in a PromQL expression: identifiers that are not functions, keywords, label names
    (in {...} or by/without/on/ignoring (...)), strings or durations."""
    text = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)
    text = re.sub(r"\{[^}]*\}", "", text)
    text = re.sub(r"\[[^\]]*\]", "", text)
    text = re.sub(r"(?<![A-Za-z0-9_:])[0-9][A-Za-z0-9_.+-]*", "", text)  # numbers, durations (offset 5m)
    text = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", "", text)
    names = set()
    for match in re.finditer(r"[A-Za-z_:][A-Za-z0-9_:]*", text):
        following = text[match.end():].lstrip()
        if match.group() not in KEYWORDS and not following.startswith("("):
            names.add(match.group())
    return names
