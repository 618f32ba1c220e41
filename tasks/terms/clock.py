"""The gait clock and the terms that follow it, as in unitree_rl_gym's G1 and H1 tasks,
MuJoCo Playground's humanoid joysticks and walk-these-ways' quadrupeds: each episode runs a
cycle of `gait_period` seconds; each foot should be down for the first `stance_share` of its
own cycle, which starts `gait_offsets` of a cycle after the first foot's (a biped's feet
half a cycle apart; a trot's diagonal pairs). The policy sees the clock's phase ([sin, cos],
observation kind `clock`; on the robot, the time since it started walking). While the
command is to stand (below `standing_speed`), every foot should stay down."""

from __future__ import annotations

import torch
from torch import Tensor

from trot.tasks.terms.body import Body, Step
from trot.tasks.terms.state import Term


class GaitClock(Term):
    """steps [N]: control steps since each env's robot was placed, counted from each
    step's pre_step (so the observation and the reward see the steps taken, the time its
    reward scores). Its own quantity, not the env's clock (`Body.episode.step`): both are 0
    at every reset and count alike, but `Env.reset(stagger=True)` starts the env's clock of
    each first episode at a random step (to spread the time limits) while the gait starts
    at 0, as a robot's runner starts its `time`; and rsl_rl's init_at_random_ep_len writes
    the env's clock (episode_length_buf) only."""

    def __init__(self, body: Body):
        c, nf = body.config, len(body.robot.feet)
        offsets = c.gait_offsets or tuple(i / nf for i in range(nf))
        if len(offsets) != nf:
            raise ValueError(f"gait_offsets has {len(offsets)} entries; give one per foot "
                             f"({', '.join(body.robot.feet)}) or none")
        self.offset = torch.tensor(offsets, device=body.device, dtype=torch.float32)  # [F]
        self.steps = torch.zeros(body.n, dtype=torch.int64, device=body.device)
        self.dt = body.dt

    def reset(self, body: Body, mask: Tensor, gen: torch.Generator) -> None:
        self.steps.masked_fill_(mask, 0)

    def pre_step(self, body: Body, gen: torch.Generator) -> None:
        self.steps += 1

    def seconds(self) -> Tensor:
        """[N] s since each env's episode began (the clock observation's time)."""
        return self.steps.float() * self.dt

    def phase(self, s: Step) -> tuple[Tensor, Tensor]:
        """Each foot's phase in the cycle [N, F] (0 at its touchdown), and whether the
        command is to stand [N, 1]."""
        c = s.config
        phase = torch.frac((self.seconds() / c.gait_period)[:, None] + self.offset)
        return phase, (s.command.norm(dim=-1) < c.standing_speed)[:, None]

    def stance_expected(self, s: Step) -> Tensor:
        """[N, F] bool: the feet the clock wants on the ground now."""
        phase, standing = self.phase(s)
        return (phase < s.config.stance_share) | standing

    def swing_target(self, s: Step) -> Tensor:
        """[N, F] m above home: the clock's arch, sin over the swing, 0 in stance."""
        c = s.config
        phase, standing = self.phase(s)
        u = ((phase - c.stance_share) / (1.0 - c.stance_share)).clamp(min=0.0)  # swing 0..1
        return torch.where(standing, 0.0, c.swing_height * torch.sin(torch.pi * u))


def gait_contact(s: Step) -> Tensor:
    """Feet whose contact matches the clock's schedule, count."""
    expected = s.term(GaitClock).stance_expected(s)
    return (s.body.foot_contact() == expected).float().sum(-1)


def feet_phase(s: Step) -> Tensor:
    """exp(-sum over feet of (height - the clock's height)^2 / feet_phase_std^2): every foot
    follows the clock's swing arch (0 in stance, up to swing_height mid-swing), an exp
    kernel as MuJoCo Playground's humanoid joysticks."""
    miss = (s.body.feet_height() - s.term(GaitClock).swing_target(s)).square().sum(-1)
    return torch.exp(-miss / s.config.feet_phase_std ** 2)


def swing_height(s: Step) -> Tensor:
    """(foot height above its home height - swing_height)^2 for feet in the air
    (unitree_rl_gym's; it leaves a shuffling robot unpenalized, feet_phase does not)."""
    miss = (s.body.feet_height() - s.config.swing_height).square()
    return (miss * ~s.body.foot_contact()).sum(-1)
