"""benchmarks/sweep.py (one --agent.FIELD over values and seeds, env steps to a goal read
from each run's eval.csv), the critic's `value_scale` it was built to sweep (Lab 9's x10),
and the two plots drawn from its committed CSVs. About 30 s: the small sweep trains two
runs of 4 iterations in new processes."""

import csv
import math
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from scripts import script

from trot.agents.config import PPOConfig
from trot.agents.networks import ActorCritic, Critic
from trot.cli import main as cli_main

ROOT = Path(__file__).resolve().parents[1]


sweep = script("sweep")
plots = script("plots")


def _write_eval(path: Path, rows: list[tuple[int, float, float]]) -> Path:
    """An eval.csv as agents/periodic_eval.py writes it: (env_steps, wall_s, mean_return)."""
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["iteration", "env_steps", "wall_s", "mean_return", "std_return",
                    "mean_length", "terminated_rate"])
        w.writerows([5 * (i + 1), s, t, r, 1.0, r, 0.5] for i, (s, t, r) in enumerate(rows))
    return path


def test_the_goal_is_the_first_evaluation_at_or_above_it_not_the_best_or_the_last(tmp_path):
    """A run that reaches the goal exactly at its third evaluation, climbs higher, then
    falls back below it. The bugs: the first row above (not at) the goal taken, the best
    or the last row taken as the goal's, the final return read from the best row, or a
    dip after the goal counted as never reaching it."""
    path = _write_eval(tmp_path / "eval.csv", [(16384, 1.5, 40.0), (32768, 3.25, 300.0),
                                               (49152, 4.75, 475.0), (65536, 6.5, 500.0),
                                               (81920, 8.0, 210.5)])
    row = sweep.goal_row(path, 475.0)
    assert row == {"goal_env_steps": 49152, "goal_train_s": 4.75,
                   "goal_env_steps_capped": 49152, "final_return": 210.5,
                   "best_return": 500.0, "reached": 1, "env_steps": 81920, "train_s": 8.0}


def test_a_run_that_never_reaches_the_goal_is_blank_not_zero(tmp_path):
    """The bug: a missed goal written as 0 env steps (the fastest of all) or as the last
    row's; only the capped column carries the budget, for the plot."""
    path = _write_eval(tmp_path / "eval.csv", [(16384, 1.0, 100.0), (32768, 2.0, 474.9)])
    row = sweep.goal_row(path, 475.0)
    assert math.isnan(row["goal_env_steps"]) and math.isnan(row["goal_train_s"])
    assert row["reached"] == 0 and row["goal_env_steps_capped"] == 32768
    assert row["final_return"] == row["best_return"] == 474.9


def _sweep(monkeypatch, out: Path, *own: str) -> None:
    """sweep.py as its command line runs it: `main` parses both halves, and `run` reads the
    train args after `--` from sys.argv, as each new process is given them. One torch
    thread: on two busy cores a second one made each evaluation's small forwards 5 ms."""
    argv = ["--field", "lam", "--values", "0.9", "0.95", "--seeds", "3", "--goal", "1",
            "--eval-every", "2", "--max-env-steps", "4096", "--out-dir", str(out), *own,
            "--", "cartpole-balance", "--num-envs", "64", "--update-threads", "1"]
    monkeypatch.setattr(sys, "argv", ["sweep.py", *argv])
    sweep.main(sweep.Settings, sweep.run, sweep.TRAIN, argv=argv)


def test_a_small_sweep_writes_a_row_per_value_and_resume_skips_them(tmp_path, monkeypatch,
                                                                   capsys):
    """Two values of lam, one seed, 4 iterations of 64 envs x 16 steps, an evaluation every
    2 and a goal of 1 (every episode earns it): each row must hold its own value and the
    first evaluation's env steps, 2 x 1024. The bugs: the value written as text or dropped
    (a plot has no x), the seed's file misnamed (plots.py and --resume read
    {label}_seed{S}.csv), the budget ignored, a rerun repeating runs."""
    out = tmp_path / "sweep"
    _sweep(monkeypatch, out)
    with open(out / "lam_seed3.csv") as f:
        rows = list(csv.DictReader(f))
    assert list(rows[0]) == ["lam", "seed", "goal_env_steps", "goal_train_s",
                             "goal_env_steps_capped", "final_return", "best_return",
                             "reached", "env_steps", "train_s", "wall_s"]
    assert [r["lam"] for r in rows] == ["0.9", "0.95"]
    for r in rows:
        assert (r["seed"], r["goal_env_steps"], r["reached"]) == ("3", "2048", "1")
        assert r["env_steps"] == "4096" and float(r["final_return"]) >= 1.0
    with pytest.raises(SystemExit, match="--resume"):
        _sweep(monkeypatch, out)
    _sweep(monkeypatch, out, "--resume")  # nothing left to run: no new rows
    assert "0.95     1/1  0.00 (0.00..0.00)" in capsys.readouterr().out
    with open(out / "lam_seed3.csv") as f:
        assert len(list(csv.DictReader(f))) == 2


