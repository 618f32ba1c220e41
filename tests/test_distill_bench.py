"""benchmarks/distill_rough.py end to end at toy sizes (a 3 x 7 map of 3 m tiles, 8 envs,
2-s episodes): the three runs, the wall-clock each row stands for, and a second call that
trains nothing more.

The bugs: the student's row without its teacher's minutes (the comparison the benchmark
exists for), the blind run given only the teacher's or the student's minutes, a finished
run started again (or refused) when the benchmark is called again.
"""

from __future__ import annotations

import csv
import subprocess
import sys
from pathlib import Path

import pytest

from trot.runs import read_checkpoint

ROOT = Path(__file__).resolve().parents[1]
SMALL = ("--num-envs 8 --env.tile-size 3 --env.terrain-rows 3 --env.terrain-cols 7 "
         "--env.terrain-border 1.5 --env.episode-seconds 2 --agent.rollout-steps 4 "
         "--agent.minibatches 2")


def test_three_runs_their_minutes_and_a_second_call_that_trains_nothing(tmp_path):
    cmd = [sys.executable, str(ROOT / "benchmarks" / "distill_rough.py"), "--teacher-min",
           "0.02", "--distill-min", "0.01", "--episodes", "1", f"--flags={SMALL}",
           "--run-root", str(tmp_path / "runs"), "--out", str(tmp_path / "out.csv")]
    first = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
    with open(tmp_path / "out.csv", newline="") as f:
        rows = {r["policy"]: {k: float(v or "nan") for k, v in r.items() if k != "policy"}
                for r in csv.DictReader(f)}
    assert list(rows) == ["teacher", "student", "blind"]
    own = {name: read_checkpoint(tmp_path / "runs" / name)["wall_s"] / 60 for name in rows}
    assert rows["student"]["minutes"] == pytest.approx(rows["teacher"]["minutes"]
                                                       + own["student"], rel=1e-12)
    assert own["teacher"] >= 0.02 and own["student"] >= 0.01 and own["blind"] >= 0.03
    for name, row in rows.items():
        assert row["own_minutes"] == own[name] and 0.0 <= row["terrain_level"] <= 2.0
        assert 0.0 <= row["fall_rate"] <= 1.0 and any(k.startswith("crossed_") for k in row)
    steps = {n: read_checkpoint(tmp_path / "runs" / n)["env_steps"] for n in rows}
    again = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    assert "trot train" not in again.stdout and "trot distill" not in again.stdout
    assert steps == {n: read_checkpoint(tmp_path / "runs" / n)["env_steps"] for n in rows}
