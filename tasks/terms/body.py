"""What terms read: `Body`, a legged robot in a batched sim with its sensors looked up once
(names checked when the task binds), and `Step`, one control step's view for rewards and
terminations. Every read is a view of the sim's arrays: no copies, no host syncs."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

import mujoco
import numpy as np
import torch
from torch import Tensor

from trot.sim.base import BatchedSim, sensor_slices
from trot.tasks.base import Episode
from trot.tasks.legged_robot import LeggedRobot

T = TypeVar("T")


class Body:
    """The robot's sensors as [N, ...] views of `sim.sensordata`, its home pose, the
    ground under it (`surface`: world xy [..., 2] -> height [...]; the floor's 0 unless a
    terrain term sets it), and the episode record (`episode`: each env's step and last
    action, tasks/base.py) that the task keeps and the env reads: terms read it here
    rather than keep copies of their own."""

    def __init__(self, robot: LeggedRobot, sim: BatchedSim, contacts: dict[str, list[str]],
                 config):
        m, dev = sim.model, sim.device
        self.robot, self.sim, self.config = robot, sim, config
        self.n, self.device, self.dt = sim.num_envs, dev, sim.control_dt
        self._slices = sensor_slices(m)
        r = robot
        self.contacts = contacts  # contact body -> its touch sensors
        self.s_jpos = self.block([f"{j}_pos" for j in r.joints])
        self.s_jvel = self.block([f"{j}_vel" for j in r.joints])
        self.s_tau = self.block([f"{j}_torque" for j in r.joints])
        self.s_feet = self.block([f"{f}_contact" for f in r.feet])
        self.s_feet_pos = self.block([f"{f}_pos" for f in r.feet])  # [N, 3F] world
        self.s_feet_vel = self.block([f"{f}_vel" for f in r.feet])
        self.s_fall = self.block([x for b in r.terminate_contacts for x in contacts[b]])
        self.s_penalized = self.block([x for b in r.penalize_contacts for x in contacts[b]])
        self.s_up, self.s_gyro, self.s_vel = (self.block([k]) for k in
                                              ("upvector", "gyro", "base_linvel"))
        adr = [int(m.jnt_qposadr[self.id(mujoco.mjtObj.mjOBJ_JOINT, j)]) for j in r.joints]
        # the joints' qpos columns: a slice where they are consecutive (every shipped robot)
        self.qpos_joints = slice(adr[0], adr[-1] + 1) if adr == list(
            range(adr[0], adr[-1] + 1)) else torch.tensor(adr, device=dev)
        kid = self.id(mujoco.mjtObj.mjOBJ_KEY, r.home)
        self.home_qpos = torch.tensor(m.key_qpos[kid], dtype=torch.float32, device=dev)
        self.home_joints = self.home_qpos[self.qpos_joints]  # [J] policy order
        # m, the base at home: a host float, rounded as the float32 pose is
        self.home_height = float(np.float32(m.key_qpos[kid, 2]))
        self.base_id = self.id(mujoco.mjtObj.mjOBJ_BODY, r.base)
        self.floor = -1  # the ground geom's id (the task sets it: the floor, or a terrain)
        ids = [self.id(mujoco.mjtObj.mjOBJ_JOINT, j) for j in r.joints]
        self.joint_range = torch.tensor(m.jnt_range[ids], dtype=torch.float32, device=dev)
        # each foot's height at home: swing heights are measured from there
        d = mujoco.MjData(m)
        mujoco.mj_resetDataKeyframe(m, d, kid)
        mujoco.mj_kinematics(m, d)
        feet = [self.id(mujoco.mjtObj.mjOBJ_GEOM, f) for f in r.feet]
        self.foot_home_z = torch.tensor(d.geom_xpos[feet, 2], dtype=torch.float32, device=dev)
        self.surface: Callable[[Tensor], Tensor] = lambda xy: xy.new_zeros(xy.shape[:-1])
        self.terms: dict[type, object] = {}  # the task's stateful terms by class, as built
        self.episode = Episode.zeros(self.n, m.nu, dev)  # the task's (Locomotion.on_reset,
        # post_step) and the env's: not a term's, so no term's checkpoint state
        self.failed: Callable[[], Tensor] = lambda: torch.zeros(  # the task's terminations
            self.n, dtype=torch.bool, device=dev)

    def term(self, cls: type[T]) -> T:
        """The task's term of this class; a ValueError naming what the task declares."""
        try:
            return self.terms[cls]  # type: ignore[return-value]
        except KeyError:
            raise ValueError(f"a term reads {cls.__name__}, which this task does not "
                             f"declare (before it); it has "
                             f"{', '.join(c.__name__ for c in self.terms) or 'none'}") from None

    def id(self, kind: mujoco.mjtObj, name: str) -> int:
        """The model id of a named object; a ValueError naming what the model has."""
        m = self.sim.model
        i = mujoco.mj_name2id(m, kind, name)
        if i < 0:
            what = str(kind).split("mjOBJ_")[-1].lower()
            raise ValueError(f"a term reads {what} {name!r}, which the robot's model lacks")
        return i

    def block(self, names: list[str]) -> slice:
        """The sensordata columns of these sensors, which must be adjacent in the MJCF."""
        if not names:  # e.g. a robot without penalized contact bodies
            return slice(0, 0)
        unknown = [k for k in names if k not in self._slices]
        if unknown:
            raise ValueError(f"a term reads sensors {unknown}, which the robot's model lacks; "
                             f"its sensors: {', '.join(self._slices)}")
        s = [self._slices[k] for k in names]
        if any(b.start != a.start + a.size for a, b in zip(s, s[1:])):
            raise ValueError(f"sensors {names} must be adjacent in the MJCF")
        return slice(s[0].start, s[-1].start + s[-1].size)

    # reads: [N, ...] views of this step's sensors
    def joint_pos(self) -> Tensor:  # [N, J]
        return self.sim.sensordata[:, self.s_jpos]

    def joint_vel(self) -> Tensor:  # [N, J]
        return self.sim.sensordata[:, self.s_jvel]

    def joint_torque(self) -> Tensor:  # [N, J]
        return self.sim.sensordata[:, self.s_tau]

    def lin_vel(self) -> Tensor:  # [N, 3] base frame
        return self.sim.sensordata[:, self.s_vel]

    def gyro(self) -> Tensor:  # [N, 3] base frame
        return self.sim.sensordata[:, self.s_gyro]

    def gravity(self) -> Tensor:  # [N, 3] projected gravity, base frame
        return -self.sim.sensordata[:, self.s_up]

    def foot_contact(self) -> Tensor:  # [N, F] bool
        return self.sim.sensordata[:, self.s_feet] > self.config.contact_threshold

    def feet_pos(self) -> Tensor:  # [N, F, 3] world
        return self.sim.sensordata[:, self.s_feet_pos].unflatten(1, (-1, 3))

    def feet_vel(self) -> Tensor:  # [N, F, 3] world
        return self.sim.sensordata[:, self.s_feet_vel].unflatten(1, (-1, 3))

    def feet_height(self) -> Tensor:
        """[N, F] m: each foot above the ground under it, less its height at home (0 for a
        foot standing as at home, on flat ground or on a stair)."""
        feet = self.feet_pos()
        return feet[..., 2] - self.surface(feet[..., :2]) - self.foot_home_z

    def base_height(self) -> Tensor:  # [N] m above the ground under the base
        return self.sim.qpos[:, 2] - self.surface(self.sim.qpos[:, :2])


@dataclass
class Step:
    """One control step as rewards read it (after physics, once memory has advanced)."""

    body: Body
    action: Tensor  # [N, A] the (clipped) action this step applied
    command: Tensor  # [N, C] the command that action answered

    @property
    def config(self):
        return self.body.config

    def term(self, cls: type[T]) -> T:
        return self.body.term(cls)
