"""benchmarks/distill_rough.py end to end at toy sizes (a 3 x 7 map of 3 m tiles, 8 envs,
1-s episodes): the three runs, the wall-clock each row stands for, and a second call whose
training step trains nothing more.

The bugs: the student's row without its teacher's minutes (the comparison the benchmark
exists for), the blind run given only the teacher's or the student's minutes, a finished
run started again (or refused) when the benchmark is called again.
"""

from __future__ import annotations

import csv
import importlib.util
import json
import sys
from pathlib import Path

import pytest

from trot.agents.runs import read_checkpoint
from trot.benchmark import main
from trot.cli_train import parse_train

ROOT = Path(__file__).resolve().parents[1]
SMALL = ("--num-envs 8 --env.tile-size 3 --env.terrain-rows 3 --env.terrain-cols 7 "
         "--env.terrain-border 1.5 --env.episode-seconds 1 --agent.rollout-steps 4 "
         "--agent.minibatches 2")


def test_three_runs_their_minutes_and_a_second_call_that_trains_nothing(tmp_path, capsys,
                                                                       monkeypatch):
    monkeypatch.chdir(tmp_path)
    spec = importlib.util.spec_from_file_location("distill_rough",
                                                  ROOT / "benchmarks" / "distill_rough.py")
    bench = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, bench)  # its dataclass looks it up
    spec.loader.exec_module(bench)
    flags = ["--teacher-min", "0.01", "--distill-min", "0.005", "--episodes", "1", "--out",
             str(tmp_path / "out.csv")]
    train = ["go1-rough", *SMALL.split(), "--run-dir", str(tmp_path / "runs")]
    main(bench.Settings, bench.run, bench.TRAIN, argv=[*flags, "--", *train])
    assert "[blind] trot train" in capsys.readouterr().out
    with open(tmp_path / "out.csv", newline="") as f:
        rows = {r["policy"]: {k: float(v or "nan") for k, v in r.items() if k != "policy"}
                for r in csv.DictReader(f)}
    assert list(rows) == ["teacher", "student", "blind"]
    saved = {n: json.loads((tmp_path / "runs" / n / "config.json").read_text()) for n in rows}
    assert [saved[n]["env"]["scan_policy"] for n in rows] == [True, False, False]
    assert [saved[n]["mode"]["kind"] for n in rows] == ["sync", "distill", "sync"]
    assert all(saved[n]["num_envs"] == 8 for n in rows)  # the train args reach all three
    own = {name: read_checkpoint(tmp_path / "runs" / name).counters.wall_s / 60 for name in rows}
    assert rows["student"]["minutes"] == pytest.approx(rows["teacher"]["minutes"]
                                                       + own["student"], rel=1e-12)
    assert own["teacher"] >= 0.01 and own["student"] >= 0.005 and own["blind"] >= 0.015
    for name, row in rows.items():
        assert row["own_minutes"] == own[name] and 0.0 <= row["terrain_level"] <= 2.0
        assert 0.0 <= row["fall_rate"] <= 1.0 and any(k.startswith("crossed_") for k in row)
    steps = {n: read_checkpoint(tmp_path / "runs" / n).counters.env_steps for n in rows}
    bench.train_all(bench.Settings(teacher_min=0.01, distill_min=0.005),
                    parse_train(train))  # what a second call does before evaluating
    again = capsys.readouterr().out
    assert "trot train" not in again and "trot distill" not in again
    assert steps == {n: read_checkpoint(tmp_path / "runs" / n).counters.env_steps for n in rows}
