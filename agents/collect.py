"""Who acts while a rollout is collected: one strategy, chosen once from the run's config.

- `Collector`: the learner's own actor (plain PPO).
- `LaggedCollector` (`actor_lag` K): the actor of K updates ago, from snapshots kept on the
  device; the learner corrects for the lag (`PPOConfig.off_policy`, agents/ppo.py).
- `PrefetchCollector` (`async_collect`): the lagged schedule with K = 1, reordered in time:
  the next rollout is collected on a second thread while the update runs (agents/overlap.py).

A collector owns the env's stepping, the action-noise generator and the acting memory; the
learner owns the actor-critic, the optimizer and the shuffle generator. The trainer calls
`collect()` (this iteration's rollout, values not yet computed), `join()` (after the update,
before the env's statistics are read), `after_update()` (after a NaN update was undone) and
`state_dict()` / `shared_state()` / `load_state_dict()` for the checkpoint.
"""

from __future__ import annotations

import copy
from collections import deque
from collections.abc import Callable

import torch

from trot.core import faults
from trot.agents.distributed import Preemption
from trot.agents.networks import ActorCritic, reset_state
from trot.agents.overlap import Prefetch
from trot.agents.ppo import PPO
from trot.agents.storage import Rollout
from trot.agents.modes import Sync
from trot.agents.train_config import TrainConfig
from trot.sim.base import available_cpus
from trot.tasks.env import Env


def set_threads(n: int) -> None:
    """torch's CPU threads: n, or with 0 every core this process may run on (its affinity,
    which distributed ranks narrow to their share)."""
    if n <= 0:
        n = available_cpus()
    if torch.get_num_threads() != n:
        torch.set_num_threads(n)


class Collector:
    """The learner's own actor acts; the rollout is its current policy's."""

    lagged = False  # whether the rollout's policy is older than the learner's
    keys: tuple[str, ...] = ("noise_gen", "policy_state")  # state_dict's, for each rank
    shared_keys: tuple[str, ...] = ()  # shared_state's

    def __init__(self, cfg: TrainConfig, env: Env, algo: PPO, ac: ActorCritic,
                 storage: Rollout, noise_seed: int, preempt: Preemption | None = None):
        self.cfg, self.env, self.algo, self.ac, self.storage = cfg, env, algo, ac, storage
        self.preempt = preempt  # DD-PPO's: a straggler's rollout is cut short
        # whether a stop was asked for (the trainer's signal flag, set while it trains)
        self.interrupted: Callable[[], bool] = lambda: False
        # action noise: an explicit, checkpointed generator on the device (each rank its
        # own stream), so a resumed run draws what the straight one would, on a GPU too
        self.noise_gen = torch.Generator(device=env.device).manual_seed(noise_seed)
        # the acting actor's memory [N, S], carried across iterations, zeroed at episode ends
        self.policy_state = ac.actor.initial_state(env.num_envs, env.device)

    def collect(self) -> Rollout:
        set_threads(self.cfg.torch_threads)  # MuJoCo's threads own the cores to step
        ro = self._steps(self.storage, None)
        set_threads(self.cfg.update_threads)  # the sim is idle: the critic pass gets the cores
        return ro

    def join(self) -> None:
        pass

    def after_update(self) -> None:
        pass

    def metrics(self) -> dict[str, torch.Tensor]:
        """The collector's own per-iteration metrics (0-d device tensors), by logged name."""
        return {}

    def task_metrics(self) -> dict[str, torch.Tensor]:
        """The task's iteration metrics (the terrain level) of the envs that collected."""
        return self.env.iteration_metrics()

    def close(self) -> None:
        """The run has ended (the decoupled actors' inbox tells them so)."""

    @torch.no_grad()
    def _steps(self, ro: Rollout, actor: torch.nn.Module | None) -> Rollout:
        """Steps the envs T times into `ro`, acting with `actor` (None: the learner's);
        fewer, and the rollout's first steps returned, where `preempt` stops it."""
        env, state, preempt = self.env, self.policy_state, self.preempt
        ro.state0.copy_(state)
        if preempt is not None:
            preempt.begin()
        for t in range(ro.steps):
            if t and preempt is not None and preempt.preempted():
                ro = ro.head(t)
                break
            faults.point("env-step")  # e.g. a slow rank, in the preemption tests
            obs = env.obs
            action, log_prob, mean, state = self.algo.act(obs.policy, actor, self.noise_gen,
                                                          state)
            res = env.step(action)
            if state.shape[1]:  # a new episode's memory starts from zero
                state = reset_state(state, res.terminated | res.truncated)
            ro.write(t, obs=obs.policy, critic_obs=obs.critic, actions=action,
                     log_probs=log_prob, rewards=res.reward, terminated=res.terminated,
                     truncated=res.truncated, final_critic_obs=res.final_obs.critic,
                     action_mean=mean)
        else:
            if preempt is not None:
                preempt.finished()
        self.policy_state = state
        return ro

    # ------------------------------------------------------------------ checkpoints
    def state_dict(self) -> dict:
        """This rank's: the noise stream and the acting memory."""
        return {"noise_gen": self.noise_gen.get_state(), "policy_state": self.policy_state}

    def shared_state(self) -> dict:
        """What every rank holds alike, saved once at the checkpoint's top level."""
        return {}

    def load_state_dict(self, mine: dict, shared: dict, iteration: int) -> None:
        """mine: this rank's entry of the learner state's ranks (`keys` checked by the
        trainer), shared: the whole of it (`shared_keys`); iteration: the run's."""
        self.noise_gen.set_state(mine["noise_gen"])
        self.policy_state = mine["policy_state"].to(self.env.device)


