"""A3C (Mnih et al., 2016): `trot train TASK --algo a3c --workers K`.

K worker processes (torch.multiprocessing, spawned) share one actor-critic's parameters in
shared memory, and RMSProp's statistics with them ("shared RMSProp", the paper's choice).
Each worker owns num_envs envs (cpu backend, on its share of the cores) and loops:
  1. copy the shared parameters and statistics into its own network (the paper's θ' = θ);
  2. collect agent.rollout_steps steps in each of its envs with that copy (the paper: 5
     steps of one env per thread; trot keeps the task's T and batches the envs);
  3. GAE targets (lam = 1 gives the paper's n-step returns; the time-limit bootstrap is
     trot's exact one); PopArt's statistics move on the shared critic;
  4. one A2C gradient (agents/ppo.py's loss at one epoch, one minibatch, no clip), clipped
     to max_grad_norm, and, when finite, applied to the shared parameters by the shared
     RMSProp without a lock (Hogwild); a non-finite one is dropped and counted;
  5. its observations fold into the shared normalizers.

Parameters are read and written without a lock, as in the paper: a worker may copy a step
another is half-way through. The statistics take one lock: PopArt's move and the rescale of
the value head that preserves its outputs must be one act, or two workers would rescale the
head against each other's statistics.

The main process is the learner that the one loop (agents/loop.py) drives: an iteration is
one update a worker reports (one row each in metrics.csv, with the worker's index), so the
loop checkpoints every checkpoint_every updates and at the end, and stops the workers at
the budget or on Ctrl-C / SIGTERM. A worker that dies (exits with an error) stops the run: the others finish their
update, the checkpoint is written, and the error names the worker and its exit code.
Carrying on with fewer workers would change the run's speed and recorded settings without
anyone asking. MAX_CONSECUTIVE_NAN updates per worker in a row whose gradients were all
non-finite stop it too (TrainingDiverged), with the last checkpoint kept as it was.

Resume continues from the shared parameters, RMSProp's statistics and the counters; the
envs start new episodes (from seeds that differ per resume), as rsl_rl's resume does. It is
not bitwise: the workers' interleaving already makes two runs of one seed differ.
"""

from __future__ import annotations

import queue
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import torch
import torch.multiprocessing as mp
from torch.utils._pytree import tree_map

from trot.agents.checkpoint import require_keys
from trot.agents.collect import Collector
from trot.agents.distributed import (ENV_STREAM, NOISE_STREAM, ONE_PROCESS, SHUFFLE_STREAM,
                                     pin_cpus, rank_seed)
from trot.agents.loop import Interrupted, OneRun
from trot.agents.networks import ActorCritic
from trot.agents.ppo import PPO
from trot.agents.runs import run_config
from trot.agents.storage import Rollout
from trot.agents.trainer import MAX_CONSECUTIVE_NAN, TrainingDiverged
from trot.agents.train_config import TrainConfig
from trot.core import faults
from trot.sim.base import available_cpus
from trot.tasks.registry import make_env
from trot.tasks.sources import load_tasks, loaded_specs

RMSPROP = {"alpha": 0.99, "eps": 1e-5}
"""the shared RMSProp's decay and epsilon (OpenAI baselines' A2C; the paper's 0.99 with an
epsilon of 0.1 inside the square root, for unnormalized Atari gradients)"""
STATE_KEYS = ("model", "optimizer", "nan_updates", "resumes")
RESUME_SEED = 7_919  # a resumed run's envs are seeded afresh: + RESUME_SEED * resumes


class WorkerDied(Interrupted):
    """A worker exited with an error: the others were stopped, the checkpoint is written."""


def worker_count(cfg: TrainConfig) -> int:
    return cfg.mode.workers or available_cpus()


@dataclass
class Shared:
    """What the workers share: the actor-critic and RMSProp's state tensors (per parameter)
    in shared memory, the lock of the statistics, the env-step counter, the count of workers
    ready, the go and stop flags, and the queue of reports (worker, env steps, metrics)."""

    ac: ActorCritic
    rms: list[dict[str, torch.Tensor]]
    lock: Any
    env_steps: Any  # multiprocessing Value('q')
    ready: Any  # multiprocessing Value('i')
    go: Any  # multiprocessing Event: every worker is ready, the clock runs
    stop: Any  # multiprocessing Event
    reports: Any  # multiprocessing Queue

    @classmethod
    def make(cls, ctx: Any, ac: ActorCritic, rms: list[dict[str, torch.Tensor]],
             env_steps: int) -> Shared:
        return cls(ac, rms, ctx.Lock(), ctx.Value("q", env_steps), ctx.Value("i", 0),
                   ctx.Event(), ctx.Event(), ctx.Queue())


