"""Data-parallel training (`trot.agents.distributed`) with two gloo processes on the CPU:
replicas stay bitwise identical, two ranks with N envs make the update one rank makes with
the same 2N envs, and a dead or hung rank ends the job with a clear error."""

from __future__ import annotations

import dataclasses
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import torch.multiprocessing as mp

from trot.agents.checkpoint import load_checkpoint
from trot.agents.config import PPOConfig
from trot.agents.distributed import Comm, init_from_env, pin_gpu, rank_seed, shutdown
from trot.agents.networks import ActorCritic
from trot.agents.ppo import PPO
from trot.agents.storage import Rollout
from trot.config import TrainConfig

TASK = "cartpole-balance"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _join(rank: int, world: int, port: int) -> Comm:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank),
                      WORLD_SIZE=str(world), LOCAL_RANK=str(rank),
                      LOCAL_WORLD_SIZE=str(world))
    comm, device = init_from_env("cpu", 60.0)
    assert device == "cpu" and comm.rank == rank and comm.world_size == world
    return comm


def _spawn(fn, *args) -> None:
    mp.spawn(fn, args=(_free_port(), *args), nprocs=2, join=True)


# ---------------------------------------------------------------------- pure helpers
def test_one_process_comm_is_the_identity():
    c = Comm()
    x = torch.randn(50, 3, dtype=torch.float64)
    mean, var, n = c.moments(x)
    assert torch.allclose(mean, x.mean(0)) and torch.allclose(var, x.var(0, unbiased=False))
    assert float(n) == 50
    assert c.mean(x) is x and c.any(False, x.device) is False and c.is_main


def test_rank_seeds_differ_and_rank0_keeps_the_run_seed():
    seeds = [rank_seed(7, r) for r in range(8)]
    assert seeds[0] == 7 and len(set(seeds)) == 8


def test_each_rank_pins_its_own_gpu():
    assert pin_gpu(1, "4,5,6") == "5"
    with pytest.raises(ValueError, match="local rank 3 has no GPU"):
        pin_gpu(3, "0,1")


# ---------------------------------------------------------------------- two processes
def _state_vector(trainer) -> torch.Tensor:
    """Every parameter and buffer (normalizers, PopArt statistics) and the learning rate."""
    parts = [v.detach().double().flatten() for v in trainer.ac.state_dict().values()]
    return torch.cat(parts + [trainer.algo.lr.double().flatten()])


def _train_worker(rank: int, port: int, out: str, iters: int) -> None:
    from trot.agents.trainer import build

    comm = _join(rank, 2, port)
    agent = dataclasses.replace(PPOConfig(), actor_hidden=(32, 32), critic_hidden=(32, 32),
                                activation="relu", rollout_steps=16, epochs=2, minibatches=2)
    cfg = TrainConfig(task=TASK, num_envs=128, agent=agent, max_env_steps=10**8, nproc=2)
    trainer = build(cfg, comm)
    identical, returns = [], []
    for _ in range(iters):
        m = trainer.iterate()
        v = _state_vector(trainer)
        both = comm._gather(v)  # [2, K]
        identical.append(bool(torch.equal(both[0], both[1])))
        if "episode_return" in m:
            returns.append(m["episode_return"])
    if rank == 0:
        torch.save({"identical": identical, "returns": returns,
                    "env_steps": trainer.env_steps}, out)
    shutdown()


def test_two_ranks_stay_identical_and_learn(tmp_path):
    out = tmp_path / "result.pt"
    iters = 24
    _spawn(_train_worker, str(out), iters)
    r = torch.load(out)
    assert r["identical"] == [True] * iters  # after every update, bitwise
    assert r["env_steps"] == iters * 16 * 128 * 2  # counted over both ranks
    first, last = r["returns"][:3], r["returns"][-3:]
    assert sum(last) / 3 > 2.0 * sum(first) / 3, r["returns"]


def _rollout(t: int, n: int, obs: int, act: int, seed: int) -> Rollout:
    g = torch.Generator().manual_seed(seed)
    ro = Rollout.allocate(t, n, obs, obs, act, torch.device("cpu"))
    ro.obs.copy_(torch.randn(t, n, obs, generator=g) * 2 + 1)
    ro.critic_obs.copy_(ro.obs)
    ro.final_critic_obs.copy_(ro.obs + 0.1 * torch.randn(t, n, obs, generator=g))
    ro.actions.copy_(torch.randn(t, n, act, generator=g))
    ro.action_mean.copy_(ro.actions + 0.3 * torch.randn(t, n, act, generator=g))
    ro.log_probs.copy_(-torch.rand(t, n, generator=g) * 3)
    ro.rewards.copy_(torch.randn(t, n, generator=g) * 4 + 2)
    ro.terminated.copy_(torch.rand(t, n, generator=g) < 0.05)
    ro.truncated.copy_(torch.rand(t, n, generator=g) < 0.05)
    ro.values.copy_(torch.randn(t, n, generator=g))
    return ro


def _update(comm: Comm, ro: Rollout, obs: int, act: int) -> dict[str, torch.Tensor]:
    """One PPO iteration's learner side (GAE, PopArt, one full-batch step, normalizers)."""
    cfg = dataclasses.replace(PPOConfig(), actor_hidden=(16,), critic_hidden=(16,),
                              epochs=1, minibatches=1, advantage_norm="batch",
                              desired_kl=0.01)
    torch.manual_seed(3)
    ac = ActorCritic(obs, obs, act, cfg)
    algo = PPO(ac, cfg, torch.device("cpu"), comm)
    batch = algo.prepare(ro)
    algo.update(batch, torch.Generator().manual_seed(0))
    ac.update_normalizers(batch.obs, batch.critic_obs, comm)
    out = {f"grad/{k}": p.grad.clone() for k, p in ac.named_parameters()}
    out |= {f"state/{k}": v.clone() for k, v in ac.state_dict().items()}
    return out | {"lr": algo.lr.clone()}


