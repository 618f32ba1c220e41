"""`gym-ant` against Gymnasium's own Ant-v5, and the tracked MjData fields (`sim.data`) it
relies on, against plain MuJoCo (cpu) and against the cpu backend (mjx)."""

from __future__ import annotations

import mujoco
import numpy as np
import pytest
import torch
from extras import need

gymnasium = need("gymnasium")

import trot
from trot.sim.cpu import CpuSim
from trot.tasks.gym_ant import ant_xml

INTEGRATION = mujoco.mjtState.mjSTATE_INTEGRATION


def _sync(genv, env, i: int) -> np.ndarray:
    """Put Gymnasium's env into trot env i's state; its observation there."""
    genv.reset(seed=i)
    genv.set_state(env.sim.qpos[i].double().numpy(), env.sim.qvel[i].double().numpy())
    return genv._get_obs()


@pytest.mark.parametrize("task,cfrc", [("gym-ant", False), ("gym-ant-cfrc", True)])
def test_same_mdp_as_gymnasium_ant_v5(task: str, cfrc: bool):
    """Each of 3 trot envs is mirrored by a Gymnasium Ant-v5 started in the same state and
    fed the same actions; where an env ends, its mirror is moved to trot's new start state.
    The float64 physics state must be bit-identical; observations and rewards are float32
    in trot, so they match to float32 rounding (see the reward bound below)."""
    n, steps, rng = 3, 250, np.random.default_rng(0)
    env = trot.make_env(task, num_envs=n, seed=1)
    obs = env.reset().policy.numpy()
    gyms = [gymnasium.make("Ant-v5", include_cfrc_ext_in_observation=cfrc).unwrapped
            for _ in range(n)]
    np.testing.assert_array_equal(obs, np.stack([_sync(g, env, i) for i, g in enumerate(gyms)]))
    assert env.obs_dim == (105 if cfrc else 27) and env.control_dt == gyms[0].dt
    ended = 0
    row = np.zeros(mujoco.mj_stateSize(gyms[0].model, INTEGRATION))
    for _ in range(steps):
        # bang-bang-ish actions flip the ant now and then: terminations get exercised
        act = (np.sign(rng.uniform(-1, 1, (n, 8))) * rng.uniform(0.5, 1, (n, 8))).astype(
            np.float32)
        res = env.step(torch.from_numpy(act))
        state = env.sim.state_dict()["state"].numpy()  # [N, nstate] float64 rows
        for i, g in enumerate(gyms):
            o, r, term, _, _ = g.step(act[i].astype(np.float64))
            mujoco.mj_getState(g.model, g.data, row, INTEGRATION)
            if not term:  # (an ended env's row already holds its next start state)
                np.testing.assert_array_equal(state[i], row)  # same MuJoCo, step for step
            assert bool(res.terminated[i]) == term and not bool(res.truncated[i])
            np.testing.assert_allclose(res.final_obs.policy[i].numpy(), o, rtol=2**-23,
                                       atol=1e-12)
            # computed in float64 like Gymnasium's, then stored as float32
            assert abs(float(res.reward[i]) - r) <= 1e-6, (float(res.reward[i]), r)
            if term:
                ended += 1
                np.testing.assert_array_equal(res.obs.policy[i].numpy(), _sync(g, env, i))
    assert ended >= 5


def test_registered_defaults():
    env = trot.make_env("gym-ant", num_envs=2)
    m = env.sim.model
    assert env.max_episode_steps == 1000 and env.sim.substeps == 5
    assert m.opt.integrator == mujoco.mjtIntegrator.mjINT_RK4 and m.opt.timestep == 0.01
    np.testing.assert_array_equal(m.actuator_ctrlrange, np.tile([-1.0, 1.0], (8, 1)))
    assert torch.equal(env.task.action_scale, torch.ones(8))  # action -> ctrl is identity
    assert torch.equal(env.task.action_offset, torch.zeros(8))
    assert ant_xml().name == "ant.xml"


def _plain(model: mujoco.MjModel, qpos: np.ndarray, qvel: np.ndarray) -> mujoco.MjData:
    d = mujoco.MjData(model)
    d.qpos[:], d.qvel[:] = qpos, qvel
    mujoco.mj_forward(model, d)
    return d