def shared_rmsprop(params: list[torch.Tensor], lr: float,
                   state: list[dict[str, torch.Tensor]]) -> torch.optim.RMSprop:
    """torch's RMSprop over `params`, stepping the given state tensors in place: built over
    the same shared tensors, every worker's instance is one optimizer."""
    opt = torch.optim.RMSprop(params, lr=lr, foreach=False, **RMSPROP)
    for p, s in zip(params, state):
        opt.state[p] = s  # torch fills a parameter's state only where it finds none
    return opt


def new_rmsprop_state(params: list[torch.Tensor]) -> list[dict[str, torch.Tensor]]:
    """RMSprop's zero state for each parameter (what its first step would create)."""
    return [{"step": torch.zeros(()), "square_avg": torch.zeros_like(p)} for p in params]


class HogwildStep:
    """The optimizer PPO.update steps in a worker: its own network's gradients, when
    finite, become the shared parameters' and the shared RMSProp steps them."""

    def __init__(self, local: ActorCritic, shared: ActorCritic,
                 rms: list[dict[str, torch.Tensor]], lr: float):
        self.local, self.shared = list(local.parameters()), list(shared.parameters())
        self.rms = shared_rmsprop(self.shared, lr, rms)
        self.dropped = 0  # non-finite gradients not applied

    def zero_grad(self, set_to_none: bool = False) -> None:
        for p in self.local:
            if p.grad is not None:
                p.grad.zero_()

    def step(self) -> None:
        grads = [p.grad for p in self.local]
        if not bool(torch.stack([g.isfinite().all() for g in grads]).all()):  # CPU only
            self.dropped += 1
            return
        for p, g in zip(self.shared, grads):
            p.grad = g
        self.rms.step()


class Worker:
    """One A3C worker: its envs, its copy of the network, and the loop of the module's
    docstring. `iterate` returns one update's report."""

    def __init__(self, k: int, cfg: TrainConfig, shared: Shared, resumes: int):
        a, dev = cfg.agent_effective, torch.device("cpu")
        seed = cfg.seed + RESUME_SEED * resumes
        self.env = env = make_env(cfg.task, cfg.num_envs, "cpu", dev,
                                  rank_seed(seed + ENV_STREAM, k), cfg.env)
        self.local = ActorCritic(env.obs_dim, env.critic_obs_dim, env.action_dim, a)
        self.shared, self.steps = shared, a.rollout_steps * cfg.num_envs
        self.step = HogwildStep(self.local, shared.ac, shared.rms, a.learning_rate)
        self.algo = PPO(self.local, a, dev, optimizer=self.step)
        buffer = Rollout.allocate(a.rollout_steps, env.num_envs, env.obs_dim,
                                  env.critic_obs_dim, env.action_dim, dev,
                                  self.local.actor.state_size)
        self.collector = Collector(cfg, env, self.algo, self.local, buffer,
                                   rank_seed(seed + NOISE_STREAM, k))
        self.gen = torch.Generator().manual_seed(rank_seed(seed + SHUFFLE_STREAM, k))
        self.k = k
        env.reset(stagger=cfg.stagger_start)

    def iterate(self) -> tuple[int, dict[str, float]]:
        s, local, algo = self.shared, self.local, self.algo
        with s.lock:
            local.load_state_dict(s.ac.state_dict())  # θ' = θ, statistics included
        ro = algo.fill_values(self.collector.collect())
        faults.point("rollout")
        adv, ret = algo.targets(ro)
        popart = local.critic.popart
        if popart is not None:
            with s.lock:  # the shared statistics' move and its head rescale, as one act
                algo.move_popart(s.ac.critic, ret)
                popart.load_state_dict(s.ac.critic.popart.state_dict())
                local.critic.head.load_state_dict(s.ac.critic.head.state_dict())
        batch = algo.pack(ro, adv, ret)
        dropped = self.step.dropped
        stats = algo.update(batch, self.gen)
        with s.lock:
            s.ac.update_normalizers(batch.obs, batch.critic_obs)
        if bool(self.env.nonfinite.fired()):  # the task made NaN: named (a CPU read)
            raise self.env.nonfinite.error(f" (worker {self.k})")
        names, vals = self.env.pop_stats()
        names = list(stats) + names + ["nan_updates"]
        m = dict(zip(names, torch.cat([torch.stack(list(stats.values())), vals,
                                       torch.tensor([float(self.step.dropped - dropped)])]).tolist()))
        if m["episodes"] == 0:
            m = {k: v for k, v in m.items() if not k.startswith(("episode_", "reward/"))}
        with s.env_steps.get_lock():
            s.env_steps.value += self.steps
            return s.env_steps.value, m


