"""Velocity tracking for any legged robot: one task over a robot description.

The policy follows a command (forward and lateral speed in the base frame, yaw rate) with
joint position targets around the standing pose, as in legged_gym (Rudin et al. 2022) and
MuJoCo Playground's joystick tasks. It sees only what the robot measures: IMU, joint
encoders, its last action and the command; the critic also gets privileged simulator state.
The robot is data (`LeggedRobot`, tasks/legged_robot.py); a robot's task is a one-line
subclass naming it, registered with `config_for(robot)` (see tasks/go2.py).

Step order (tasks/env.py): pre_step (timers: command resampling, pushes; joint velocity
snapshot) -> action_to_ctrl (latency) -> physics -> post_step (heading commands: the
yaw-rate command follows the new yaw) -> observation -> reward (which also
advances the per-step histories: last action, feet air time) -> terminated -> for ended
envs: initial_state -> randomize -> the sim's reset (its forward sees the new parameters) ->
on_reset. Every per-env clock is a tensor; nothing here reads a tensor on the host.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import ClassVar

import mujoco
import torch
from torch import Tensor

from trot.sim.base import BatchedSim, sensor_slices
from trot.tasks import legged_robot as lr
from trot.tasks import locomotion as loco
from trot.tasks.base import Task
from trot.tasks.gait import GaitTracker
from trot.tasks.legged_config import COMMANDS, LeggedConfig, config_for
from trot.tasks.legged_robot import LeggedRobot
from trot.tasks.mirror import Mirror
from trot.tasks.observation import ObsTerm
from trot.tasks.randomization import DomainRandomizer

__all__ = ["COMMANDS", "LeggedConfig", "LeggedVelocity", "config_for"]


class LeggedVelocity(Task[LeggedConfig]):
    """Velocity tracking for `robot`. A robot's task: `class Go2Flat(LeggedVelocity): robot =
    GO2` (tasks/go2.py)."""

    robot: ClassVar[LeggedRobot]
    command_dim = 3

    # ---------------------------------------------------------------- model
    def build(self) -> mujoco.MjSpec:
        spec = lr.prepare(self.robot)
        self._floor_name = lr.floor_geom(spec)
        r = self.robot  # names the spec fixes, for observation terms and bind
        self._contact_names = {b: lr.contact_sensors(r, spec, b)
                               for b in (*r.terminate_contacts, *r.penalize_contacts)}
        return spec

    def command_ranges(self) -> dict[str, list[float]]:
        """Command ranges by name; the command vector is ordered as COMMANDS."""
        c = self.config
        return {"lin_vel_x": list(c.lin_vel_x), "lin_vel_y": list(c.lin_vel_y),
                "yaw_rate": list(c.yaw_rate)}

    def action_affine(self, model: mujoco.MjModel) -> tuple[list[float], list[float]]:
        kid = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_KEY, self.robot.home)
        offset = [float(model.key_qpos[kid, model.jnt_qposadr[model.actuator_trnid[i, 0]]])
                  for i in range(model.nu)]
        return [self.config.action_scale] * model.nu, offset

    @property
    def home_keyframe(self) -> str:  # the description's, e.g. 'standing'
        return self.robot.home

    def mirror(self) -> Mirror | None:
        """The description's joint mirror; forward speed keeps its sign, lateral speed and
        yaw rate flip."""
        return Mirror(self.robot.mirror, command=(1.0, -1.0, -1.0)) if self.robot.mirror \
            else None

    def home_pose(self) -> tuple[float, ...]:
        """The policy joints' angles in the home keyframe, in policy order."""
        if not hasattr(self, "_home_pose"):
            m = self._model()
            kid = mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_KEY, self.robot.home)
            self._home_pose = tuple(float(m.key_qpos[kid, m.jnt_qposadr[mujoco.mj_name2id(
                m, mujoco.mjtObj.mjOBJ_JOINT, j)]]) for j in self.robot.joints)
        return self._home_pose

    def _model(self) -> mujoco.MjModel:
        """The compiled model: the sim's once bound, else compiled here once (observation
        terms of a task that has no sim yet)."""
        if not hasattr(self, "_compiled"):
            self._compiled = self.build().compile()
        return self._compiled

    def _contacts(self, bodies: tuple[str, ...]) -> list[str]:
        """The touch sensors of these contact bodies (legged_robot.contact_sensors)."""
        if not hasattr(self, "_contact_names"):
            self.build()
        return [x for b in bodies for x in self._contact_names[b]]

    # ---------------------------------------------------------------- observations
    def policy_terms(self) -> tuple[ObsTerm, ...]:
        # scales as legged_gym (ang vel 0.25, joint vel 0.05); noise half-widths are its noise
        # levels (gravity 0.05, gyro 0.2 rad/s, joint pos 0.01 rad, joint vel 1.5 rad/s)
        # times the scale
        joints = self.robot.joints
        return (
            ObsTerm("projected_gravity", "sensor", ("upvector",), scale=-1.0, noise=0.05),
            ObsTerm("base_ang_vel", "sensor", ("gyro",), scale=0.25, noise=0.05),
            ObsTerm("joint_pos", "sensor", tuple(f"{j}_pos" for j in joints),
                    offset=self.home_pose(), noise=0.01),
            ObsTerm("joint_vel", "sensor", tuple(f"{j}_vel" for j in joints), scale=0.05,
                    noise=0.075),
            ObsTerm("last_action", "last_action"),
            ObsTerm("command", "command"),
        )

    def critic_terms(self) -> tuple[ObsTerm, ...]:
        clean = tuple(replace(t, noise=0.0) for t in self.policy_terms())
        r, m = self.robot, self._model()
        floor = mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_GEOM, self._floor_name)
        penalized = tuple(self._contacts(r.penalize_contacts))
        contacts = (ObsTerm("contact_forces", "sensor", penalized, scale=0.02),) \
            if penalized else ()
        return clean + (
            ObsTerm("base_lin_vel", "sensor", ("base_linvel",), scale=2.0),
            ObsTerm("base_height", "qpos", start=2, stop=3, scale=1.0),
            ObsTerm("foot_forces", "sensor", tuple(f"{f}_contact" for f in r.feet),
                    scale=0.02),
            *contacts,
            # the floor's randomized sliding friction (geom_friction flattened [ngeom * 3])
            ObsTerm("floor_friction", "param", field="geom_friction", start=3 * floor,
                    stop=3 * floor + 1, offset=(1.0,), scale=2.0, mirror=(1.0,)),
        )

    # ---------------------------------------------------------------- setup
    def bind(self, sim: BatchedSim) -> None:
        m, c, r = sim.model, self.config, self.robot
        dev = sim.device
        self.dt = sim.control_dt
        self._compiled = m  # the model the env compiled from this task's build()
        acts = [mujoco.mj_id2name(m, mujoco.mjtObj.mjOBJ_JOINT, m.actuator_trnid[i, 0])
                for i in range(m.nu)]
        if tuple(acts) != r.joints:
            raise ValueError(f"actuators must drive {r.joints} in order, got {acts}")
        slices = sensor_slices(m)

        def block(names: list[str]) -> slice:
            if not names:  # e.g. a robot without penalized contact bodies
                return slice(0, 0)
            s = [slices[k] for k in names]
            if any(b.start != a.start + a.size for a, b in zip(s, s[1:])):
                raise ValueError(f"sensors {names} must be adjacent in the MJCF")
            return slice(s[0].start, s[-1].start + s[-1].size)

        self._s_jpos = block([f"{j}_pos" for j in r.joints])
        self._s_jvel = block([f"{j}_vel" for j in r.joints])
        self._s_tau = block([f"{j}_torque" for j in r.joints])
        self._s_feet = block([f"{f}_contact" for f in r.feet])
        self._s_feet_pos = block([f"{f}_pos" for f in r.feet])  # [N, 3F] world
        self._s_feet_vel = block([f"{f}_vel" for f in r.feet])
        self._s_fall = block(self._contacts(r.terminate_contacts))
        self._s_penalized = block(self._contacts(r.penalize_contacts))
        one = lambda k: slice(slices[k].start, slices[k].start + slices[k].size)  # noqa: E731
        self._s_up, self._s_gyro = one("upvector"), one("gyro")
        self._s_vel = one("base_linvel")
        joint_ids = [mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_JOINT, j) for j in r.joints]
        adr = [int(m.jnt_qposadr[j]) for j in joint_ids]
        # the joints' qpos columns: a slice where they are consecutive (every shipped robot)
        self._qpos_joints = slice(adr[0], adr[-1] + 1) if adr == list(
            range(adr[0], adr[-1] + 1)) else torch.tensor(adr, device=dev)

        kid = mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_KEY, r.home)
        self._home_qpos = torch.tensor(m.key_qpos[kid], dtype=torch.float32, device=dev)
        self._cmd_low = torch.tensor([c.lin_vel_x[0], c.lin_vel_y[0], c.yaw_rate[0]],
                                     device=dev)
        self._cmd_high = torch.tensor([c.lin_vel_x[1], c.lin_vel_y[1], c.yaw_rate[1]],
                                      device=dev)
        self._standing = c.standing_fraction  # share of all-zero commands
        self._resample_steps = max(1, round(c.resample_seconds / self.dt))
        self._push_steps = tuple(max(1, round(s / self.dt)) for s in c.push_interval_seconds)
        self._bind_state(sim)

    def _bind_state(self, sim: BatchedSim) -> None:
        """Per-env clocks and histories, and the randomization's ids and nominal values."""
        m, c, n, dev = sim.model, self.config, sim.num_envs, sim.device
        f32 = dict(device=dev, dtype=torch.float32)
        self.command = torch.zeros(n, 3, **f32)
        self._cmd_seen = torch.zeros(n, 3, **f32)  # the command the current action answered
        self._cmd_timer = torch.zeros(n, dtype=torch.int64, device=dev)
        self._heading = loco.HeadingSteer(n, c.heading_stiffness, c.yaw_rate, math.pi, dev) \
            if c.heading_command else None
        self._push_timer = torch.zeros(n, dtype=torch.int64, device=dev)
        self._push_at = torch.full((n,), self._push_steps[1], dtype=torch.int64, device=dev)
        self._prev_action = torch.zeros(n, m.nu, **f32)
        self._prev_joint_vel = torch.zeros(n, m.nu, **f32)
        nfeet = len(self.robot.feet)
        self._air_time = torch.zeros(n, nfeet, **f32)
        self._last_contact = torch.zeros(n, nfeet, dtype=torch.bool, device=dev)
        self._gait = GaitTracker(n, self.robot.feet, self.dt, dev)  # evaluation only
        if c.latency_steps < 0:
            raise ValueError(f"latency_steps must be >= 0, got {c.latency_steps}")
        self._latency = torch.zeros(c.latency_steps, n, m.nu, **f32)  # ring of pending actions
        self._ring = 0

        self._floor = mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_GEOM, self._floor_name)
        base = mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_BODY, self.robot.base)
        self._randomize = DomainRandomizer(m, c, self._floor, base, dev)

    # ---------------------------------------------------------------- sensors
    def _joint_vel(self, sim: BatchedSim) -> Tensor:
        return sim.sensordata[:, self._s_jvel]

    def _gravity(self, sim: BatchedSim) -> Tensor:
        return -sim.sensordata[:, self._s_up]

    # ---------------------------------------------------------------- resets
    def initial_state(self, sim: BatchedSim, gen: torch.Generator) -> tuple[Tensor, Tensor]:
        c, n, dev = self.config, sim.num_envs, sim.device
        u = lambda *s: 2.0 * torch.rand(*s, generator=gen, device=dev) - 1.0  # noqa: E731
        qpos = self._home_qpos.expand(n, -1).clone()
        yaw = math.pi * u(n)
        qpos[:, 3], qpos[:, 6] = torch.cos(yaw / 2), torch.sin(yaw / 2)
        qpos[:, self._qpos_joints] += c.init_joint_noise * u(n, len(self.robot.joints))
        qvel = torch.zeros(n, sim.model.nv, device=dev)
        qvel[:, :6] = c.init_vel_noise * u(n, 6)
        return qpos, qvel

    def on_reset(self, sim: BatchedSim, mask: Tensor, gen: torch.Generator) -> None:
        n = sim.num_envs
        m1 = mask[:, None]
        cmd = loco.sample_commands(n, self._cmd_low, self._cmd_high, self._standing, gen)
        self.command.copy_(torch.where(m1, cmd, self.command))
        self._steer(sim, mask, cmd, gen)
        self._cmd_seen.copy_(torch.where(m1, self.command, self._cmd_seen))
        self._cmd_timer.masked_fill_(mask, 0)
        self._push_timer.masked_fill_(mask, 0)
        self._push_at.copy_(torch.where(mask, self._draw_push_interval(n, gen, sim.device),
                                        self._push_at))
        self._prev_action.masked_fill_(m1, 0.0)
        self._prev_joint_vel.copy_(torch.where(m1, self._joint_vel(sim), self._prev_joint_vel))
        self._air_time.masked_fill_(m1, 0.0)
        self._last_contact.masked_fill_(m1, False)
        self._latency.masked_fill_(mask[None, :, None], 0.0)
        self._gait.reset(mask)

    def randomize(self, sim: BatchedSim, mask: Tensor, gen: torch.Generator) -> None:
        if self.config.randomize:
            self._randomize(sim, mask, gen)

    def _draw_push_interval(self, n: int, gen: torch.Generator, dev) -> Tensor:
        lo, hi = self._push_steps
        return torch.randint(lo, hi + 1, (n,), generator=gen, device=dev)

    # ---------------------------------------------------------------- stepping
    def pre_step(self, sim: BatchedSim, gen: torch.Generator) -> None:
        c = self.config
        # The action about to be applied answered the command in the last observation: its
        # reward is scored against that one, even where the command changes now.
        self._cmd_seen.copy_(self.command)
        due, self._cmd_timer = loco.tick(self._cmd_timer, self._resample_steps)
        new = loco.sample_commands(sim.num_envs, self._cmd_low, self._cmd_high,
                                   self._standing, gen)
        self.command.copy_(torch.where(due[:, None], new, self.command))
        if self._heading is not None:  # targets drawn now, from the yaw before the physics;
            # every moving env steers after it (post_step)
            self._heading.draw(loco.yaw_of(sim.qpos[:, 3:7]), due, new, gen)
        self._prev_joint_vel.copy_(self._joint_vel(sim))
        if c.push:
            self._push(sim, gen)

    def post_step(self, sim: BatchedSim) -> None:
        if self._heading is not None:  # every moving env steers from its yaw after physics
            self._heading.steer(loco.yaw_of(sim.qpos[:, 3:7]), self.command)

    def _steer(self, sim: BatchedSim, new: Tensor, cmd: Tensor, gen: torch.Generator) -> None:
        """heading_command at a reset: rows `new` [N] (given `cmd` [N, 3]) draw a target
        heading and, if moving, steer to it from their start yaw (post_step, which steers
        every env, has run for this step)."""
        if self._heading is not None:
            yaw = loco.yaw_of(sim.qpos[:, 3:7])  # the free base joint's quaternion
            self._heading.draw(yaw, new, cmd, gen)
            self._heading.steer(yaw, self.command, new)

    def _push(self, sim: BatchedSim, gen: torch.Generator) -> None:
        """Kick due envs: add U(-v, v) to the base's world-frame x/y velocity."""
        n, dev = sim.num_envs, sim.device
        self._push_timer += 1
        due = self._push_timer >= self._push_at
        self._push_timer.masked_fill_(due, 0)
        self._push_at.copy_(torch.where(due, self._draw_push_interval(n, gen, dev),
                                        self._push_at))
        kick = self.config.push_velocity * (2 * torch.rand(n, 2, generator=gen, device=dev) - 1)
        dqvel = torch.zeros_like(sim.qvel)
        dqvel[:, :2] = kick
        sim.kick(due, dqvel)

    def action_latency_steps(self) -> int:
        return self.config.latency_steps

    def action_to_ctrl(self, action: Tensor) -> Tensor:
        """Joint targets; with latency L, the targets of the action from L steps ago."""
        if self.config.latency_steps > 0:
            slot = self._ring
            delayed = self._latency[slot].clone()
            self._latency[slot] = action
            self._ring = (slot + 1) % self.config.latency_steps
            action = delayed
        return self.action_offset + self.action_scale * action

    def reward(self, sim: BatchedSim, action: Tensor) -> tuple[Tensor, dict[str, Tensor]]:
        """Weighted terms x control dt, summed (clipped at 0 with only_positive_rewards), plus
        the one-off termination penalty on a fall."""
        terms = {k: (w * self.dt) * v for k, (w, v) in self.reward_terms(sim, action).items()}
        total = torch.stack(list(terms.values())).sum(0)
        if self.config.only_positive_rewards:
            total = total.clamp(min=0.0)
        terms["termination"] = self.config.w_termination * self.terminated(sim).float()
        return total + terms["termination"], terms

    def reward_terms(self, sim: BatchedSim, action: Tensor) -> dict[str, tuple[float, Tensor]]:
        """name -> (weight per second, unweighted value [N]). A variant adds a term with
        `super().reward_terms(sim, action) | {"mine": (w, value)}` (docs/tasks.md)."""
        c, d = self.config, sim.sensordata
        vel, gyro, gravity = d[:, self._s_vel], d[:, self._s_gyro], self._gravity(sim)
        jvel, tau = d[:, self._s_jvel], d[:, self._s_tau]
        cmd = self._cmd_seen
        contact = self._foot_contact(sim)
        air, self._air_time, self._last_contact = loco.feet_air_time(
            contact, self._last_contact, self._air_time, self.dt, cmd[:, :2],
            c.air_time_target)
        raw = {
            "lin_vel": (c.w_lin_vel, loco.track_lin_vel_xy(cmd[:, :2], vel[:, :2],
                                                           c.tracking_std)),
            "yaw_rate": (c.w_yaw_rate, loco.track_yaw_rate(cmd[:, 2], gyro[:, 2],
                                                           c.tracking_std)),
            "lin_vel_z": (c.w_lin_vel_z, loco.lin_vel_z(vel[:, 2])),
            "ang_vel_xy": (c.w_ang_vel_xy, loco.ang_vel_xy(gyro)),
            "orientation": (c.w_orientation, loco.flat_orientation(gravity)),
            "torques": (c.w_torques, loco.torques(tau)),
            "joint_acc": (c.w_joint_acc, loco.joint_acc(jvel, self._prev_joint_vel, self.dt)),
            "action_rate": (c.w_action_rate, loco.action_rate(action, self._prev_action)),
            "feet_air_time": (c.w_feet_air_time, air),
            "undesired_contacts": (c.w_undesired_contacts, loco.undesired_contacts(
                d[:, self._s_penalized], c.contact_threshold)),
        }
        self._prev_action.copy_(action)
        return raw

    def terminated(self, sim: BatchedSim) -> Tensor:
        d = sim.sensordata
        fell = (d[:, self._s_fall] > self.config.contact_threshold).any(-1)
        tilted = self._gravity(sim)[:, 2] > self.config.max_gravity_z
        return fell | tilted

    def eval_metrics(self, sim: BatchedSim) -> dict[str, Tensor]:
        """lin_vel_error (m/s, planar, base frame), yaw_rate_error (rad/s), power (W, sum of
        |torque x joint speed|) and speed (m/s, planar, world): energy per meter is
        mean(power) / mean(speed); and the gait/ metrics of tasks/gait.py."""
        d, cmd = sim.sensordata, self._cmd_seen
        vel, gyro = d[:, self._s_vel], d[:, self._s_gyro]
        return {
            "lin_vel_error": (cmd[:, :2] - vel[:, :2]).norm(dim=-1),
            "yaw_rate_error": (cmd[:, 2] - gyro[:, 2]).abs(),
            "power": (d[:, self._s_tau] * d[:, self._s_jvel]).abs().sum(-1),
            "speed": sim.qvel[:, :2].norm(dim=-1),
        } | self._gait.update(self._foot_contact(sim), self._feet_pos(sim),
                              cmd[:, :2].norm(dim=-1))

    def surface(self, xy: Tensor) -> Tensor:
        """Ground height (m) [...] under world points xy [..., 2]: the floor plane's 0 here;
        the rough task's terrain (tasks/rough.py)."""
        return xy.new_zeros(xy.shape[:-1])

    def _foot_contact(self, sim: BatchedSim) -> Tensor:  # [N, F] bool
        return sim.sensordata[:, self._s_feet] > self.config.contact_threshold

    def _feet_pos(self, sim: BatchedSim) -> Tensor:  # [N, F, 3] world
        return sim.sensordata[:, self._s_feet_pos].unflatten(1, (-1, 3))

    def summarize(self, means: dict[str, float]) -> dict[str, float]:
        """fall_rate (episodes ended by a fall), episode_seconds, and energy_per_meter (J/m):
        mechanical work at the joints over planar distance, mean(power) / mean(speed)."""
        return {"fall_rate": means["terminated_rate"],
                "episode_seconds": means["mean_length"] * self.dt,
                "energy_per_meter": means["power"] / max(means["speed"], 1e-6)}

    # ---------------------------------------------------------------- checkpoints
    _STATE = ("command", "_cmd_seen", "_cmd_timer", "_push_timer", "_push_at", "_prev_action",
              "_prev_joint_vel", "_air_time", "_last_contact", "_latency")

    def state_dict(self) -> dict[str, Tensor]:
        out = {k.lstrip("_"): getattr(self, k).clone() for k in self._STATE}
        out["ring"] = torch.tensor(self._ring)
        return out | (self._heading.state_dict() if self._heading is not None else {})

    def load_state_dict(self, state: dict[str, Tensor]) -> None:
        for k in self._STATE:
            getattr(self, k).copy_(state[k.lstrip("_")])
        self._ring = int(state["ring"])
        if self._heading is not None:
            self._heading.load_state_dict(state)


