"""One policy for several tasks (`trot train TASK_A TASK_B`, agents/multitask.py)."""

from __future__ import annotations

import csv
import dataclasses
import json

import numpy as np
import pytest
import torch

from test_trainer import _isolate  # noqa: F401  (autouse: cwd, threads, RNG restored)
from trot.agents.config import PPOConfig
from trot.agents.multitask import task_view
from trot.agents.normalization import PopArt
from trot.agents.learners import build
from trot.cli import main as cli_main
from trot.agents.modes import Sync, Tasks
from trot.agents.train_config import TrainConfig
from trot.agents.runs import read_checkpoint
from trot.tasks.registry import make_task_envs

TASKS = ("cartpole-balance", "cartpole-swingup-x100")
SYNC = dataclasses.asdict(Sync())  # a task's own run: one learner in one process
AGENT = dataclasses.replace(PPOConfig(), actor_hidden=(32, 32), critic_hidden=(32,),
                            rollout_steps=16, update_dtype="float32")


def _trainer(agent: PPOConfig = AGENT, popart_tasks: str = "per-task", n: int = 48):
    return build(TrainConfig(task=TASKS[0], mode=Tasks(TASKS[1:]), num_envs=n, export=False,
                             agent=dataclasses.replace(agent, popart_tasks=popart_tasks)))


@pytest.mark.parametrize("agent", [AGENT, dataclasses.replace(AGENT, rnn="gru", rnn_hidden=16),
                                   dataclasses.replace(AGENT, share_torso=True,
                                                       critic_hidden=(32, 32))],
                         ids=["mlp", "gru", "shared-torso"])
def test_a_task_view_is_the_multitask_network_with_its_task_fixed(agent):
    """Each task's one-task network (what its directory, export and sim2sim load) acts and
    values that task's own observations as the multi-task network does them with the
    task's one-hot appended. Catches the one-hot folded into the wrong columns or layer
    (a recurrent actor's input weights, a shared torso), the normalizer's statistics cut
    at the wrong place, another task's value output or PopArt statistics kept."""
    tr = _trainer(agent)
    for _ in range(2):  # normalizers and PopArt statistics away from their start
        tr.iterate()
    env, ac = tr.env, tr.ac
    for k, sub in enumerate(env.envs):
        view = task_view(ac, k, sub.obs_dim, sub.critic_obs_dim, sub.action_dim, agent)
        rows = env.rows[k]
        obs, critic = env.obs.policy[rows], env.obs.critic[rows]  # [n, P + T], [n, C + T]
        state = torch.randn(obs.shape[0], ac.actor.state_size)
        with torch.no_grad():
            want, want_state = ac.actor.step(obs, state)
            got, got_state = view.actor.step(obs[:, :sub.obs_dim], state)
            torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
            torch.testing.assert_close(got_state, want_state, rtol=1e-5, atol=1e-5)
            want_v = ac.critic.value(critic)
            got_v = view.critic.value(critic[:, :sub.critic_obs_dim])
            torch.testing.assert_close(got_v, want_v, rtol=1e-5, atol=1e-3)
        assert want_v.abs().mean() > 0.1  # values on the task's own scale, not zeros


