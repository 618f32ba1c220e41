"""A run killed at chosen points (trot/core/faults.py: deterministic, unlike random kills) and
resumed: metrics.csv and TensorBoard continue from the checkpoint with no repeated or
out-of-order iteration, and the temporary files a crashed writer left are removed while a
live writer's are kept."""

from __future__ import annotations

import csv
import os
import subprocess
import sys
from pathlib import Path

import pytest

from trot.core.faults import CRASH_ENV, CRASH_EXIT

# 8 envs x 8 steps = 64 env steps an iteration, a checkpoint every 3 iterations
TRAIN = ["cartpole-balance", "--num-envs", "8", "--agent.rollout-steps", "8",
         "--agent.minibatches", "2", "--agent.epochs", "1", "--checkpoint-every", "3",
         "--log-every", "100", "--no-export", "--max-env-steps", str(64 * 10)]


def _trot(args: list[str], cwd: Path, crash: str | None = None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != CRASH_ENV}
    if crash:
        env[CRASH_ENV] = crash
    return subprocess.run([sys.executable, "-m", "trot", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=300, check=False)


def _iterations(run: Path) -> list[int]:
    with open(run / "metrics.csv", newline="") as f:
        return [int(float(r["iteration"])) for r in csv.DictReader(f)]


def _tb_steps(run: Path, tag: str) -> list[int]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(run / "tb"))
    acc.Reload()
    return [e.step for e in acc.Scalars(tag)]


@pytest.mark.parametrize("crash, logged_before_resume", [
    ("logged:5", 5),            # two rows past the checkpoint of iteration 3
    ("checkpoint-saved:1", 3),  # right after the rename: the log and checkpoint agree
    ("tmp-written-checkpoint.pt:2", 6),  # checkpoint 6 complete under its temp name
])
def test_crash_then_resume_continues_logs_without_repeats(tmp_path, crash,
                                                          logged_before_resume):
    run = tmp_path / "run"
    p = _trot(["train", *TRAIN, "--run-dir", str(run)], tmp_path, crash)
    assert p.returncode == CRASH_EXIT, p.stderr[-2000:]
    assert _iterations(run) == list(range(1, logged_before_resume + 1))
    temps = [q.name for q in run.iterdir() if ".tmp" in q.name]
    if crash.startswith("tmp-written-"):
        assert temps, "the crash point leaves the checkpoint's temporary file"
    # a concurrent writer's temporary file (this test process is alive) must survive
    live = run / f".policy.onnx.{os.getpid()}.abcd1234.tmp"
    live.write_bytes(b"being written")

    p = _trot(["train", "--resume", str(run)], tmp_path)
    assert p.returncode == 0, p.stderr[-2000:]
    assert _iterations(run) == list(range(1, 11))  # in order, none repeated, none lost
    assert live.exists()
    assert [q.name for q in run.iterdir() if ".tmp" in q.name] == [live.name]
    steps = _tb_steps(run, "steps_per_s")
    assert steps == [64 * i for i in range(1, 11)]  # TensorBoard purged the repeats too
