"""Velocity tracking with a gait clock: the generic legged task (tasks/legged.py) plus a
clock that sets the feet's rhythm, and the terms a clocked walker needs. A robot's task is
`class G1Flat(LeggedClocked): robot = G1` (a biped, tasks/g1.py) or `class Go1Flat(...)` (a
trotting quadruped, tasks/go1.py).

The gait is set by a clock, as in unitree_rl_gym's G1 and H1 tasks, MuJoCo Playground's
humanoid joysticks and walk-these-ways' quadrupeds: each episode runs a cycle of
`gait_period` seconds; each foot should be down for the first `stance_share` of its own
cycle, which starts `gait_offsets` of a cycle after the first foot's (a biped's feet half a
cycle apart; a trot's diagonal pairs). The policy sees the clock's phase ([sin, cos],
observation kind `clock`; on the robot, the time since it started walking). While the
command is to stand (below `standing_speed`), every foot should stay down. Terms added to
the legged task's (weights per second):

- gait_contact: per foot, 1 where its contact matches the clock's schedule;
- feet_phase: every foot follows the clock's swing arch (height above home 0 in stance, a
  sine of peak swing_height over the swing; 0 for every foot while standing), an exp kernel
  as MuJoCo Playground's humanoid joysticks;
- swing_height: (foot height above its home height - swing_height)^2 for feet in the air
  (unitree_rl_gym's; off by default: it leaves a shuffling robot unpenalized);
- feet_slip: planar speed^2 of feet on the ground;
- deviation: squared offset from home of `deviation_joints` (the hip roll and yaw, which
  keep the feet apart and pointing forward);
- base_height: (base height - base_height_target)^2;
- joint_limits: how far joints go past `soft_joint_limit` of their range (rad);
- joint_vel: joint speeds^2; alive: 1 per second not fallen.

An episode also ends when the base drops below `min_base_height` (a fall). Heights are above
the ground under the foot or base (`surface`: 0 on flat ground, the terrain's in
tasks/rough.py), so the same terms hold on stairs.
"""

from __future__ import annotations

from dataclasses import dataclass

import mujoco
import torch
from torch import Tensor

from trot.sim.base import BatchedSim
from trot.tasks.legged import LeggedConfig, LeggedVelocity
from trot.tasks.observation import ObsTerm


@dataclass(frozen=True)
class ClockedConfig(LeggedConfig):
    """The clocked task's settings; the defaults are the G1's (tasks/g1.py)."""

    gait_period: float = 0.8
    """s per gait cycle (every foot one step)"""
    stance_share: float = 0.55
    """share of the cycle each foot should be on the ground"""
    gait_offsets: tuple[float, ...] = ()
    """each foot's touchdown in the cycle, as a share of it, in the description's feet order
    (a trot: diagonal pairs half a cycle apart); empty: foot i at i / F (a biped alternates)"""
    standing_speed: float = 0.1
    """below this command size (planar m/s and yaw rad/s, norm) every foot stays down"""
    swing_height: float = 0.08
    """m above its home height a swinging foot should reach"""
    deviation_joints: tuple[str, ...] = ()
    """joints held near their home angle by the deviation term (e.g. hip roll and yaw)"""
    base_height_target: float = 0.0
    """base height (m) of the base_height term; 0: the home keyframe's"""
    min_base_height: float = 0.0
    """end the episode when the base is lower than this (m); 0: never"""
    soft_joint_limit: float = 0.9
    """share of each joint's range, about its middle, that joint_limits leaves free"""
    w_feet_air_time: float = 0.0
    """(the legged term; the clock sets the steps here)"""
    w_gait_contact: float = 0.18
    """feet whose contact matches the clock's schedule, count"""
    w_swing_height: float = 0.0
    """squared miss of swing_height, feet in the air (unitree_rl_gym's -20; off: it leaves a
    shuffling robot unpenalized, feet_phase does not)"""
    w_feet_phase: float = 1.0
    """exp(-sum over feet of (height - clock's height)^2 / feet_phase_std^2): every foot
    follows the clock's swing arch (0 in stance, up to swing_height mid-swing)"""
    feet_phase_std: float = 0.05
    """m: the feet_phase kernel's width"""
    w_feet_slip: float = -0.2
    """planar speed squared of feet on the ground"""
    w_deviation: float = -1.0
    """squared offsets of deviation_joints from home"""
    w_base_height: float = -10.0
    """squared miss of base_height_target"""
    w_joint_limits: float = -5.0
    """rad beyond the soft joint limits, summed"""
    w_joint_vel: float = -1e-3
    """joint speeds squared"""
    w_alive: float = 0.15
    """1 per second"""


