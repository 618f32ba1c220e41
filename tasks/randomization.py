"""Domain randomization of the legged task (tasks/legged.py): per env, at each reset, the
floor's sliding friction, the base's mass and centre of mass, and each motor's strength and
PD gains, drawn from the config's ranges around the model's nominal values and written to
the ended envs' rows through `BatchedSim.set_params`."""

from __future__ import annotations

import mujoco
import torch
from torch import Tensor

from trot.sim.base import BatchedSim
from trot.tasks.legged_config import LeggedConfig

FIELDS = ("geom_friction", "body_mass", "body_ipos", "actuator_gainprm", "actuator_biasprm")
"""the model fields a draw writes (whole rows, each from its nominal value)"""


class DomainRandomizer:
    """Draws for `config`'s ranges; `floor` is the ground geom's id, `base` the base body's."""

    def __init__(self, m: mujoco.MjModel, config: LeggedConfig, floor: int, base: int,
                 device: torch.device | str):
        self.config, self.floor, self.base = config, floor, base
        self.nominal = {f: torch.tensor(getattr(m, f), dtype=torch.float32, device=device)
                        for f in FIELDS}

    def __call__(self, sim: BatchedSim, mask: Tensor, gen: torch.Generator) -> None:
        """New parameters for the envs in `mask` [N] bool; the draw order is fixed (every
        env draws, so a run's stream does not depend on which envs ended)."""
        c, n, dev, nom = self.config, sim.num_envs, sim.device, self.nominal

        def uniform(rng: tuple[float, float], *shape: int) -> Tensor:
            lo, hi = rng
            return lo + (hi - lo) * torch.rand(*shape, generator=gen, device=dev)

        friction = nom["geom_friction"].expand(n, -1, -1).clone()
        friction[:, self.floor, 0] = uniform(c.friction_range, n)
        sim.set_params("geom_friction", mask, friction)

        mass = nom["body_mass"].expand(n, -1).clone()
        mass[:, self.base] += uniform(c.added_mass_range, n)
        sim.set_params("body_mass", mask, mass)

        ipos = nom["body_ipos"].expand(n, -1, -1).clone()
        shift = torch.tensor(c.com_offset, device=dev)
        ipos[:, self.base] += shift * uniform((-1.0, 1.0), n, 3)
        sim.set_params("body_ipos", mask, ipos)

        nu = sim.model.nu
        strength = uniform(c.motor_strength_range, n, nu)
        kp = nom["actuator_gainprm"][:, 0] * strength * uniform(c.kp_range, n, nu)
        kv = -nom["actuator_biasprm"][:, 2] * strength * uniform(c.kd_range, n, nu)
        gain = nom["actuator_gainprm"].expand(n, -1, -1).clone()
        bias = nom["actuator_biasprm"].expand(n, -1, -1).clone()
        gain[:, :, 0] = kp  # position servo: force = kp * (ctrl - q) - kv * qdot
        bias[:, :, 1] = -kp
        bias[:, :, 2] = -kv
        sim.set_params("actuator_gainprm", mask, gain)
        sim.set_params("actuator_biasprm", mask, bias)