class LaggedCollector(Collector):
    """The actor of `actor_lag` K updates ago acts: the actor's state after each of the last
    K + 1 updates (device tensors, normalizer included), the oldest loaded into a copy."""

    lagged = True
    shared_keys = ("actor_snapshots",)

    def __init__(self, *args):
        super().__init__(*args)
        self.behaviour_actor = copy.deepcopy(self.ac.actor).requires_grad_(False)
        self.actor_snapshots: deque[dict[str, torch.Tensor]] = deque(
            [_clone_state(self.ac.actor)], maxlen=self.cfg.mode.actor_lag + 1)

    def collect(self) -> Rollout:
        set_threads(self.cfg.torch_threads)
        ro = self._lagged_steps(self.storage, self.actor_snapshots[0])
        set_threads(self.cfg.update_threads)
        return ro

    def after_update(self) -> None:
        self.actor_snapshots.append(_clone_state(self.ac.actor))

    def _lagged_steps(self, ro: Rollout, actor_state: dict) -> Rollout:
        self.behaviour_actor.load_state_dict(actor_state)
        return self._steps(ro, self.behaviour_actor)

    def shared_state(self) -> dict:
        return {"actor_snapshots": list(self.actor_snapshots)}

    def load_state_dict(self, mine: dict, shared: dict, iteration: int) -> None:
        super().load_state_dict(mine, shared, iteration)
        self.actor_snapshots.clear()
        self.actor_snapshots.extend(shared["actor_snapshots"])


class PrefetchCollector(LaggedCollector):
    """Rollout k is handed out while rollout k+1 is collected on a worker thread by the
    actor before update k, into a second buffer; `join` waits for it. The collected, not
    yet learned from rollout is part of the checkpoint."""

    keys = (*LaggedCollector.keys, "pending")

    def __init__(self, *args, spare: Rollout):
        super().__init__(*args)
        self.prefetch = Prefetch((self.storage, spare), self._lagged_steps)

    def collect(self) -> Rollout:
        set_threads(self.cfg.torch_threads)  # the update runs beside MuJoCo's threads too
        return self.prefetch.begin(self.actor_snapshots[0], self.actor_snapshots[-1])

    def join(self) -> None:
        self.prefetch.end()  # the env, its statistics and the noise stream are ours again

    def state_dict(self) -> dict:
        return super().state_dict() | {"pending": self.prefetch.state_dict()}

    def load_state_dict(self, mine: dict, shared: dict, iteration: int) -> None:
        super().load_state_dict(mine, shared, iteration)
        self.prefetch.load_state_dict(mine["pending"])


def make_collector(cfg: TrainConfig, env: Env, algo: PPO, ac: ActorCritic,
                   buffer: Callable[[], Rollout], noise_seed: int,
                   preempt: Preemption | None = None) -> Collector:
    """The run's strategy: prefetching (`async_collect`), lagged (`actor_lag` > 0) or plain
    (which alone takes DD-PPO's `preempt`: TrainConfig.validate refuses the others)."""
    args = (cfg, env, algo, ac, buffer(), noise_seed)
    mode = cfg.mode
    if isinstance(mode, Sync) and mode.async_collect:
        return PrefetchCollector(*args, spare=buffer())
    lagged = isinstance(mode, Sync) and mode.actor_lag > 0
    return LaggedCollector(*args) if lagged else Collector(*args, preempt)


def _clone_state(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in module.state_dict().items()}
