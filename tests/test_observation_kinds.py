"""The table of observation kinds (trot/core/observation_kinds.py): for every kind a robot can
read, the env side (a gather from the batched pool) and the robot side (the runner's
ObservationBuilder on a plain MjData) give the same numbers for the same state; the
privileged kinds are refused on the robot, naming the kinds it accepts."""

from __future__ import annotations

import dataclasses
import re

import mujoco
import numpy as np
import pytest
import torch

from trot.export.checks import ContractError, check_layout
from trot.export.runner import ObservationBuilder
from trot.core.observation_kinds import KINDS
from trot.tasks.cartpole import BALANCE, Cartpole
from trot.tasks.env import Env
from trot.tasks import terrain
from trot.tasks.observation import ObsTerm
from trot.sim import make_sim

INTEGRATION = mujoco.mjtState.mjSTATE_INTEGRATION  # the cpu backend's state rows


PROBE = (20.3, 0.4, 0.8)  # a free body over a terrain beside the cartpole, for the scan


class EveryKind(Cartpole):
    """Cartpole observing one term of every kind, slices that do not start at 0, offsets
    and scales that are not 1, and a two-number command; a free, spinning probe body over
    a generated terrain carries the height scan."""

    command_dim = 2

    def build(self):
        spec = super().build()
        cfg = terrain.TerrainConfig(tile_size=2.0, rows=2, cols=7, border=0.5, platform=0.5)
        terrain.add_terrain(spec, terrain.generate(cfg, center=(20.0, 0.0)), "terrain")
        probe = spec.worldbody.add_body(name="probe", pos=list(PROBE))
        probe.add_freejoint()
        probe.add_geom(size=[0.05, 0, 0], contype=0, conaffinity=0)
        return spec

    def terminated(self, sim):
        return torch.zeros(sim.num_envs, dtype=torch.bool)

    def initial_state(self, sim, gen):
        qpos, qvel = super().initial_state(sim, gen)
        n = sim.num_envs
        yaw = torch.rand(n, generator=gen) * 6.0
        pose = torch.cat([torch.tensor(PROBE).expand(n, 3), torch.cos(yaw / 2)[:, None],
                          torch.zeros(n, 2), torch.sin(yaw / 2)[:, None]], 1)
        spin = torch.tensor([0.5, -0.3, 0.0, 0.2, 0.1, 2.0]).expand(n, 6)
        return torch.cat([qpos, pose], 1), torch.cat([qvel, spin], 1)

    def bind(self, sim):
        super().bind(sim)
        self.command = torch.tensor([[0.3, -0.7]], device=sim.device).repeat(sim.num_envs, 1)
        self.dt = sim.control_dt
        self._steps = torch.arange(sim.num_envs) * 3  # each env's clock at its own time

    def pre_step(self, sim, gen):
        super().pre_step(sim, gen)
        self._steps += 1

    def clock_seconds(self):
        return self._steps.float() * self.dt

    def policy_terms(self):
        return (ObsTerm("axis_vel", "sensor", ("pole_vel", "pole_axis"), scale=0.5),
                ObsTerm("angle", "qpos", start=1, stop=2, offset=(0.25,), scale=2.0),
                ObsTerm("vel", "qvel", start=0, stop=2, scale=0.1),
                ObsTerm("cmd", "command", offset=(0.1, 0.2)),
                ObsTerm("last", "last_action", scale=3.0),
                ObsTerm("scan", "height_scan", start=2, grid=(0.6, 0.4, 0.2), scale=2.0,
                        clip=(-1.0, 0.9)),
                ObsTerm("clock", "clock", period=0.7, scale=0.5))

    def critic_terms(self):
        return self.policy_terms() + (
            ObsTerm("xpos", "data", field="xpos", start=4, stop=6, clip=(-0.5, 0.5)),
            ObsTerm("mass", "param", field="body_mass", start=1, stop=3))

    data_fields = ("xpos",)


def _env(n: int = 3) -> Env:
    task = EveryKind(BALANCE)
    sim = make_sim("cpu", task.build().compile(), n, BALANCE.substeps, fields=task.data_fields)
    return Env("every-kind", task, sim, seed=4)


