"""benchmarks/plots.py and the results page it draws for (docs/benchmarks.md): the series a
plot draws against its source CSVs, the page's pictures against the script, the page's
links against the journal. About 5 s (matplotlib, Agg)."""

import csv
import re
from pathlib import Path

import numpy as np
import pytest
from scripts import script

from trot.benchmark import fmt_time, main

ROOT = Path(__file__).resolve().parents[1]
plots = script("plots")

PAGE = ROOT / "docs" / "benchmarks.md"
EXPERIMENTS = ROOT / "docs" / "experiments.md"  # the seeds' experiments: their own page
JOURNAL = ROOT / "docs" / "journal"


def _rows(path: Path) -> list[dict[str, str]]:
    with open(path) as f:
        return list(csv.DictReader(f))


def _write_seed(path: Path, steps: list[float], values: list[float]) -> None:
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["train_s", "env_steps", "lin_vel_error"])
        w.writerows([i, s, v] for i, (s, v) in enumerate(zip(steps, values)))


def test_seeds_are_aligned_by_env_steps_not_by_row(tmp_path):
    """Three seeds evaluated at different env steps, each a straight line of its own offset.
    The median must be the line plus the median offset and the band the lowest and highest
    offsets, at every env step every seed reached and at none beyond. The bugs: seeds
    zipped row by row (the median mixes 1 M with 2 M), a seed extrapolated past its last
    evaluation, or the band taken along env steps instead of across seeds."""
    def line(x):
        return 0.6 - 0.04 * np.asarray(x) / 1e6

    offsets = (0.0, 0.05, -0.03)
    steps = ([1e6, 3e6, 5e6, 7e6, 9e6], [2e6, 4e6, 6e6, 8e6], [1.5e6, 4.5e6, 7.5e6, 10.5e6])
    for k, (s, o) in enumerate(zip(steps, offsets)):
        _write_seed(tmp_path / f"s{k}.csv", s, list(line(s) + o))
    plot = plots.Plot("t", "t", (plots.Curve("seeds", ("s0.csv", "s1.csv", "s2.csv")),),
                      (plots.Panel("lin_vel_error", "error"),))
    rows = plots.series(plot, root=tmp_path)

    x = np.array([r["x"] for r in rows])
    reached = sorted({v for s in steps for v in s if 2e6 <= v <= 8e6})
    assert x.tolist() == reached
    np.testing.assert_allclose([r["median"] for r in rows], line(x) + 0.0, atol=1e-12)
    np.testing.assert_allclose([r["low"] for r in rows], line(x) - 0.03, atol=1e-12)
    np.testing.assert_allclose([r["high"] for r in rows], line(x) + 0.05, atol=1e-12)
    assert {r["runs"] for r in rows} == {3}


def test_one_run_is_drawn_as_logged():
    """A curve of one CSV is its rows, every evaluation, in each panel's own column. The
    bugs: a panel reading another column, an evaluation dropped or reordered, a band drawn
    around a single run."""
    plot = next(p for p in plots.PLOTS if p.name == "go1_rough")
    (curve,) = plot.curves
    src = _rows(ROOT / curve.csvs[0])
    rows = plots.series(plot)
    for panel in plot.panels:
        got = [r for r in rows if r["panel"] == panel.column]
        assert [r["x"] for r in got] == [float(s["env_steps"]) for s in src]
        assert [r["median"] for r in got] == [float(s[panel.column]) for s in src]
        assert all(r["low"] == r["median"] == r["high"] and r["runs"] == 1 for r in got)


