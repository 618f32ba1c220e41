"""Cartpole balance and swing-up on trot's own MJCF (tasks/assets/cartpole.xml).

Observations come from MJCF sensors only (what a real cartpole would measure): cart
position and velocity, the pole's direction (its z axis: sin and cos of the angle, so the
policy never sees an angle wrap) and its angular velocity.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from pathlib import Path

import mujoco
import torch
from torch import Tensor

from trot.sim.base import BatchedSim
from trot.tasks.base import Task, TaskConfig
from trot.tasks.observation import ObsTerm
from trot.tasks.registry import register
from trot.tasks.terms.rewards import gaussian
from trot.tasks.sampling import UniformBank

ASSET = Path(__file__).parent / "assets" / "cartpole.xml"


@dataclass(frozen=True)
class CartpoleConfig(TaskConfig):
    episode_seconds: float = 10.0
    """time limit; reaching it truncates (bootstrap), it does not terminate"""
    substeps: int = 2
    """physics steps per control step: 0.01 s timestep x 2 = 50 Hz control"""
    swingup: bool = False
    """start hanging down with a smooth upright reward and no early termination"""
    init_angle: float = 0.1
    """balance: initial pole angle ~ U(-a, a) rad (swing-up: pi + U(-a, a))"""
    init_noise: float = 0.05
    """initial cart position and velocities ~ U(-x, x)"""
    init_vel_noise: float | None = None
    """initial velocities ~ U(-v, v) instead (None: init_noise)"""
    max_angle: float = 0.25
    """balance: terminate when |pole angle| exceeds this (rad)"""
    max_cart: float = 1.8
    """balance: terminate when |cart position| exceeds this (m)"""
    ctrl_cost: float = 0.2
    """swing-up: reward factor 1 - ctrl_cost * u^2"""
    reward_scale: float = 1.0
    """multiplies the reward and its terms (a task whose rewards are on another scale:
    multi-task PopArt's benchmark, benchmarks/multitask_cartpole.py)"""
    blind: bool = False
    """the policy sees positions only (cart position, pole direction), no velocities: a
    test of memory (a GRU or an observation history); the critic still sees them all"""


class Cartpole(Task[CartpoleConfig]):
    def build(self) -> mujoco.MjSpec:
        spec = mujoco.MjSpec.from_file(str(ASSET))
        add = spec.add_sensor
        add(name="cart_pos", type=mujoco.mjtSensor.mjSENS_JOINTPOS, objtype=mujoco.mjtObj.mjOBJ_JOINT, objname="slider")
        add(name="cart_vel", type=mujoco.mjtSensor.mjSENS_JOINTVEL, objtype=mujoco.mjtObj.mjOBJ_JOINT, objname="slider")
        add(name="pole_axis", type=mujoco.mjtSensor.mjSENS_FRAMEZAXIS, objtype=mujoco.mjtObj.mjOBJ_XBODY, objname="pole")
        add(name="pole_vel", type=mujoco.mjtSensor.mjSENS_JOINTVEL, objtype=mujoco.mjtObj.mjOBJ_JOINT, objname="hinge")
        return spec

    def critic_terms(self) -> tuple[ObsTerm, ...]:
        return (
            ObsTerm("cart_pos", "sensor", ("cart_pos",)),
            ObsTerm("pole_axis", "sensor", ("pole_axis",)),
            ObsTerm("cart_vel", "sensor", ("cart_vel",), scale=0.5),
            ObsTerm("pole_vel", "sensor", ("pole_vel",), scale=0.2),
        )

    def policy_terms(self) -> tuple[ObsTerm, ...]:
        return self.critic_terms()[:2] if self.config.blind else self.critic_terms()

    def bind(self, sim: BatchedSim) -> None:
        # start box of [cart, angle, cart vel, angle vel]: lower corner and width
        c = self.config
        vel = c.init_noise if c.init_vel_noise is None else c.init_vel_noise
        half = torch.tensor([c.init_noise, c.init_angle, vel, vel])
        center = torch.tensor([0.0, math.pi if c.swingup else 0.0, 0.0, 0.0])
        self._start_low = (center - half).to(sim.device)
        self._start_width = (2 * half).to(sim.device)
        self._start_draws = UniformBank(sim.num_envs, 4, sim.device)  # one RNG call a block
        self._limits = torch.tensor([c.max_cart, c.max_angle], device=sim.device)
        self._alive = torch.ones(sim.num_envs, device=sim.device)  # read-only reward
        self._never = torch.zeros(sim.num_envs, dtype=torch.bool, device=sim.device)

    def initial_state(self, sim: BatchedSim, gen: torch.Generator) -> tuple[Tensor, Tensor]:
        u = self._start_draws.draw(gen)  # [N, 4]
        x = torch.addcmul(self._start_low, u, self._start_width)  # uniform in the box
        return x[:, :2], x[:, 2:]

    def restart(self) -> None:
        self._start_draws.clear()

    def state_dict(self) -> dict[str, Tensor]:
        return {f"start_draws/{k}": v for k, v in self._start_draws.state_dict().items()}

    def load_state_dict(self, state: dict[str, Tensor]) -> None:
        prefix = "start_draws/"
        bank = {k.removeprefix(prefix): v for k, v in state.items() if k.startswith(prefix)}
        if not bank:  # kept fresh, the resumed run would draw other start states
            raise ValueError(f"the checkpoint's cartpole state has no {prefix}* entries (the "
                             "start-state bank): written by a trot before 0.1's checkpoint "
                             f"format; 0.1 writes {sorted(self.state_dict())}. Retrain the "
                             "run, or finish it with the trot that wrote it")
        self._start_draws.load_state_dict(bank)

    def reward(self, sim: BatchedSim, action: Tensor) -> tuple[Tensor, dict[str, Tensor]]:
        scale = self.config.reward_scale
        if not self.config.swingup:
            alive = self._alive if scale == 1.0 else self._alive * scale
            return alive, {"alive": alive}
        x, angle, omega = sim.qpos[:, 0], sim.qpos[:, 1], sim.qvel[:, 1]
        upright = 0.5 * (1.0 + torch.cos(angle))
        centered = 0.5 * (1.0 + gaussian(x, 1.0))
        small_ctrl = 1.0 - self.config.ctrl_cost * action[:, 0].square()
        small_vel = 0.5 * (1.0 + gaussian(omega, 5.0))
        r = upright * centered * small_ctrl * small_vel * scale
        return r, {"swingup": r}

    def terminated(self, sim: BatchedSim) -> Tensor:
        if self.config.swingup:
            return self._never
        # |cart position| > max_cart or |pole angle| > max_angle
        return (sim.qpos.abs() > self._limits).any(dim=1)

    def max_return(self) -> float | None:
        steps = round(self.config.episode_seconds / (0.01 * self.config.substeps))
        return float(steps) * self.config.reward_scale if not self.config.swingup else None

    def eval_metrics(self, sim: BatchedSim) -> dict[str, Tensor]:
        """upright: the pole within 0.45 rad (cos > 0.9) of vertical."""
        return {"upright": (torch.cos(sim.qpos[:, 1]) > 0.9).float()}


BALANCE = CartpoleConfig()
SWINGUP = replace(BALANCE, swingup=True, init_angle=0.2)

# Balance is easy: small ReLU nets and fewer epochs keep the update cheap next to physics.
register("cartpole-balance", Cartpole, BALANCE,
         "keep a pole upright on a cart; +1 per step, ends when it falls (max return 500)",
         agent=dict(actor_hidden=(32,), critic_hidden=(32,), activation="relu",
                    epochs=2, minibatches=2, rnn_hidden=32), budget=2_000_000)
# blind: the start velocities are wide (U(-1, 1)), so that what the pole does next
# depends on a velocity the policy must infer from successive positions. The actor has two
# layers of 64: with one of 32, a 4-frame history balanced 92.8% of the maximum (median of
# 3 seeds) against 97.9% (docs/journal/memory.md, "Memory on a blind cartpole")
register("cartpole-balance-blind", Cartpole, replace(BALANCE, blind=True, init_vel_noise=1.0),
         "cartpole-balance whose policy sees no velocities, started with velocities up to "
         "1: it needs memory (--agent.rnn gru or --env.obs-history 4)",
         agent=dict(actor_hidden=(64, 64), critic_hidden=(32,), activation="relu",
                    epochs=2, minibatches=2, rnn_hidden=32), budget=2_000_000)
register("cartpole-swingup", Cartpole, SWINGUP,
         "swing a hanging pole up and hold it; smooth upright*centered reward, no early end",
         agent={}, budget=1_500_000)
# rewards 100x those of cartpole-swingup: trained beside cartpole-balance as one policy,
# a shared value normalization drowns balance out (benchmarks/multitask_cartpole.py)
register("cartpole-swingup-x100", Cartpole, replace(SWINGUP, reward_scale=100.0),
         "cartpole-swingup with its reward multiplied by 100 (multi-task PopArt's benchmark)",
         agent={}, budget=1_500_000)
