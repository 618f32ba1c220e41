"""benchmarks/locomotion_cpu.py end to end at toy sizes: seeds, their summary, resume.

The bugs: two seeds sharing a run directory (the second resuming the first), the first
time the thresholds held read from the wrong row, a resumed run repeating its rows, the
median taken over seeds that never met the thresholds as if they had, a --resume over
seeds that fails on the one that never began, --eval-env's overrides left out of the
evaluation, a resumed run rewriting its earlier rows in another form (ints read back as
floats).
"""

from __future__ import annotations

import csv
import importlib.util
import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "locomotion_cpu.py"
# what is checked here is the bookkeeping around training and evaluation, so: 2-s episodes
# (each evaluation plays one whole episode per env; 20 s registered: 1000 steps) and no
# export (seconds per seed)
BENCH = ["--episodes", "2", "--budget-min", "0.04", "--eval-every-min", "0.02"]
TRAIN = ["go1-flat", "--num-envs", "8", "--agent.rollout-steps", "4",
         "--agent.minibatches", "2", "--env.episode-seconds", "2", "--no-export"]


def _cmd(tmp_path: Path, extra: tuple[str, ...], run: str = "run", out: str = "curve.csv"
         ) -> list[str]:
    return [sys.executable, str(SCRIPT), *BENCH, "--out", str(tmp_path / out), *extra, "--",
            *TRAIN, "--run-dir", str(tmp_path / run)]