@pytest.mark.parametrize("mode", ["per-task", "shared"])
def test_popart_moves_each_task_to_its_own_returns_and_keeps_the_values(mode):
    """Per task: output k's statistics are those of a one-output PopArt fed task k's
    returns alone; shared: every output's are those of one PopArt fed all returns. Either
    way each row's value in reward units is unchanged by the move, and the advantages
    reach the update divided by their own task's return scale. Catches the task masks
    swapped or read from the wrong columns, `popart_tasks` ignored, the head rescaled in
    rows of another task, a task's advantages scaled by another's statistics."""
    tr = _trainer(popart_tasks=mode)
    tr.iterate()
    algo, critic, env = tr.algo, tr.ac.critic, tr.env
    ro = tr.collect()
    adv, ret = algo.targets(ro)  # [T, N]
    refs = []
    for k, rows in enumerate(env.rows):
        ref = PopArt(torch.nn.Linear(1, 1).double(), critic.popart.beta)
        ref.load_state_dict({"mu": critic.popart.mu[k:k + 1].clone(),
                             "nu": critic.popart.nu[k:k + 1].clone(),
                             "count": critic.popart.count.clone()})
        ref.update(ret[:, rows] if mode == "per-task" else ret)
        refs.append(ref)
    before = critic.value(ro.critic_obs.flatten(0, 1))
    batch = algo.prepare(ro)  # moves PopArt
    after = critic.value(ro.critic_obs.flatten(0, 1))
    torch.testing.assert_close(after, before, rtol=1e-5, atol=1e-2)
    for k, rows in enumerate(env.rows):
        torch.testing.assert_close(critic.popart.mu[k:k + 1], refs[k].mu)
        torch.testing.assert_close(critic.popart.nu[k:k + 1], refs[k].nu)
        got = batch.advantages.view(ret.shape)[:, rows]
        torch.testing.assert_close(got, adv[:, rows] / critic.popart.std[k].float(),
                                   rtol=1e-4, atol=1e-5)
    scales = critic.popart.std  # shared: one scale for both tasks
    assert torch.equal(scales[0], scales[1]) == (mode == "shared")


def test_tasks_that_do_not_agree_are_refused_by_what_differs():
    """Catches a policy built over observations of different meaning (go2-flat's 45
    columns against cartpole's 6) instead of an error that names them; and the README's
    two robots (`trot train go1-flat go2-flat-clocked`) refused where they agree."""
    from trot.cli_train import parse_train

    both = make_task_envs(parse_train(["go1-flat", "go2-flat-clocked"]).tasks, 4)
    assert both.obs_dim == 188 + 2 and [e.num_envs for e in both.envs] == [2, 2]
    with pytest.raises(ValueError, match="action dimension differ"):
        make_task_envs([("cartpole-balance", None), ("go2-flat", None)], 4)
    with pytest.raises(ValueError, match="policy observation terms"):
        make_task_envs([("cartpole-balance", None), ("cartpole-balance-blind", None)], 4)


def test_the_split_gives_each_task_its_share_within_one_env():
    """Every task's env count is within one env of its exact quota num_envs * share /
    sum(shares), the counts add up to num_envs, a larger share never gets fewer envs, and
    every task gets one env even where its quota is below one. Catches truncated quotas
    whose remainder is lost or handed out twice, rounding that does not add up, and the
    envs left after raising a tiny task to one env counted with the wrong sign."""
    from trot.tasks.multi import split_envs

    rng = np.random.default_rng(0)
    for _ in range(300):
        t = int(rng.integers(2, 6))
        n, shares = int(rng.integers(20 * t, 5000)), rng.uniform(0.1, 2.0, t)
        sizes = np.array(split_envs(n, shares.tolist()))
        quota = n * shares / shares.sum()
        assert sizes.sum() == n and np.all(np.abs(sizes - quota) < 1), (n, shares, sizes)
        order = np.argsort(shares)
        assert np.all(np.diff(sizes[order]) >= 0)
    assert split_envs(7, [1, 1, 1]) == [3, 2, 2]  # equal shares: the first ones one more
    assert split_envs(3, [1000, 1, 1]) == [1, 1, 1] and split_envs(5, [1000, 1, 1]) == [3, 1, 1]
    with pytest.raises(ValueError, match="cannot give each of 3 tasks an env"):
        split_envs(2, [1, 1, 1])