def test_the_sweep_refuses_a_value_trot_train_refuses_before_running_any(tmp_path):
    """value_scale 10 with PopArt on is refused at once, naming the clash, rather than
    after the values before it have trained (the bug: a sweep that fails an hour in)."""
    s = sweep.Settings(out_dir=str(tmp_path), field="value-scale", values=("1", "10"))
    with pytest.raises(SystemExit, match="value_scale 10.0 .*popart"):
        sweep.check(s, ["cartpole-balance"])
    sweep.check(s, ["cartpole-balance", "--agent.no-popart"])
    with pytest.raises(SystemExit, match="--seed"):
        sweep.check(s, ["cartpole-balance", "--agent.no-popart", "--seed", "2"])
    assert not any(tmp_path.iterdir())


def test_value_scale_multiplies_the_critics_output_exactly():
    """The same weights (and observation statistics) under value_scale 10 and 1: forward,
    value and the per-task outputs are exactly ten times. The bugs: the scale applied to
    the features or the targets instead of the output, a second scaling in value(), or the
    scale kept as a parameter that the optimizer then moves."""
    torch.manual_seed(0)
    one = PPOConfig(popart=False, critic_hidden=(16, 16))
    ten = PPOConfig(popart=False, critic_hidden=(16, 16), value_scale=10.0)
    c1, c10 = Critic(5, one), Critic(5, ten)
    c1.normalizer.merge(torch.tensor([1.0, 2.0, 0.0, -1.0, 0.5]), torch.full((5,), 4.0),
                        100.0)  # statistics away from (0, 1): the normalizer is copied too
    c10.load_state_dict(c1.state_dict())  # strict: the scale adds no state
    obs = torch.randn(64, 5)
    assert torch.equal(c10(obs), c1(obs) * 10.0)
    assert torch.equal(c10.value(obs), c1.value(obs) * 10.0)
    assert [n for n, _ in c10.named_parameters()] == [n for n, _ in c1.named_parameters()]
    ac = ActorCritic(5, 5, 1, ten)
    assert ac.critic.value_scale == 10.0 and isinstance(ac.critic.value_scale, float)


def test_value_scale_with_popart_is_refused_naming_both(tmp_path, capsys):
    """`trot train --agent.value-scale 10` with PopArt on (the default) exits before a run
    directory exists, its message naming the setting, the clash and what is accepted. The
    bug: both applied, PopArt's rescaling of the head then changing the values it is meant
    to preserve; or a non-positive scale accepted (a critic of the wrong sign)."""
    run = tmp_path / "run"
    rc = cli_main(["train", "cartpole-balance", "--agent.value-scale", "10", "--run-dir",
                   str(run), "--num-envs", "16", "--no-export"])
    err = capsys.readouterr().err
    assert rc != 0 and not run.exists()
    assert "value_scale 10.0" in err and "popart" in err and "--agent.no-popart" in err
    with pytest.raises(ValueError, match="value_scale must be a finite number > 0"):
        PPOConfig(popart=False, value_scale=0.0).validate(16)
    PPOConfig(popart=False, value_scale=10.0).validate(16)


@pytest.mark.parametrize("name", ["critic_scale", "lambda_sweep"])
def test_the_sweeps_plots_are_the_median_and_range_over_seeds_at_each_value(name):
    """Each curve of the committed plot, at each swept value, is the median, lowest and
    highest of its seeds' CSVs at that value, with every seed counted. The bugs: seeds
    zipped row by row when a seed's rows are in another order, a seed's value dropped, a
    panel reading another column."""
    plot = next(p for p in plots.PLOTS if p.name == name)
    rows = plots.series(plot)
    for curve in plot.curves:
        runs = [plots.read_run(ROOT / p) for p in curve.csvs]
        for panel in plot.panels:
            got = [r for r in rows if r["curve"] == curve.label and r["panel"] == panel.column]
            xs = sorted(set(np.concatenate([r[panel.x] for r in runs])))
            assert [r["x"] for r in got] == xs
            for r in got:
                ys = [run[panel.column][run[panel.x] == r["x"]][0] for run in runs]
                assert (r["median"], r["low"], r["high"], r["runs"]) == pytest.approx(
                    (np.median(ys), min(ys), max(ys), len(runs)))
