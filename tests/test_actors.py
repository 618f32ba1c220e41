"""Decoupled actors (`trot train TASK --actors K`, agents/actors.py) on the CPU: one actor
that waits for each update is the synchronous run bit for bit; a slow actor lags by 3 or
more updates, V-trace truncates its importance weights, and its death ends the job; an
asynchronous actor learns cartpole-balance into a run that trot eval loads.

The actor runs go through the CLI (torchrun: about 5 s of start-up each), so each test
makes as few of them as what it checks needs."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from trot.agents.actors import report, sums_width
from trot.agents.checkpoint import load_checkpoint
from trot.cli import main as cli_main
from trot.cli_train import parse_train
from trot.core.faults import CRASH_ENV, CRASH_EXIT, DELAY_ENV
from trot.tasks.registry import make_env

TASK = "cartpole-balance"
SMALL = [TASK, "--num-envs", "16", "--agent.rollout-steps", "8", "--agent.minibatches", "2",
         "--agent.epochs", "2", "--log-every", "1000", "--no-export", "--update-threads", "1"]


def _trot(args: list[str], cwd: Path, delay: str | None = None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != DELAY_ENV}
    if delay:
        env[DELAY_ENV] = delay
    p = subprocess.run([sys.executable, "-m", "trot", *args], cwd=cwd, env=env,
                       capture_output=True, text=True, timeout=600, check=False)
    assert p.returncode == 0, p.stderr[-3000:]
    return p


def _rows(run: Path) -> list[dict[str, str]]:
    with open(run / "metrics.csv", newline="") as f:
        return list(csv.DictReader(f))


BUDGET = ["--max-env-steps", str(16 * 8 * 6)]


@pytest.fixture(scope="module")
def single_run(tmp_path_factory) -> Path:
    """The synchronous single-process run both actor variants must reproduce."""
    d = tmp_path_factory.mktemp("single")
    assert cli_main(["train", *SMALL, *BUDGET, "--run-dir", str(d / "one")]) == 0
    return d / "one"


@pytest.mark.parametrize("central", [False, True])
def test_one_synced_actor_is_the_synchronous_run_bitwise(tmp_path, single_run, central):
    """The learner fed by one actor that waits for each update ends with the weights,
    normalizers, PopArt statistics and Adam state of the single-process run, bit for bit.
    Catches a rollout field packed in the wrong place, the actor acting with parameters one
    update old (or without the normalizer the learner just moved), and env or noise streams
    other than the single run's. With central inference the learner acts: catches a step's
    outcome written to the wrong step, or a memory not reset where an episode ended."""
    _trot(["train", *SMALL, *BUDGET, "--actors", "1", "--actor-sync", "--run-dir",
           str(tmp_path / "actor"), *(["--central-inference"] if central else [])], tmp_path)
    one, actor = (load_checkpoint(d / "checkpoint.pt") for d in (single_run, tmp_path / "actor"))
    assert one.counters.iteration == actor.counters.iteration == 6
    one, actor = one.state, actor.state
    for k, v in one["model"].items():
        assert torch.equal(v, actor["model"][k]), k
    for k, v in one["algo"]["optimizer"]["state"].items():
        for name, t in v.items():
            assert torch.equal(t, actor["algo"]["optimizer"]["state"][k][name]), (k, name)
    a, b = _rows(single_run), _rows(tmp_path / "actor")
    assert [r["loss/value"] for r in a] == [r["loss/value"] for r in b]
    assert {r["policy_lag"] for r in b} == {"0"}


def test_a_slow_actor_lags_vtrace_truncates_and_its_death_ends_the_job(tmp_path, capsys):
    """Two actors, the second sleeping 0.3 s per rollout and crashing at its 5th: the
    learner sees it 3 or more updates behind, V-trace's rho_bar cuts some of its importance
    weights, and then the job ends (the learner is not left waiting for rollouts that will
    never come), naming the rank and its exit code. Catches a lag that is not measured (or
    always 0), an off-policy correction that never acts, and a learner that hangs on a dead
    actor or trains on without it."""
    run = tmp_path / "run"
    env = {k: v for k, v in os.environ.items() if k not in (DELAY_ENV, CRASH_ENV)}
    env.update({DELAY_ENV: "rollout:0.3:2", CRASH_ENV: "rollout:5:2"})
    t0 = time.monotonic()
    p = subprocess.run([sys.executable, "-m", "trot", "train", *SMALL, "--actors", "2",
                        "--agent.off-policy", "vtrace", "--max-env-steps", str(10**9),
                        "--checkpoint-every", "5", "--run-dir", str(run)], cwd=tmp_path, env=env, capture_output=True,
                       text=True, timeout=600, check=False)
    assert p.returncode == 2, p.stderr[-3000:]
    assert f"rank 2 exited with code {CRASH_EXIT}" in p.stderr, p.stderr[-3000:]
    assert time.monotonic() - t0 < 120
    rows = _rows(run)
    assert max(float(r["policy_lag"]) for r in rows) >= 3
    assert max(float(r["rho_clipped"]) for r in rows) > 0
    capsys.readouterr()
    assert cli_main(["eval", str(run), "--episodes", "4", "--json"]) == 0  # the last
    assert json.loads(capsys.readouterr().out)["episodes"] == 4  # checkpoint loads


def test_an_actor_learns_cartpole_balance_through_a_resume(tmp_path, capsys):
    """`trot train cartpole-balance --actors 1 --no-export`, the command of the issue, at
    32 envs and 120k env steps (it reaches 500 by about 60k), in two halves: the learner
    resumes from its checkpoint (its log continues without a repeated iteration, the actor
    starts anew), the run learns, and trot eval loads it. Catches a resume that loses the
    learner's state or hangs the actors waiting for their first parameters.
    Slow (about 25 s): torchrun starts a learner and an actor process, twice (the resume), and
    the run must learn."""
    run = tmp_path / "run"
    _trot(["train", TASK, "--actors", "1", "--num-envs", "32", "--max-env-steps", "60000",
           "--no-export", "--run-dir", str(run)], tmp_path)
    first = len(_rows(run))
    p = _trot(["train", "--resume", str(run), "--max-env-steps", "120000"], tmp_path)
    assert f"resuming {run} at iteration {first}" in p.stdout
    rows = _rows(run)
    assert [int(r["iteration"]) for r in rows] == list(range(1, len(rows) + 1))
    assert len(rows) > first and int(rows[-1]["env_steps"]) >= 120_000
    capsys.readouterr()
    assert cli_main(["eval", str(run), "--episodes", "16", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    # untrained, 34; asynchronous runs are not reproducible, so: learning clear of that
    assert out["mean_return"] >= 80, out


def test_an_actors_report_has_the_learners_width_for_a_task_without_reward_terms():
    """A task may name no reward terms (Task.reward returns an empty dict): the actor's
    report is still [4 + M] (episodes, return, length, unstable, then M task metrics), the
    width the learner's Wire expects. Catches a report of zero sums there, which shifted
    every rollout field of the message by 4 values."""
    env = make_env(TASK, 4, "cpu", torch.device("cpu"), 0)
    total = env.task.reward
    env.task.reward = lambda sim, action: (total(sim, action)[0], {})  # no named terms
    env.capture(lambda fn: fn)
    env.reset()
    for _ in range(1000):  # pushed one way, the pole falls: episodes end
        env.step(torch.ones(4, env.action_dim))
        if env.stats.sums[0] > 0:
            break
    assert env.reward_terms == () and env.stats.sums[0] > 0
    before = env.stats.sums.clone()  # [3]: episodes, return, length
    rep = report(env, sums_width(env))
    assert rep.shape == (4 + len(env.task.iteration_metrics()),)
    assert torch.equal(rep[:3], before)


@pytest.mark.parametrize("flags, msg", [
    (["--actors", "2", "--nproc", "2"], r"--nproc is a setting of synchronous training "
                                        r"\(one process, or --nproc K\); this run is "
                                        r"decoupled actors"),
    (["--actors", "1", "--async-collect", "--actor-lag", "1"], "--actor-lag is a setting"),
    (["--actor-sync"], "--actor-sync is a setting of decoupled actors"),
    (["--central-inference"], "--central-inference is a setting of decoupled actors"),
    (["--actors", "1", "--sim", "mjx"], "does not take sim 'mjx'"),
])
def test_actor_settings_are_checked(flags, msg):
    """A flag the actors' mode does not take, or one of its own without it, is named."""
    with pytest.raises(ValueError, match=msg):
        parse_train(["cartpole-balance", *flags]).validate()