def _run(tmp_path: Path, *extra: str) -> str:
    done = subprocess.run(_cmd(tmp_path, extra), cwd=tmp_path, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done.stdout


def _rows(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def test_seeds_are_separate_runs_summarized_and_resumable(tmp_path):
    # thresholds no policy can miss: met at each seed's first evaluation
    out = _run(tmp_path, "--seeds", "0", "1", "--max-error", "100", "--max-falls", "1")
    # evaluations come every 0.02 min of training up to 0.04 min: 2 rows, or 1 where a
    # loaded machine's single iteration outlasts the budget (the loop is wall-clock)
    count = {}
    for k in (0, 1):
        cfg = json.loads((tmp_path / f"run_seed{k}" / "config.json").read_text())
        assert cfg["seed"] == k
        rows = _rows(tmp_path / f"curve_seed{k}.csv")
        count[k] = len(rows)
        assert 1 <= len(rows) <= 2
        first = f"{float(rows[0]['env_steps']) / 1e6:.1f} M env steps"
        assert f"{float(rows[0]['train_s']) / 60:.1f} min, {first}" in out
    assert "median (range) over 2 seeds" in out and "not reached" not in out

    # a budget already spent: resume trains nothing more and repeats no row
    again = _run(tmp_path, "--seeds", "0", "1", "--resume", "--max-error", "-1")
    for k in (0, 1):
        assert len(_rows(tmp_path / f"curve_seed{k}.csv")) == count[k]
    assert "not reached by 2 of 2 seeds" in again  # -1 m/s: never met

    # a seed the split run never began starts under --resume; the others only re-report
    _run(tmp_path, "--seeds", "0", "2", "--resume", "--max-error", "100", "--max-falls", "1")
    assert json.loads((tmp_path / "run_seed2" / "config.json").read_text())["seed"] == 2
    assert 1 <= len(_rows(tmp_path / "curve_seed2.csv")) <= 2
    assert len(_rows(tmp_path / "curve_seed0.csv")) == count[0]

    # --eval-only: one more evaluation row printed, nothing written
    before = (tmp_path / "curve_seed1.csv").read_text()
    lines = _run(tmp_path, "--seeds", "1", "--eval-only").splitlines()
    header = next(i for i, x in enumerate(lines) if x.split()[:1] == ["train_s"])
    assert float(lines[header + 1].split()[1]) == float(_rows(tmp_path / "curve_seed1.csv")
                                                        [-1]["env_steps"])
    assert (tmp_path / "curve_seed1.csv").read_text() == before

    # --eval-env: the evaluation runs under its overrides (0.5-s episodes, where the run's
    # own rows, 2-s episodes from a standing start, last longer); a field the task lacks
    # is named before anything trains
    assert all(float(r["episode_s"]) > 0.5 for r in _rows(tmp_path / "curve_seed1.csv"))
    lines = _run(tmp_path, "--seeds", "1", "--eval-only", "--eval-env",
                 "episode_seconds=0.5").splitlines()
    header = next(i for i, x in enumerate(lines) if x.split()[:1] == ["train_s"])
    assert float(lines[header + 1].split()[6]) <= 0.5
    for stacked in ((), ("--seeds", "0", "1", "--stacked")):  # checked before either kind
        bad = subprocess.run(_cmd(tmp_path, ("--eval-env", "push_every=3", *stacked),
                                  "fresh", "fresh.csv"), cwd=tmp_path, capture_output=True,
                             text=True, timeout=600)
        assert bad.returncode != 0 and "--eval-env" in bad.stderr
        assert "push_every" in bad.stderr
        assert not list(tmp_path.glob("fresh*"))  # no run directory, no CSV


def test_stacked_seeds_are_one_run_evaluated_per_seed_and_resumable(tmp_path):
    """--stacked: the seeds in one process (one run directory with seed_K inside), every
    seed evaluated into its own CSV, the time until every seed walked printed, and a
    --resume over a spent budget that repeats no row. Catches the evaluations of one seed
    written for another, or rows repeated on resume.
    Slow (about 35 s): five runs of the script, each a new process that imports torch and trains
    go1-flat briefly."""
    out = _run(tmp_path, "--seeds", "0", "1", "--stacked", "--max-error", "100",
               "--max-falls", "1")
    assert json.loads((tmp_path / "run" / "config.json").read_text())["mode"]["seeds"] == [0, 1]
    rows = [_rows(tmp_path / f"curve_seed{k}.csv") for k in (0, 1)]
    assert 1 <= len(rows[0]) == len(rows[1]) <= 2
    assert [r["env_steps"] for r in rows[0]] == [r["env_steps"] for r in rows[1]]
    assert rows[0][0]["lin_vel_error"] != rows[1][0]["lin_vel_error"]  # two policies
    hit = max(float(r[0]["train_s"]) for r in rows) / 60
    assert f"2 walking seeds after {hit:.1f} min of training (together)" in out
    _run(tmp_path, "--seeds", "0", "1", "--stacked", "--resume")
    assert [len(_rows(tmp_path / f"curve_seed{k}.csv")) for k in (0, 1)] == [len(r) for r in rows]


@pytest.fixture
def bench(monkeypatch):
    """benchmarks/locomotion_cpu.py as a module, loaded from its file (no sys.path edit;
    in sys.modules while it loads, where its dataclasses look themselves up)."""
    spec = importlib.util.spec_from_file_location("locomotion_cpu", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, module)
    spec.loader.exec_module(module)
    return module


def test_goals_hold_on_every_matching_column_and_name_what_missed(bench):
    """--goals: a goal on gait_duty_* holds only when every foot's duty factor is in range,
    a NaN or missing column is a miss (a metric that never fired is not a goal met), the
    terrain share and every course tile count for rough, and walk follows --max-error and
    --max-falls. The bugs: only the first foot or tile checked, NaN comparisons read as
    held, the walk thresholds fixed at their defaults."""
    from trot.benchmark import missed

    s = bench.Settings(goals=("walk", "gait"), max_error=0.25, max_falls=0.05)
    good = {"lin_vel_error": 0.2, "fall_rate": 0.04, "gait_duty_left_foot": 0.6,
            "gait_duty_right_foot": 0.6, "gait_flight": 0.01, "gait_swing_height": 0.06,
            "gait_phase_offset": 0.52, "gait_stance_slip": 0.02}
    assert missed(bench.goals(s), good) == []
    limp = good | {"gait_duty_right_foot": 0.75, "gait_swing_height": math.nan}
    assert [m.split()[0] for m in missed(bench.goals(s), limp)] == [
        "gait_duty_right_foot", "gait_swing_height"]
    assert "(0.3..0.7)" in missed(bench.goals(s), limp)[0]
    assert missed(bench.goals(s), {k: v for k, v in good.items() if k != "gait_flight"}) == [
        "gait_flight None (<= 0.05)"]
    assert missed(bench.goals(bench.Settings(max_error=0.1, max_falls=0.05)), good)
    rough = bench.goals(bench.Settings(goals=("rough",), max_error=0.0, max_falls=0.0))
    course = {"terrain_share": 0.52, "crossed_slope_up": 1.0, "crossed_stairs_up": 0.81}
    assert not missed(rough, course | {"lin_vel_error": 9.0})  # walk is not asked for
    assert missed(rough, course | {"crossed_stairs_up": 0.5}) == [
        "crossed_stairs_up 0.5 (>= 0.8)"]
    assert missed(rough, course | {"terrain_share": 0.49})


def test_timed_rows_resume_from_the_checkpoint_unchanged(tmp_path):
    """trot/benchmark.py's Timed, the evaluation every benchmark's run shares: rows past
    the checkpoint a resumed run starts from are dropped (a crash between a row and its
    checkpoint), the earlier ones kept byte for byte with ints still ints (env steps were
    once rewritten as 5652480.0), and the next evaluation falls due on the same clock."""
    from trot.agents.checkpoint import Counters
    from trot.benchmark import Timed

    path = tmp_path / "rows.csv"
    measured = iter([{"lin_vel_error": 0.2948646545410156}, {"lin_vel_error": 1e-5},
                     {"lin_vel_error": 0.5}])
    timed = Timed(path, Counters(), 1.0, lambda learner: next(measured), show=lambda r: None)
    for it, (steps, wall) in enumerate([(5652480, 60.5), (11354112, 121.0)], 1):
        at = Counters(it, steps, wall)
        assert timed.due(None, {"episode_return": -3.0}, at)
        timed(None, at)
    assert not timed.due(None, {}, Counters(3, 1, 130.0))
    before = path.read_bytes()
    again = Timed(path, Counters(2, 11354112, 121.0), 1.0, lambda learner: next(measured))
    assert path.read_bytes() == before and again.rows[1]["env_steps"] == 11354112
    assert not again.due(None, {}, Counters(3, 1, 179.0)) and \
        again.due(None, {}, Counters(3, 1, 180.0))
    back = Timed(path, Counters(1, 5652480, 60.5), 1.0, lambda learner: {})
    assert [r["iteration"] for r in back.rows] == [1] and back.rows[0]["train_return"] == -3.0
    assert path.read_text().count("\n") == 2  # the header and the row it resumes from


def test_a_training_flag_before_the_separator_names_the_new_spelling(bench):
    """The form before the shared scaffolding (`--task T --agent FIELD=VALUE` among the
    benchmark's own flags) is refused with the one that works now, before anything runs;
    the benchmark's own --seeds is its own. The bug: tyro's bare 'unrecognized options'."""
    from trot.benchmark import main

    for old in (["--task", "go1-flat"], ["--agent", "symmetry=augment"], ["--num-envs", "8"]):
        with pytest.raises(SystemExit, match=f"{old[0]} is a setting of the run.*after `--`"):
            main(bench.Settings, lambda s, cfg: pytest.fail("it ran"), ("go1-flat",), old)
    got = main(bench.Settings, lambda s, cfg: (s.seeds, cfg.task, cfg.seed), ("go1-flat",),
               ["--seeds", "0", "1", "--", "go2-flat", "--seed", "3"])
    assert got == ((0, 1), "go2-flat", 3)