def test_task_shares_from_the_cli_split_the_envs_and_survive_resume(tmp_path, capsys):
    """`--task-shares 3 1` gives the first task three quarters of the envs, in its env
    steps, its task directory and after `--resume` (read back from config.json); a share
    per task is required, and one task refuses shares. Catches shares dropped between the
    CLI and the envs, or lost on resume (the run would continue on an even split)."""
    run = tmp_path / "run"
    base = ["train", *TASKS, "--num-envs", "16", "--agent.rollout-steps", "16",
            "--no-export", "--run-dir", str(run)]
    assert cli_main(base + ["--task-shares", "3", "1", "--max-env-steps", str(16 * 16)]) == 0
    assert cli_main(["train", "--resume", str(run), "--max-env-steps", str(2 * 16 * 16)]) == 0
    assert json.loads((run / "config.json").read_text())["mode"]["task_shares"] == [3.0, 1.0]
    assert read_checkpoint(run).counters.env_steps == 2 * 16 * 16
    for task, envs in zip(TASKS, (12, 4)):
        assert read_checkpoint(run / f"task_{task}").counters.env_steps == 2 * 16 * envs
    capsys.readouterr()
    other = ["--run-dir", str(tmp_path / "other")]
    assert cli_main(base + ["--task-shares", "1"] + other) == 2
    assert "task_shares needs one positive share per task (2:" in capsys.readouterr().err
    assert cli_main(["train", TASKS[0], "--task-shares", "1"] + other) == 2
    assert "--task-shares is a setting of several tasks" in capsys.readouterr().err


def test_several_tasks_from_the_cli_resume_and_each_task_loads_as_a_run(tmp_path, capsys):
    """`trot train A B` split and resumed equals the straight run bit for bit (both tasks'
    env states and the shared learner), every task's episodes are logged under its name,
    and each task's directory is a run that eval and sim2sim load; export and sim2sim of
    the top directory act on each task; play of the top directory and a task's resume are
    refused with the way out."""
    base = ["train", *TASKS, "--num-envs", "32", "--agent.rollout-steps", "16",
            "--no-export", "--checkpoint-every", "2",
            "--env.cartpole-swingup-x100.episode-seconds", "0.5"]
    straight, split = tmp_path / "straight", tmp_path / "split"
    steps = lambda k: str(k * 32 * 16)  # noqa: E731
    assert cli_main(base + ["--max-env-steps", steps(6), "--run-dir", str(straight)]) == 0
    assert cli_main(base + ["--max-env-steps", steps(3), "--run-dir", str(split)]) == 0
    assert cli_main(["train", "--resume", str(split), "--max-env-steps", steps(6)]) == 0
    a, b = read_checkpoint(straight).model, read_checkpoint(split).model
    assert all(torch.equal(a[k], b[k]) for k in a)
    header = (split / "metrics.csv").read_text().splitlines()[0].split(",")
    assert {f"{t}/episode_return" for t in TASKS} <= set(header)
    png = tmp_path / "curves.png"  # trot compare: one panel per task, as logged
    assert cli_main(["compare", str(split), "--out", str(png)]) == 0
    drawn = list(csv.DictReader(png.with_suffix(".csv").open()))
    logged = list(csv.DictReader((split / "metrics.csv").open()))
    for t in TASKS:
        got = [(float(r["x"]), float(r["median"])) for r in drawn if r["x_column"] ==
               "env_steps" and r["column"] == f"{t}/episode_return"]
        want = [(float(r["env_steps"]), float(r[f"{t}/episode_return"])) for r in logged
                if r[f"{t}/episode_return"]]
        assert np.allclose(got, want, rtol=1e-9) and len(got) == len(want) >= 2
    swing = split / "task_cartpole-swingup-x100"
    cfg = json.loads((swing / "config.json").read_text())
    assert cfg["task"] == TASKS[1] and cfg["mode"] == {"kind": "sync", **SYNC} and cfg["env"][
        "episode_seconds"] == 0.5
    assert read_checkpoint(swing).counters.env_steps == 6 * 16 * 16  # its 16 envs' share
    capsys.readouterr()
    assert cli_main(["eval", str(swing), "--episodes", "4"]) == 0
    assert cli_main(["export", str(split)]) == 0  # one contract per task
    assert all((split / f"task_{t}" / "policy.onnx").is_file() for t in TASKS)
    assert cli_main(["sim2sim", str(swing), "--episodes", "4"]) == 0
    capsys.readouterr()  # the top directory: each task's, under its name
    assert cli_main(["sim2sim", str(split), "--episodes", "2", "--json"]) == 0
    both = json.loads(capsys.readouterr().out)
    assert sorted(both) == sorted(TASKS) and both[TASKS[1]]["episodes"] == 2
    assert cli_main(["play", str(split), "--gif", str(tmp_path / "x.gif")]) == 2
    assert "give one task's directory" in capsys.readouterr().err
    assert cli_main(["train", "--resume", str(swing)]) == 2
    assert f"trot train --resume {split}" in capsys.readouterr().err
    assert cli_main(base[:3] + ["--seeds", "0", "1"]) == 2
    assert "several tasks (trot train TASK_A TASK_B) and seeds trained together (--seeds) are different modes" in capsys.readouterr().err


