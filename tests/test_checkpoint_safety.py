"""A checkpoint from elsewhere cannot run code: every command that loads one refuses a
pickle that calls a function, and the payload never runs. Checkpoints trot writes hold
only tensors and plain containers, so they still load."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from trot.agents.checkpoint import (Checkpoint, CheckpointError, Counters, load_checkpoint,
                                   save_checkpoint)
from trot.agents.config import PPOConfig
from trot.agents.learners import start
from trot.agents.loop import save
from trot.agents.runs import CHECKPOINT
from trot.agents.train_config import TrainConfig


class _Payload:
    """Unpickling this calls os.system: what a crafted checkpoint.pt would do."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return os.system, (f"touch {self.marker}",)


@pytest.fixture(scope="module")
def crafted_run(tmp_path_factory) -> tuple[Path, Path]:
    base = tmp_path_factory.mktemp("crafted")
    threads = torch.get_num_threads()
    cfg = TrainConfig(task="cartpole-balance", num_envs=2, run_dir=str(base / "run"),
                      agent=dataclasses.replace(PPOConfig(), actor_hidden=(8,),
                                                critic_hidden=(8,)))
    trainer, run_dir = start(cfg)
    save(trainer, run_dir)  # a real checkpoint first: it loads
    torch.set_num_threads(threads)
    assert load_checkpoint(run_dir / CHECKPOINT).counters.iteration == 0
    marker = base / "payload-ran"
    payload = load_checkpoint(run_dir / CHECKPOINT).payload()
    payload["state"]["model"]["trap"] = _Payload(marker)  # otherwise a valid checkpoint
    torch.save(payload, run_dir / CHECKPOINT)
    return run_dir, marker


def test_load_refuses_and_the_payload_never_runs(crafted_run):
    run_dir, marker = crafted_run
    with pytest.raises(CheckpointError, match="refused to load"):
        load_checkpoint(run_dir / CHECKPOINT)
    assert not marker.exists()


@pytest.mark.parametrize("command", [
    ["eval", "{run}", "--episodes", "2"],
    ["export", "{run}"],
    ["play", "{run}", "--gif", "{run}/x.gif", "--seconds", "0.1"],
    ["train", "--resume", "{run}"],
])
def test_every_command_refuses_the_crafted_checkpoint(crafted_run, command, tmp_path):
    run_dir, marker = crafted_run
    argv = [a.format(run=run_dir) for a in command]
    p = subprocess.run([sys.executable, "-m", "trot", *argv], cwd=tmp_path, timeout=300,
                       capture_output=True, text=True, check=False)
    assert p.returncode == 2, (p.stdout[-1000:], p.stderr[-2000:])
    assert "refused to load" in p.stderr and "Traceback" not in p.stderr
    assert not marker.exists(), f"the payload ran under trot {command[0]}"


def test_saving_anything_but_tensors_and_plain_containers_is_refused(tmp_path):
    bad = Checkpoint("ppo", {}, Counters(), {"model": {}, "extra": [1, np.zeros(3)]})
    with pytest.raises(CheckpointError,
                       match=r"checkpoint\['state'\]\['extra'\]\[1\] is a numpy"):
        save_checkpoint(tmp_path / "c.pt", bad)
    assert not list(tmp_path.iterdir())  # nothing written, not even a temporary file


def test_a_checkpoint_of_another_format_is_refused_by_name(tmp_path):
    """trot 0.1's flat checkpoint (no format, the model beside the counters) and a format
    from a later trot are refused, named, with what this trot reads. Catches a loader that
    reads an old file's keys with defaults and quietly continues another run."""
    old = {"model": {}, "iteration": 3, "env_steps": 96, "wall_s": 1.0, "config": {}}
    torch.save(old, tmp_path / "old.pt")
    with pytest.raises(CheckpointError, match=r"format 1 \(trot 0\.1's.*reads format 2"):
        load_checkpoint(tmp_path / "old.pt")
    new = Checkpoint("ppo", {}, Counters(), {"model": {}}).payload() | {"format": 3}
    torch.save(new, tmp_path / "new.pt")
    with pytest.raises(CheckpointError, match=r"in checkpoint format 3; this trot reads"):
        load_checkpoint(tmp_path / "new.pt")
    save_checkpoint(tmp_path / "ok.pt", Checkpoint("ppo", {}, Counters(1, 2, 3.0), {}))
    ok = load_checkpoint(tmp_path / "ok.pt")
    assert ok.learner == "ppo" and ok.counters == Counters(1, 2, 3.0)
