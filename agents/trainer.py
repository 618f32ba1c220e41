"""PPO's learner: rollout -> values -> GAE -> PopArt -> update -> one host sync; the loop
around it (log, evaluate off the clock, checkpoint) is agents/loop.py's. One process,
data-parallel ranks (--nproc), the learner fed by actors (--actors) and several tasks are
this learner with another comm, collector or env.

rsl_rl's split: the env (tasks/env.py) knows episodes, the algorithm (ppo.py) knows losses,
the storage (storage.py) knows shapes, the collector (collect.py) knows who acts (the
learner's actor, a lagged one, or one on a second thread), and this file only orders them
in time. The run directory's files are agents/runs.py's.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import ClassVar

import torch
from torch import Tensor
from torch.utils._pytree import tree_map

from trot.agents.actors import Inbox
from trot.agents.capture import compiler
from trot.agents.central import CentralInbox
from trot.agents.checkpoint import Checkpoint, require_keys
from trot.agents.collect import make_collector
from trot.agents.distributed import (NOISE_STREAM, ONE_PROCESS, SHUFFLE_STREAM, Comm,
                                     Preemption, rank_seed)
from trot.agents.loop import OneRun
from trot.agents.multitask import write_task_views
from trot.agents.networks import ActorCritic
from trot.agents.ppo import PPO
from trot.agents.rollback import Rollback
from trot.agents.storage import Batch, Rollout
from trot.agents.modes import Actors, Sync
from trot.agents.train_config import TrainConfig
from trot.agents.runs import task_dir
from trot.core import faults
from trot.tasks.env import Env

MAX_CONSECUTIVE_NAN = 5
# what the learner's state holds besides the collector's keys: at its top, and per rank
STATE_KEYS = ("model", "algo", "ranks", "nan_updates", "consecutive_nan")
RANK_KEYS = ("env", "gen", "torch_rng")


class TrainingDiverged(RuntimeError):
    pass


class Trainer(OneRun):
    """The PPO/A2C learner (agents/loop.py's `Learner`)."""

    kind: ClassVar[str] = "ppo"

    def __init__(self, cfg: TrainConfig, env: Env, comm: Comm = ONE_PROCESS,
                 actors: Comm | None = None, ac: ActorCritic | None = None,
                 storage: Rollout | None = None):
        """actors: the job of decoupled actors this learner (its rank 0) feeds on
        (the Actors mode, agents/actors.py); `comm` is then the learners' own job.
        ac, storage: the actor-critic (as built from cfg.seed) and the rollout buffer to
        use, where they live in a stack of seeds (agents/seeds.py); default new ones."""
        cfg.validate()
        torch.manual_seed(cfg.seed)
        preempt = None
        mode = cfg.mode
        if isinstance(mode, Sync) and mode.preempt_fraction > 0:  # DD-PPO's: the ranks'
            comm = dataclasses.replace(comm, ragged=True)  # rollouts may differ in length
            preempt = Preemption(comm, mode.preempt_fraction)
        self.cfg, self.env, self.comm = cfg, env, comm
        self.agent_cfg = a = cfg.agent_effective
        dev = env.device
        self.ac = ActorCritic(env.obs_dim, env.critic_obs_dim, env.action_dim, a,
                              env.num_tasks).to(dev) if ac is None else ac
        comm.broadcast_module(self.ac)  # identical replicas from the start
        capture = compiler(cfg.capture, dev)  # graph capture: agents/capture.py
        env.capture(capture)
        self.algo = PPO(self.ac, a, dev, comm,
                        env.mirrors() if a.symmetry == "augment" else None, capture,
                        trust_region=cfg.algo == "trpo")
        self.rollback = Rollback(self.ac, self.algo.optimizer, (self.algo.lr,))
        buffer = lambda: Rollout.allocate(a.rollout_steps, env.num_envs, env.obs_dim,  # noqa: E731
                                          env.critic_obs_dim, env.action_dim, dev,
                                          self.ac.actor.state_size) \
            if storage is None else storage
        # plain, lagged (actor_lag) or prefetching (async_collect): agents/collect.py
        noise_seed = rank_seed(cfg.seed + NOISE_STREAM, comm.rank)
        self.collector = make_collector(cfg, env, self.algo, self.ac, buffer, noise_seed,
                                        preempt) if actors is None else \
            (CentralInbox if isinstance(mode, Actors) and mode.central_inference else Inbox)(
                cfg, env, self.algo, self.ac, buffer(), noise_seed, actors)
        # minibatch shuffles differ per rank: each shuffles only its own envs' samples
        self.gen = torch.Generator(device=dev).manual_seed(
            rank_seed(cfg.seed + SHUFFLE_STREAM, comm.rank))
        self.iteration = 0
        self.env_steps = 0
        self.nan_updates = 0
        self._consecutive_nan = 0
        env.reset(stagger=cfg.stagger_start)

    @property
    def device(self) -> torch.device:
        return self.env.device

    @property
    def rollout(self) -> Rollout:
        """The collector's rollout buffer (the last rollout, once collected)."""
        return self.collector.storage

    def noise(self, n: int) -> Tensor:
        """n draws of the action noise [n, A] from this learner's own stream."""
        return self.ac.actor.noise(n, self.collector.noise_gen)

    # ------------------------------------------------------------------ the run
    def start(self, interrupted: Callable[[], bool]) -> None:
        self.collector.interrupted = interrupted  # the inbox waits on actors: it polls it

    def close(self, failed: bool) -> list[dict[str, float]]:
        if not failed:  # the decoupled actors' inbox tells them to stop: an actor that
            self.collector.close()  # never came for its stop raises
        return []

    def write_views(self, run_dir: Path, checkpoint: Checkpoint) -> None:
        if self.env.num_tasks > 1:  # each task's own run directory, after the whole
            write_task_views(run_dir, self, checkpoint)

    def run_dirs(self, run_dir: Path) -> list[Path]:
        return [task_dir(run_dir, t) for t, _ in self.cfg.tasks] if self.env.num_tasks > 1 \
            else [Path(run_dir)]

    # ------------------------------------------------------------------ one iteration
    def collect(self) -> Rollout:
        """This iteration's rollout (agents/collect.py), with its V(s_t)."""
        return self.algo.fill_values(self.collector.collect())

    def iterate(self) -> dict[str, float]:
        """collect -> values -> prepare (GAE or V-trace, PopArt) -> update -> one host sync;
        returns the iteration's metrics as plain floats."""
        self.rollback.save()
        ro = self.collect()
        faults.point("rollout")  # e.g. a straggler, in the fault tests
        steps = self.comm.total(ro.steps * self.env.num_envs, self.env.device)  # [1] all ranks'
        batch = self.algo.prepare(ro)
        stats = self.algo.update(batch, self.gen, lagged=self.collector.lagged)
        names, values = self.measure(batch, stats, steps)
        return self.account(dict(zip(names, values.tolist())))  # the one host sync

    def measure(self, batch: Batch, stats: dict[str, Tensor], steps: Tensor
                ) -> tuple[list[str], Tensor]:
        """After the update: the normalizers learn the batch, the collector hands the env
        back, and the iteration's metrics are gathered as names and one float64 device
        tensor [M] (the update's `stats`, episodes, task and collector metrics, whether
        the parameters are finite, and the env `steps` [1] of every rank)."""
        dev = self.env.device
        self.ac.update_normalizers(batch.obs, batch.critic_obs, self.comm,
                                   keep_policy=self.algo.trust_region)
        self.collector.join()  # a rollout collected meanwhile: the env is ours again
        finite = torch.stack([p.isfinite().all() for p in self.ac.state_dict().values()
                              if p.is_floating_point()]).all()
        # the env's statistics live where its physics does (the host, in Sebulba mode)
        ep_names, ep_vals = self.env.pop_stats()
        ep_vals = self.comm.merge_episode_stats(ep_vals.to(dev))  # episodes of every rank
        # e.g. the terrain curriculum's level
        task_m = {k: v.to(dev) for k, v in self.collector.task_metrics().items()}
        own = self.collector.metrics()  # e.g. the decoupled actors' policy lag
        # the task's own NaN (tasks/nonfinite.py), for this sync: its source named after it
        fault = self.env.nonfinite.fired().to(dev)
        names = list(stats) + ep_names + [f"task/{k}" for k in task_m] + list(own) + [
            "finite", "nonfinite", "steps"]
        return names, torch.cat([torch.stack(list(stats.values())).double(), ep_vals.double(),
                                 *(v.double()[None] for v in [*task_m.values(),
                                                              *own.values()]),
                                 finite.double()[None], fault.double()[None],
                                 steps.double()])

    def account(self, m: dict[str, float]) -> dict[str, float]:
        """The measured metrics `m` (plain floats) counted in: env steps and iterations,
        a NaN update undone; returns what the iteration logs."""
        if m.pop("nonfinite"):  # found in the sync: the task's code made NaN, named now
            raise self.env.nonfinite.error(f" (iteration {self.iteration + 1})")
        self.env_steps += int(m.pop("steps"))
        self.iteration += 1
        self._undo_if_nan(m.pop("finite") < 1.0)
        self.collector.after_update()  # lagged: a snapshot of the actor as it now stands
        # means over no episodes are not logged: the run's, or a task's (NAME/episodes)
        empty = [k[:-8] for k, v in m.items() if k.endswith("episodes") and v == 0]
        m = {k: v for k, v in m.items() if not any(k.startswith((p + "episode_", p + "reward/"))
                                                   for p in empty)}
        m.update(iteration=self.iteration, env_steps=self.env_steps,
                 nan_updates=self.nan_updates)
        return m

    def _undo_if_nan(self, nan: bool) -> None:
        """NaN/Inf reached the weights: undo this update; too many in a row stop the run."""
        if not nan:
            self._consecutive_nan = 0
            return
        self.rollback.restore()
        self.nan_updates += 1
        self._consecutive_nan += 1
        if self._consecutive_nan >= MAX_CONSECUTIVE_NAN:
            raise TrainingDiverged(
                f"{MAX_CONSECUTIVE_NAN} updates in a row produced NaN/Inf parameters; "
                "stopped with the last good checkpoint kept")

    # ------------------------------------------------------------------ checkpoints
    def state_dict(self) -> dict | None:
        """The learner's state, on rank 0 (None elsewhere). Every rank must call it: the
        ranks' env and sampling states are gathered into rank 0's file, so resume restores
        all."""
        ranks = self.comm.gather_objects(_to_cpu({"env": self.env.state_dict(),
                                                  "gen": self.gen.get_state(),
                                                  "torch_rng": torch.get_rng_state()}
                                                 | self.collector.state_dict()))
        if ranks is None:
            return None
        return {"model": self.ac.state_dict(), "algo": self.algo.state_dict(),
                "ranks": ranks, "nan_updates": self.nan_updates,
                "consecutive_nan": self._consecutive_nan} | self.collector.shared_state()

    def load_state_dict(self, s: dict) -> None:
        """Checked before anything is loaded: the format and the process count."""
        require_keys(s, STATE_KEYS + self.collector.shared_keys, "the checkpoint's state")
        ranks = s["ranks"]
        for i, r in enumerate(ranks):
            require_keys(r, RANK_KEYS + self.collector.keys, f"the checkpoint's ranks[{i}]")
        if len(ranks) != self.comm.world_size:
            raise ValueError(_process_count_error(len(ranks), self.comm.world_size))
        self.ac.load_state_dict(s["model"])
        self.algo.load_state_dict(s["algo"])
        mine = ranks[self.comm.rank]
        self.env.load_state_dict(mine["env"])
        self.gen.set_state(mine["gen"])
        torch.set_rng_state(mine["torch_rng"])
        self.nan_updates, self._consecutive_nan = s["nan_updates"], s["consecutive_nan"]
        self.collector.load_state_dict(mine, s, self.iteration)


def _process_count_error(saved: int, now: int) -> str:
    procs = f"{saved} process" + ("es" if saved != 1 else "")
    torchrun = (f", or torchrun --nproc_per_node={saved} -m trot train --resume RUN_DIR"
                if saved > 1 else "")
    return (f"the checkpoint was written by a run of {procs} and this job has {now}: each "
            "rank's env states and random streams are saved in it, so a different process "
            "count cannot continue the run exactly. Resume with `trot train --resume "
            f"RUN_DIR` (it keeps the run's process count, from config.json){torchrun}")


def _to_cpu(tree):
    """Device tensors to host copies, so checkpoint states pickle across ranks."""
    return tree_map(lambda x: x.cpu() if isinstance(x, torch.Tensor) else x, tree)
