"""benchmarks/stragglers.py (Exercise 19.5): a small run's files, the schemes' collection
times against hand-computed cases, the simulated lag against its closed form, and the
committed figure's series against the committed CSVs. A few seconds (one cartpole and one
go1 env stepped 40 times each)."""

import csv
import dataclasses
import json
import math
from pathlib import Path

import numpy as np
import pytest
from scripts import script

from trot.benchmark import main

ROOT = Path(__file__).resolve().parents[1]


st = script("stragglers")
plots = script("plots")

SMALL = ["--workers", "1", "4", "--rollout", "8", "--rollouts", "4", "--seeds", "0",
         "--steps", "40", "--warmup", "5", "--actors", "1", "4", "--batches", "1", "2",
         "--trajectories", "200"]


def _rows(path: Path) -> list[dict[str, str]]:
    with open(path) as f:
        return list(csv.DictReader(f))


def test_small_run_writes_every_csv_and_resumes_without_redoing(tmp_path, capsys):
    """The small run through `main`: each source's seed CSV has a row per worker count
    with the efficiency columns (1.0 at one worker) and its step-time columns, the measured
    steps and their load average are kept, and lag.csv has every (N, B). The bugs: a
    column renamed or dropped (the figure and docs read them), efficiencies above 1 (the
    ratio inverted), a --resume that remeasures or appends rows twice, or a rerun without
    --resume that silently overwrites committed results."""
    out = tmp_path / "out"
    main(st.Settings, st.run, argv=["--out-dir", str(out), *SMALL])
    for src in st.SOURCES:
        rows = _rows(out / f"{src}_seed0.csv")
        assert [int(r["workers"]) for r in rows] == [1, 4]
        assert {"workers", "lockstep", "per_rollout", "mean_ms", "p99_ms",
                "reset_frac"} <= set(rows[0])
        assert float(rows[0]["lockstep"]) == float(rows[0]["per_rollout"]) == 1.0
        lock, per = float(rows[1]["lockstep"]), float(rows[1]["per_rollout"])
        assert 0 < lock <= per <= 1.0  # waiting per step is never cheaper than per rollout
    for name in st.TASKS:
        steps = _rows(out / f"{name}_steps.csv")
        assert len(steps) == 40 and all(float(r["ms"]) > 0 for r in steps)
        meta = json.loads((out / f"{name}_steps.json").read_text())
        assert len(meta["loadavg_1_5_15"]) == 3 and meta["task"] == st.TASKS[name][0]
    lag = _rows(out / "lag.csv")
    assert {(int(r["actors"]), int(r["batch"])) for r in lag} == {(1, 1), (1, 2), (4, 1),
                                                                   (4, 2)}
    assert "lockstep" in capsys.readouterr().out

    before = {p.name: p.read_bytes() for p in out.iterdir()}
    main(st.Settings, st.run, argv=["--out-dir", str(out), *SMALL, "--resume"])
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    with pytest.raises(SystemExit, match="--resume"):
        main(st.Settings, st.run, argv=["--out-dir", str(out), *SMALL])


def test_schemes_against_hand_computed_times():
    """Two workers, two rollouts of three steps (ms). Rollout 1: worker 0 takes 1, 3, 0.5
    and worker 1 takes 2, 1, 1; rollout 2: 1, 1, 1 against 2, 2, 2. Asynchronous: the
    workers' totals 7.5 and 10 averaged, 8.75; lockstep: 2 + 3 + 1 + 2 + 2 + 2 = 12; per
    rollout: max(4.5, 4) + max(3, 6) = 10.5. The bugs:
    the max taken over steps instead of workers (lockstep 10), one sync for the whole run
    instead of per rollout (10), or the asynchronous time as the slowest worker's."""
    t = np.array([[[1, 2], [3, 1], [0.5, 1]],
                  [[1, 2], [1, 2], [1, 2]]], float)  # [R=2, T=3, N=2]
    assert st.collection_times(t) == (8.75, 12.0, 10.5)
    s = st.Settings(rollout=3, rollouts=2)
    lock, per = st.efficiencies(lambda shape: t[:shape[0]], 2, s)
    assert (lock, per) == pytest.approx((8.75 / 12, 8.75 / 10.5))


