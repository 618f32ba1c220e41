"""`gym-ant`: Gymnasium's Ant-v5, the same MDP, on the ant.xml that Gymnasium ships.

Everything follows `gymnasium/envs/mujoco/ant_v5.py` with its defaults: frame_skip 5
(control dt 0.05 s, RK4 at 0.01 s), reward = forward + healthy - ctrl_cost - contact_cost,
termination when unhealthy, a 1000-step time limit (truncation), reset noise U(+-0.1) on
qpos and 0.1 * N(0, 1) on qvel, and actions as controls unchanged (ctrlrange [-1, 1]).

Two Gymnasium conventions that a plain reading of qpos would miss, reproduced exactly:
  * The forward reward is the torso's x displacement over the step / dt, read from
    `data.xpos` as mj_step leaves it. With RK4 that is the position at the last Runge-Kutta
    stage, not the final qpos (they differ by ~1e-4 m), so the task reads the tracked field
    `xpos` (Task.data_fields), before (pre_step) and after the step.
  * The contact cost uses `cfrc_ext` after mj_rnePostConstraint on the data mj_step left,
    clipped to contact_force_range; the sim tracks it (`sim.data("cfrc_ext")`).

Observation: qpos[2:] + qvel (27) by default. Ant-v5's own default adds the clipped
cfrc_ext of bodies 1.. (78 more, 105 in all): `include_cfrc_ext_in_observation=True`, or
the task `gym-ant-cfrc`. trot's default leaves them out: the 27 dimensions are what the
exported policy can be fed from a plain MjData (the runner refuses `data` terms), they are
cheaper, and the contact cost still uses the forces either way.

Differences that remain (none affects in-range actions on a healthy ant): trot clips
actions to [-1, 1] before the ctrl cost (Gymnasium charges an out-of-range action in full,
MuJoCo then clamps the control); observations and rewards are float32 (the physics is the
same float64 MuJoCo, step for step); a diverged simulation terminates instead of MuJoCo's
silent reset to qpos0; a step that both fails health and hits the time limit is
terminated only (Gymnasium sets both flags); and at a reset trot computes cfrc_ext where
Gymnasium leaves it 0 (Ant's start states touch nothing: 0 in both).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from importlib import resources
from pathlib import Path

import mujoco
import torch
from torch import Tensor

from trot.sim.base import BatchedSim
from trot.tasks.base import Task, TaskConfig
from trot.tasks.observation import ObsTerm
from trot.tasks.registry import register

NQ, NV, NBODY = 15, 14, 14  # Ant: free joint (7 qpos, 6 dofs) + 8 hinges; world + 13 bodies
TORSO = 1  # Ant-v5's main_body


def ant_xml() -> Path:
    """The ant.xml of the installed Gymnasium package."""
    try:
        path = resources.files("gymnasium") / "envs" / "mujoco" / "assets" / "ant.xml"
    except ModuleNotFoundError:
        raise ModuleNotFoundError(
            "task gym-ant loads the ant.xml that Gymnasium ships, and gymnasium is not "
            "installed: pip install 'trot[gym]' (gymnasium[mujoco]>=1.0)",
            name="gymnasium") from None
    if not path.is_file():
        raise FileNotFoundError(f"this gymnasium has no {path}; gym-ant needs gymnasium>=1.0")
    return Path(str(path))


@dataclass(frozen=True)
class GymAntConfig(TaskConfig):
    episode_seconds: float = 50.0
    """time limit: Ant-v5's 1000 steps x 0.05 s (truncation)"""
    substeps: int = 5
    """Ant-v5's frame_skip: 5 x 0.01 s = 20 Hz control"""
    forward_reward_weight: float = 1.0
    """weight of the torso's x velocity"""
    ctrl_cost_weight: float = 0.5
    """ctrl_cost = weight * sum(action^2)"""
    contact_cost_weight: float = 5e-4
    """contact_cost = weight * sum(clip(cfrc_ext)^2)"""
    healthy_reward: float = 1.0
    """reward per step while healthy"""
    terminate_when_unhealthy: bool = True
    """end the episode (no bootstrap) when the ant is unhealthy"""
    healthy_z_range: tuple[float, float] = (0.2, 1.0)
    """healthy: torso z within this range and the state finite"""
    contact_force_range: tuple[float, float] = (-1.0, 1.0)
    """cfrc_ext is clipped to this range (cost and observation)"""
    reset_noise_scale: float = 0.1
    """qpos = qpos0 + U(-s, s), qvel = s * N(0, 1)"""
    include_cfrc_ext_in_observation: bool = False
    """append clip(cfrc_ext[1:]) (78 values) as Ant-v5's default does (105 dims in all)"""


