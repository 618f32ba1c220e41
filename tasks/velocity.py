"""Velocity tracking for legged robots, as a composition: a `Velocity` declaration lists the
robot, the observation terms, the reward terms with their weights, the terminations, the
terms with memory, the events and the ground; `Locomotion` runs one. No task subclasses
another: a variant is another declaration (`dataclasses.replace` of one, docs/tasks.md).

Step order (tasks/env.py): pre_step (command resampling, pushes, the clock, the joint
velocity snapshot) -> action_to_ctrl (latency) -> physics -> post_step (heading steering,
then every term's memory advances: the previous action, feet air time, the curriculum's
commanded distance; last, the episode record) -> observation -> reward (pure: computing it
twice gives the same value) -> terminated -> for ended envs: episode_end (curriculum) ->
initial_state -> randomize -> the sim's reset -> the episode record's start, then reset of
every term, in declared order. Every draw comes from the env's generator in that order;
nothing here reads a tensor on the host.

The task keeps the episode record (`Body.episode`, tasks/base.py: each env's step and last
action) that its terms read and the env adopts: its hooks advance it, and they are all that
export/sim2sim.py's plain runner calls, so the record is the same with or without an env.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import mujoco
import torch
from torch import Tensor

from trot.sim.base import BatchedSim
from trot.tasks import legged_robot as lr
from trot.tasks.base import Task
from trot.tasks.gait import GaitTracker
from trot.tasks.legged_config import LeggedConfig
from trot.tasks.legged_robot import LeggedRobot
from trot.tasks.mirror import Mirror
from trot.tasks.observation import ObsTerm, check_number
from trot.tasks.terms import terminations as term_end
from trot.tasks.terms.body import Body, Step
from trot.tasks.terms.clock import GaitClock
from trot.tasks.terms.commands import AXES, VelocityCommand
from trot.tasks.terms.events import Latency, Push, Randomize
from trot.tasks.terms.state import (EPISODE_END, EPISODE_OUTCOMES, ITERATION_METRICS, PLACE,
                                    POST_STEP, PRE_STEP, RANDOMIZE, RESET, RESTART,
                                    STAGGERED, TRUNCATED, Term, bound_hooks, check_hooks,
                                    check_state)
from trot.tasks.terms.terrain import Terrain, add_ground

ObsFn = Callable[["Locomotion"], ObsTerm | None]
"""an observation term of the task (tasks/terms/observations.py), or None to leave it out"""


@dataclass(frozen=True)
class Reward:
    """A weighted reward term. `fn` is a function of the step, `Step -> [N]` (unweighted),
    or a `Term` class, built once the task binds and then called with the step."""

    name: str
    fn: Callable[[Step], Tensor] | type[Term]
    weight: float
    """per second: the task multiplies it by the control dt (legged_gym's convention)"""
    once: bool = False
    """added as weight x value, not per second and after the only_positive_rewards clip
    (the termination penalty: a fall must cost even when the clip leaves nothing to lose)"""

    def __post_init__(self) -> None:
        check_number(f"reward term {self.name!r}", "weight", self.weight)
        if not callable(self.fn):
            raise ValueError(f"reward term {self.name!r}: fn must be a function of the step "
                             f"(Step -> [N]) or a Term class, got {self.fn!r}")


def failed(s: Step) -> Tensor:
    """1 on the step an episode ends by a failure (the task's terminations)."""
    return s.body.failed().float()


@dataclass(frozen=True)
class Velocity:
    """A velocity-tracking task, declared: call it with a config to get the task."""

    robot: LeggedRobot
    policy: tuple[ObsFn, ...]
    """the policy's observation terms, in order (what the robot measures)"""
    critic: tuple[ObsFn, ...]
    """privileged terms the critic sees after the policy's own (noise-free; a perceived
    height scan is left out of them: the critic's is exact)"""
    rewards: tuple[Reward, ...]
    memory: tuple[type[Term], ...] = ()
    """terms with memory that rewards read (GaitClock, FeetAirTime, PreviousAction, ...)"""
    terminations: tuple[Callable[[Body], Tensor], ...] = (term_end.fell, term_end.tilted)
    events: tuple[type[Term], ...] = (Randomize, Push, Latency)
    ground: tuple[type[Term], ...] = ()
    """terrain terms (Terrain, TerrainCurriculum); none: a flat floor"""
    config: type[LeggedConfig] = LeggedConfig
    changes: tuple[tuple[str, Any], ...] = field(default=())
    """this task's settings over its config class's defaults (per-robot tuning)"""
    edit: Callable[[mujoco.MjSpec], None] | None = None
    """a change to the model after trot's own edits (e.g. primitive collision geoms for a
    robot whose collision geometry is meshes; docs/tasks.md)"""

    def __post_init__(self) -> None:
        """Checks where the declaration is written (nothing is changed)."""
        names = [r.name for r in self.rewards]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise ValueError(f"reward terms {twice} are declared twice; one name each")
        kinds = [*self.memory, *self.events, *self.ground]
        again = sorted({k.__name__ for k in kinds if kinds.count(k) > 1})
        if again:
            raise ValueError(f"terms {again} are declared twice; one of each")

    @property
    def command_dim(self) -> int:
        return len(AXES)

    def defaults(self, **changes) -> LeggedConfig:
        """The config this declaration registers with: its changes, then `changes`."""
        return self.config(**dict(self.changes) | changes)

    def __call__(self, config: LeggedConfig) -> "Locomotion":
        return Locomotion(self, config)


class Locomotion(Task[LeggedConfig]):
    """Runs a `Velocity` declaration: builds the robot's model (and terrain), binds the
    terms, and calls each term's hooks in the declared order."""

    command_dim = len(AXES)

    def __init__(self, decl: Velocity, config: LeggedConfig):
        if not isinstance(config, decl.config):
            raise TypeError(f"this task takes a {decl.config.__name__}, got "
                            f"{type(config).__name__}")
        super().__init__(config)
        self.decl, self.robot = decl, decl.robot
        known = {r.name for r in decl.rewards}
        unknown = sorted({k for k, _ in config.weights} - known)
        if unknown:
            raise ValueError(f"env.weights names reward terms {unknown} that this task lacks; "
                             f"its terms: {', '.join(r.name for r in decl.rewards)}")
        self.weights = {r.name: r.weight for r in decl.rewards} | dict(config.weights)
        self.clock_seconds = self.scan_bias = None  # set by bind where the terms exist

    # ---------------------------------------------------------------- model
    def build(self) -> mujoco.MjSpec:
        spec = lr.prepare(self.robot)
        self._floor = lr.floor_geom(spec)
        if Terrain in self.decl.ground:
            self._floor = add_ground(spec, self.config, self._floor)
        if self.decl.edit is not None:
            self.decl.edit(spec)
        r = self.robot  # names the spec fixes, for observation terms and bind
        self._contacts = {b: lr.contact_sensors(r, spec, b)
                          for b in (*r.terminate_contacts, *r.penalize_contacts)}
        return spec

    def model(self) -> mujoco.MjModel:
        """The compiled model: the sim's once bound, else compiled here once."""
        if not hasattr(self, "_compiled"):
            self._compiled = self.build().compile()
        return self._compiled

    def floor(self) -> str:
        """The geom the robot walks on (the floor plane, or the active heightfield)."""
        if not hasattr(self, "_floor"):
            self.build()
        return self._floor

    def contacts(self) -> dict[str, list[str]]:
        """Contact body -> its touch sensors (legged_robot.contact_sensors)."""
        if not hasattr(self, "_contacts"):
            self.build()
        return self._contacts

    @property
    def home_keyframe(self) -> str:  # the description's, e.g. 'standing'
        return self.robot.home

    def home_pose(self) -> tuple[float, ...]:
        """The policy joints' angles in the home keyframe, in policy order."""
        m = self.model()
        kid = mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_KEY, self.robot.home)
        return tuple(float(m.key_qpos[kid, m.jnt_qposadr[mujoco.mj_name2id(
            m, mujoco.mjtObj.mjOBJ_JOINT, j)]]) for j in self.robot.joints)

    def home_height(self) -> float:
        m = self.model()
        return float(m.key_qpos[mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_KEY,
                                                  self.robot.home), 2])

    def command_ranges(self) -> dict[str, list[float]]:
        """Command ranges by name, in the command's order (commands.AXES)."""
        return {a.name: list(getattr(self.config, a.name)) for a in AXES}

    def action_affine(self, model: mujoco.MjModel) -> tuple[list[float], list[float]]:
        kid = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_KEY, self.robot.home)
        offset = [float(model.key_qpos[kid, model.jnt_qposadr[model.actuator_trnid[i, 0]]])
                  for i in range(model.nu)]
        return [self.config.action_scale] * model.nu, offset

    def mirror(self) -> Mirror | None:
        """The description's joint mirror, with the command axes' signs."""
        return Mirror(self.robot.mirror, command=tuple(a.mirror for a in AXES)) \
            if self.robot.mirror else None

    def action_latency_steps(self) -> int:
        return self.config.latency_steps

    # ---------------------------------------------------------------- observations
    def policy_terms(self) -> tuple[ObsTerm, ...]:
        return tuple(t for f in self.decl.policy if (t := f(self)) is not None)

    def critic_terms(self) -> tuple[ObsTerm, ...]:
        own = tuple(replace(t, noise=0.0) for t in self.policy_terms()
                    if t.kind != "height_scan")
        return own + tuple(t for f in self.decl.critic if (t := f(self)) is not None)

    # ---------------------------------------------------------------- setup
    def bind(self, sim: BatchedSim) -> None:
        m = sim.model
        self._compiled, self.dt = m, sim.control_dt
        acts = [mujoco.mj_id2name(m, mujoco.mjtObj.mjOBJ_JOINT, m.actuator_trnid[i, 0])
                for i in range(m.nu)]
        if tuple(acts) != self.robot.joints:
            raise ValueError(f"actuators must drive {self.robot.joints} in order, got {acts}")
        body = self.body = Body(self.robot, sim, self.contacts(), self.config)
        body.floor = mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_GEOM, self.floor())
        body.failed = lambda: self.terminated(sim)
        d = self.decl
        rewards = [r.fn for r in d.rewards if isinstance(r.fn, type)]
        for cls in (VelocityCommand, *d.memory, *rewards, *d.events, *d.ground):
            term = cls(body)
            check_state(cls.__name__, term)
            check_hooks(term)
            body.terms[cls] = term
        self.terms = tuple(body.terms.values())
        self._hooks = bound_hooks(self.terms)
        self.episode = body.episode  # the env reads this record; on_reset, post_step keep it
        self._command = body.term(VelocityCommand)
        self.command = self._command.command  # [N, 3] what the policy sees
        self._latency = body.term(Latency) if Latency in body.terms else None
        clock = body.terms.get(GaitClock)
        self.clock_seconds = clock.seconds if clock is not None else None
        terrain = body.terms.get(Terrain)
        self.scan_bias = terrain.scan_bias if terrain is not None else None
        self._gait = GaitTracker(body.n, self.robot.feet, self.dt, sim.device)  # evaluation
        self._check_rewards(sim)

    def _check_rewards(self, sim: BatchedSim) -> None:
        """Evaluate every reward and termination once: a term that reads what the task
        lacks fails here, named, rather than at the first step."""
        step = Step(self.body, torch.zeros(sim.num_envs, sim.model.nu, device=sim.device),
                    self._command.seen)
        for r in self.decl.rewards:
            try:
                self._value(r, step)
            except (ValueError, AttributeError, IndexError) as e:
                raise ValueError(f"reward term {r.name!r}: {e}") from e

    def _value(self, r: Reward, step: Step) -> Tensor:
        fn = self.body.terms[r.fn] if isinstance(r.fn, type) else r.fn
        return fn(step)

    # ---------------------------------------------------------------- episodes
    def initial_state(self, sim: BatchedSim, gen: torch.Generator) -> tuple[Tensor, Tensor]:
        """The home pose at a random heading, joints + U(-init_joint_noise, ..), base
        velocity U(-init_vel_noise, ..); then where the ground places it."""
        c, n, dev, b = self.config, sim.num_envs, sim.device, self.body
        u = lambda *s: 2.0 * torch.rand(*s, generator=gen, device=dev) - 1.0  # noqa: E731
        qpos = b.home_qpos.expand(n, -1).clone()
        yaw = torch.pi * u(n)
        qpos[:, 3], qpos[:, 6] = torch.cos(yaw / 2), torch.sin(yaw / 2)
        qpos[:, b.qpos_joints] += c.init_joint_noise * u(n, len(self.robot.joints))
        qvel = torch.zeros(n, sim.model.nv, device=dev)
        qvel[:, :6] = c.init_vel_noise * u(n, 6)
        for place in self._hooks[PLACE]:
            place(b, qpos, gen)
        return qpos, qvel

    def restart(self) -> None:
        for hook in self._hooks[RESTART]:
            hook()

    def staggered(self, sim: BatchedSim, elapsed: Tensor) -> None:
        for hook in self._hooks[STAGGERED]:
            hook(elapsed)

    def episode_end(self, sim: BatchedSim, mask: Tensor) -> None:
        for hook in self._hooks[EPISODE_END]:
            hook(self.body, mask)

    def randomize(self, sim: BatchedSim, mask: Tensor, gen: torch.Generator) -> None:
        for hook in self._hooks[RANDOMIZE]:
            hook(self.body, mask, gen)

    def on_reset(self, sim: BatchedSim, mask: Tensor, gen: torch.Generator) -> None:
        self.episode.start(mask)  # before the terms: they begin a fresh episode
        for hook in self._hooks[RESET]:
            hook(self.body, mask, gen)
        self._gait.reset(mask)

    # ---------------------------------------------------------------- stepping
    def pre_step(self, sim: BatchedSim, gen: torch.Generator) -> None:
        for hook in self._hooks[PRE_STEP]:
            hook(self.body, gen)

    def action_to_ctrl(self, action: Tensor) -> Tensor:
        """Joint targets; with latency L, those of the action from L steps ago."""
        if self._latency is not None:
            action = self._latency.delay(action)
        return self.action_offset + self.action_scale * action

    def post_step(self, sim: BatchedSim, action: Tensor) -> None:
        """The one place where memory advances, once per step; the episode record last (a
        term's post_step still reads the step before's last action)."""
        step = Step(self.body, action, self._command.seen)
        for hook in self._hooks[POST_STEP]:
            hook(step)
        self.episode.advance(action)

    def reward(self, sim: BatchedSim, action: Tensor) -> tuple[Tensor, dict[str, Tensor]]:
        """Weighted terms x control dt, summed (clipped at 0 with only_positive_rewards),
        plus the `once` terms (the fall penalty)."""
        step = Step(self.body, action, self._command.seen)
        w, rs = self.weights, self.decl.rewards
        terms = {r.name: (w[r.name] * self.dt) * self._value(r, step) for r in rs
                 if not r.once}
        total = torch.stack(list(terms.values())).sum(0)
        if self.config.only_positive_rewards:
            total = total.clamp(min=0.0)
        for r in rs:
            if r.once:
                terms[r.name] = w[r.name] * self._value(r, step)
                total = total + terms[r.name]
        return total, terms

    def terminated(self, sim: BatchedSim) -> Tensor:
        ends = [f(self.body) for f in self.decl.terminations]
        out = ends[0]
        for e in ends[1:]:
            out = out | e
        return out

    def truncated(self, sim: BatchedSim) -> Tensor | None:
        ends = [f(self.body) for f in self._hooks[TRUNCATED]]
        return None if not ends else ends[0] if len(ends) == 1 else torch.stack(ends).any(0)

    # ---------------------------------------------------------------- evaluation
    def surface(self, xy: Tensor) -> Tensor:
        """Ground height (m) [...] under world points xy [..., 2]."""
        return self.body.surface(xy)

    def eval_metrics(self, sim: BatchedSim) -> dict[str, Tensor]:
        """lin_vel_error (m/s, planar, base frame), yaw_rate_error (rad/s), power (W, sum of
        |torque x joint speed|) and speed (m/s, planar, world): energy per meter is
        mean(power) / mean(speed); and the gait/ metrics of tasks/gait.py."""
        b, cmd = self.body, self._command.seen
        vel, gyro = b.lin_vel(), b.gyro()
        return {
            "lin_vel_error": (cmd[:, :2] - vel[:, :2]).norm(dim=-1),
            "yaw_rate_error": (cmd[:, 2] - gyro[:, 2]).abs(),
            "power": (b.joint_torque() * b.joint_vel()).abs().sum(-1),
            "speed": sim.qvel[:, :2].norm(dim=-1),
        } | self._gait.update(b.foot_contact(), b.feet_pos(), cmd[:, :2].norm(dim=-1))

    def episode_outcomes(self, sim: BatchedSim) -> dict[str, Tensor]:
        return {k: v for hook in self._hooks[EPISODE_OUTCOMES] for k, v in hook().items()}

    def iteration_metrics(self) -> dict[str, Tensor]:
        return {k: v for hook in self._hooks[ITERATION_METRICS] for k, v in hook().items()}

    def summarize(self, means: dict[str, float]) -> dict[str, float]:
        """fall_rate (episodes ended by a fall), episode_seconds, and energy_per_meter (J/m):
        mechanical work at the joints over planar distance, mean(power) / mean(speed)."""
        return {"fall_rate": means["terminated_rate"],
                "episode_seconds": means["mean_length"] * self.dt,
                "energy_per_meter": means["power"] / max(means["speed"], 1e-6)}

    # ---------------------------------------------------------------- checkpoints
    def state_dict(self) -> dict[str, Any]:
        """The union of the terms' state, by term class."""
        return {f"{type(t).__name__}.{k}": v for t in self.terms
                for k, v in t.state_dict().items()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        for t in self.terms:
            prefix = f"{type(t).__name__}."
            mine = {k[len(prefix):]: v for k, v in state.items() if k.startswith(prefix)}
            if set(mine) != set(t.state_dict()):
                raise ValueError(f"the checkpoint's task state does not match term "
                                 f"{type(t).__name__}: it has {sorted(mine)}, the term holds "
                                 f"{sorted(t.state_dict())}")
            t.load_state_dict(mine)
