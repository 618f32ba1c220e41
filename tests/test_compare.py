"""`trot train --eval-every` (eval.csv) and `trot compare` on tiny cartpole runs through the
CLI: what eval.csv holds, that its evaluations stay off the training clock, that a resumed
run continues it, and that the compare figure's CSV is the median and range of the runs."""

from __future__ import annotations

import csv
import dataclasses
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from trot.agents.evaluate import EVAL_SEED, run_episodes
from trot.agents.logger import _cell
from trot.cli import main
from trot.core.faults import DELAY_ENV
from trot.agents.runs import load_run
from trot.tasks.registry import make_env

# 8 envs x 8 steps = 64 env steps an iteration; 2 s episodes: an evaluation is 100 steps
TRAIN = ["train", "cartpole-balance", "--num-envs", "8", "--agent.rollout-steps", "8",
         "--agent.minibatches", "2", "--agent.epochs", "1", "--log-every", "100",
         "--no-export", "--eval-episodes", "4", "--env.episode-seconds", "2"]


@pytest.fixture(autouse=True)
def _isolate(tmp_path, monkeypatch):
    """The Trainer sets torch's thread count and seeds the global RNG; MuJoCo may write a
    log into the cwd: keep all three from leaking into other tests."""
    monkeypatch.chdir(tmp_path)
    threads, rng = torch.get_num_threads(), torch.get_rng_state()
    yield
    torch.set_num_threads(threads)
    torch.set_rng_state(rng)


def _train(run_dir: Path, iterations: int, *extra: str, steps: int = 64) -> None:
    assert main(TRAIN + ["--max-env-steps", str(steps * iterations), "--run-dir",
                         str(run_dir), *extra]) == 0