def test_cpu_data_fields_are_what_plain_mujoco_leaves():
    """xpos as mj_step leaves it (RK4: the last stage) and cfrc_ext/cacc after
    mj_rnePostConstraint, in every env, after steps, resets and a checkpoint round trip."""
    model = mujoco.MjModel.from_xml_path(str(ant_xml()))
    fields = ("xpos", "cfrc_ext", "cacc")
    n, rng = 3, np.random.default_rng(0)
    sim = CpuSim(model, n, substeps=5, fields=fields)
    q0 = model.qpos0 + rng.uniform(-0.1, 0.1, (n, model.nq))
    v0 = 0.1 * rng.standard_normal((n, model.nv))
    sim.reset(torch.ones(n, dtype=torch.bool), torch.from_numpy(q0), torch.from_numpy(v0))
    datas = [_plain(model, q0[i], v0[i]) for i in range(n)]
    touched = 0  # steps on which some env had a contact force
    for t in range(40):
        ctrl = rng.uniform(-1, 1, (n, model.nu))
        sim.step(torch.from_numpy(ctrl).float())
        for i, d in enumerate(datas):
            d.ctrl[:] = ctrl[i].astype(np.float32)
            mujoco.mj_step(model, d, nstep=5)
            mujoco.mj_rnePostConstraint(model, d)
        if t == 20:  # reset env 1 mid-run: its fields describe the new state
            mask = torch.tensor([False, True, False])
            sim.reset(mask, torch.from_numpy(q0), torch.from_numpy(v0))
            datas[1] = _plain(model, q0[1], v0[1])
            mujoco.mj_rnePostConstraint(model, datas[1])
        for f in fields:
            want = np.stack([getattr(d, f) for d in datas]).astype(np.float32)
            np.testing.assert_array_equal(sim.data(f).numpy(), want, err_msg=f"{f} step {t}")
        touched += bool(sim.data("cfrc_ext").abs().sum() > 0)
    assert touched >= 10  # the ant lands and walks: contact forces were compared
    saved = sim.state_dict()
    other = CpuSim(model, n, substeps=5, fields=fields)
    other.load_state_dict(saved)
    for f in fields:
        assert torch.equal(other.data(f), sim.data(f))
    with pytest.raises(KeyError, match="not tracked"):
        sim.data("cvel")
    with pytest.raises(ValueError, match="cannot track"):
        CpuSim(model, 1, fields=("qpos",))


BALL = """<mujoco><option timestep="0.005"/>
<worldbody><geom type="plane" size="5 5 .1"/>
<body pos="0 0 0.3"><freejoint/><geom type="sphere" size="0.1" mass="1"/></body>
<body pos="0.5 0 0.5"><joint name="h" type="hinge" axis="0 1 0"/>
<geom type="capsule" fromto="0 0 0 0.3 0 0" size="0.05" mass="0.5"/></body>
</worldbody><actuator><motor joint="h" ctrlrange="-1 1"/></actuator></mujoco>"""


def test_mjx_data_fields_agree_with_cpu():
    """The same tracked fields on MJX (jax impl, float32): a ball settling on the floor (a
    contact force in cfrc_ext) next to a driven arm (cacc).
    Slow (about 40 s): MJX compiles both models on JAX's CPU backend; full CI leg only."""
    need("jax")
    need("mujoco.mjx")
    from trot.sim.mjx import MjxSim

    model = mujoco.MjModel.from_xml_string(BALL)
    fields = ("xpos", "cfrc_ext", "cacc")
    mj = MjxSim(model, 2, 4, impl="jax", fields=fields)
    cpu = CpuSim(model, 2, 4, fields=fields)
    for _ in range(60):
        ctrl = torch.full((2, 1), 0.3)
        mj.step(ctrl)
        cpu.step(ctrl)
    for f in fields:
        np.testing.assert_allclose(mj.data(f).numpy(), cpu.data(f).numpy(), atol=1e-4,
                                   err_msg=f)
    assert float(cpu.data("cfrc_ext")[:, 1, 5].min()) == pytest.approx(9.81, rel=1e-3)
