"""Data-parallel training (`trot.agents.distributed`) with two gloo processes on the CPU:
replicas stay bitwise identical, two ranks with N envs make the update one rank makes with
the same 2N envs, a dead or hung rank ends the job with a clear error, a crashed one is
named with its exit status and last lines, and every rank leaves the job cleanly (no gloo
thread survives into interpreter exit, where it could abort the process)."""

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
from trot.agents.modes import Sync
from trot.agents.train_config import TrainConfig

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
    from trot.agents.learners import build

    comm = _join(rank, 2, port)
    agent = dataclasses.replace(PPOConfig(), actor_hidden=(32, 32), critic_hidden=(32, 32),
                                activation="relu", rollout_steps=16, epochs=2, minibatches=2)
    cfg = TrainConfig(task=TASK, num_envs=128, agent=agent, max_env_steps=10**8,
                      mode=Sync(nproc=2))
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
        x = getattr(full, f.name)  # [T, N, ...]; state0 [N, S]
        own = x[rank * n:(rank + 1) * n] if f.name == "state0" else x[:, rank * n:(rank + 1) * n]
        getattr(mine, f.name).copy_(own)
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
    ckpt = load_checkpoint(run_dir / "checkpoint.pt")  # the last good one loads
    assert len(ckpt.state["ranks"]) == 2 and ckpt.counters.iteration >= 1