def _rows(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def _independent_eval(run_dir: Path, episodes: int = 4) -> dict:
    """The checkpoint's deterministic return as `trot eval` measures it: a fresh noise-free
    env of the run's task through runs.load_run, played by run_episodes."""
    run = load_run(run_dir, episodes, seed=EVAL_SEED)
    return run_episodes(run.env, run.ac.actor, episodes)


def test_eval_rows_match_metrics_and_an_independent_evaluation(tmp_path):
    """eval.csv's rows fall at the iterations asked for, with metrics.csv's env steps and
    training clock there, and the return of the policy saved at that iteration played on
    fresh envs with noise off. The bugs: evaluating in the training envs (their states,
    count and seeds), with the policy's sampling noise, rows at the wrong iteration, or a
    row's env_steps or wall_s taken from another iteration."""
    run = tmp_path / "run"
    _train(run, 4, "--eval-every", "2")
    evals, metrics = _rows(run / "eval.csv"), _rows(run / "metrics.csv")
    assert [r["iteration"] for r in evals] == ["2", "4"]
    by_iteration = {r["iteration"]: r for r in metrics}
    for r in evals:
        assert r["env_steps"] == by_iteration[r["iteration"]]["env_steps"]
        assert r["wall_s"] == by_iteration[r["iteration"]]["wall_s"]
    ref = _independent_eval(run)  # the final checkpoint is iteration 4's
    assert evals[-1]["mean_return"] == _cell(ref["mean_return"])
    assert evals[-1]["upright"] == _cell(ref["upright"])
    assert evals[-1]["terminated_rate"] == _cell(ref["terminated_rate"])


def test_locomotion_eval_has_noise_off_and_the_task_metrics(tmp_path):
    """go1-flat (2 s episodes): eval.csv carries the tracking error and the fall rate, equal
    to the checkpoint evaluated with observation noise off; with the noise on they differ,
    so the check would catch an evaluation that left the training noise on."""
    run = tmp_path / "go1"
    assert main(["train", "go1-flat", "--num-envs", "4", "--agent.rollout-steps", "4",
                 "--agent.minibatches", "1", "--agent.epochs", "1", "--no-export",
                 "--env.episode-seconds", "2", "--eval-every", "1", "--eval-episodes", "4",
                 "--max-env-steps", "16", "--run-dir", str(run)]) == 0
    row = _rows(run / "eval.csv")[-1]
    ref = _independent_eval(run)
    for k in ("mean_return", "lin_vel_error", "fall_rate"):
        assert row[k] == _cell(ref[k]), k
    loaded = load_run(run, 4, seed=EVAL_SEED)
    noisy = make_env("go1-flat", 4, seed=EVAL_SEED, config=dataclasses.replace(
        loaded.cfg.env, obs_noise=True))
    assert _cell(run_episodes(noisy, loaded.ac.actor, 4)["lin_vel_error"]) != \
        row["lin_vel_error"]


def test_training_clock_excludes_the_evaluations(tmp_path, monkeypatch):
    """Each evaluation made to last 2 s more (trot/core/faults.py's delay at "evaluated", inside
    the evaluation): two of them, and metrics.csv's wall_s and steps/s stay those of the
    training alone. The bug: the clock running through the evaluations, so wall-clock
    curves and the --minutes budget count evaluation time as training."""
    monkeypatch.setenv(DELAY_ENV, "evaluated:2")
    run = tmp_path / "run"
    t0 = time.monotonic()
    _train(run, 3, "--eval-every", "1")
    elapsed = time.monotonic() - t0
    metrics, evals = _rows(run / "metrics.csv"), _rows(run / "eval.csv")
    assert len(evals) == 3 and elapsed > 6
    assert float(metrics[-1]["wall_s"]) < 2, metrics[-1]["wall_s"]
    # the iteration after an evaluation: 64 env steps in its own time, not in 2 s more
    assert all(float(r["steps_per_s"]) > 64 / 2 for r in metrics[1:])


def test_resumed_run_continues_eval_csv_as_a_straight_run(tmp_path):
    """Two iterations, then --resume to four, against four straight: the same eval.csv rows
    (training clock aside) with none repeated, although the first part's file holds a row
    a crashed process wrote past its checkpoint. Iteration 2's row is the policy saved at
    iteration 2. The bugs: rows repeated or kept past the checkpoint on resume, or an
    evaluation that moves the training's random streams (the resumed run then differs)."""
    straight, split = tmp_path / "straight", tmp_path / "split"
    _train(straight, 4, "--eval-every", "1", "--checkpoint-every", "100")
    _train(split, 2, "--eval-every", "1", "--checkpoint-every", "100")
    assert _rows(split / "eval.csv")[-1]["mean_return"] == \
        _cell(_independent_eval(split)["mean_return"])
    with open(split / "eval.csv", "a") as f:  # a crashed process's row past the checkpoint
        f.write("3,192,9.9,1,0,1,1,1\n")
    assert main(["train", "--resume", str(split), "--max-env-steps", str(64 * 4)]) == 0

    def no_clock(rows):
        return [{k: v for k, v in r.items() if k != "wall_s"} for r in rows]

    a, b = _rows(straight / "eval.csv"), _rows(split / "eval.csv")
    assert [r["iteration"] for r in b] == ["1", "2", "3", "4"]
    assert no_clock(a) == no_clock(b)


def _band_on_union(runs: list[tuple[np.ndarray, np.ndarray]]):
    """The documented reading, written out: drop NaN, interpolate each run linearly at the
    union of the runs' x within the range all reached; median, min and max across runs."""
    runs = [(x[~np.isnan(y)], y[~np.isnan(y)]) for x, y in runs]
    runs = [(x, y) for x, y in runs if len(x)]  # a run with no value yet is left out
    lo, hi = max(x.min() for x, _ in runs), min(x.max() for x, _ in runs)
    grid = sorted({v for x, _ in runs for v in x if lo <= v <= hi})
    ys = np.array([[np.interp(g, x, y) for g in grid] for x, y in runs])
    return grid, np.median(ys, 0), ys.min(0), ys.max(0), len(runs)


def test_compare_draws_the_median_and_range_of_seed_runs(tmp_path):
    """Three seeds in seed_K/ folders make one curve; its CSV's median, low and high equal
    numpy's median, min and max over the runs' own metrics.csv and eval.csv (at env steps
    every run logged, the plain values; against wall-clock, the runs interpolated onto the
    union of their times, within the range all reached; none where those ranges do not
    overlap, as they may not for tiny runs on a loaded machine), and a --group of two runs is a
    second curve. The bugs: a band taken along x instead of across seeds, a panel reading
    another column or file, seeds drawn as separate curves."""
    cfg = tmp_path / "cfg"
    for k in range(3):
        _train(cfg / f"seed_{k}", 6, "--seed", str(k), "--eval-every", "2")
    png = tmp_path / "out" / "curves.png"
    pair = f"pair={cfg / 'seed_0'},{cfg / 'seed_1'}"
    assert main(["compare", str(cfg), "--group", pair, "--out", str(png)]) == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    rows = _rows(png.with_suffix(".csv"))
    assert {r["curve"] for r in rows} == {str(cfg), "pair"}
    for file, column in (("metrics.csv", "episode_return"), ("eval.csv", "mean_return")):
        tables = [_rows(cfg / f"seed_{k}" / file) for k in range(3)]
        for x_column in ("env_steps", "wall_s"):
            got = [r for r in rows if r["curve"] == str(cfg) and r["file"] == file
                   and r["column"] == column and r["x_column"] == x_column]
            runs = [(np.array([float(r[x_column]) for r in t]),
                     np.array([float(r[column]) if r[column] else np.nan for r in t]))
                    for t in tables]
            grid, med, low, high, n = _band_on_union(runs)
            # wall-clock ranges of tiny runs on a loaded machine may not overlap: no points
            assert n >= 2 and (len(grid) >= 1 or x_column == "wall_s")
            assert [float(r["x"]) for r in got] == pytest.approx(grid, rel=1e-9)
            for name, want in (("median", med), ("low", low), ("high", high)):
                assert [float(r[name]) for r in got] == pytest.approx(want, rel=1e-8)
            assert all(r["runs"] == str(n) for r in got)
        # where every seed logged the env step, no interpolation: numpy on the raw values
        common = set.intersection(*({r["env_steps"] for r in t if r[column]} for t in tables
                                    if any(r[column] for r in t)))
        for r in rows:
            if (r["curve"], r["file"], r["column"], r["x_column"]) == (
                    str(cfg), file, column, "env_steps") and r["x"] in common:
                vals = [float(next(u[column] for u in t if u["env_steps"] == r["x"]))
                        for t in tables if any(u[column] for u in t)]
                assert float(r["median"]) == pytest.approx(np.median(vals), rel=1e-9)
                assert (float(r["low"]), float(r["high"])) == pytest.approx(
                    (min(vals), max(vals)), rel=1e-9)


def test_compare_names_a_folder_that_is_not_a_run(tmp_path, capsys):
    """A folder without metrics.csv: an error naming it and what is expected, not a
    traceback or an empty figure."""
    (tmp_path / "empty").mkdir()
    assert main(["compare", str(tmp_path / "empty"), "--out", str(tmp_path / "c.png")]) == 2
    err = capsys.readouterr().err
    assert str(tmp_path / "empty") in err and "metrics.csv" in err and "seed_K" in err
    assert not (tmp_path / "c.png").exists()
