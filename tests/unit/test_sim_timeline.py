"""Timeline pictures of single-link runs (leveller.sim.timeline), checked on the drawn figure.

The figure is caught as plot_timelines closes it, so each bar, label and limit is read back from
matplotlib's objects and compared with the simulated segments (the pixels are checked in
tests/unit/test_sim_link.py).
"""

from __future__ import annotations

from fractions import Fraction as F
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from matplotlib.colors import to_hex
from matplotlib.text import Text

from leveller.core.policies import make_policy
from leveller.model.shape import JobShape
from leveller.sim.link import LinkResult, Segment, simulate_link
from leveller.sim.presets import PRESETS
from leveller.sim.timeline import COLORS, LABELS, plot_timelines

DPI = 110  # the PNG's resolution (dots per inch)


@pytest.fixture
def drawn(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """The figures plot_timelines closes, in order (caught before they are closed)."""
    import matplotlib.pyplot as plt

    figures: list[Any] = []
    close = plt.close

    def catch(fig: Any = None) -> None:
        figures.append(fig if fig is not None else plt.gcf())
        close(fig)

    monkeypatch.setattr(plt, "close", catch)
    return figures


def bars(ax: Any) -> list[tuple[float, float, float, float, str, str, float]]:
    """(x, width, y, height, face colour, edge colour, line width) of every bar of ``ax`` (to 1e-6)."""
    out = []
    for coll in ax.collections:
        face, edge = to_hex(coll.get_facecolor()[0]), to_hex(coll.get_edgecolor()[0])
        for path in coll.get_paths():
            xs, ys = path.vertices[:, 0], path.vertices[:, 1]
            out.append((round(float(xs.min()), 6), round(float(xs.max() - xs.min()), 6), round(float(ys.min()), 6),
                        round(float(ys.max() - ys.min()), 6), face, edge, float(coll.get_linewidth()[0])))
    return sorted(out)


def expected_bars(result: LinkResult, until: F) -> list[tuple[float, float, float, float, str]]:
    """The bars the picture must show: every segment starting before ``until``, cut there, on its job's row
    (Job 1 on top), 0.7 high, in its kind's colour."""
    n = len(result.jobs)
    return sorted((round(float(s.start), 6), round(float(min(s.end, until) - s.start), 6),
                   round(n - 1 - s.job - 0.35, 6), 0.7, COLORS[s.kind]) for s in result.segments if s.start < until)


def test_each_segment_is_one_bar_on_its_jobs_row_cut_at_the_end(drawn: list[Any], tmp_path: Path) -> None:
    res = simulate_link(PRESETS["fig1-trio"], make_policy("leveller"), cycles=10, record_until=F(30))
    until = F(12)  # segments go on past it: they are cut, later ones left out
    assert any(s.start < until < s.end for s in res.segments) and any(s.start >= until for s in res.segments)
    plot_timelines([("leveller", res)], tmp_path / "t.png", until)
    (fig,) = drawn
    (ax,) = fig.axes
    got = bars(ax)
    assert [b[:5] for b in got] == expected_bars(res, until)
    assert {b[5] for b in got} == {"#ffffff"} and {b[6] for b in got} == {0.5}  # white gaps between bars
    assert max(b[0] + b[1] for b in got) == pytest.approx(float(until))


def test_a_segment_starting_exactly_at_the_end_is_not_drawn(drawn: list[Any], tmp_path: Path) -> None:
    jobs = (JobShape(F(1), F(1)),)
    res = LinkResult("x", jobs, F(4), (1,), (F(1, 2),),
                     (Segment(0, "compute", F(0), F(1)), Segment(0, "send", F(1), F(2)),
                      Segment(0, "compute", F(2), F(3))))
    plot_timelines([("x", res)], tmp_path / "t.png", F(2))
    assert [b[:5] for b in bars(drawn[0].axes[0])] == [(0.0, 1.0, -0.35, 0.7, COLORS["compute"]),
                                                       (1.0, 1.0, -0.35, 0.7, COLORS["send"])]


def test_segments_in_any_order_are_all_drawn(drawn: list[Any], tmp_path: Path) -> None:
    """A result listing its segments job by job (not in time order): the end cuts each job's own."""
    jobs = (JobShape(F(1), F(1)), JobShape(F(1), F(1)))
    segs = (Segment(0, "compute", F(0), F(1)), Segment(0, "send", F(1), F(2)), Segment(0, "compute", F(2), F(3)),
            Segment(1, "compute", F(0), F(1)), Segment(1, "wait", F(1), F(2)), Segment(1, "send", F(2), F(3)))
    res = LinkResult("x", jobs, F(3), (1, 1), (F(2, 3), F(2, 3)), segs)
    plot_timelines([("x", res)], tmp_path / "t.png", F(3, 2))
    assert [b[:5] for b in bars(drawn[0].axes[0])] == expected_bars(res, F(3, 2))
    assert len(expected_bars(res, F(3, 2))) == 4


def test_rows_titles_limits_and_legend(drawn: list[Any], tmp_path: Path) -> None:
    fair = simulate_link(PRESETS["fig3"], make_policy("fair"), cycles=5, record_until=F(15))
    trio = simulate_link(PRESETS["fig1-trio"], make_policy("leveller"), cycles=5, record_until=F(15))
    out = plot_timelines([("fair", fair), ("trio", trio)], tmp_path / "t.png", F(15))
    assert out == tmp_path / "t.png" and out.is_file()
    (fig,) = drawn
    top, bottom = fig.axes[:2]
    for ax, res, title in ((top, fair, "fair"), (bottom, trio, "trio")):
        n = len(res.jobs)
        assert list(ax.get_yticks()) == list(range(n))
        assert [t.get_text() for t in ax.get_yticklabels()] == [f"Job {n - i}" for i in range(n)]  # Job 1 on top
        rates = ", ".join(f"{float(r):.3f}" for r in res.rates)
        assert ax.get_title(loc="left") == f"{title}: R -> {rates}" and ax.get_title() == ""
        (title_text,) = [t for t in ax.findobj(Text) if t.get_text() == ax.get_title(loc="left")]
        assert title_text.get_fontsize() == 10
        assert ax.get_xlim() == (0.0, 15.0)
        assert ax.get_ylim() == pytest.approx((-0.6, n - 0.4))
    assert top.get_shared_x_axes().joined(top, bottom)  # one time axis for every panel
    assert bottom.get_xlabel() == "time (link units)" and top.get_xlabel() == ""
    (legend,) = fig.legends
    assert [t.get_text() for t in legend.get_texts()] == [LABELS[k] for k in COLORS]
    assert [to_hex(h.get_facecolor()) for h in legend.legend_handles] == list(COLORS.values())
    assert not legend.get_frame_on()
    # one row of entries, centred below the panels and their time label, which span the figure's width
    fig.canvas.draw()
    to_fig = fig.transFigure.inverted()
    rows = {round(t.get_window_extent().transformed(to_fig).y0, 3) for t in legend.get_texts()}
    box = legend.get_window_extent().transformed(to_fig)
    label = bottom.xaxis.label.get_window_extent().transformed(to_fig)
    assert len(rows) == 1 and box.y1 <= label.y0 and (box.x0 + box.x1) / 2 == pytest.approx(0.5, abs=0.01)
    assert box.y0 >= 0
    for ax in (top, bottom):
        pos = ax.get_position()
        assert 0 <= pos.x0 < 0.15 and 0.95 < pos.x1 <= 1
    assert 0.85 < top.get_position().y1 <= 1 and top.get_position().y1 - bottom.get_position().y0 > 0.6


@settings(max_examples=8)
@given(st.lists(st.integers(1, 4), min_size=1, max_size=3))
def test_picture_is_9_inches_wide_and_a_row_of_0_55_inch_per_job(panel_sizes: list[int]) -> None:
    """Size grows with the rows drawn (1 inch of margins + 0.55 inch per job of every panel), at 110 dpi."""
    import tempfile

    import matplotlib.image as mpimg

    panels = [(f"p{i}", simulate_link([JobShape(F(1), F(1))] * n, make_policy("fair"), cycles=2,
                                      record_until=F(4))) for i, n in enumerate(panel_sizes)]
    with tempfile.TemporaryDirectory() as tmp:
        out = plot_timelines(panels, Path(tmp) / "t.png", F(4))
        height, width = mpimg.imread(str(out)).shape[:2]
    assert width == 9 * DPI
    assert abs(height - (1.0 + 0.55 * sum(panel_sizes)) * DPI) <= 1  # whole pixels


def test_the_directory_is_made_and_a_second_picture_replaces_the_first(tmp_path: Path) -> None:
    res = simulate_link(PRESETS["fig3"], make_policy("fair"), cycles=2, record_until=F(4))
    target = tmp_path / "a" / "b" / "t.png"
    assert plot_timelines([("x", res)], target, F(4)) == target and target.is_file()
    first = target.read_bytes()
    again = plot_timelines([("x", res)], str(target), F(2))  # type: ignore[arg-type]  # a str path too
    assert again == target
    assert target.read_bytes() != first


def test_every_figure_is_closed(tmp_path: Path) -> None:
    import matplotlib.pyplot as plt

    res = simulate_link(PRESETS["fig3"], make_policy("fair"), cycles=2, record_until=F(4))
    before = set(plt.get_fignums())
    for i in range(3):
        plot_timelines([("x", res)], tmp_path / f"{i}.png", F(4))
    assert set(plt.get_fignums()) == before


def test_the_title_is_10_points_whatever_the_default_font_size(drawn: list[Any], tmp_path: Path) -> None:
    """The panel title has its own size: a larger rc font.size does not grow it."""
    import matplotlib

    res = simulate_link(PRESETS["fig3"], make_policy("fair"), cycles=2, record_until=F(4))
    with matplotlib.rc_context({"font.size": 14}):
        plot_timelines([("fair", res)], tmp_path / "t.png", F(4))
    ax = drawn[0].axes[0]
    (title_text,) = [t for t in ax.findobj(Text) if t.get_text() == ax.get_title(loc="left")]
    assert title_text.get_fontsize() == 10
