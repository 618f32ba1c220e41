"""Events: what happens to the robot besides its actions. Domain randomization at each
reset (friction, base mass and centre of mass, motor strength and PD gains), pushes at
random intervals, and action latency. Every draw comes from the env's generator in a fixed
order, whichever envs ended, so a run's stream does not depend on its episodes."""

from __future__ import annotations

import torch
from torch import Tensor

from trot.tasks.terms.body import Body
from trot.tasks.terms.state import Term

FIELDS = ("geom_friction", "body_mass", "body_ipos", "actuator_gainprm", "actuator_biasprm")
"""the model fields domain randomization writes (whole rows, each from its nominal value)"""


class Randomize(Term):
    """New per-env model parameters for the envs that reset, drawn from the config's ranges
    around the model's nominal values (with `randomize`), before the sim's reset so that its
    forward already sees them. The ground geom's (`Body.floor`) friction is drawn."""

    def __init__(self, body: Body):
        m = body.sim.model
        self.floor, self.base = body.floor, body.base_id
        f32 = dict(dtype=torch.float32, device=body.device)
        self.friction0, self.mass0, self.ipos0, self.gain0, self.bias0 = (
            torch.tensor(getattr(m, f), **f32) for f in FIELDS)

    def randomize(self, body: Body, mask: Tensor, gen: torch.Generator) -> None:
        c, n, dev, sim = body.config, body.n, body.device, body.sim
        if not c.randomize:
            return

        def uniform(rng: tuple[float, float], *shape: int) -> Tensor:
            lo, hi = rng
            return lo + (hi - lo) * torch.rand(*shape, generator=gen, device=dev)

        friction = self.friction0.expand(n, -1, -1).clone()
        friction[:, self.floor, 0] = uniform(c.friction_range, n)
        sim.set_params("geom_friction", mask, friction)
        mass = self.mass0.expand(n, -1).clone()
        mass[:, self.base] += uniform(c.added_mass_range, n)
        sim.set_params("body_mass", mask, mass)
        ipos = self.ipos0.expand(n, -1, -1).clone()
        ipos[:, self.base] += torch.tensor(c.com_offset, device=dev) * uniform((-1.0, 1.0), n, 3)
        sim.set_params("body_ipos", mask, ipos)
        nu = sim.model.nu
        strength = uniform(c.motor_strength_range, n, nu)
        kp = self.gain0[:, 0] * strength * uniform(c.kp_range, n, nu)
        kv = -self.bias0[:, 2] * strength * uniform(c.kd_range, n, nu)
        gain = self.gain0.expand(n, -1, -1).clone()
        bias = self.bias0.expand(n, -1, -1).clone()
        gain[:, :, 0] = kp  # position servo: force = kp * (ctrl - q) - kv * qdot
        bias[:, :, 1] = -kp
        bias[:, :, 2] = -kv
        sim.set_params("actuator_gainprm", mask, gain)
        sim.set_params("actuator_biasprm", mask, bias)


class Push(Term):
    """With `push`, kick due envs: add U(-push_velocity, push_velocity) m/s to the base's
    world x and y velocity, every U(push_interval_seconds) s per env. The interval is drawn
    at every reset either way (a fixed stream)."""

    def __init__(self, body: Body):
        self.lo, self.hi = (max(1, round(s / body.dt)) for s in
                            body.config.push_interval_seconds)
        self.timer = torch.zeros(body.n, dtype=torch.int64, device=body.device)
        self.at = torch.full((body.n,), self.hi, dtype=torch.int64, device=body.device)

    def _interval(self, body: Body, gen: torch.Generator) -> Tensor:
        return torch.randint(self.lo, self.hi + 1, (body.n,), generator=gen, device=body.device)

    def reset(self, body: Body, mask: Tensor, gen: torch.Generator) -> None:
        self.timer.masked_fill_(mask, 0)
        self.at.copy_(torch.where(mask, self._interval(body, gen), self.at))

    def pre_step(self, body: Body, gen: torch.Generator) -> None:
        if not body.config.push:
            return
        self.timer += 1
        due = self.timer >= self.at
        self.timer.masked_fill_(due, 0)
        self.at.copy_(torch.where(due, self._interval(body, gen), self.at))
        self.kick(body, due, gen)

    def kick(self, body: Body, mask: Tensor, gen: torch.Generator) -> None:
        """Kick the envs where mask [N] is set now (a draw for every env: a fixed stream);
        `trot view`'s push button calls this too."""
        kick = body.config.push_velocity * (2 * torch.rand(body.n, 2, generator=gen,
                                                           device=body.device) - 1)
        dqvel = torch.zeros_like(body.sim.qvel)
        dqvel[:, :2] = kick
        body.sim.kick(mask, dqvel)


class Latency(Term):
    """The motors receive each action `latency_steps` control steps late: a ring of the
    pending actions [L, N, A], emptied at resets."""

    def __init__(self, body: Body):
        steps = body.config.latency_steps
        if steps < 0:
            raise ValueError(f"latency_steps must be >= 0, got {steps}")
        self.pending = torch.zeros(steps, body.n, body.sim.model.nu, device=body.device)
        self.slot = 0

    def reset(self, body: Body, mask: Tensor, gen: torch.Generator) -> None:
        self.pending.masked_fill_(mask[None, :, None], 0.0)

    def delay(self, action: Tensor) -> Tensor:
        """The action from L steps ago (this one waits its turn)."""
        if not len(self.pending):
            return action
        delayed = self.pending[self.slot].clone()
        self.pending[self.slot] = action
        self.slot = (self.slot + 1) % len(self.pending)
        return delayed
