"""`trot train --wandb PROJECT` (agents/logger.py's WandbSink): the rows of metrics.csv and
eval.csv, the config and the curve go to one W&B run, which `trot train --resume` continues
without logging an iteration twice. A fake `wandb` module records the calls, so every value
is checked; the real one, offline, proves the integration end to end."""

from __future__ import annotations

import csv
import json
import math
import os
import subprocess
import sys
import types
from pathlib import Path

import pytest

from trot.agents.logger import WANDB_ID, WandbSink
from trot.cli import main as cli_main

TASK = "cartpole-balance"
BATCH = 16 * 8  # env steps an iteration: 16 envs x 8 steps
SMALL = ["--num-envs", "16", "--agent.rollout-steps", "8", "--agent.minibatches", "2",
         "--agent.actor-hidden", "16", "--agent.critic-hidden", "16", "--eval-every", "2",
         "--eval-episodes", "4", "--log-every", "100", "--no-export"]


class _Server:
    """What W&B keeps of each run id (the steps logged) and the calls made to it."""

    def __init__(self) -> None:
        self.calls: list[tuple] = []
        self.steps: dict[str, list[int]] = {}

    def module(self) -> types.ModuleType:
        wandb = types.ModuleType("wandb")
        wandb.init = self.init
        wandb.Image = lambda path: ("image", path)
        return wandb

    def init(self, **kw):
        self.calls.append(("init", kw))
        return _Run(self, kw["id"])


class _Run:
    def __init__(self, server: _Server, run_id: str):
        self.server, self.id = server, run_id
        done = server.steps.setdefault(run_id, [])
        self.step = done[-1] + 1 if done else 0  # as W&B resumes a run: its next step
        self.config = types.SimpleNamespace(update=self._config)

    def _config(self, d: dict, allow_val_change: bool = False) -> None:
        self.server.calls.append(("config", self.id, d))

    def log(self, d: dict, step: int | None = None) -> None:
        self.server.calls.append(("log", self.id, step, d))
        if not self.server.steps[self.id] or step > self.server.steps[self.id][-1]:
            self.server.steps[self.id].append(step)

    def finish(self) -> None:
        self.server.calls.append(("finish", self.id))


