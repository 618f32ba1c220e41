"""`trot compare RUN_DIR... [--out curves.png] [--group NAME=RUN_DIR,RUN_DIR ...]`: several
runs in one figure.

Rows of panels: the training return (metrics.csv's episode_return) and the evaluations of
`trot train --eval-every` (eval.csv: the return and, for locomotion, the tracking error and
the fall rate); `--eval-metrics NAME ...` adds eval.csv columns. Each panel is drawn against
env steps (left) and the training wall-clock (right). A metric no run has is left out.

A run of several tasks (`trot train A B`) logs each task's return as TASK/episode_return:
each is its own panel, labelled with the task.

Seeds of one configuration are one curve: the `seed_K/` run directories in a folder given
as RUN_DIR (or given one by one), or the runs of a `--group`. Their rows fall at different
x (always so for wall-clock), so `band` interpolates each run linearly onto the union of the
runs' x within the range every run reached (no extrapolation) and draws the median over the
runs with a band from the lowest to the highest. A curve of one run is drawn as logged.

Beside the PNG, a CSV of what it draws (curves.png -> curves.csv): one row per point,
(curve, file, column, x_column, x, median, low, high, runs). benchmarks/plots.py draws the
results page's plots with the same `band`.
"""

from __future__ import annotations

import csv
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import tyro

from trot.core.files import atomic_write

TRAIN, EVAL = "metrics.csv", "eval.csv"  # agents/logger.py's and agents/periodic_eval.py's
X_AXES = {"env_steps": ("env steps (M)", 1e-6), "wall_s": ("training wall-clock (min)", 1 / 60)}
FIELDS = ("curve", "file", "column", "x_column", "x", "median", "low", "high", "runs")
SEED_DIR = re.compile(r"^seed_\d+$")  # the many-seeds layout: CONFIG/seed_K/


@dataclass(frozen=True)
class Metric:
    file: str  # TRAIN or EVAL
    column: str
    label: str


METRICS = (Metric(TRAIN, "episode_return", "training return"),
           Metric(EVAL, "mean_return", "eval return (deterministic)"),
           Metric(EVAL, "lin_vel_error", "eval lin-vel tracking error (m/s)"),
           Metric(EVAL, "fall_rate", "eval fall rate"))


@dataclass(frozen=True)
class Group:
    label: str
    runs: tuple[Path, ...]  # several: seeds of one configuration


@dataclass(frozen=True)
class CompareArgs:
    """trot compare: several runs' training return and eval.csv metrics in one figure, seeds
    as median and min-max band, the points beside it as CSV (trot/compare.py)"""

    runs: tyro.conf.Positional[tuple[str, ...]] = ()
    """run directories of `trot train`, or folders of seed_K/ run directories"""
    out: str = "curves.png"
    """the figure; the CSV of what it draws is written beside it (.csv)"""
    group: tuple[str, ...] = ()
    """NAME=RUN_DIR,RUN_DIR: these runs are seeds of one configuration, drawn as one curve"""
    eval_metrics: tuple[str, ...] = ()
    """eval.csv columns to draw besides the default ones, e.g. upright"""


def band(runs: list[tuple[np.ndarray, np.ndarray]]):
    """(x, median, low, high) over runs given as (x, y), on the x every run reached."""
    runs = [(x[np.isfinite(y)], y[np.isfinite(y)]) for x, y in runs]
    runs = [(x[np.argsort(x)], y[np.argsort(x)]) for x, y in runs]
    if len(runs) == 1:
        x, y = runs[0]
        return x, y, y, y
    lo, hi = max(x[0] for x, _ in runs), min(x[-1] for x, _ in runs)
    grid = np.unique(np.concatenate([x for x, _ in runs]))
    grid = grid[(grid >= lo) & (grid <= hi)]
    ys = np.stack([np.interp(grid, x, y) for x, y in runs])
    return grid, np.median(ys, axis=0), ys.min(axis=0), ys.max(axis=0)


def plot_band(ax, pts: list[dict], scale: float, color: str, label: str) -> None:
    """One curve of `series` rows on ax: the median (x scaled), and the min-max band where
    the curve has several runs."""
    x = np.array([r["x"] for r in pts]) * scale
    ax.plot(x, [r["median"] for r in pts], color=color, label=label,
            marker="o" if len(pts) < 40 else None, ms=3)
    if pts and pts[0]["runs"] > 1:
        ax.fill_between(x, [r["low"] for r in pts], [r["high"] for r in pts], color=color,
                        alpha=0.2, lw=0)


def _not_a_run(path: Path) -> ValueError:
    return ValueError(f"{path}: no {TRAIN} there; trot compare takes run directories of "
                      "`trot train` (each with its metrics.csv) or folders of seed_K/ run "
                      "directories")


def _seed_runs(folder: Path) -> tuple[Path, ...]:
    return tuple(sorted((p for p in folder.iterdir() if SEED_DIR.match(p.name)
                         and (p / TRAIN).is_file()), key=lambda p: int(p.name[5:])))


