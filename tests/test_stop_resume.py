"""Every mode stops cleanly and resumes through the one loop (agents/loop.py): a signal
during training (SIGTERM for the plain run, Ctrl-C's SIGINT to the whole process group for
the others, as a terminal sends it: torchrun's launcher and its ranks alike) writes a checkpoint, prints the resume command and
exits 0; `trot train --resume RUN` (or `trot distill --resume RUN`) then continues the run,
its logs without a repeated iteration. One new process per mode (torch's import, then a
few iterations): about 10-25 s each, which is why they are separate tests."""

from __future__ import annotations

import csv
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from trot.agents.runs import read_checkpoint
from trot.cli import main as cli_main

TASK = "cartpole-balance"
SMALL = ["--num-envs", "16", "--agent.rollout-steps", "8", "--agent.minibatches", "2",
         "--agent.actor-hidden", "16", "--agent.critic-hidden", "16", "--no-export",
         "--max-env-steps", str(10**9), "--checkpoint-every", "1000"]
# mode: (the command after `trot`, the metrics.csv that shows it trains, the signal)
MODES = {
    "plain": (["train", TASK], "metrics.csv", signal.SIGTERM),
    "nproc": (["train", TASK, "--nproc", "2"], "metrics.csv", signal.SIGINT),
    "seeds": (["train", TASK, "--seeds", "0", "1"], "seed_1/metrics.csv", signal.SIGINT),
    "tasks": (["train", TASK, "cartpole-swingup-x100"], "metrics.csv", signal.SIGINT),
    "a3c": (["train", TASK, "--algo", "a3c", "--workers", "2"], "metrics.csv",
            signal.SIGINT),
    "actors": (["train", TASK, "--actors", "1"], "metrics.csv", signal.SIGINT),
    "distill": (["distill", "{teacher}", TASK], "metrics.csv", signal.SIGINT),
}


@pytest.fixture(scope="module")
def teacher(tmp_path_factory) -> Path:
    """A cartpole run of one iteration: distillation's teacher (how well it acts does not
    matter here)."""
    run = tmp_path_factory.mktemp("teacher") / "run"
    assert cli_main(["train", TASK, *SMALL[:-4], "--max-env-steps", "128",
                     "--run-dir", str(run)]) == 0
    return run


def _iterations(path: Path) -> list[int]:
    with open(path, newline="") as f:
        return [int(float(r["iteration"])) for r in csv.DictReader(f)]


@pytest.mark.parametrize("mode", list(MODES))
def test_a_signal_checkpoints_and_the_run_resumes(tmp_path, mode, teacher):
    """The bugs: a mode whose loop has no handler (the signal kills it, the last
    iterations lost), a stop that skips the checkpoint or prints no way back, and a resume
    that restarts the counters or repeats logged iterations."""
    cmd, shows, sig = MODES[mode]
    run = tmp_path / "run"
    argv = [a.format(teacher=teacher) for a in cmd] + SMALL + ["--run-dir", str(run)]
    p = subprocess.Popen([sys.executable, "-m", "trot", *argv], cwd=tmp_path, text=True,
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         start_new_session=True)
    try:
        deadline = time.monotonic() + 180
        while not ((run / shows).is_file() and len(_iterations(run / shows)) >= 2):
            assert p.poll() is None, p.communicate()[0][-3000:]
            assert time.monotonic() < deadline, f"{mode}: no 2 iterations in 180 s"
            time.sleep(0.1)
        os.killpg(p.pid, sig)
        out, _ = p.communicate(timeout=120)
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
    assert p.returncode == 0, out[-3000:]
    assert "Traceback" not in out, out[-3000:]
    resume = f"trot {cmd[0]} --resume {run}"
    assert f"stopped by {sig.name}" in out and resume in out, out[-3000:]
    at = read_checkpoint(run).counters
    assert at.iteration >= 2 and at.env_steps > 0
    assert not [f for f in os.listdir(run) if f.endswith(".tmp")]  # atomic writes only
    if mode == "plain":  # every iteration counted once: 16 envs x 8 steps
        assert at.env_steps == at.iteration * 16 * 8 and str(run) in out
    if mode == "nproc":  # both ranks' envs and streams (torchrun's launcher ends quietly)
        assert len(read_checkpoint(run).state["ranks"]) == 2
    assert _iterations(run / shows) == list(range(1, at.iteration + 1))
    more = at.env_steps + (1 if mode == "a3c" else at.env_steps // at.iteration)
    assert cli_main([cmd[0], "--resume", str(run), "--max-env-steps", str(more)]) == 0
    again = read_checkpoint(run).counters
    assert again.iteration > at.iteration and again.env_steps >= more
    assert _iterations(run / shows) == list(range(1, again.iteration + 1))