class LeggedClocked(LeggedVelocity):
    """The legged velocity task with a gait clock and its terms (module docstring)."""

    config: ClockedConfig
    _STATE = LeggedVelocity._STATE + ("_clock",)

    def policy_terms(self) -> tuple[ObsTerm, ...]:
        return super().policy_terms() + (
            ObsTerm("gait_clock", "clock", period=self.config.gait_period),)

    def bind(self, sim: BatchedSim) -> None:
        super().bind(sim)
        m, c, dev = sim.model, self.config, sim.device
        self._clock = torch.zeros(sim.num_envs, dtype=torch.int64, device=dev)
        names = list(self.robot.joints)
        unknown = [j for j in c.deviation_joints if j not in names]
        if unknown:
            raise ValueError(f"deviation_joints {unknown} are not policy joints; policy "
                             f"joints: {', '.join(names)}")
        self._deviation = torch.tensor([names.index(j) for j in c.deviation_joints],
                                       dtype=torch.long, device=dev)
        self._home_joints = torch.tensor(self.home_pose(), device=dev)
        ids = [mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_JOINT, j) for j in names]
        lo, hi = (torch.tensor(m.jnt_range[ids, k], dtype=torch.float32, device=dev)
                  for k in (0, 1))
        mid, half = (lo + hi) / 2, (hi - lo) / 2 * c.soft_joint_limit
        self._soft_lo, self._soft_hi = mid - half, mid + half
        self._base_target = c.base_height_target or float(self._home_qpos[2])
        # each foot's height at home: its swing height is measured from there
        d = mujoco.MjData(m)
        mujoco.mj_resetDataKeyframe(m, d, mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_KEY,
                                                            self.robot.home))
        mujoco.mj_kinematics(m, d)
        feet = [mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_GEOM, f) for f in self.robot.feet]
        self._foot_home_z = torch.tensor(d.geom_xpos[feet, 2], dtype=torch.float32,
                                         device=dev)
        offsets = c.gait_offsets or tuple(i / len(feet) for i in range(len(feet)))
        if len(offsets) != len(feet):
            raise ValueError(f"gait_offsets has {len(offsets)} entries; give one per foot "
                             f"({', '.join(self.robot.feet)}) or none")
        self._phase_offset = torch.tensor(offsets, device=dev, dtype=torch.float32)

    def clock_seconds(self) -> Tensor:
        """[N] s since each env's episode began (the clock observation's time)."""
        return self._clock.float() * self.dt

    def _phase(self) -> tuple[Tensor, Tensor]:
        """Each foot's phase in the cycle [N, F] (0 at its touchdown), and whether the command
        is to stand [N, 1]."""
        c = self.config
        phase = torch.frac((self.clock_seconds() / c.gait_period)[:, None] + self._phase_offset)
        return phase, (self._cmd_seen.norm(dim=-1) < c.standing_speed)[:, None]

    def stance_expected(self) -> Tensor:
        """[N, F] bool: the feet the clock wants on the ground now."""
        phase, standing = self._phase()
        return (phase < self.config.stance_share) | standing

    def swing_target(self) -> Tensor:
        """[N, F] m above home: the clock's arch, sin over the swing, 0 in stance."""
        c = self.config
        phase, standing = self._phase()
        u = ((phase - c.stance_share) / (1.0 - c.stance_share)).clamp(min=0.0)  # swing 0..1
        return torch.where(standing, 0.0, c.swing_height * torch.sin(torch.pi * u))

    def on_reset(self, sim: BatchedSim, mask: Tensor, gen: torch.Generator) -> None:
        super().on_reset(sim, mask, gen)
        self._clock.masked_fill_(mask, 0)

    def pre_step(self, sim: BatchedSim, gen: torch.Generator) -> None:
        super().pre_step(sim, gen)
        self._clock += 1  # the time at the end of this step: what its reward scores

    def reward_terms(self, sim: BatchedSim, action: Tensor) -> dict[str, tuple[float, Tensor]]:
        c, d = self.config, sim.sensordata
        contact = self._foot_contact(sim)  # [N, F]
        feet_v = d[:, self._s_feet_vel].unflatten(1, (-1, 3))[..., :2]  # [N, F, 2]
        q = d[:, self._s_jpos]  # [N, J]
        height = self.feet_height(sim)  # [N, F]
        swing_miss = (height - c.swing_height).square()
        phase_miss = (height - self.swing_target()).square().sum(-1)
        beyond = (self._soft_lo - q).clamp(min=0) + (q - self._soft_hi).clamp(min=0)
        return super().reward_terms(sim, action) | {
            "gait_contact": (c.w_gait_contact,
                             (contact == self.stance_expected()).float().sum(-1)),
            "swing_height": (c.w_swing_height, (swing_miss * ~contact).sum(-1)),
            "feet_phase": (c.w_feet_phase, torch.exp(-phase_miss / c.feet_phase_std ** 2)),
            "feet_slip": (c.w_feet_slip, (feet_v.square().sum(-1) * contact).sum(-1)),
            "deviation": (c.w_deviation, (q - self._home_joints)[:, self._deviation]
                          .square().sum(-1)),
            "base_height": (c.w_base_height, (self.base_height(sim) - self._base_target)
                            .square()),
            "joint_limits": (c.w_joint_limits, beyond.sum(-1)),
            "joint_vel": (c.w_joint_vel, d[:, self._s_jvel].square().sum(-1)),
            "alive": (c.w_alive, torch.ones_like(q[:, 0])),
        }

    def terminated(self, sim: BatchedSim) -> Tensor:
        return super().terminated(sim) | (self.base_height(sim) < self.config.min_base_height)

    def feet_height(self, sim: BatchedSim) -> Tensor:
        """[N, F] m: each foot above the ground under it, less its height at home (0 for a
        foot standing as at home, on flat ground or on a stair)."""
        feet = self._feet_pos(sim)  # [N, F, 3]
        return feet[..., 2] - self.surface(feet[..., :2]) - self._foot_home_z

    def base_height(self, sim: BatchedSim) -> Tensor:
        """[N] m: the base above the ground under it."""
        return sim.qpos[:, 2] - self.surface(sim.qpos[:, :2])