def _worker(k: int, workers: int, run_dir: str, shared: Shared, resumes: int,
            specs: list[str]) -> None:
    """A worker process's body: until the stop flag, the budget, or an error."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the main process decides when to stop
    faults.set_rank(k)
    pin_cpus(k, workers)
    for spec in specs:
        load_tasks(spec)
    cfg = run_config(Path(run_dir))
    w = Worker(k, cfg, shared, resumes)
    with shared.ready.get_lock():
        shared.ready.value += 1
    while not shared.go.wait(0.2):  # the clock starts once every worker is built
        if shared.stop.is_set():
            return
    while not shared.stop.is_set():
        steps, m = w.iterate()
        shared.reports.put((k, steps, m))
        if steps >= cfg.max_env_steps:
            break


class A3C(OneRun):
    """The main process (agents/loop.py's `Learner`): the shared network and optimizer
    state, and the workers; one iteration is one worker's update, as it reports it."""

    kind: ClassVar[str] = "a3c"

    def __init__(self, cfg: TrainConfig, run_dir: Path):
        cfg.validate()
        self.cfg, self.run_dir, a = cfg, Path(run_dir), cfg.agent_effective
        self.comm, self.device = ONE_PROCESS, torch.device("cpu")
        probe = make_env(cfg.task, 1, "cpu", "cpu", 0, cfg.env)  # the layout's sizes only
        torch.manual_seed(cfg.seed)
        self.ac = ActorCritic(probe.obs_dim, probe.critic_obs_dim, probe.action_dim, a)
        self.rms = new_rmsprop_state(list(self.ac.parameters()))
        self.iteration = self.env_steps = self.nan_updates = self.resumes = 0
        self._dropped_in_a_row = 0
        self.procs: list = []
        self.shared: Shared | None = None
        self._share()

    def _share(self) -> None:
        self.ac.share_memory()
        for st in self.rms:
            for t in st.values():
                t.share_memory_()

    # ------------------------------------------------------------------ the run
    def start(self, interrupted: Callable[[], bool]) -> None:
        """Start the workers and wait until each has built its envs (the clock starts
        then). A worker that fails meanwhile raises WorkerDied."""
        ctx, k = mp.get_context("spawn"), worker_count(self.cfg)
        self.shared = shared = Shared.make(ctx, self.ac, self.rms, self.env_steps)
        self.procs = [ctx.Process(target=_worker, name=f"trot-a3c-worker-{i}", daemon=True,
                                  args=(i, k, str(self.run_dir), shared, self.resumes,
                                        loaded_specs()))
                      for i in range(k)]
        for p in self.procs:
            p.start()
        while shared.ready.value < k and not interrupted():  # envs being built
            _check_alive(self.procs, self.run_dir)
            time.sleep(0.05)
        self.since = (time.monotonic(), self.env_steps)  # the rate's reference: the go
        if not interrupted():
            shared.go.set()

    def iterate(self) -> dict[str, float]:
        """The next update a worker reports: counted, and its metrics. The rate is the mean
        since the workers started (one update's is one worker's burst)."""
        while True:
            _check_alive(self.procs, self.run_dir)
            try:
                m = self._count(self.shared.reports.get(timeout=0.2))
                break
            except queue.Empty:
                continue
        if self._dropped_in_a_row >= MAX_CONSECUTIVE_NAN * len(self.procs):
            raise TrainingDiverged(
                f"the last {self._dropped_in_a_row} worker updates all had NaN/Inf gradients "
                "(the shared parameters have diverged); stopped with the last good "
                "checkpoint kept")
        return m

    def _count(self, report: tuple) -> dict[str, float]:
        k, steps, m = report
        now = time.monotonic()
        self.iteration += 1
        self.env_steps = max(self.env_steps, steps)
        dropped = int(m.pop("nan_updates"))
        self.nan_updates += dropped
        self._dropped_in_a_row = (self._dropped_in_a_row + 1) if dropped else 0
        return m | {"iteration": self.iteration, "env_steps": self.env_steps, "worker": k,
                    "nan_updates": self.nan_updates,
                    "steps_per_s": (self.env_steps - self.since[1]) /
                    max(now - self.since[0], 1e-9)}

    def close(self, failed: bool) -> list[dict[str, float]]:
        """Stop every worker; the updates they still report are returned to log. A worker
        still busy after dist_timeout (stuck in its update), or any on a failure, is
        terminated."""
        if self.shared is None:
            return []
        self.shared.stop.set()
        rows, deadline = [], time.monotonic() + (0.0 if failed else self.cfg.dist_timeout)
        while any(p.is_alive() for p in self.procs) or not self.shared.reports.empty():
            if time.monotonic() > deadline:
                for p in self.procs:
                    p.terminate()
                    p.join(5.0)
                break
            try:
                rows.append(self._count(self.shared.reports.get(timeout=0.2)))
            except queue.Empty:
                pass
        if failed:
            return []
        try:
            _check_alive(self.procs, self.run_dir)  # one that died after the last look
        except WorkerDied as e:
            e.rows = rows  # the loop logs them and checkpoints, then raises
            raise
        return rows

    def policy(self) -> None:
        return None  # RULES refuse eval_every: workers would train on while it ran

    def progress(self, m: dict[str, float]) -> str:
        return super().progress(m) + f" | worker {int(m['worker'])}"

    # ------------------------------------------------------------------ checkpoints
    def state_dict(self) -> dict:
        """A copy taken under the statistics lock (the statistics whole; the parameters as
        Hogwild leaves them). A lock still held after `terminate()` killed its holder is
        not waited for: the copy is taken without it, and said so. Parameters that hold
        NaN/Inf are refused: the last good checkpoint stays."""
        lock = None if self.shared is None else self.shared.lock
        held = lock is None or lock.acquire(timeout=10.0)
        try:
            opt = shared_rmsprop(list(self.ac.parameters()),
                                 self.cfg.agent_effective.learning_rate, self.rms)
            state = _cloned({"model": self.ac.state_dict(), "optimizer": opt.state_dict(),
                             "nan_updates": self.nan_updates, "resumes": self.resumes})
        finally:
            if lock is not None and held:
                lock.release()
        if not held:
            print("trot: a3c: the statistics lock was not released (a worker was killed "
                  "holding it); the checkpoint was copied without it", flush=True)
        if not all(bool(t.isfinite().all()) for t in state["model"].values()
                   if t.is_floating_point()):
            raise TrainingDiverged("the shared parameters hold NaN/Inf (an overflowing "
                                   "step); the last checkpoint was kept, not overwritten")
        return state

    def load_state_dict(self, state: dict) -> None:
        """The shared parameters and RMSProp's statistics (in shared memory again), the
        NaN count; the envs start afresh (`resumes` moves their seeds on)."""
        require_keys(state, STATE_KEYS, "the a3c checkpoint's state")
        params = list(self.ac.parameters())
        self.ac.load_state_dict(state["model"])
        opt = shared_rmsprop(params, self.cfg.agent_effective.learning_rate, self.rms)
        opt.load_state_dict(state["optimizer"])  # new state tensors: adopt them
        self.rms = [opt.state[p] for p in params]
        self.nan_updates, self.resumes = state["nan_updates"], state["resumes"] + 1
        self._share()


def _check_alive(procs: list, run_dir: Path) -> None:
    """Raise WorkerDied naming each worker that has failed."""
    died = [p for p in procs if p.exitcode not in (None, 0)]
    if died:
        who = "; ".join(f"{p.name} exited with code {p.exitcode}" for p in died)
        raise WorkerDied(f"an a3c worker died: {who} (its error is printed above). The "
                         "other workers were stopped and the checkpoint written: resume "
                         f"with `trot train --resume {run_dir}`")


def _cloned(tree):
    """Every tensor of a checkpoint's tree copied (shared tensors move on under Hogwild)."""
    return tree_map(lambda x: x.clone() if isinstance(x, torch.Tensor) else x, tree)
