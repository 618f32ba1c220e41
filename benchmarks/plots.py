"""Every plot of docs/benchmarks.md and docs/journal/, drawn from the CSVs in docs/data/.

    python benchmarks/plots.py                        # all of them, into docs/img/
    python benchmarks/plots.py --only ant_peers --out-dir /tmp/img
    python benchmarks/plots.py --list

It draws from committed files only: no task, no training (it takes no train arguments).

Each plot NAME writes NAME.png and, beside it, NAME.csv: the series the picture draws, one
row per point (curve, panel, x, median, low, high, runs), so that a reader or a test can
check a picture against its sources.

Several CSVs in one curve are seeds of one configuration. Their evaluations fall at
different env steps, so each seed is interpolated linearly onto the union of the seeds'
env steps, within the range every seed reached (no extrapolation); the curve is the median
over seeds and the band runs from the lowest seed to the highest. A curve of one CSV is
drawn as logged. The peers' Ant-v5 curves use trot/benchmark.py's reading of its
CSVs: the episode-weighted mean return of the 10 s up to each logged row, the quantity its
table reports.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from trot.benchmark import main, read_rows, return_at
from trot.compare import X_AXES, band, plot_band  # `trot compare`'s median and band

ROOT = Path(__file__).resolve().parents[1]



# `trot compare`'s axes, and the sweeps' (a setting on x; one point per run)
AXES = {**X_AXES, "learning_rate": ("learning rate", 1.0), "lam": ("GAE λ", 1.0),
        "rho_bar": ("V-trace ρ̄", 1.0), "workers": ("workers", 1.0),
        "lag": ("actor lag (updates)", 1.0), "value_scale": ("critic output scale", 1.0)}
FIELDS = ("plot", "curve", "panel", "x_column", "x", "median", "low", "high", "runs")


@dataclass(frozen=True)
class Curve:
    label: str
    csvs: tuple[str, ...]  # relative to the repository root; several: seeds
    stack: str | None = None  # a compare_ant stack: read as its table reads it
    column: str | None = None  # this curve's y column, in place of the panel's
    panels: tuple[str, ...] = ()  # the panels (by column) it is drawn in; (): every panel


@dataclass(frozen=True)
class Panel:
    column: str
    label: str
    goal: float | None = None  # drawn as a dashed line
    x: str = "env_steps"
    log_x: bool = False


@dataclass(frozen=True)
class Plot:
    name: str
    title: str
    curves: tuple[Curve, ...]
    panels: tuple[Panel, ...]


def _seeds(stem: str, n: int = 3) -> tuple[str, ...]:
    return tuple(f"docs/data/{stem}_seed{k}.csv" for k in range(n))


VTRACE_SEEDS = tuple(f"docs/data/vtrace_rho/seed{k}.csv" for k in range(3))
TRACKING = Panel("lin_vel_error", "lin-vel tracking error (m/s)", 0.20)
FALLS = Panel("fall_rate", "fall rate", 0.02)
PLOTS = (
    Plot("go1_flat", "go1-flat, registered settings: median and range over 3 seeds",
         (Curve("3 seeds, 2026-12-03", _seeds("go1_after_fixes")),
          Curve("seed 0, 2026-12-04", ("docs/data/go1_randomize_first_seed0.csv",))),
         (TRACKING, FALLS)),
    Plot("go1_flat_history", "go1-flat, one configuration after another: median over 3 seeds",
         (Curve("no clock (go1-flat-airtime)", _seeds("go1_seeds")),
          Curve("clock, 256-128-64", _seeds("go1_trot_seeds")),
          Curve("clock, 128-64-32", _seeds("go1_screen_small_clock")),
          Curve("clock, 128-64-32, after the fixes", _seeds("go1_after_fixes"))),
         (TRACKING, FALLS)),
    Plot("go2_flat", "go2-flat, seed 0",
         (Curve("bf16 update (registered)", ("docs/data/go2_curve_bf16.csv",)),
          Curve("float32 update", ("docs/data/go2_curve.csv",))),
         (Panel("lin_vel_error", "lin-vel tracking error (m/s)", 0.25),
          Panel("fall_rate", "fall rate", 0.10))),
    Plot("go1_rough", "go1-rough, registered settings (heading commands), seed 0",
         (Curve("go1-rough", ("docs/data/go1_rough_curve_heading.csv",)),),
         (Panel("terrain_level", "mean terrain level (of 7)", 3.5),
          Panel("crossed_stairs_up", "course: stairs up crossed", 0.8),
          Panel("lin_vel_error", "lin-vel tracking error (m/s)"))),
    Plot("g1_flat", "g1-flat, seed 0",
         (Curve("symmetry augmentation (registered)", ("docs/data/g1_curve_symmetry.csv",)),
          Curve("no symmetry (attempt 3)", ("docs/data/g1_curve.csv",))),
         (Panel("lin_vel_error", "lin-vel tracking error (m/s)", 0.25),
          Panel("fall_rate", "fall rate", 0.05),
          Panel("gait_swing_height", "swing height (m)", 0.05))),
    Plot("ant_peers", "Ant-v5, 12 minutes of training each, one seed",
         (Curve("trot", ("docs/data/ant_trot_metrics.csv",), stack="trot"),
          Curve("rl_games + envpool", ("docs/data/ant_rlgames.csv",), stack="rlgames"),
          Curve("SB3 PPO", ("docs/data/ant_sb3.csv",), stack="sb3")),
         (Panel("return", "training return (10 s mean)", x="wall_s"),
          Panel("return", "training return (10 s mean)", x="env_steps"))),
    Plot("a3c_robustness", "cartpole-balance, 60 s per run, median and range of 2 seeds",
         (Curve("A3C, 2 workers, shared RMSProp", _seeds("a3c_robustness/a3c", 2)),
          Curve("A2C, same envs in one process, Adam", _seeds("a3c_robustness/a2c", 2))),
         (Panel("mean_return", "eval return (deterministic)", 475.0, x="learning_rate",
                log_x=True),)),
    Plot("stragglers", "Exercise 19.5: collection against asynchronous, T = 128; "
         "median and range of 3 seeds",
         (Curve("exercise's printed table", ("docs/data/stragglers/claim.csv",)),
          Curve("model (lognormal, resets +20 ms)", _seeds("stragglers/model")),
          Curve("cartpole-balance, measured", _seeds("stragglers/cartpole")),
          Curve("go1-flat, measured", _seeds("stragglers/go1"))),
         (Panel("lockstep", "lockstep efficiency", x="workers", log_x=True),
          Panel("per_rollout", "per-rollout sync efficiency", x="workers", log_x=True))),
    Plot("vtrace_rho", "V-trace's fixed point per state and its target's variance "
         "(c̄ = min(1, ρ̄), T = 16), 3 seeds",
         (*(Curve(f"state {x}", VTRACE_SEEDS, column=f"fixed_s{x}",
                  panels=("fixed",)) for x in range(6)),
          Curve("16-step target", VTRACE_SEEDS, panels=("target_var",))),
         (Panel("fixed", "fixed point V(x)", x="rho_bar", log_x=True),
          Panel("target_var", "target variance (mean over states)", x="rho_bar",
                log_x=True))),
    Plot("stale_actors", "cartpole-balance, 16 envs x 16 steps, 500 updates, actors K "
         "updates behind: median and range of 6 seeds",
         (Curve("no correction", _seeds("stale_actors/none", 6)),
          Curve("V-trace (ρ̄ = c̄ = 1)", _seeds("stale_actors/vtrace", 6)),
          Curve("PPO clip [0.8, 1.2]", _seeds("stale_actors/clip", 6))),
         (Panel("last_return", "training return (last 20 updates)", 475.0, x="lag"),
          Panel("eval_return", "deterministic policy's return", 475.0, x="lag"))),
    # benchmarks/sweep.py's CSVs: one row per (value, seed); a missed goal's capped column
    # holds the run's last evaluated env steps (a lower bound), so no seed drops out
    Plot("critic_scale", "cartpole-balance, A2C (lr 0.003, 32 envs x 8 steps): the "
         "critic's output scale; median and range of 6 seeds",
         (Curve("no PopArt, output x scale", _seeds("critic_scale/no_popart", 6)),
          Curve("PopArt (scale 1)", _seeds("critic_scale/popart", 6))),
         (Panel("final_return", "final eval return", 475.0, x="value_scale", log_x=True),
          Panel("goal_env_steps_capped", "env steps to return 475 (or budget)",
                x="value_scale", log_x=True))),
    Plot("lambda_sweep", "cartpole-balance, PPO (registered settings, 256 envs): GAE's "
         "λ; median and range of 3 seeds",
         (Curve("PPO", _seeds("lambda_sweep/lam", 3)),),
         (Panel("goal_env_steps_capped", "env steps to return 475 (or budget)",
                x="lam"),
          Panel("final_return", "final eval return", 475.0, x="lam"))),
)


def read_run(path: Path, stack: str | None = None) -> dict[str, np.ndarray]:
    """One CSV's columns as float arrays; a peers' stack as compare_ant's table reads it."""
    if stack is not None:
        rows = read_rows(path, stack)
        kept = [(w, s, return_at(rows, w)) for w, s, _, _ in rows]
        kept = [k for k in kept if k[2] is not None]
        return dict(zip(("wall_s", "env_steps", "return"), np.array(kept, float).T))
    with open(path) as f:
        rows = list(csv.DictReader(f))
    return {k: np.array([float(r[k]) if r[k].strip() else np.nan for r in rows])
            for k in rows[0]}