def _equivalence_worker(rank: int, port: int, out: str) -> None:
    comm = _join(rank, 2, port)
    t, n, obs, act = 8, 24, 5, 2
    full = _rollout(t, 2 * n, obs, act, seed=11)  # the same data on both ranks
    mine = _rollout(t, n, obs, act, seed=0)
    for f in dataclasses.fields(Rollout):  # this rank's envs: columns [rank*N, (rank+1)*N)
        getattr(mine, f.name).copy_(getattr(full, f.name)[:, rank * n:(rank + 1) * n])
    two = _update(comm, mine, obs, act)
    if rank == 0:
        one = _update(Comm(), full, obs, act)  # one process holding all 2N envs
        torch.save({"one": one, "two": two}, out)
    shutdown()


def test_two_ranks_make_the_update_of_one_rank_with_all_envs(tmp_path):
    out = tmp_path / "eq.pt"
    _spawn(_equivalence_worker, str(out))
    r = torch.load(out)
    one, two = r["one"], r["two"]
    assert one.keys() == two.keys()
    for k in one:
        assert torch.allclose(two[k].double(), one[k].double(), rtol=1e-5, atol=1e-5), k
    # the check has teeth: the update did move things
    assert one["state/critic.popart.count"] == 1 and one["state/actor.normalizer.count"] == 384


# ---------------------------------------------------------------------- failures
def _launch(rank: int, port: int, run_dir: Path, timeout_s: int) -> subprocess.Popen:
    env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank),
               WORLD_SIZE="2", LOCAL_RANK=str(rank), LOCAL_WORLD_SIZE="2")
    cmd = [sys.executable, "-m", "trot", "train", TASK, "--num-envs", "64",
           "--max-env-steps", str(10**9), "--checkpoint-every", "1", "--run-dir",
           str(run_dir), "--dist-timeout", str(timeout_s), "--no-export",
           "--agent.actor-hidden", "16", "16", "--agent.critic-hidden", "16", "16"]
    return subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, cwd=run_dir.parent)


@pytest.mark.parametrize("fault", ["kill", "hang"])
def test_a_dead_or_hung_rank_ends_the_job_with_a_clear_error(tmp_path, fault):
    run_dir, timeout_s = tmp_path / "run", 10
    port = _free_port()
    procs = [_launch(r, port, run_dir, timeout_s) for r in range(2)]
    try:
        deadline = time.monotonic() + 120
        while not (run_dir / "checkpoint.pt").exists():
            assert time.monotonic() < deadline and procs[0].poll() is None, \
                procs[0].communicate()
            time.sleep(0.2)
        time.sleep(1.0)  # a few iterations more
        procs[1].send_signal(signal.SIGKILL if fault == "kill" else signal.SIGSTOP)
        t0 = time.monotonic()
        _, err = procs[0].communicate(timeout=timeout_s + 60)
        waited = time.monotonic() - t0
    finally:
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGKILL)
                p.wait()
    assert procs[0].returncode != 0
    assert "another rank has probably died or hangs" in err, err[-2000:]
    assert waited < timeout_s + 30
    state = load_checkpoint(run_dir / "checkpoint.pt")  # the last good one loads
    assert len(state["ranks"]) == 2 and state["iteration"] >= 1


# ---------------------------------------------------------------------- launch and resume
def _trot(*args: str, cwd: Path) -> str:
    p = subprocess.run([sys.executable, "-m", "trot", *args], capture_output=True, text=True,
                       check=False,
                       cwd=cwd, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    return p.stdout


def test_nproc_launches_torchrun_and_resume_restores_every_rank(tmp_path):
    common = ["--nproc", "2", "--num-envs", "32", "--no-export", "--agent.rollout-steps", "8",
              "--agent.actor-hidden", "16", "16", "--agent.critic-hidden", "16", "16"]
    full = 10 * 8 * 32 * 2  # 10 iterations over both ranks
    a, b = tmp_path / "straight", tmp_path / "resumed"
    out = _trot("train", TASK, *common, "--max-env-steps", str(full), "--run-dir", str(a),
                cwd=tmp_path)
    assert "(2 processes)" in out and out.strip().splitlines()[-1] == str(a)
    _trot("train", TASK, *common, "--max-env-steps", str(full // 2), "--run-dir", str(b),
          cwd=tmp_path)
    _trot("train", "--resume", str(b), "--max-env-steps", str(full), cwd=tmp_path)
    sa, sb = load_checkpoint(a / "checkpoint.pt"), load_checkpoint(b / "checkpoint.pt")
    assert sa["iteration"] == sb["iteration"] == 10 and len(sb["ranks"]) == 2
    for k, v in sa["model"].items():  # interrupted + resumed == straight, bitwise
        assert torch.equal(v, sb["model"][k]), k
    for ra, rb in zip(sa["ranks"], sb["ranks"]):  # every rank's envs were restored
        assert torch.equal(ra["env"]["obs"][0], rb["env"]["obs"][0])
    assert not torch.equal(sa["ranks"][0]["env"]["obs"][0], sa["ranks"][1]["env"]["obs"][0])