def test_equal_step_times_cost_nothing_and_chunks_add_up(monkeypatch):
    """Equal step times (the model without spread, or measured times all alike): every
    scheme is as fast as asynchronous, efficiency exactly 1. And drawn in several chunks
    (a tiny CHUNK), the efficiency is the one of the whole array at once. The bugs: a
    ratio averaged per chunk, a chunk's remainder dropped, or a resampling that invents
    times the measurement never had."""
    s = st.Settings(rollout=16, rollouts=10)
    same = st.bootstrap_draw(np.random.default_rng(0), np.full(50, 2.5))
    assert st.efficiencies(same, 8, s) == (1.0, 1.0)
    flat = dataclasses.replace(s, sigma=0.0, reset_ms=0.0)
    assert st.efficiencies(st.model_draw(np.random.default_rng(0), flat), 8, s) == (1.0, 1.0)

    t = np.random.default_rng(1).lognormal(0, 1, (10, 16, 8))  # [R, T, N]
    taken = []

    def in_order(shape):
        start = sum(x.shape[0] for x in taken)
        taken.append(t[start:start + shape[0]])
        return taken[-1]

    monkeypatch.setattr(st, "CHUNK", 3 * 16 * 8)  # chunks of 3, 3, 3 and 1 rollouts
    a, lock, per = st.collection_times(t)
    assert st.efficiencies(in_order, 8, s) == pytest.approx((a / lock, a / per))
    assert [x.shape[0] for x in taken] == [3, 3, 3, 1]


def test_model_is_the_exercises_distribution_and_reproduces_its_table():
    """The model's step times have mean 1 + 20/200 = 1.1 ms with 1 step in 200 resetting,
    and at N = 8 (T = 128) its efficiencies are the exercise's 0.29 and 0.81. The bugs: a
    lognormal parameterized by mu = 0 (mean e^0.5 = 1.65, and different tails), or the
    reset added to every step with probability 1/200 of the whole rollout."""
    s = st.Settings()
    t, reset = st.model_times(np.random.default_rng(0), s, (1 << 20,))
    assert t.mean() == pytest.approx(1.1, abs=0.01)
    assert reset.mean() == pytest.approx(1 / 200, abs=3e-4)
    small = dataclasses.replace(s, rollouts=60)
    lock, per = st.efficiencies(st.model_draw(np.random.default_rng(0), s), 8, small)
    assert lock == pytest.approx(st.CLAIM[8][0], abs=0.02)
    assert per == pytest.approx(st.CLAIM[8][1], abs=0.02)


@pytest.mark.parametrize("n,b", [(1, 1), (8, 1), (8, 4), (6, 4), (3, 8), (64, 16)])
def test_simulated_lag_is_the_closed_form(n, b):
    """With equal trajectory durations the lags repeat every lcm(N, B) trajectories, so
    the mean over a whole number of periods is exactly (N - 1) / B, with B not dividing N
    too (6, 4) and B above N (3, 8); with B = 1 every lag is N - 1 (A3C: each other actor
    updated once meanwhile). The bugs: the actor fetching before the update its own
    trajectory completed (mean N / B), the lag read at arrival instead of at the update
    that uses the trajectory, or the warm-up's short lags left in."""
    period = math.lcm(n, b)
    lags = st.simulate_lag(n, b, 12 * period, np.random.default_rng(0))
    assert lags.mean() == pytest.approx(st.closed_form_lag(n, b), abs=1e-12)
    assert lags.max() - lags.min() <= 1  # equal durations: the lag is N/B give or take one
    if b == 1:
        assert (lags == n - 1).all()


def test_lag_with_unequal_durations_keeps_its_mean():
    """Lognormal durations (sigma 1) spread the lag out but keep its mean near (N - 1) / B:
    N / B updates happen during a mean trajectory. The bug: durations not of mean 1 (the
    lag would scale with the mean), or actors not independent (all on one clock)."""
    lags = st.simulate_lag(16, 2, 40000, np.random.default_rng(0), sigma=1.0)
    assert lags.mean() == pytest.approx(st.closed_form_lag(16, 2), rel=0.05)
    assert lags.max() - lags.min() > 10


def test_committed_figure_draws_the_committed_csvs():
    """plots.series of the "stragglers" plot: every curve in both panels, at the workers
    of the committed CSVs, each median the median over the seed CSVs, and the committed
    docs/img/stragglers.csv is what series gives now. The bugs: a curve reading the wrong
    column or seeds, or a figure left stale after the data changed."""
    plot = next(p for p in plots.PLOTS if p.name == "stragglers")
    rows = plots.series(plot)
    data = ROOT / "docs" / "data" / "stragglers"
    for src, curve in zip(st.SOURCES, plot.curves[1:]):
        seeds = [_rows(data / f"{src}_seed{k}.csv") for k in range(3)]
        for panel in ("lockstep", "per_rollout"):
            mine = [r for r in rows if r["curve"] == curve.label and r["panel"] == panel]
            assert [r["x"] for r in mine] == [1, 2, 4, 8, 16, 64, 256, 512]
            want = np.median([[float(r[panel]) for r in s] for s in seeds], axis=0)
            np.testing.assert_allclose([r["median"] for r in mine], want)
    claim = [r for r in rows if r["curve"] == plot.curves[0].label and r["panel"] == "lockstep"]
    assert [(r["x"], r["median"]) for r in claim] == [(n, c[0]) for n, c in st.CLAIM.items()]
    committed = _rows(ROOT / "docs" / "img" / "stragglers.csv")
    assert len(committed) == len(rows)
    np.testing.assert_allclose([float(r["median"]) for r in committed],
                               [r["median"] for r in rows], rtol=1e-5)
