"""Reward terms. A stateless term is a function of the step, `Step -> [N]` (unweighted); one
with memory is a small `Term` that advances in `post_step`, once per step, and is read by a
function here. The task weights each term (per second) and multiplies by the control dt, so
that weights read as in legged_gym (Rudin et al. 2022). Nothing here syncs with the host.
"""

from __future__ import annotations

import torch
from torch import Tensor

from trot.tasks.terms.body import Body, Step
from trot.tasks.terms.state import Term


def gaussian(x: Tensor, std: float) -> Tensor:
    """exp(-(x/std)^2): 1 at 0, smooth, bounded in (0, 1]."""
    return (-(x / std).square()).exp()


def tracking_exp(sq_error: Tensor, std: float) -> Tensor:
    """exp(-err^2 / std^2) of an already-squared error [N]."""
    return (-sq_error / (std * std)).exp()


# ---------------------------------------------------------------- memory
class PreviousAction(Term):
    """prev [N, A]: the action of the step before this one (0 at an episode's first step).
    The last action itself is the episode record's (`Body.episode.last_action`, which the
    env's checkpoint holds): in post_step, before the task advances the record, it is
    still the step before's."""

    def __init__(self, body: Body):
        self.prev = torch.zeros(body.n, body.sim.model.nu, device=body.device)

    def post_step(self, step: Step) -> None:
        self.prev.copy_(step.body.episode.last_action)


class PreviousJointVel(Term):
    """The joint velocities before this step's physics."""

    def __init__(self, body: Body):
        self.prev = torch.zeros(body.n, len(body.robot.joints), device=body.device)

    def reset(self, body: Body, mask: Tensor, gen: torch.Generator) -> None:
        self.prev.copy_(torch.where(mask[:, None], body.joint_vel(), self.prev))

    def pre_step(self, body: Body, gen: torch.Generator) -> None:
        self.prev.copy_(body.joint_vel())


class FeetAirTime(Term):
    """legged_gym's feet air time (`_reward_feet_air_time`): a foot that touches down after
    a swing scores (air time - air_time_target), while commanded to move faster than
    0.1 m/s: long steps pay, shuffling costs. A contact counts if this step or the last saw
    it (touch forces flicker on first impact). `value` [N] is this step's score."""

    MIN_COMMAND = 0.1

    def __init__(self, body: Body):
        nf = len(body.robot.feet)
        self.air = torch.zeros(body.n, nf, device=body.device)  # [N, F] s since lift-off
        self.last_contact = torch.zeros(body.n, nf, dtype=torch.bool, device=body.device)
        self.value = torch.zeros(body.n, device=body.device)

    def reset(self, body: Body, mask: Tensor, gen: torch.Generator) -> None:
        self.air.masked_fill_(mask[:, None], 0.0)
        self.last_contact.masked_fill_(mask[:, None], False)

    def post_step(self, step: Step) -> None:
        contact = step.body.foot_contact()
        filt = contact | self.last_contact
        first = (self.air > 0) & filt  # touchdown after at least one step in the air
        air = self.air + step.body.dt
        moving = step.command[:, :2].norm(dim=-1) > self.MIN_COMMAND
        target = step.config.air_time_target
        self.value.copy_(((air - target) * first).sum(-1) * moving)
        self.air.copy_(torch.where(filt, 0.0, air))
        self.last_contact.copy_(contact)


# ---------------------------------------------------------------- terms
def lin_vel(s: Step) -> Tensor:
    """exp(-|v_cmd - v|^2 / std^2) over the base's planar velocity (base frame)."""
    err = (s.command[:, :2] - s.body.lin_vel()[:, :2]).square().sum(-1)
    return tracking_exp(err, s.config.tracking_std)


def yaw_rate(s: Step) -> Tensor:
    """exp(-(w_cmd - w_z)^2 / std^2)."""
    return tracking_exp((s.command[:, 2] - s.body.gyro()[:, 2]).square(), s.config.tracking_std)


def lin_vel_z(s: Step) -> Tensor:
    """Vertical base velocity squared (base frame)."""
    return s.body.lin_vel()[:, 2].square()


def ang_vel_xy(s: Step) -> Tensor:
    """Roll and pitch rates squared, summed."""
    return s.body.gyro()[:, :2].square().sum(-1)


def orientation(s: Step) -> Tensor:
    """Projected gravity's xy squared, summed: 0 when level."""
    return s.body.gravity()[:, :2].square().sum(-1)


def torques(s: Step) -> Tensor:
    """Joint torques squared, summed."""
    return s.body.joint_torque().square().sum(-1)


def joint_acc(s: Step) -> Tensor:
    """Finite-difference joint accelerations over the step, squared, summed."""
    prev = s.term(PreviousJointVel).prev
    return ((s.body.joint_vel() - prev) / s.body.dt).square().sum(-1)


def joint_vel(s: Step) -> Tensor:
    """Joint speeds squared, summed."""
    return s.body.joint_vel().square().sum(-1)


def action_rate(s: Step) -> Tensor:
    """Action changes between consecutive steps, squared, summed."""
    return (s.action - s.term(PreviousAction).prev).square().sum(-1)


def feet_air_time(s: Step) -> Tensor:
    return s.term(FeetAirTime).value


def undesired_contacts(s: Step) -> Tensor:
    """Penalized bodies (the description's penalize_contacts) pressed harder than
    contact_threshold N, count."""
    forces = s.body.sim.sensordata[:, s.body.s_penalized]
    return (forces > s.config.contact_threshold).float().sum(-1)


def feet_slip(s: Step) -> Tensor:
    """Planar speed squared of feet on the ground, summed."""
    v = s.body.feet_vel()[..., :2]  # [N, F, 2]
    return (v.square().sum(-1) * s.body.foot_contact()).sum(-1)


def base_height(s: Step) -> Tensor:
    """(base height above the ground - base_height_target)^2; target 0: the home height."""
    target = s.config.base_height_target or s.body.home_height
    return (s.body.base_height() - target).square()


def joint_limits(s: Step) -> Tensor:
    """Radians beyond the soft joint limits (soft_joint_limit of each range, about its
    middle), summed."""
    lo, hi = s.body.joint_range.unbind(-1)
    mid, half = (lo + hi) / 2, (hi - lo) / 2 * s.config.soft_joint_limit
    q = s.body.joint_pos()
    return ((mid - half - q).clamp(min=0) + (q - (mid + half)).clamp(min=0)).sum(-1)


def alive(s: Step) -> Tensor:
    """1 per second."""
    return torch.ones_like(s.body.sim.qpos[:, 0])


class Deviation(Term):
    """Squared offsets from home of `deviation_joints` (e.g. hip roll and yaw, which keep a
    biped's feet apart and pointing forward), summed."""

    def __init__(self, body: Body):
        names = list(body.robot.joints)
        unknown = [j for j in body.config.deviation_joints if j not in names]
        if unknown:
            raise ValueError(f"deviation_joints {unknown} are not policy joints; policy "
                             f"joints: {', '.join(names)}")
        self.index = torch.tensor([names.index(j) for j in body.config.deviation_joints],
                                  dtype=torch.long, device=body.device)

    def __call__(self, s: Step) -> Tensor:
        return (s.body.joint_pos() - s.body.home_joints)[:, self.index].square().sum(-1)