def series(plot: Plot, root: Path = ROOT) -> list[dict]:
    """The rows of PLOT's CSV: each curve's median and band in each panel."""
    out = []
    for curve in plot.curves:
        runs = [read_run(root / p, curve.stack) for p in curve.csvs]
        for panel in plot.panels:
            if curve.panels and panel.column not in curve.panels:
                continue
            y = curve.column or panel.column
            x, med, low, high = band([(r[panel.x], r[y]) for r in runs])
            out += [{"plot": plot.name, "curve": curve.label, "panel": panel.column,
                     "x_column": panel.x, "x": a, "median": b, "low": c, "high": d,
                     "runs": len(runs)} for a, b, c, d in zip(x, med, low, high)]
    return out


def draw(plot: Plot, rows: list[dict], png: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    n = len(plot.panels)
    fig, axes = plt.subplots(1, n, figsize=(max(4.2 * n, 6.0), 3.4), squeeze=False)
    for ax, panel in zip(axes[0], plot.panels):
        xlabel, scale = AXES[panel.x]
        for i, curve in enumerate(plot.curves):
            plot_band(ax, [r for r in rows if r["curve"] == curve.label
                           and r["panel"] == panel.column and r["x_column"] == panel.x],
                      scale, f"C{i}", curve.label)
        if panel.goal is not None:
            ax.axhline(panel.goal, color="gray", ls="--", lw=0.8, label="goal")
        ax.set_xlabel(xlabel)
        if panel.log_x:
            ax.set_xscale("log")
        ax.set_ylabel(panel.label)
        ax.grid(alpha=0.3)
    axes[0][0].legend(fontsize=7)
    fig.suptitle(plot.title, fontsize=10)
    fig.tight_layout()
    fig.savefig(png, dpi=100)
    plt.close(fig)


def write(plot: Plot, out_dir: Path, root: Path = ROOT) -> tuple[Path, Path]:
    """PLOT's PNG and the CSV of what it draws, in OUT_DIR."""
    out_dir.mkdir(parents=True, exist_ok=True)
    rows = series(plot, root)
    png, table = out_dir / f"{plot.name}.png", out_dir / f"{plot.name}.csv"
    with open(table, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=FIELDS)
        w.writeheader()
        w.writerows({**r, "x": f"{r['x']:.10g}",
                     **{k: f"{r[k]:.6g}" for k in ("median", "low", "high")}} for r in rows)
    draw(plot, rows, png)
    return png, table


@dataclass(frozen=True)
class Settings:
    out_dir: Path = ROOT / "docs" / "img"
    """where the PNGs and their CSVs go"""
    only: tuple[str, ...] = ()
    """draw these plots only (default: all)"""
    list: bool = False
    """print each plot and its CSVs"""


def run(s: Settings, cfg=None) -> None:
    """Draw (or list) the plots; cfg, the train arguments, is not used."""
    unknown = set(s.only) - {p.name for p in PLOTS}
    if unknown:
        raise SystemExit(f"--only: no plot {', '.join(sorted(unknown))}; the plots: "
                         f"{', '.join(p.name for p in PLOTS)}")
    for plot in PLOTS:
        if s.only and plot.name not in s.only:
            continue
        if s.list:
            print(plot.name + ": " + " ".join(p for c in plot.curves for p in c.csvs))
            continue
        png, _ = write(plot, Path(s.out_dir))
        print(f"{png}")


if __name__ == "__main__":
    main(Settings, run)