# ---------------------------------------------------------------------- launch and resume
def _trot(*args: str, cwd: Path) -> str:
    p = subprocess.run([sys.executable, "-m", "trot", *args], capture_output=True, text=True,
                       check=False,
                       cwd=cwd, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    return p.stdout


def test_nproc_launches_torchrun_and_resume_restores_every_rank(tmp_path):
    """`trot train --nproc 2` launches torchrun; a run interrupted at half its budget and
    resumed ends bitwise equal to the straight run, every rank's envs restored. Slow (about
    20 s): three torchrun jobs of two processes, each importing torch."""
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
    ca, cb = load_checkpoint(a / "checkpoint.pt"), load_checkpoint(b / "checkpoint.pt")
    sa, sb = ca.state, cb.state
    assert ca.counters.iteration == cb.counters.iteration == 10 and len(sb["ranks"]) == 2
    for k, v in sa["model"].items():  # interrupted + resumed == straight, bitwise
        assert torch.equal(v, sb["model"][k]), k
    for ra, rb in zip(sa["ranks"], sb["ranks"]):  # every rank's envs were restored
        assert torch.equal(ra["env"]["obs"][0], rb["env"]["obs"][0])
    assert not torch.equal(sa["ranks"][0]["env"]["obs"][0], sa["ranks"][1]["env"]["obs"][0])


# ---------------------------------------------------------------------- leaving the job
def _thread_names() -> list[str]:
    names = []
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/comm") as f:
                names.append(f.read().strip())
        except OSError:  # the thread ended meanwhile
            pass
    return names


_LINUX_THREADS = pytest.mark.skipif(not os.path.isdir("/proc/self/task"),
                                    reason="thread names from /proc")


def _shutdown_worker(rank: int, port: int) -> None:
    comm = _join(rank, 2, port)
    # as the Trainer does after joining: an optimizer (torch.optim imports torch._dynamo,
    # which imports torch.distributed.nn.functional: it bound group.WORLD as a default)
    torch.optim.Adam([torch.nn.Parameter(torch.zeros(3))])
    comm._gather(torch.ones(4))
    shutdown()
    alive = [n for n in _thread_names() if "gloo" in n]
    # a gloo thread alive at interpreter exit can abort the process (SIGABRT) when it
    # drops the last collective's tensors after the interpreter started to finalize
    assert not alive, f"rank {rank}: gloo threads outlive shutdown(): {alive}"


@_LINUX_THREADS
def test_shutdown_leaves_no_gloo_thread_behind():
    _spawn(_shutdown_worker)


_EXIT_PROBE = '''
import atexit, os

def _record():  # the threads still alive when this interpreter exits
    rank, out = os.environ.get("RANK"), os.environ.get("TROT_TEST_EXIT_PROBE")
    if rank is None or not out:
        return
    names = []
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/comm") as f:
                names.append(f.read().strip())
        except OSError:
            pass
    with open(os.path.join(out, f"threads.{rank}"), "w") as f:
        f.write("\\n".join(names))

atexit.register(_record)
'''


def _small_run(run_dir: Path) -> list[str]:
    return [sys.executable, "-m", "trot", "train", TASK, "--nproc", "2", "--num-envs", "16",
            "--max-env-steps", "2000", "--no-export", "--run-dir", str(run_dir),
            "--dist-timeout", "60", "--agent.actor-hidden", "16", "16",
            "--agent.critic-hidden", "16", "16"]


@_LINUX_THREADS
def test_a_rank_late_to_shutdown_still_exits_cleanly(tmp_path):
    """Rank 1 sleeps 3 s before leaving (TROT_DELAY_AT) while rank 0 is done: both exit 0,
    no gloo thread is left when either interpreter exits, and the output streams live."""
    probe = tmp_path / "probe"
    probe.mkdir()
    (probe / "sitecustomize.py").write_text(_EXIT_PROBE)
    env = dict(os.environ, TROT_DELAY_AT="before-shutdown:3:1", TROT_TEST_EXIT_PROBE=str(probe),
               PYTHONPATH=os.pathsep.join([str(probe), *filter(None, [
                   os.environ.get("PYTHONPATH")])]))
    run_dir = tmp_path / "run"
    p = subprocess.Popen(_small_run(run_dir), env=env, cwd=tmp_path, text=True,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        first = p.stdout.readline()
        live = p.poll() is None  # rank 0's first line came while the job still ran
        out, err = p.communicate(timeout=180)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 0, err[-3000:]
    assert first.startswith("run directory:") and live, first
    assert out.strip().splitlines()[-1] == str(run_dir)
    assert "terminate called" not in err and "trot: warning" not in err, err[-3000:]
    for rank in (0, 1):
        names = (probe / f"threads.{rank}").read_text().split()
        assert not [n for n in names if "gloo" in n], (rank, names)


def test_a_crashed_rank_is_named_with_its_exit_code_and_last_lines(tmp_path):
    """Rank 0 alone logs, so TROT_CRASH_AT=logged:2 kills only rank 0 (os._exit(86))."""
    from trot.core.faults import CRASH_EXIT

    env = dict(os.environ, TROT_CRASH_AT="logged:2")
    p = subprocess.run(_small_run(tmp_path / "run"), env=env, cwd=tmp_path, text=True,
                       capture_output=True, timeout=180, check=False)
    assert p.returncode == 2, p.stderr[-3000:]
    head = "trot: error: distributed training failed: "
    report = p.stderr[p.stderr.index(head) + len(head):]
    first = report.splitlines()[0]
    assert f"rank 0 exited with code {CRASH_EXIT}" in first, report
    assert "last lines rank 0 printed (stdout):\n  run directory: " in report, report
    assert "run directory: " in p.stdout  # and it had reached the console too


def test_the_failure_report_puts_the_rank_that_failed_first(tmp_path):
    """A rank killed by a signal is named with it; ranks torchrun stopped come after."""
    from torch.distributed.elastic.multiprocessing.errors import (
        ChildFailedError,
        ProcessFailure,
    )

    from trot.launch import _failure_report

    abort = "terminate called without an active exception\n"
    for rank, text in ((0, "it     5 | ...\n"), (1, abort)):
        d = tmp_path / "run_x" / "attempt_0" / str(rank)
        d.mkdir(parents=True)
        (d / "stdout.log").write_text("" if rank else text)
        (d / "stderr.log").write_text(text if rank else "")
    failures = {0: ProcessFailure(0, 11, -signal.SIGTERM, "<N/A>"),
                1: ProcessFailure(1, 12, -signal.SIGABRT, "<N/A>")}
    report = _failure_report(ChildFailedError("trot", failures), tmp_path)
    first, *rest = report.splitlines()
    assert first == ("rank 1 was killed by signal SIGABRT (6) (pid 12); "
                     "rank 0 was killed by signal SIGTERM (15) (pid 11)")
    assert rest[:2] == ["last lines rank 1 printed (stderr):",
                        "  terminate called without an active exception"]
    assert rest[2:] == ["last lines rank 0 printed (stdout):", "  it     5 | ..."]


# ---------------------------------------------------------------------- cores and counts
@pytest.mark.skipif(not hasattr(os, "sched_setaffinity") or len(os.sched_getaffinity(0)) < 2,
                    reason="needs CPU affinity and two cores")
def test_thread_pools_follow_the_affinity():
    """pin_cpus narrows each rank's affinity: the cpu sim's pool and torch's threads follow
    it (os.cpu_count() would give every core of the machine to every rank)."""
    code = ("import os, mujoco, torch\n"
            "os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})\n"
            "from trot.agents.collect import set_threads\n"
            "from trot.sim.cpu import CpuSim\n"
            "m = mujoco.MjModel.from_xml_string('<mujoco><worldbody><body><freejoint/>"
            "<geom size=\".1\"/></body></worldbody></mujoco>')\n"
            "set_threads(0)\n"
            "print(CpuSim(m, 4).nthread, torch.get_num_threads())\n")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       timeout=120, check=False)
    assert p.returncode == 0, p.stderr[-2000:]
    assert p.stdout.split() == ["1", "1"]


def test_resuming_with_another_process_count_is_refused():
    """Each rank's envs and random streams are in the checkpoint: a job of another size
    cannot continue it exactly, and is told how to resume instead of starting fresh envs."""
    from trot.agents.learners import build

    agent = dataclasses.replace(PPOConfig(), actor_hidden=(16,), critic_hidden=(16,),
                                rollout_steps=4)
    cfg = TrainConfig(task=TASK, num_envs=8, agent=agent, max_env_steps=10**6)
    one = build(cfg)
    one.iterate()
    state = one.state_dict()  # written by one process
    other = build(cfg)
    before = _state_vector(other)
    other.comm = Comm(rank=0, world_size=2)  # as under torchrun; no collective comes first
    with pytest.raises(ValueError, match=r"run of 1 process and this job has 2: .*"
                                         r"`trot train --resume RUN_DIR`"):
        other.load_state_dict(state)
    assert torch.equal(_state_vector(other), before)  # nothing was loaded
    state["ranks"] = state["ranks"] * 2  # as if written by two
    other.comm = Comm()
    with pytest.raises(ValueError, match=r"run of 2 processes and this job has 1: .*"
                                         r"torchrun --nproc_per_node=2 -m trot train --resume"):
        other.load_state_dict(state)


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity") or len(os.sched_getaffinity(0)) < 2,
                    reason="needs CPU affinity and two cores")
def test_more_ranks_than_cores_take_the_cores_in_turn():
    """Four A3C workers (or local ranks) on two cores: each gets one core, in turn. Catches
    every rank past the core count piling onto the last core."""
    code = ("import os\nfrom trot.agents.distributed import pin_cpus\n"
            "cores = sorted(os.sched_getaffinity(0))[:2]\nout = []\n"
            "for r in range(4):\n"
            "    os.sched_setaffinity(0, cores)\n    pin_cpus(r, 4)\n"
            "    out.append(cores.index(min(os.sched_getaffinity(0))))\n"
            "print(*out)\n")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       timeout=120, check=False)
    assert p.returncode == 0, p.stderr[-2000:]
    assert p.stdout.split() == ["0", "1", "0", "1"]