def test_the_multitask_benchmark_writes_resumes_and_summarizes(tmp_path):
    """benchmarks/multitask_cartpole.py at toy sizes: a row per evaluation for each mode,
    a summary read from those rows, and a --resume that repeats no finished run. Catches
    the script drifting from the multi-task API, a summary not of its own rows, or a
    resumed benchmark that trains a finished run again."""
    import subprocess
    import sys
    from pathlib import Path

    script = Path(__file__).resolve().parents[1] / "benchmarks" / "multitask_cartpole.py"
    out = tmp_path / "mt.csv"
    cmd = [sys.executable, str(script), "--seeds", "0", "--eval-every", "1", "--out", str(out)]
    train = ["--", "cartpole-balance", "cartpole-swingup-x100", "--num-envs", "16",
             "--max-env-steps", str(2 * 16 * PPOConfig().rollout_steps), "--run-dir",
             str(tmp_path / "runs")]

    def run(*extra: str) -> str:
        done = subprocess.run(cmd + list(extra) + train, capture_output=True, text=True,
                              timeout=300)
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
        return done.stdout

    first = run()
    rows = list(csv.DictReader(open(out)))
    assert [(r["mode"], r["iteration"]) for r in rows] == [
        ("per-task", "1"), ("per-task", "2"), ("shared", "1"), ("shared", "2")]
    for mode in ("per-task", "shared"):
        last = [r for r in rows if r["mode"] == mode][-1]
        assert (f"{mode}: last evaluation over 1 seeds: balance return "
                f"{float(last['balance_return']):.1f}") in first
    again = run("--resume")
    assert list(csv.DictReader(open(out))) == rows and "seed 0 it" not in again


def test_the_two_robot_benchmark_evaluates_each_robot_and_resumes(tmp_path):
    """benchmarks/multitask_legged.py at toy sizes: each robot's row per evaluation with
    its own share of the env steps, and --resume continuing the run (rows kept, a later
    evaluation appended). Catches the script drifting from the multi-task API, a robot
    evaluated with the other's policy column (its share of env steps), or rows lost on
    resume."""
    import subprocess
    import sys
    from pathlib import Path

    script = Path(__file__).resolve().parents[1] / "benchmarks" / "multitask_legged.py"
    out = tmp_path / "go.csv"
    cmd = [sys.executable, str(script), "--episodes", "2", "--eval-episode-s", "0.5",
           "--eval-every-min", "0.001", "--out", str(out)]
    train = ["--", "go1-flat", "go2-flat-clocked", "--num-envs", "8", "--run-dir",
             str(tmp_path / "run")]

    def run(*extra: str) -> list[dict]:
        done = subprocess.run(cmd + list(extra) + train, capture_output=True, text=True,
                              timeout=300)
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
        return list(csv.DictReader(open(out)))

    rows = run("--budget-min", "0.001")
    assert [r["task"] for r in rows] == ["go1-flat", "go2-flat-clocked"]
    assert all(int(r["task_env_steps"]) * 2 == int(r["env_steps"]) > 0 for r in rows)
    budget = 2 * float(rows[0]["train_s"]) / 60  # at least one more iteration, however slow
    more = run("--budget-min", f"{budget:.4f}", "--resume")
    assert more[:2] == rows and len(more) >= 4
    assert int(more[-1]["env_steps"]) > int(rows[-1]["env_steps"])
