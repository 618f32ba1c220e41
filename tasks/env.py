"""The env loop every consumer sees: clocks, time limits, auto-reset, the NaN guard.

`Env.step` never synchronises with the host: every branch is a `torch.where` over envs.
(On the cpu backend, the sim itself reads its reset mask on the host; that is MuJoCo's
own memory, the one intended exception.)
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import Tensor

from trot.sim.base import BatchedSim
from trot.tasks import mirror
from trot.tasks.base import Episode, Observation, StepResult, Task, checked_output
from trot.tasks.mirror import Mirrors
from trot.tasks.nonfinite import watching
from trot.tasks.stats import EpisodeStats
from trot.tasks.observation import ObsLayout, ObsPlan, build_obs, compile_terms


def stack_history(prev: Tensor | None, frame: Tensor, fresh: Tensor | None, k: int) -> Tensor:
    """The observation [N, K * P] of the last k frames with `frame` [N, P] as its newest:
    prev [N, K * P] shifted by one frame, or k copies of the frame (the contract's fill
    rule: a new episode's history is its first frame) where prev is None or fresh [N] is
    set."""
    if k == 1:
        return frame
    first = frame.repeat(1, k)  # [N, K * P]
    if prev is None:
        return first
    shifted = torch.cat([prev[:, frame.shape[1]:], frame], 1)
    return shifted if fresh is None else torch.where(fresh[:, None], first, shifted)


class Env:
    """N envs of one task on one device. Actions [N, action_dim] in [-1, 1]."""

    num_tasks = 1  # the tasks its policy tells apart (several: tasks/multi.py)

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
        self._adopt_episode(task.episode)
        self._ones = torch.ones(n, device=dev)
        self._no_unstable = torch.zeros((), dtype=torch.int64, device=dev)  # read-only
        self._first_episodes_left = 0  # steps until every staggered first episode has ended
        self._compile_observations()
        self._shared_critic = task.critic_terms() == task.policy_terms()
        self.nonfinite = watching(name, n, dev, self.policy_layout.slots,  # the task's NaN
                                  None if self._shared_critic else self.critic_layout.slots)
        self.reward_terms: tuple[str, ...] = ()
        self.stats = EpisodeStats(n, 0, dev)
        # evaluation only: Task.eval_metrics of the state each step reached, before resets
        self.record_eval_metrics = False
        self.eval_step: dict[str, Tensor] = {}
        self.eval_outcomes: dict[str, Tensor] = {}  # Task.episode_outcomes, the same way
        self.obs: Observation | None = None
        self.noise = task.config.obs_noise
        self.capture(lambda fn: fn)

    def _adopt_episode(self, kept: Episode | None) -> None:
        """The episode record (tasks/base.py `Episode`): the task's where it keeps one (its
        terms read it, and it must run without an env too: export/sim2sim.py), else the
        env's own. Only the record's owner starts and advances it."""
        n, a, dev = self.num_envs, self.action_dim, self.device
        if kept is not None:
            checked_output("Task.episode.step", kept.step, (n,), torch.int64, dev)
            checked_output("Task.episode.last_action", kept.last_action, (n, a), torch.float32,
                           dev)
        self.episode = Episode.zeros(n, a, dev) if kept is None else kept
        self._keeps_episode = kept is None

    @property
    def episode_step(self) -> Tensor:
        """[N] int64 `Episode.step`: the time limit's clock (rsl_rl's episode_length_buf
        writes it in place)."""
        return self.episode.step

    @property
    def last_action(self) -> Tensor:
        """[N, A] `Episode.last_action`: what the `last_action` observation reads."""
        return self.episode.last_action

    def capture(self, compile_fn: Callable[[Callable], Callable]) -> None:
        """Run a step's observation, reward and termination through compile_fn (agents/
        capture.py's `compiler`: torch.compile, or eager, as here by default)."""
        self._observe = compile_fn(self.observe_checked)
        self._reward = compile_fn(self.task.reward)
        self._terminated = compile_fn(self.task.terminated)

    # ------------------------------------------------------------------ observation
    def observe(self, noise: tuple[Tensor | None, Tensor | None] | None = None) -> Observation:
        """noise: the uniform draws of `_draw_noise`; None draws fresh ones."""
        return self.observe_checked(noise)[0]

    def observe_checked(self, noise: tuple[Tensor | None, Tensor | None] | None = None
                        ) -> tuple[Observation, Tensor]:
        """`observe`, and where a value it read was NaN or Inf: [N, P] policy columns (then
        [N, C] critic ones where the critic has its own), read as 0 in the observation."""
        parts = [get() for get in self._pool_parts]
        pool = parts[0] if len(parts) == 1 else torch.cat(parts, dim=1)
        u_policy, u_critic = self._draw_noise() if noise is None else noise
        policy, bad = build_obs(self._policy_plan, pool, u_policy)
        if self._shared_critic:
            return Observation(policy, policy), bad
        critic, bad_critic = build_obs(self._critic_plan, pool, u_critic)
        return Observation(policy, critic), torch.cat([bad, bad_critic], 1)

    def _draw_noise(self) -> tuple[Tensor | None, Tensor | None]:
        """Uniform [0, 1) draws for the noisy observation terms (None: no noise). One draw
        serves both observations of a step, so an env that did not end sees the same
        numbers in `obs` and `final_obs`."""
        if not (self.noise and (self._policy_plan.noisy or self._critic_plan.noisy)):
            return None, None
        return self._draw(self._policy_plan, self.frame_dim), \
            None if self._shared_critic else self._draw(self._critic_plan, self.critic_obs_dim)

    def _draw(self, plan: ObsPlan, dim: int) -> Tensor | None:
        if not plan.noisy:
            return None
        return torch.rand(self.num_envs, dim, generator=self.gen, device=self.device)

    def _compile_observations(self) -> None:
        """Layouts, and plans that gather each observation from a pool of the sources the
        terms read (sensordata, qpos, ... named fields), side by side in order of first use."""
        task = self.task
        for hook in ("policy_terms", "critic_terms"):
            if not getattr(task, hook)():
                raise ValueError(f"{type(task).__name__}.{hook}() is empty: the network needs "
                                 "at least one observation term (trot.tasks.ObsTerm)")
        (self.policy_layout, self.critic_layout), self._pool_parts, \
            (self._policy_plan, self._critic_plan) = compile_terms(
                self, task.policy_terms(), task.critic_terms())
        # the policy sees its last `history` frames, oldest first: obs_dim = history * frame
        self.history = int(task.config.obs_history)
        self.frame_dim, self.critic_obs_dim = self.policy_layout.dim, self.critic_layout.dim
        self.obs_dim = self.history * self.frame_dim

    def observer(self, terms: tuple) -> tuple[ObsLayout, Callable[[], Tensor]]:
        """Another set of observation terms (a teacher's, agents/distill.py) read from this
        env's sim and task state: its layout and a noise-free reader -> [N, D]. A term this
        env cannot provide (a sensor its model lacks, a source its task does not keep) is
        a ValueError naming it."""
        try:
            (layout,), parts, (plan,) = compile_terms(self, tuple(terms))
        except (KeyError, AttributeError, ValueError) as e:
            msg = e.args[0] if e.args else type(e).__name__
            raise ValueError(f"task {self.name!r} cannot provide these observation terms: "
                             f"{msg}") from None

        def read() -> Tensor:
            ps = [get() for get in parts]
            return build_obs(plan, ps[0] if len(ps) == 1 else torch.cat(ps, dim=1), None)[0]

        return layout, read

    def mirrors(self) -> Mirrors:
        """The task's left-right mirror as maps on the policy and critic observations and
        the action (tasks/mirror.py); a ValueError where the task declares none."""
        declared = self.task.mirror()
        if declared is None:
            raise ValueError(f"task {self.name!r} declares no left-right mirror "
                             "(Task.mirror), which symmetry augmentation needs")
        if len(declared.command) != self.task.command_dim:
            raise ValueError(f"task {self.name!r}: its mirror has {len(declared.command)} "
                             f"command signs, the command has {self.task.command_dim}")
        ctx = mirror.context(declared, self.sim.model)
        return Mirrors(mirror.observation_map(self.policy_layout, ctx, self.device
                                              ).tiled(self.history),
                       mirror.observation_map(self.critic_layout, ctx, self.device),
                       mirror.action_map(ctx, self.device))

    # ------------------------------------------------------------------ episode control
    def reset(self, stagger: bool = False) -> Observation:
        """Reset every env. stagger: start each clock at a random step so that time-limit
        resets spread out instead of all envs ending together (the first, partial
        episodes are left out of the statistics)."""
        everyone = torch.ones(self.num_envs, dtype=torch.bool, device=self.device)
        self.task.restart()
        self._reset_envs(everyone)
        if stagger:  # in place, whoever owns the record
            self.episode_step.copy_(torch.randint(0, self.max_episode_steps, (self.num_envs,),
                                                  generator=self.gen, device=self.device))
            self.task.staggered(self.sim, self.episode_step * self.control_dt)
        self.stats.restart(self.episode_step == 0 if stagger else None)
        # every staggered first episode has ended by the time limit at the latest
        self._first_episodes_left = self.max_episode_steps if stagger else 0
        frame = self.observe()
        self.obs = Observation(self._stacked(None, frame.policy, None), frame.critic)
        return self.obs

    def _stacked(self, prev: Tensor | None, frame: Tensor, fresh: Tensor | None) -> Tensor:
        return stack_history(prev, frame, fresh, self.history)

    def _reset_envs(self, mask: Tensor) -> None:
        self.task.episode_end(self.sim, mask)
        qpos, qvel = self.task.initial_state(self.sim, self.gen)
        m, n, dev = self.sim.model, self.num_envs, self.device
        checked_output("Task.initial_state's qpos", qpos, (n, m.nq), torch.float32, dev)
        checked_output("Task.initial_state's qvel", qvel, (n, m.nv), torch.float32, dev)
        bad = mask & ~(qpos.isfinite().all(1) & qvel.isfinite().all(1))  # [N]
        self.nonfinite.note("init", bad.any()[None], bad)
        self.task.randomize(self.sim, mask, self.gen)  # before the reset's forward
        self.sim.reset(mask, qpos, qvel)
        self.task.on_reset(self.sim, mask, self.gen)
        if self._keeps_episode:  # else the task's on_reset has started its own
            self.episode.start(mask)

    def step(self, action: Tensor) -> StepResult:
        action, bad_action, ctrl = self.begin_step(action)
        self.sim.step(ctrl)
        return self.end_step(action, bad_action)

    def begin_step(self, action: Tensor) -> tuple[Tensor, Tensor | None, Tensor]:
        """A step up to the physics: the checked, clipped action [N, A], the envs whose
        action was not finite ([N] bool, or None), and the control [N, nu] for the sim.
        Split from `end_step` so that blocks of one sim (agents/seeds.py) step together."""
        if self.obs is None:
            raise RuntimeError("call env.reset() before env.step()")
        action, bad_action = self._checked(action)
        self.task.pre_step(self.sim, self.gen)
        return action, bad_action, self.task.action_to_ctrl(action)

    def end_step(self, action: Tensor, bad_action: Tensor | None) -> StepResult:
        """The step after the physics: task state, observation, reward, resets."""
        self.task.post_step(self.sim, action)
        if self._keeps_episode:  # else the task's post_step has advanced its own
            self.episode.advance(action)
        if self._first_episodes_left:  # every staggered first episode has ended at the latest
            self._first_episodes_left -= 1  # when this reaches 0: the time limit
            self.stats.all_counted = self._first_episodes_left == 0
        unstable = self.sim.unstable if bad_action is None else self.sim.unstable | bad_action
        # where the host knows for free that every env is stable (cpu), skip the guard's
        # per-env selects and the count
        stable = self.sim.all_stable is True and bad_action is None

        noise = self._draw_noise()
        prev = self.obs.policy
        frame, bad = self._observe(noise)
        self._note_nonfinite(bad, None if stable else unstable)
        final = Observation(self._stacked(prev, frame.policy, None), frame.critic)
        reward, terms = self._reward(self.sim, action)
        terminated = self._terminated(self.sim)
        if not self.reward_terms:  # the first step: the task's outputs, named if malformed
            self._check_outputs(reward, terms, terminated)
        terminated = terminated | unstable
        limit = self.episode_step >= self.max_episode_steps
        ended = self.task.truncated(self.sim)  # a task's own truncations, if any
        done = terminated | (limit if ended is None else limit | ended)
        truncated = done ^ terminated  # the time limit, where the task did not terminate
        n_unstable = self._no_unstable if stable else unstable.sum()
        reward = self._record(reward, terms, done, None if stable else unstable, n_unstable)
        if self.record_eval_metrics:  # before the reset: an ended env's last state counts
            self.eval_step = self.task.eval_metrics(self.sim)
            self.eval_outcomes = self.task.episode_outcomes(self.sim)

        self._reset_envs(done)
        # Rows that did not end are unchanged by the reset (state, command, last action,
        # noise draw), so the fresh observation is the step's observation for every env
        frame, _ = self._observe(noise)
        self.obs = Observation(self._stacked(prev, frame.policy, done), frame.critic)
        self.nonfinite.tick()
        return StepResult(self.obs, reward, terminated, truncated, final,
                          {"unstable": n_unstable})

    def _note_nonfinite(self, bad: Tensor, unstable: Tensor | None) -> None:
        """Observation columns that read NaN or Inf (bad [N, P (+ C)]) where the physics is
        finite (unstable [N] bool, None where no env is): a value of the task's own."""
        if unstable is not None:  # a diverged env's values are the physics', not the task's
            bad = bad & ~unstable[:, None]
        self.nonfinite.note("obs", bad.any(0), bad.any(1))

    def _check_outputs(self, reward: Tensor, terms: dict[str, Tensor], terminated: Tensor
                       ) -> None:
        """[N] float32 rewards and terms, [N] bool terminations, on the env's device: a
        [N, 1] would broadcast against [N] into [N, N] rather than fail."""
        n, dev, f32 = (self.num_envs,), self.device, torch.float32
        checked_output("Task.reward (its total)", reward, n, f32, dev)
        for k, v in terms.items():
            checked_output(f"Task.reward (its term {k!r})", v, n, f32, dev)
        checked_output("Task.terminated", terminated, n, torch.bool, dev)

    def _record(self, reward: Tensor, terms: dict[str, Tensor], done: Tensor,
                unstable: Tensor | None, n_unstable: Tensor) -> Tensor:
        """NaN guard on the reward and its terms (a diverged env scores 0 and shows finite
        numbers), then the episode statistics. unstable: [N] bool, None when no env is.
        Returns the guarded reward [N]."""
        if not self.reward_terms and terms:  # first step: fix the term order
            self.reward_terms = tuple(terms)
            old = self.stats
            self.stats = EpisodeStats(self.num_envs, len(terms), self.device)
            self.stats.counted.copy_(old.counted)
            self.stats.all_counted = old.all_counted
        if "reward" not in self.nonfinite.groups:
            self.nonfinite.watch_rewards(self.reward_terms)
        this_step = torch.stack([reward, self._ones, *(terms[k] for k in self.reward_terms)], 1)
        # [N, 2 + K]
        bad = ~this_step.isfinite()  # a diverged env's rewards are the physics', not the task's
        bad = bad if unstable is None else bad & ~unstable[:, None]
        self.nonfinite.note("reward", torch.cat([bad[:, :1].any(0), bad[:, 2:].any(0)]),
                            bad.any(1))
        this_step = this_step.nan_to_num_(0.0, 0.0, 0.0)
        if unstable is not None:
            this_step = torch.where(unstable[:, None], self.stats.unstable_step, this_step)
        self.stats.record(this_step, done, None if unstable is None else n_unstable)
        return this_step[:, 0]

    def _checked(self, action: Tensor) -> tuple[Tensor, Tensor | None]:
        """Validate shape/dtype/device; clip to [-1, 1]. Returns the action and a [N] mask of
        envs whose action had NaN/Inf (those are treated as unstable), None for none."""
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
            # a finite sum means every entry is finite (the exact test runs only otherwise);
            # numpy's sum of the host memory costs less than torch's sum and item
            host = (action.detach() if action.requires_grad else action).numpy()
            if not math.isfinite(host.sum()) and not bool(torch.isfinite(action).all()):
                if bool(self.nonfinite.fired()):  # the policy read the task's own NaN
                    raise self.nonfinite.error(", before the NaN reached the actions")
                bad = (~torch.isfinite(action).all(dim=-1)).nonzero().flatten().tolist()
                raise ValueError(f"action contains NaN or Inf in envs {bad[:10]}; actions "
                                 "must be finite values in [-1, 1]")
            return action.clamp(-1.0, 1.0), None
        # on an accelerator, no host sync: such envs get action 0 and count as unstable
        finite = torch.isfinite(action).all(dim=-1)  # [N]
        action = torch.where(finite[:, None], action, 0.0).clamp(-1.0, 1.0)
        return action, ~finite

    def pop_stats(self) -> tuple[list[str], Tensor]:
        """The episode statistics since the last call, as names and one device vector
        (tasks/stats.py `EpisodeStats.pop`), the accumulators zeroed."""
        return self.stats.pop(self.reward_terms)

    def iteration_metrics(self) -> dict[str, Tensor]:
        """The task's per-iteration metrics (e.g. the terrain curriculum's level)."""
        return self.task.iteration_metrics()

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
            "nonfinite": self.nonfinite.state_dict(),
        }

    def load_state_dict(self, state: dict) -> None:
        self.sim.load_state_dict(state["sim"])
        self.task.load_state_dict(state["task"])
        self.episode_step.copy_(state["episode_step"])
        self.last_action.copy_(state["last_action"])
        self.gen.set_state(state["gen"])
        self.reward_terms = tuple(state["reward_terms"])
        self.nonfinite.load_state_dict(state["nonfinite"])
        if self.reward_terms:
            self.nonfinite.watch_rewards(self.reward_terms)
        self.stats = EpisodeStats(self.num_envs, len(self.reward_terms), self.device)
        table, width = state["running"], self.stats.running.shape[1]  # [N, 3 + K]
        if len(table) != 2 or table[0].shape[-1] != width:  # older layouts: refused, never
            raise ValueError(  # broadcast into this one's columns
                f"the checkpoint's episode statistics are {len(table)} tensors, the first "
                f"{list(table[0].shape)}: written by a trot before 0.1's checkpoint format; "
                f"0.1 writes [running [N, {width}] (1, return, length and "
                f"{len(self.reward_terms)} reward terms), counted [N]]. Retrain the run, or "
                "finish it with the trot that wrote it")
        running, counted = table
        self.stats.running.copy_(running)
        self.stats.counted.copy_(counted)
        self.stats.all_counted = bool(self.stats.counted.all())
        # not saved: until every env is counted, at most one episode length to go
        self._first_episodes_left = 0 if self.stats.all_counted else self.max_episode_steps
        self.obs = None if state["obs"] is None else Observation(*state["obs"])