def groups_of(runs: tuple[str, ...], group: tuple[str, ...] = ()) -> list[Group]:
    """Curves in the order given: a seed_K/ run joins its siblings' curve (named by their
    folder), a folder of seed_K/ runs is one curve, and each --group NAME=A,B is one."""
    members: dict[str, list[Path]] = {}
    for arg in runs:
        d = Path(arg)
        if (d / TRAIN).is_file():
            members.setdefault(str(d.parent) if SEED_DIR.match(d.name) else arg, []).append(d)
        elif d.is_dir() and _seed_runs(d):
            members.setdefault(arg, []).extend(_seed_runs(d))
        else:
            raise _not_a_run(d)
    for spec in group:
        name, _, dirs = spec.partition("=")
        if not name or not dirs:
            raise ValueError(f"--group {spec!r}: expected NAME=RUN_DIR,RUN_DIR")
        for d in map(Path, dirs.split(",")):
            if not (d / TRAIN).is_file():
                raise _not_a_run(d)
            members.setdefault(name, []).append(d)
    if not members:
        raise ValueError("trot compare: give at least one RUN_DIR or --group")
    return [Group(k, tuple(v)) for k, v in members.items()]


def read_csv(path: Path) -> dict[str, np.ndarray]:
    """A CSV's columns as float arrays (an empty cell is NaN); {} where there is none."""
    if not path.is_file():
        return {}
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    return {k: np.array([float(r[k]) if r[k] else np.nan for r in rows])
            for k in (rows[0] if rows else {})}


def columns_of(m: Metric, tables: list[dict]) -> list[str]:
    """The metric's columns in these runs: its own, then a run of several tasks' TASK/COLUMN
    (agents/trainer.py logs each task's episodes under its name)."""
    own = [c for t in tables for c in t[m.file]]
    return [m.column] + sorted({c for c in own if c.endswith("/" + m.column)})


def series(groups: list[Group], metrics: tuple[Metric, ...] = METRICS) -> list[dict]:
    """The CSV's rows: each curve's median and band for each metric (and each task's column
    of it) against each x."""
    out = []
    for g in groups:
        tables = [{f: read_csv(run / f) for f in (TRAIN, EVAL)} for run in g.runs]
        for m, column in ((m, c) for m in metrics for c in columns_of(m, tables)):
            m = Metric(m.file, column, m.label)
            for x in X_AXES:
                runs = [(t[m.file][x], t[m.file][m.column]) for t in tables
                        if m.column in t[m.file] and np.isfinite(t[m.file][m.column]).any()]
                if not runs:
                    continue
                out += [{"curve": g.label, "file": m.file, "column": m.column,
                         "x_column": x, "x": a, "median": b, "low": c, "high": d,
                         "runs": len(runs)} for a, b, c, d in zip(*band(runs))]
    return out


def draw(groups: list[Group], metrics: tuple[Metric, ...], rows: list[dict],
         png: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = {(m.file, m.column): m.label for m in metrics}

    def panel(file: str, column: str) -> Metric:  # TASK/COLUMN: the metric's label, the task's
        task, _, base = column.rpartition("/")
        return Metric(file, column, labels[file, base] + (f": {task}" if task else ""))

    shown = [panel(*k) for k in dict.fromkeys((r["file"], r["column"]) for r in rows)]
    fig, axes = plt.subplots(len(shown), len(X_AXES), figsize=(9, 2.8 * len(shown)),
                             squeeze=False)
    for row_axes, m in zip(axes, shown):
        for ax, (x_column, (xlabel, scale)) in zip(row_axes, X_AXES.items()):
            for i, g in enumerate(groups):
                plot_band(ax, [r for r in rows if r["curve"] == g.label and r["file"] == m.file
                               and r["column"] == m.column and r["x_column"] == x_column],
                          scale, f"C{i}", g.label)
            ax.set_xlabel(xlabel)
            ax.set_ylabel(m.label, fontsize=8)
            ax.grid(alpha=0.3)
    axes[0][0].legend(fontsize=7)
    fig.tight_layout()
    atomic_write(png, lambda p: fig.savefig(p, format="png", dpi=100))
    plt.close(fig)


def compare(groups: list[Group], png: Path,
            metrics: tuple[Metric, ...] = METRICS) -> tuple[Path, Path]:
    """The figure and, beside it, the CSV of its points."""
    rows = series(groups, metrics)
    if not rows:
        raise ValueError("trot compare: the runs have no rows to draw yet")
    table = png.with_suffix(".csv")

    def write(path: Path) -> None:
        with open(path, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=FIELDS)
            w.writeheader()
            w.writerows({**r, **{k: f"{r[k]:.10g}" for k in ("x", "median", "low", "high")}}
                        for r in rows)

    atomic_write(table, write)
    draw(groups, metrics, rows, png)
    return png, table


def main(args: list[str]) -> int:
    a = tyro.cli(CompareArgs, args=args, prog="trot compare")
    extra = tuple(Metric(EVAL, c, f"eval {c}") for c in a.eval_metrics)
    png, table = compare(groups_of(a.runs, a.group), Path(a.out), METRICS + extra)
    print(f"{png}\n{table}")
    return 0
