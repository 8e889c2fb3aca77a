"""What a PNG shows, measured from its pixels: how much of each expected colour it holds.

Plots are checked by content (the area of each series' colour), not by their file signature.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import numpy as np


def colour_pixels(png: Path, colours: Mapping[str, str], tolerance: float = 0.02) -> dict[str, int]:
    """Pixels of each ``#rrggbb`` colour (within ``tolerance`` per channel, 0..1) in the PNG."""
    import matplotlib.image as mpimg

    img = mpimg.imread(str(png))[..., :3]
    out = {}
    for name, hexcode in colours.items():
        rgb = np.array([int(hexcode[i:i + 2], 16) / 255 for i in (1, 3, 5)])
        out[name] = int(np.all(np.abs(img - rgb) <= tolerance, axis=-1).sum())
    return out


def shares(counts: Mapping[str, float]) -> dict[str, float]:
    total = sum(counts.values())
    return {k: v / total for k, v in counts.items()}


def widest_row_coverage(png: Path, colours: Mapping[str, str], tolerance: float = 0.02) -> float:
    """Of the pixel row with the most pixels in ``colours``: the fraction of its span (first to last
    such pixel) that is in them. A timeline bar that covers its whole time range gives ~1."""
    import matplotlib.image as mpimg

    img = mpimg.imread(str(png))[..., :3]
    hit = np.zeros(img.shape[:2], dtype=bool)
    for hexcode in colours.values():
        rgb = np.array([int(hexcode[i:i + 2], 16) / 255 for i in (1, 3, 5)])
        hit |= np.all(np.abs(img - rgb) <= tolerance, axis=-1)
    row = hit[int(np.argmax(hit.sum(axis=1)))]
    cols = np.flatnonzero(row)
    return float(row.sum() / (cols[-1] - cols[0] + 1)) if cols.size else 0.0


def cycle_colours(n: int) -> list[str]:
    """The first ``n`` colours matplotlib gives series that set none, as #rrggbb."""
    import matplotlib
    from matplotlib.colors import to_hex

    return [to_hex(c) for c in matplotlib.rcParams["axes.prop_cycle"].by_key()["color"][:n]]


def over_white(hexcode: str, alpha: float) -> str:
    """The colour ``hexcode`` drawn with ``alpha`` over a white background."""
    rgb = [int(hexcode[i:i + 2], 16) / 255 for i in (1, 3, 5)]
    return "#" + "".join(f"{round(255 * (1 - alpha * (1 - c))):02x}" for c in rgb)