def test_every_kind_is_in_the_test():
    assert {t.kind for t in EveryKind(BALANCE).critic_terms()} == set(KINDS)


def test_robot_side_equals_env_side_for_every_robot_kind():
    """The bug this catches: one side of a kind reading another slice, block or order
    (qvel from qpos, a slice's start ignored, sensors concatenated in another order)."""
    env = _env()
    env.reset()
    gen = torch.Generator().manual_seed(0)
    for _ in range(7):
        pre = env.sim.state_dict()["state"].numpy().copy()  # [N, INTEGRATION] float64
        obs = env.step(torch.rand(env.num_envs, env.action_dim, generator=gen) * 2 - 1).obs
    post = env.sim.state_dict()["state"].numpy()
    model = env.sim.model
    contract = {"observation": env.policy_layout.to_json(), "obs_dim": env.obs_dim,
                "command_dim": 2, "action_dim": env.action_dim}
    builder = ObservationBuilder(contract, model)
    data, after = mujoco.MjData(model), mujoco.MjData(model)
    for i in range(env.num_envs):
        # replay the last step in plain MuJoCo: mj_step leaves the sensors of the state it
        # stepped from, in the env and here alike
        mujoco.mj_setState(model, after, post[i], INTEGRATION)
        mujoco.mj_setState(model, data, pre[i], INTEGRATION)
        data.ctrl[:] = after.ctrl
        for _ in range(env.sim.substeps):
            mujoco.mj_step(model, data)
        builder.command[:] = env.task.command[i].numpy()
        builder.last_action[:] = env.last_action[i].numpy()
        builder.time = float(env.task.clock_seconds()[i])
        np.testing.assert_allclose(builder.build(data), obs.policy[i].numpy(), atol=1e-5)
    last = env.policy_layout.slots[4]  # the last action is not zero
    assert not np.allclose(obs.policy[0, last.start:last.start + last.size].numpy(), 0.0)


@pytest.mark.parametrize("kind", [k for k, v in KINDS.items() if v.robot is None])
def test_robot_refuses_privileged_kinds(kind):
    env = _env()
    term = next(s for s in env.critic_layout.to_json() if s["source"]["kind"] == kind)
    builder = ObservationBuilder({"observation": [term], "obs_dim": term["size"],
                                  "command_dim": 2, "action_dim": 1}, env.sim.model)
    with pytest.raises(ContractError, match=f"{kind!r}, which no robot measures; accepted: "
                                            "sensor, qpos, qvel, command, last_action"):
        builder.build(mujoco.MjData(env.sim.model))


SLICED = [k for k, v in KINDS.items() if v.named_field or v.extent]


@pytest.mark.parametrize("kind", SLICED)
def test_a_slice_past_its_block_is_refused(kind):
    """A [start, stop) term reaching past its block: the env read the next block's values
    (sensors after qpos) without a word, and a robot failed to broadcast."""
    class Past(EveryKind):
        def critic_terms(self):
            return tuple(dataclasses.replace(t, start=t.start + 1000, stop=t.stop + 1000)
                         if t.kind == kind else t for t in super().critic_terms())

    task = Past(BALANCE)
    name = next(t.name for t in task.critic_terms() if t.kind == kind)
    sim = make_sim("cpu", task.build().compile(), 2, BALANCE.substeps, fields=task.data_fields)
    with pytest.raises(ValueError, match=re.escape(f"observation term {name!r}: [start, stop)")):
        Env("past", task, sim, seed=0)


@pytest.mark.parametrize("kind", [k for k in SLICED if KINDS[k].robot is not None])
def test_a_contract_slice_past_the_models_state_is_refused(kind):
    env = _env()
    contract = {"observation": env.policy_layout.to_json(), "obs_dim": env.obs_dim,
                "command_dim": 2, "action_dim": env.action_dim}
    check_layout(contract, env.sim.model)  # as trained: accepted
    k = next(i for i, t in enumerate(contract["observation"]) if t["source"]["kind"] == kind)
    src = contract["observation"][k]["source"]
    src["start"], src["stop"] = src["start"] + 1000, src["stop"] + 1000
    with pytest.raises(ContractError, match=re.escape(f"observation[{k}]") + ".*not within"):
        check_layout(contract, env.sim.model)
