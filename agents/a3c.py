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

The main process owns the run directory: it logs every update a worker reports (one row
each in metrics.csv, with the worker's index), writes the checkpoint every
checkpoint_every updates and at the end, and stops the workers at the budget or on Ctrl-C /
SIGTERM. A worker that dies (exits with an error) stops the run: the others finish their
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
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.multiprocessing as mp

import trot
from trot import faults
from trot.agents.checkpoint import require_keys, save_checkpoint
from trot.agents.collect import Collector
from trot.agents.distributed import ENV_STREAM, NOISE_STREAM, SHUFFLE_STREAM, pin_cpus, rank_seed
from trot.agents.logger import RunLogger, progress_line
from trot.agents.networks import ActorCritic
from trot.agents.ppo import PPO
from trot.agents.storage import Rollout
from trot.agents.loop import _StopFlag
from trot.agents.trainer import MAX_CONSECUTIVE_NAN, TrainingDiverged
from trot.config import TrainConfig, to_json
from trot.runs import CHECKPOINT, raise_budget, read_checkpoint, run_config
from trot.sim.base import available_cpus
from trot.tasks.registry import make_env

RMSPROP = {"alpha": 0.99, "eps": 1e-5}
"""the shared RMSProp's decay and epsilon (OpenAI baselines' A2C; the paper's 0.99 with an
epsilon of 0.1 inside the square root, for unnormalized Atari gradients)"""
STATE_KEYS = ("model", "optimizer", "iteration", "env_steps", "wall_s", "nan_updates",
              "resumes")
RESUME_SEED = 7_919  # a resumed run's envs are seeded afresh: + RESUME_SEED * resumes


class WorkerDied(RuntimeError):
    pass


def worker_count(cfg: TrainConfig) -> int:
    return cfg.workers or available_cpus()


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
        self.algo = PPO(self.local, a, dev)
        self.algo.optimizer = self.step = HogwildStep(self.local, shared.ac, shared.rms,
                                                      a.learning_rate)
        buffer = Rollout.allocate(a.rollout_steps, env.num_envs, env.obs_dim,
                                  env.critic_obs_dim, env.action_dim, dev,
                                  self.local.actor.state_size)
        self.collector = Collector(cfg, env, self.algo, self.local, buffer,
                                   rank_seed(seed + NOISE_STREAM, k))
        self.gen = torch.Generator().manual_seed(rank_seed(seed + SHUFFLE_STREAM, k))
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
    from trot.tasks.sources import load_tasks

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


class A3C:
    """The main process: the shared network and optimizer state, the workers, the run
    directory's logs and checkpoints."""

    def __init__(self, cfg: TrainConfig, state: dict | None = None):
        cfg.validate()
        self.cfg, a = cfg, cfg.agent_effective
        probe = make_env(cfg.task, 1, "cpu", "cpu", 0, cfg.env)  # the layout's sizes only
        torch.manual_seed(cfg.seed)
        self.ac = ActorCritic(probe.obs_dim, probe.critic_obs_dim, probe.action_dim, a)
        params = list(self.ac.parameters())
        self.rms = new_rmsprop_state(params)
        self.iteration = self.env_steps = self.nan_updates = self.resumes = 0
        self._dropped_in_a_row = 0
        self.wall_s = 0.0
        if state is not None:
            require_keys(state, STATE_KEYS, "the a3c checkpoint")
            self.ac.load_state_dict(state["model"])
            opt = shared_rmsprop(params, a.learning_rate, self.rms)
            opt.load_state_dict(state["optimizer"])  # new state tensors: adopt them
            self.rms = [opt.state[p] for p in params]
            self.iteration, self.env_steps = state["iteration"], state["env_steps"]
            self.wall_s, self.nan_updates = state["wall_s"], state["nan_updates"]
            self.resumes = state["resumes"] + 1
        self.ac.share_memory()
        for st in self.rms:
            for t in st.values():
                t.share_memory_()

    def state_dict(self) -> dict:
        opt = shared_rmsprop(list(self.ac.parameters()),
                             self.cfg.agent_effective.learning_rate, self.rms)
        return {"model": self.ac.state_dict(), "optimizer": opt.state_dict(),
                "iteration": self.iteration, "env_steps": self.env_steps,
                "wall_s": self.wall_s, "nan_updates": self.nan_updates,
                "resumes": self.resumes, "algo": "a3c", "config": to_json(self.cfg),
                "trot_version": trot.__version__}

    def save(self, run_dir: Path, lock: Any) -> None:
        """A copy taken under the lock (the statistics whole; the parameters as Hogwild
        leaves them), then written. A lock still held after `terminate()` killed its
        holder is not waited for: the copy is taken without it, and said so."""
        held = lock.acquire(timeout=10.0)
        try:
            state = _cloned(self.state_dict())
        finally:
            if held:
                lock.release()
        if not held:
            print("trot: a3c: the statistics lock was not released (a worker was killed "
                  "holding it); the checkpoint was copied without it", flush=True)
        if not all(bool(t.isfinite().all()) for t in state["model"].values()
                   if t.is_floating_point()):
            raise TrainingDiverged("the shared parameters hold NaN/Inf (an overflowing "
                                   "step); the last checkpoint was kept, not overwritten")
        save_checkpoint(run_dir / CHECKPOINT, state)

    def done(self) -> bool:
        return self.cfg.spent(self.env_steps, self.wall_s)

    def train(self, run_dir: Path, quiet: bool = False) -> Path:
        """Start the workers, log their reports, checkpoint, stop them at the budget."""
        from trot.launch import _tasks_flags

        ctx, k = mp.get_context("spawn"), worker_count(self.cfg)
        shared = Shared.make(ctx, self.ac, self.rms, self.env_steps)
        specs = _tasks_flags()[1::2]
        procs = [ctx.Process(target=_worker, name=f"trot-a3c-worker-{i}", daemon=True,
                             args=(i, k, str(run_dir), shared, self.resumes, specs))
                 for i in range(k)]
        for p in procs:
            p.start()
        logger = RunLogger(run_dir, iteration=self.iteration, env_steps=self.env_steps)
        stop, start = _StopFlag(), time.monotonic() - self.wall_s
        since = (time.monotonic(), self.env_steps)  # the rate's reference: the go
        try:
            with stop.installed():
                while shared.ready.value < k and not stop.requested:  # envs being built
                    _check_alive(procs, run_dir)
                    time.sleep(0.05)
                start, since = time.monotonic() - self.wall_s, (time.monotonic(),
                                                                self.env_steps)
                if not stop.requested:
                    shared.go.set()
                while not (self.done() or stop.requested):
                    _check_alive(procs, run_dir)
                    try:
                        report = shared.reports.get(timeout=0.2)
                    except queue.Empty:
                        continue
                    self._log(report, logger, start, since, quiet)
                    if self._dropped_in_a_row >= MAX_CONSECUTIVE_NAN * k:
                        raise TrainingDiverged(
                            f"the last {self._dropped_in_a_row} worker updates all had "
                            "NaN/Inf gradients (the shared parameters have diverged); "
                            "stopped with the last good checkpoint kept")
                    if self.iteration % self.cfg.checkpoint_every == 0:
                        logger.flush()
                        self.save(run_dir, shared.lock)
        finally:  # a normal end, a signal, or a dead worker: stop the rest, keep their updates
            self._stop(procs, shared, logger, start, since)
            if self._dropped_in_a_row < MAX_CONSECUTIVE_NAN * k:  # diverged: keep the last
                self.save(run_dir, shared.lock)
        _check_alive(procs, run_dir)  # one that died (or hung) after the loop's last look
        if stop.requested:
            print(f"stopped by {stop.requested}; checkpoint written. Resume with:\n"
                  f"  trot train --resume {run_dir}", flush=True)
        return run_dir

    def _stop(self, procs: list, shared: Shared, logger: RunLogger, start: float,
              since: tuple[float, int]) -> None:
        """Stop every worker, logging the updates they still report; a worker still busy
        after dist_timeout (stuck in its update) is terminated."""
        shared.stop.set()
        deadline = time.monotonic() + self.cfg.dist_timeout
        while any(p.is_alive() for p in procs) or not shared.reports.empty():
            try:
                self._log(shared.reports.get(timeout=0.2), logger, start, since, True)
            except queue.Empty:
                pass
            if time.monotonic() > deadline:
                for p in procs:
                    p.terminate()
                    p.join(5.0)
                break
        logger.close()

    def _log(self, report: tuple, logger: RunLogger, start: float,
             since: tuple[float, int], quiet: bool) -> None:
        """One worker's update: counted, logged, and printed every log_every. The rate is
        the mean since this process started (one update's is one worker's burst)."""
        k, steps, m = report
        now = time.monotonic()
        self.iteration += 1
        self.env_steps, self.wall_s = max(self.env_steps, steps), now - start
        dropped = int(m.pop("nan_updates"))
        self.nan_updates += dropped
        self._dropped_in_a_row = (self._dropped_in_a_row + 1) if dropped else 0
        m |= {"iteration": self.iteration, "env_steps": self.env_steps, "worker": k,
              "wall_s": self.wall_s, "nan_updates": self.nan_updates,
              "steps_per_s": (self.env_steps - since[1]) / max(now - since[0], 1e-9)}
        logger.log(m)
        faults.point("logged")
        if not quiet and self.iteration % self.cfg.log_every == 0:
            print(progress_line(m, self.cfg.max_env_steps, 60 * self.cfg.minutes) +
                  f" | worker {k}", flush=True)


def _check_alive(procs: list, run_dir: Path) -> None:
    """Raise WorkerDied naming each worker that has failed."""
    died = [p for p in procs if p.exitcode not in (None, 0)]
    if died:
        who = "; ".join(f"{p.name} exited with code {p.exitcode}" for p in died)
        raise WorkerDied(f"an a3c worker died: {who} (its error is printed above). The "
                         "other workers were stopped and the checkpoint written: resume "
                         f"with `trot train --resume {run_dir}`")


def resume_a3c(run_dir: Path, max_env_steps: int | None = None,
               minutes: float | None = None) -> A3C:
    """The A3C run in run_dir from its checkpoint, its budgets raised as given."""
    run = A3C(run_config(run_dir), read_checkpoint(run_dir))
    run.cfg = raise_budget(run_dir, run.cfg, run.env_steps, run.wall_s, max_env_steps,
                           minutes)
    return run


def _cloned(tree):
    """Every tensor of a checkpoint's tree copied (shared tensors move on under Hogwild)."""
    from torch.utils._pytree import tree_map

    return tree_map(lambda x: x.clone() if isinstance(x, torch.Tensor) else x, tree)