class GymAnt(Task[GymAntConfig]):
    data_fields = ("xpos", "cfrc_ext")

    def build(self) -> mujoco.MjSpec:
        return mujoco.MjSpec.from_file(str(ant_xml()))

    def bind(self, sim: BatchedSim) -> None:
        m = sim.model
        if (m.nq, m.nv, m.nbody) != (NQ, NV, NBODY):
            raise ValueError(f"gymnasium's ant.xml has nq, nv, nbody = {m.nq}, {m.nv}, "
                             f"{m.nbody}; gym-ant was written for {NQ}, {NV}, {NBODY}")
        self.qpos0 = torch.tensor(m.qpos0, dtype=torch.float32, device=sim.device)  # [15]
        self.x_before = torch.zeros(sim.num_envs, device=sim.device)  # [N]
        self.x_velocity = torch.zeros(sim.num_envs, device=sim.device)  # [N]

    def policy_terms(self) -> tuple[ObsTerm, ...]:
        terms = (ObsTerm("qpos", "qpos", start=2, stop=NQ),  # x, y left out (Ant-v5)
                 ObsTerm("qvel", "qvel", start=0, stop=NV))
        if self.config.include_cfrc_ext_in_observation:  # bodies 1.. of [nbody, 6], flat
            terms += (ObsTerm("cfrc_ext", "data", field="cfrc_ext", start=6, stop=6 * NBODY,
                              clip=self.config.contact_force_range),)
        return terms

    def initial_state(self, sim: BatchedSim, gen: torch.Generator) -> tuple[Tensor, Tensor]:
        n, dev, s = sim.num_envs, sim.device, self.config.reset_noise_scale
        u = torch.rand(n, NQ, generator=gen, device=dev)  # [N, 15]
        qpos = self.qpos0 + (2.0 * u - 1.0) * s  # the quaternion is left unnormalized too
        qvel = s * torch.randn(n, NV, generator=gen, device=dev)  # [N, 14]
        return qpos, qvel

    def pre_step(self, sim: BatchedSim, gen: torch.Generator) -> None:
        # xpos as the last step (or reset) left it; cpu updates it in place: copy
        self.x_before = sim.data("xpos", precise=True)[:, TORSO, 0].clone()  # [N]

    def healthy(self, sim: BatchedSim) -> Tensor:
        lo, hi = self.config.healthy_z_range
        z = sim.qpos[:, 2]
        finite = torch.isfinite(sim.qpos).all(1) & torch.isfinite(sim.qvel).all(1)
        return finite & (z >= lo) & (z <= hi)  # [N]

    def reward(self, sim: BatchedSim, action: Tensor) -> tuple[Tensor, dict[str, Tensor]]:
        # In the sim's own precision (float64 on the cpu backend), as Gymnasium computes it:
        # the difference of two float32 positions would be off by ~ulp(x) / dt.
        c = self.config
        x_after = sim.data("xpos", precise=True)[:, TORSO, 0]  # [N]
        x_velocity = (x_after - self.x_before) / sim.control_dt  # [N]
        self.x_velocity = x_velocity.float()
        forward = c.forward_reward_weight * x_velocity
        healthy = c.healthy_reward * self.healthy(sim).to(x_velocity.dtype)
        ctrl = c.ctrl_cost_weight * action.to(x_velocity.dtype).square().sum(1)
        lo, hi = c.contact_force_range
        forces = sim.data("cfrc_ext", precise=True).clamp(lo, hi)  # [N, nbody, 6]
        contact = c.contact_cost_weight * forces.square().sum((1, 2))
        total = (forward + healthy) - (ctrl + contact)  # Ant-v5's order of operations
        terms = {"forward": forward, "healthy": healthy, "ctrl_cost": -ctrl,
                 "contact_cost": -contact}
        return total.float(), {k: v.float() for k, v in terms.items()}

    def terminated(self, sim: BatchedSim) -> Tensor:
        if not self.config.terminate_when_unhealthy:
            return torch.zeros(sim.num_envs, dtype=torch.bool, device=sim.device)
        return ~self.healthy(sim)

    def eval_metrics(self, sim: BatchedSim) -> dict[str, Tensor]:
        """x_velocity: the torso's forward speed over the last step (m/s)."""
        return {"x_velocity": self.x_velocity}


ANT = GymAntConfig()

# PPO for a 2-core CPU: few envs and short rollouts make many small updates; a lower initial
# std keeps the ctrl cost (0.5 * sum a^2, 8 actuators) from swamping the healthy reward.
# Tuned on the 2-core CPU (3-minute runs, 64 envs): lr 1e-3 under the KL-adaptive schedule
# and 5 epochs reached a training return of 1100 in 1m53s, where lr 3e-4 / 8 epochs /
# log-std -0.5 was at about 450. A small initial std keeps the control cost low early.
ANT_PPO = dict(rollout_steps=32, epochs=5, minibatches=4, learning_rate=1e-3, gamma=0.99,
               lam=0.95, init_log_std=-1.0, actor_hidden=(64, 64), critic_hidden=(64, 64),
               activation="elu")

register("gym-ant", GymAnt, ANT,
         "Gymnasium Ant-v5, the same MDP (27-dim observation: qpos[2:] + qvel); "
         "run with --num-envs 64 on a small CPU", agent=ANT_PPO, budget=2_000_000)
register("gym-ant-cfrc", GymAnt, replace(ANT, include_cfrc_ext_in_observation=True),
         "Gymnasium Ant-v5 with its default 105-dim observation (clipped contact forces)",
         agent=ANT_PPO)
