"""The env loop every consumer sees: clocks, time limits, auto-reset, the NaN guard.

`Env.step` never synchronises with the host: every branch is a `torch.where` over envs.
(On the cpu backend, the sim itself reads its reset mask on the host; that is MuJoCo's
own memory, the one intended exception.)
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from trot.sim.base import BatchedSim, sensor_slices
from trot.tasks.base import Observation, StepResult, Task
from trot.tasks.observation import (FIELD_KINDS, build_obs, compile_layout, field_key,
                                    make_layout, pool_columns, source_pool)


@dataclass
class EpisodeStats:
    """Device-side accumulators of finished episodes, drained once per iteration.
    Columns of `running` and `sums`: return, length, then one per reward term."""

    running: Tensor  # [N, 2 + K] of the episodes in progress
    sums: Tensor  # [2 + K] over finished episodes
    episodes: Tensor  # []
    unstable: Tensor  # [] count of envs the NaN guard reset
    counted: Tensor  # [N] bool: this env's episode started at step 0 (not a staggered start)

    @classmethod
    def zeros(cls, n: int, k: int, device: torch.device) -> "EpisodeStats":
        z = lambda *s: torch.zeros(*s, device=device)  # noqa: E731
        return cls(z(n, 2 + k), z(2 + k), z(()), z(()),
                   torch.ones(n, dtype=torch.bool, device=device))

    def record(self, reward: Tensor, terms: Tensor, done: Tensor, unstable: Tensor) -> None:
        ones = torch.ones_like(reward)
        self.running += torch.cat([reward[:, None], ones[:, None], terms], dim=1)
        d = (done & self.counted).float()  # a staggered first episode is partial: skip it
        self.counted |= done
        self.sums += d @ self.running  # [2 + K]
        self.episodes += d.sum()
        self.unstable += unstable.sum()
        self.running *= (~done)[:, None]

    def pop(self, term_names: tuple[str, ...]) -> tuple[list[str], Tensor]:
        """Means over the episodes finished since the last pop, as one device vector (no
        host sync), and zero the accumulators. Means read 0 when no episode finished."""
        names = ["episodes", "unstable_envs", "episode_return", "episode_length"]
        names += [f"reward/{k}" for k in term_names]
        vals = torch.cat([torch.stack([self.episodes, self.unstable]),
                          self.sums / self.episodes.clamp(min=1.0)])
        for t in (self.sums, self.episodes, self.unstable):
            t.zero_()
        return names, vals

    def drain(self, term_names: tuple[str, ...]) -> dict[str, float]:
        """`pop` with the host sync: plain floats; means only when an episode finished."""
        names, vals = self.pop(term_names)
        out = dict(zip(names, vals.tolist()))
        if out["episodes"] == 0:
            out = {k: out[k] for k in ("episodes", "unstable_envs")}
        return out


class Env:
    """N envs of one task on one device. Actions [N, action_dim] in [-1, 1]."""

    def __init__(self, name: str, task: Task, sim: BatchedSim, seed: int = 0):
        self.name, self.task, self.sim = name, task, sim
        self.num_envs = sim.num_envs
        self.device = sim.device
        self.control_dt = sim.control_dt
        self.action_dim = int(sim.model.nu)
        self.max_episode_steps = max(1, round(task.config.episode_seconds / self.control_dt))
        self.seed = seed
        self.gen = torch.Generator(device=self.device).manual_seed(seed)
        task.bind_actions(sim)
        task.bind(sim)
        n, dev = self.num_envs, self.device
        self.episode_step = torch.zeros(n, dtype=torch.int64, device=dev)
        self._no_envs = torch.zeros(n, dtype=torch.bool, device=dev)
        self.last_action = torch.zeros(n, self.action_dim, device=dev)
        dims = {k: s.size for k, s in sensor_slices(sim.model).items()}
        cdim = task.command_dim
        self.policy_layout = make_layout(task.policy_terms(), dims, cdim, self.action_dim)
        self.critic_layout = make_layout(task.critic_terms(), dims, cdim, self.action_dim)
        ranges = {k: (s.start, s.start + s.size) for k, s in sensor_slices(sim.model).items()}
        m = sim.model
        # named fields the observations read, at the pool's end: tracked MjData fields
        # (Task.data_fields) and per-env model parameters
        terms = [t for t in task.policy_terms() + task.critic_terms() if t.kind in FIELD_KINDS]
        self._obs_fields = tuple(dict.fromkeys((t.kind, t.field) for t in terms))
        sizes = {f"{k}:{f}": self._field(k, f)[0].numel() for k, f in self._obs_fields}
        for t in terms:
            if not 0 <= t.start < t.stop <= sizes[field_key(t)]:
                raise ValueError(f"observation term {t.name!r}: [start, stop) = "
                                 f"[{t.start}, {t.stop}) is not within the "
                                 f"{sizes[field_key(t)]} values of {t.field!r}")
        cols = pool_columns(m.nsensordata, m.nq, m.nv, cdim, self.action_dim, sizes)
        self._policy_plan = compile_layout(self.policy_layout, ranges, cols, dev)
        self._critic_plan = compile_layout(self.critic_layout, ranges, cols, dev)
        self.obs_dim, self.critic_obs_dim = self.policy_layout.dim, self.critic_layout.dim
        self._shared_critic = task.critic_terms() == task.policy_terms()
        self.reward_terms: tuple[str, ...] = ()
        self.stats = EpisodeStats.zeros(n, 0, dev)
        self.obs: Observation | None = None
        self.noise = task.config.obs_noise

    # ------------------------------------------------------------------ observation
    def _field(self, kind: str, name: str) -> Tensor:  # [N, *shape]
        return self.sim.data(name) if kind == "data" else self.sim.params(name)

    def observe(self) -> Observation:
        sim = self.sim
        cmd = self.task.command if self.task.command is not None else self.last_action[:, :0]
        data = tuple(self._field(k, f) for k, f in self._obs_fields)
        pool = source_pool(sim.sensordata, sim.qpos, sim.qvel, cmd, self.last_action, data)
        pool = torch.nan_to_num(pool, 0.0, 0.0, 0.0)  # a diverged env still shows numbers
        gen = self.gen if self.noise else None
        policy = build_obs(self._policy_plan, pool, gen)
        critic = policy if self._shared_critic else build_obs(self._critic_plan, pool, gen)
        return Observation(policy, critic)

    # ------------------------------------------------------------------ episode control
    def reset(self, stagger: bool = False) -> Observation:
        """Reset every env. stagger: start each clock at a random step so that time-limit
        resets spread out instead of all envs ending together (the first, partial
        episodes are left out of the statistics)."""
        everyone = torch.ones(self.num_envs, dtype=torch.bool, device=self.device)
        self._reset_envs(everyone)
        if stagger:
            self.episode_step = torch.randint(0, self.max_episode_steps, (self.num_envs,),
                                              generator=self.gen, device=self.device)
            self.stats.counted = self.episode_step == 0
        self.obs = self.observe()
        return self.obs

    def _reset_envs(self, mask: Tensor) -> None:
        qpos, qvel = self.task.initial_state(self.sim, self.gen)
        self.sim.reset(mask, qpos, qvel)
        self.task.on_reset(self.sim, mask, self.gen)
        self.episode_step.masked_fill_(mask, 0)
        self.last_action.masked_fill_(mask[:, None], 0.0)

    def step(self, action: Tensor) -> StepResult:
        if self.obs is None:
            raise RuntimeError("call env.reset() before env.step()")
        action, bad_action = self._checked(action)
        self.task.pre_step(self.sim, self.gen)
        self.sim.step(self.task.action_to_ctrl(action))
        self.last_action.copy_(action)
        self.episode_step += 1
        unstable = self.sim.unstable | bad_action

        final = self.observe()
        reward, terms = self.task.reward(self.sim, action)
        terminated = self.task.terminated(self.sim) | unstable
        truncated = (self.episode_step >= self.max_episode_steps) & ~terminated
        # NaN guard: a diverged env scores 0, shows finite numbers, ends and is reset.
        reward = torch.nan_to_num(reward, 0.0, 0.0, 0.0).masked_fill_(unstable, 0.0)
        done = terminated | truncated
        self._record(reward, terms, done, unstable)

        self._reset_envs(done)
        fresh = self.observe()
        d = done[:, None]
        policy = torch.where(d, fresh.policy, final.policy)
        critic = policy if self._shared_critic else torch.where(d, fresh.critic, final.critic)
        self.obs = Observation(policy, critic)
        metrics = {"unstable": unstable.sum()}
        return StepResult(self.obs, reward, terminated, truncated, final, metrics)

    def _record(self, reward: Tensor, terms: dict[str, Tensor], done: Tensor,
                unstable: Tensor) -> None:
        if not self.reward_terms and terms:  # first step: fix the term order
            self.reward_terms = tuple(terms)
            counted = self.stats.counted
            self.stats = EpisodeStats.zeros(self.num_envs, len(terms), self.device)
            self.stats.counted = counted
        if terms:
            stacked = torch.stack([terms[k] for k in self.reward_terms], dim=-1)  # [N, K]
            stacked = torch.nan_to_num(stacked).masked_fill_(unstable[:, None], 0.0)
        else:
            stacked = self.stats.running[:, 2:]  # [N, 0]
        self.stats.record(reward, stacked, done, unstable)

    def _checked(self, action: Tensor) -> tuple[Tensor, Tensor]:
        """Validate shape/dtype/device; clip to [-1, 1]. Returns the action and a [N] mask of
        envs whose action had NaN/Inf (those are treated as unstable)."""
        want = (self.num_envs, self.action_dim)
        if not isinstance(action, Tensor):
            raise TypeError(f"action must be a torch.Tensor of shape {want}, got "
                            f"{type(action).__name__}")
        if tuple(action.shape) != want:
            raise ValueError(f"action must have shape {want} (num_envs, action_dim), "
                             f"got {tuple(action.shape)}")
        if action.dtype != torch.float32:
            raise TypeError(f"action must be float32, got {action.dtype}")
        if action.device != self.device:
            raise ValueError(f"action is on {action.device}; this env runs on {self.device}")
        if self.device.type == "cpu":  # a host check is free here: refuse bad actions
            if not bool(torch.isfinite(action).all()):
                bad = (~torch.isfinite(action).all(dim=-1)).nonzero().flatten().tolist()
                raise ValueError(f"action contains NaN or Inf in envs {bad[:10]}; actions "
                                 "must be finite values in [-1, 1]")
            return action.clamp(-1.0, 1.0), self._no_envs
        # on an accelerator, no host sync: such envs get action 0 and count as unstable
        finite = torch.isfinite(action).all(dim=-1)  # [N]
        action = torch.where(finite[:, None], action, 0.0).clamp(-1.0, 1.0)
        return action, ~finite

    # ------------------------------------------------------------------ checkpoints
    def state_dict(self) -> dict:
        return {
            "sim": self.sim.state_dict(),
            "task": self.task.state_dict(),
            "episode_step": self.episode_step.clone(),
            "last_action": self.last_action.clone(),
            "gen": self.gen.get_state(),
            "running": [self.stats.running.clone(), self.stats.counted.clone()],
            "reward_terms": list(self.reward_terms),
            "obs": None if self.obs is None else (self.obs.policy.clone(), self.obs.critic.clone()),
        }

    def load_state_dict(self, state: dict) -> None:
        self.sim.load_state_dict(state["sim"])
        self.task.load_state_dict(state["task"])
        self.episode_step.copy_(state["episode_step"])
        self.last_action.copy_(state["last_action"])
        self.gen.set_state(state["gen"])
        self.reward_terms = tuple(state["reward_terms"])
        self.stats = EpisodeStats.zeros(self.num_envs, len(self.reward_terms), self.device)
        running = state["running"]
        if len(running) == 4:  # checkpoints before the stats were one table
            running = [torch.cat([running[0][:, None], running[1][:, None], running[2]], 1),
                       running[3]]
        for dst, src in zip((self.stats.running, self.stats.counted), running):
            dst.copy_(src)
        self.obs = None if state["obs"] is None else Observation(*state["obs"])