def _rows(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def _same_row(csv_row: dict[str, str], logged: dict, prefix: str = "") -> None:
    """A CSV row and the logged one: the same names (empty cells were not logged), the same
    values (the CSV keeps 6 digits)."""
    want = {prefix + k: float(v) for k, v in csv_row.items() if v != ""}
    assert set(logged) == set(want), (sorted(logged), sorted(want))
    for k, v in want.items():
        assert math.isclose(logged[k], v, rel_tol=1e-5, abs_tol=1e-9), (k, logged[k], v)


def test_wandb_gets_every_row_and_the_config_once_across_a_resume(tmp_path, monkeypatch):
    """The bugs: no --wandb, a resume that starts another W&B run (or logs the kept rows
    again), a row whose values differ from metrics.csv's or eval.csv's, a step that goes
    back."""
    server = _Server()
    monkeypatch.setitem(sys.modules, "wandb", server.module())
    run = tmp_path / "run"
    assert cli_main(["train", TASK, *SMALL, "--max-env-steps", str(3 * BATCH), "--wandb",
                     "trot-test", "--run-dir", str(run)]) == 0
    assert cli_main(["train", "--resume", str(run), "--max-env-steps", str(6 * BATCH)]) == 0

    run_id = (run / WANDB_ID).read_text().strip()
    inits = [c[1] for c in server.calls if c[0] == "init"]
    assert [(i["project"], i["id"]) for i in inits] == [("trot-test", run_id)] * 2
    assert all(i["resume"] in ("allow", "must") for i in inits)
    configs = [c[2] for c in server.calls if c[0] == "config"]
    assert [(c["task"], c["wandb"], c["max_env_steps"]) for c in configs] == [
        (TASK, "trot-test", 3 * BATCH), (TASK, "trot-test", 6 * BATCH)]
    assert [c[0] for c in server.calls].count("finish") == 2
    assert {c[1] for c in server.calls if c[0] != "init"} == {run_id}

    logs = [(step, d) for kind, _, step, d in (c for c in server.calls if c[0] == "log")]
    steps = [s for s, _ in logs]
    assert steps == sorted(steps)  # W&B's step never goes back
    metrics = [(s, d) for s, d in logs if "iteration" in d]
    evals = [(s, d) for s, d in logs if "eval/iteration" in d]
    curves = [d["curve"] for s, d in logs if "curve" in d]
    assert len(metrics) + len(evals) + len(curves) == len(logs)
    rows, eval_rows = _rows(run / "metrics.csv"), _rows(run / "eval.csv")
    assert [s for s, _ in metrics] == [int(r["iteration"]) for r in rows] == [1, 2, 3, 4, 5, 6]
    assert [s for s, _ in evals] == [int(r["iteration"]) for r in eval_rows] == [2, 4, 6]
    for row, (_, d) in zip(rows, metrics):
        _same_row(row, d)
    for row, (_, d) in zip(eval_rows, evals):
        _same_row(row, d, "eval/")
    # each process's last curve.png, once there is one (once an episode has ended)
    assert 1 <= len(curves) <= 2 and set(curves) == {("image", str(run / "curve.png"))}
    assert logs[-1] == (6, {"curve": curves[-1]})


def test_a_resumed_sink_skips_the_steps_wandb_already_has(tmp_path, monkeypatch):
    """A process that crashed after logging iterations past its checkpoint: the resumed
    run repeats them, and the W&B run keeps the ones it has (W&B refuses a step that goes
    back); the rest continue it."""
    server = _Server()
    monkeypatch.setitem(sys.modules, "wandb", server.module())
    first = WandbSink(tmp_path, "p", {})
    for i in (1, 2, 3, 4, 5):  # then a crash: the checkpoint was at 3
        first.log({"iteration": i, "x": float(i)})
    again = WandbSink(tmp_path, "p", {})
    for i in (4, 5, 6):
        again.log({"iteration": i, "x": 10.0 * i})
    again.close()
    run_id = (tmp_path / WANDB_ID).read_text().strip()
    assert [c[1]["id"] for c in server.calls if c[0] == "init"] == [run_id, run_id]
    assert [(c[2], c[3]["x"]) for c in server.calls if c[0] == "log"] == [
        (1, 1.0), (2, 2.0), (3, 3.0), (4, 4.0), (5, 5.0), (6, 60.0)]


# ---------------------------------------------------------------------- the real wandb
def _records(run_file: Path):
    """The records of an offline run's .wandb file: W&B's transaction log, in LevelDB's log
    format (32 KiB blocks of chunks, each with a 7-byte header: checksum, length, type),
    after a 7-byte file header. wandb reads it back only in its Go core."""
    data, block = run_file.read_bytes(), 32 * 1024
    assert data[:4] == b":W&B", data[:8]
    pos, record = 7, b""
    while pos + 7 <= len(data):
        if block - pos % block < 7:  # the block's tail is padding
            pos += block - pos % block
            continue
        length, kind = int.from_bytes(data[pos + 4:pos + 6], "little"), data[pos + 6]
        record += data[pos + 7:pos + 7 + length]
        pos += 7 + length
        if kind in (1, 4):  # a record whole, or its last chunk
            yield record
            record = b""


def _history(run_file: Path) -> tuple[list[dict], dict]:
    """The history rows and the config an offline run's .wandb file holds."""
    from wandb.proto import wandb_internal_pb2 as pb

    rows, config = [], {}
    for data in _records(run_file):
        rec = pb.Record()
        rec.ParseFromString(data)
        kind = rec.WhichOneof("record_type")
        if kind == "history":
            rows.append({i.key or "/".join(i.nested_key): json.loads(i.value_json)
                         for i in rec.history.item})
        elif kind == "config":
            config |= {i.key: json.loads(i.value_json) for i in rec.config.update}
    return rows, config


def test_an_offline_wandb_run_continues_across_a_resume(tmp_path):
    """WANDB_MODE=offline: both processes log to the one run id the run directory keeps,
    every metrics.csv and eval.csv row once, at its iteration."""
    pytest.importorskip("wandb", reason="needs the 'wandb' extra (wandb is missing): "
                                        "pip install -e \".[wandb]\"")
    run = tmp_path / "run"
    env = os.environ | {"WANDB_MODE": "offline", "WANDB_DIR": str(tmp_path),
                        "WANDB_CONFIG_DIR": str(tmp_path / "config"),
                        "WANDB_CACHE_DIR": str(tmp_path / "cache"),
                        "WANDB_DATA_DIR": str(tmp_path / "data"), "WANDB_SILENT": "true",
                        "WANDB_DISABLE_GIT": "true"}
    for argv in (["train", TASK, *SMALL, "--max-env-steps", str(3 * BATCH), "--wandb",
                  "trot-test", "--run-dir", str(run)],
                 ["train", "--resume", str(run), "--max-env-steps", str(6 * BATCH)]):
        p = subprocess.run([sys.executable, "-m", "trot", *argv], cwd=tmp_path, env=env,
                           capture_output=True, text=True, timeout=300, check=False)
        assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    run_id = (run / WANDB_ID).read_text().strip()
    files = sorted((tmp_path / "wandb").glob(f"offline-run-*-{run_id}/run-{run_id}.wandb"))
    assert len(files) == 2, sorted(p.name for p in (tmp_path / "wandb").iterdir())
    history, configs = zip(*(_history(f) for f in files))
    assert [(c["wandb"], c["max_env_steps"]) for c in configs] == [
        ("trot-test", 3 * BATCH), ("trot-test", 6 * BATCH)]
    rows = [r for h in history for r in h]
    assert [r["_step"] for r in rows] == [1, 2, 3, 4, 5, 6]  # each iteration once
    assert [r["iteration"] for r in rows] == [int(r["iteration"])
                                              for r in _rows(run / "metrics.csv")]
    assert [r["eval/iteration"] for r in rows if "eval/iteration" in r] == [
        int(r["iteration"]) for r in _rows(run / "eval.csv")] == [2, 4, 6]
    evals = iter(_rows(run / "eval.csv"))
    for row, logged in zip(_rows(run / "metrics.csv"), rows):
        _same_row(row, {k: v for k, v in logged.items() if k in row})
        if "eval/iteration" in logged:
            _same_row(next(evals), {k: v for k, v in logged.items() if k[:5] == "eval/"},
                      "eval/")