def test_committed_plots_are_what_the_script_draws_from_the_csvs_now(tmp_path):
    """`python benchmarks/plots.py` into a fresh folder: every PNG is written, and each CSV
    beside it equals the one committed in docs/img. The bug: a CSV in docs/data changed (a
    new run, a new seed) and the page still shows the picture of the old one."""
    main(plots.Settings, plots.run, argv=["--out-dir", str(tmp_path)])
    for plot in plots.PLOTS:
        png = tmp_path / f"{plot.name}.png"
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", plot.name
        new = _rows(tmp_path / f"{plot.name}.csv")
        old = _rows(ROOT / "docs" / "img" / f"{plot.name}.csv")
        assert len(new) == len(old), f"{plot.name}: rerun python benchmarks/plots.py"
        for a, b in zip(new, old):
            assert [a[k] for k in ("curve", "panel", "x_column", "runs")] == \
                [b[k] for k in ("curve", "panel", "x_column", "runs")], plot.name
            for k in ("x", "median", "low", "high"):
                assert float(a[k]) == pytest.approx(float(b[k]), rel=1e-5), (plot.name, k)


def _page_table(heading: str) -> dict[str, list[str]]:
    """The first table after HEADING on the results page: first cell -> the row's cells."""
    table: list[list[str]] = []
    for ln in PAGE.read_text().split(heading, 1)[1].splitlines():
        if ln.startswith("|") and not ln.startswith("|---"):
            table.append([c.strip() for c in ln.strip("|").split("|")])
        elif table and not ln.startswith("|"):
            break
    return {row[0]: row for row in table}


def test_ant_curves_cross_the_thresholds_when_the_page_table_says():
    """The Ant-v5 picture and the table beside it on the results page tell the same story:
    each stack's plotted return first reaches 1,000 and 2,000 at the times the table gives.
    The bugs: the picture drawing another quantity (per-iteration returns, the episode
    length column) or another clock (seconds read as minutes) than the table's."""
    table = _page_table("## Peers")
    head = table["stack"]
    plot = next(p for p in plots.PLOTS if p.name == "ant_peers")
    rows = [r for r in plots.series(plot) if r["x_column"] == "wall_s"]
    for curve in plot.curves:
        pts = [r for r in rows if r["curve"] == curve.label]
        for thr in (1000, 2000):
            cell = table[curve.label][head.index(f"first >= {thr:,}")].strip("*")
            hit = next((r["x"] for r in pts if r["median"] >= thr), None)
            assert fmt_time(hit) == cell, (curve.label, thr)


def test_every_picture_on_the_page_is_drawn_by_the_script_from_committed_csvs():
    """Every image on the results page exists and is one of plots.py's, from CSVs in
    docs/data; every plot of the script is shown on the page or in the journal. The bugs:
    a picture no script draws (or from a CSV that is not committed), a plot renamed while
    the page still points at the old file, a plot nobody shows."""
    page = PAGE.read_text() + EXPERIMENTS.read_text()
    shown = re.findall(r"!\[[^\]]*\]\(img/([\w.-]+)\)", page)
    names = {p.name: p for p in plots.PLOTS}
    assert shown, "the results page shows no plot"
    for img in shown:
        assert (ROOT / "docs" / "img" / img).is_file(), img
        assert img.endswith(".png") and img[:-4] in names, f"{img}: not drawn by plots.py"
        for curve in names[img[:-4]].curves:
            assert all(c.startswith("docs/data/") and (ROOT / c).is_file() for c in curve.csvs)
    journal = " ".join(p.read_text() for p in JOURNAL.glob("*.md"))
    for name in names:
        assert f"img/{name}.png)" in page + journal, f"{name}.png is shown nowhere"


def _anchor(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def test_results_page_links_land_on_journal_sections():
    """Every link from the results page into docs/journal/ names a file that exists and a
    section heading it holds; the page stays a results page. The bugs: a journal section
    renamed or moved while a row still points at it, and the page growing back into a lab
    notebook (the issue: at most about 300 lines)."""
    page = PAGE.read_text()
    links = re.findall(r"\]\(journal/([\w.-]+\.md)(?:#([\w-]+))?\)", page)
    assert len(links) > 10
    for name, anchor in links:
        path = JOURNAL / name
        assert path.is_file(), name
        heads = {_anchor(ln.lstrip("#")) for ln in path.read_text().splitlines()
                 if ln.startswith("#")}
        assert not anchor or anchor in heads, f"{name}#{anchor}"
    assert len(page.splitlines()) <= 300
