"""benchmarks/stale_actors.py, the stale-actor figure over several lags: its small run
writes one row per (learner, seed, lag), `--resume` runs only what is missing, and
benchmarks/plots.py draws the committed CSVs."""

from __future__ import annotations

import csv
from pathlib import Path

from scripts import script

from trot.benchmark import main

ROOT = Path(__file__).resolve().parents[1]


stale = script("stale_actors")
plots = script("plots")
COLUMNS = ["lag", "updates", "last_return", "eval_return", "train_reached", "eval_reached"]


def _rows(path: Path) -> list[dict[str, str]]:
    with open(path) as f:
        return list(csv.DictReader(f))


def test_small_run_writes_a_row_per_lag_and_resume_runs_only_the_missing(tmp_path, capsys):
    """2 updates, lags 0 and 2, then --resume with lag 3 added: each CSV holds lags 0, 2, 3
    once, each run trained its 2 updates, and the table counts them. The bugs: a resume
    that reruns (duplicate rows) or skips a lag, rows filed under the wrong learner or seed,
    a run that stops before its updates."""
    out = tmp_path / "out"
    small = ["--updates", "2", "--seeds", "1", "--learners", "none", "clip", "--out-dir",
             str(out)]
    train = ["--", "cartpole-balance", "--num-envs", "4", "--torch-threads", "1",
             "--agent.rollout-steps", "8", "--agent.desired-kl", "0"]
    main(stale.Settings, stale.run, argv=[*small, "--lags", "0", "2", *train])
    main(stale.Settings, stale.run, argv=[*small, "--lags", "0", "2", "3", "--resume", *train])
    printed = capsys.readouterr().out
    assert "2 runs of 2 updates" in printed  # the resume ran lag 3 of each learner only
    assert sorted(p.name for p in out.iterdir()) == ["clip_seed0.csv", "none_seed0.csv"]
    for name in ("clip_seed0.csv", "none_seed0.csv"):
        rows = _rows(out / name)
        assert list(rows[0]) == COLUMNS
        assert [int(r["lag"]) for r in rows] == [0, 2, 3]
        assert all(int(r["updates"]) == 2 for r in rows)
    table = stale.table(stale.results(out))
    assert table.count("0/1") == 12  # 2 learners x 3 lags x (train, eval): none learn yet


def test_plots_draw_the_committed_stale_actor_csvs():
    """The committed figure's series: every learner's curve covers the lags the CSVs hold
    and its median lies within its band. The bugs: a learner's CSVs missing from the plot,
    the lag column misread (an empty x axis), the band computed over the wrong seeds."""
    plot = next(p for p in plots.PLOTS if p.name == "stale_actors")
    rows = plots.series(plot)
    for curve in plot.curves:
        mine = [r for r in rows if r["curve"] == curve.label]
        lags = {int(r["lag"]) for c in curve.csvs for r in _rows(ROOT / c)}
        assert {int(r["x"]) for r in mine} == lags, curve.label
        assert all(r["low"] <= r["median"] <= r["high"] for r in mine)
