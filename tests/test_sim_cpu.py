"""CpuSim against plain single-env MuJoCo (`mujoco.MjData` + `mujoco.mj_step`)."""

from __future__ import annotations

import copy

import mujoco
import numpy as np
import pytest
import torch

from trot.sim.base import RANDOMIZABLE_FIELDS
from trot.sim.cpu import CpuSim
from trot.tasks.registry import compile_model, get_task

N = 8
SUBSTEPS = 2


@pytest.fixture(scope="module")
def model() -> mujoco.MjModel:
    entry = get_task("cartpole-balance")
    return compile_model(entry.task_cls(entry.config))


def _start_state(n: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """float32 start states well inside the rail (no limit constraint becomes active)."""
    g = torch.Generator().manual_seed(seed)
    u = lambda *s: 2.0 * torch.rand(*s, generator=g) - 1.0  # noqa: E731
    qpos = u(n, 2) * torch.tensor([0.3, 0.3])
    qvel = u(n, 2) * torch.tensor([0.3, 0.5])
    return qpos, qvel


def _controls(n: int, steps: int, seed: int) -> list[torch.Tensor]:
    """Different controls per env: random small pushes, plus constant ones in some envs."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(steps):
        c = (2.0 * torch.rand(n, 1, generator=g) - 1.0) * 0.3
        c[0] = 0.0
        c[1] = 0.2
        c[2] = -0.2
        out.append(c)
    return out


def _all(n: int) -> torch.Tensor:
    return torch.ones(n, dtype=torch.bool)


def _new_sim(model, n=N, seed=0) -> tuple[CpuSim, torch.Tensor, torch.Tensor]:
    sim = CpuSim(model, n, SUBSTEPS)
    qpos, qvel = _start_state(n, seed)
    sim.reset(_all(n), qpos, qvel)
    return sim, qpos, qvel


def _plain(model, qpos_row: torch.Tensor, qvel_row: torch.Tensor) -> mujoco.MjData:
    d = mujoco.MjData(model)
    d.qpos[:] = qpos_row.double().numpy()
    d.qvel[:] = qvel_row.double().numpy()
    return d


def _plain_step(model, d: mujoco.MjData, ctrl_row: torch.Tensor, substeps=SUBSTEPS) -> None:
    d.ctrl[:] = ctrl_row.double().numpy()
    for _ in range(substeps):
        mujoco.mj_step(model, d)


def _close(actual: torch.Tensor, expected: np.ndarray, tol=1e-6) -> None:
    np.testing.assert_allclose(actual.double().numpy(), expected, rtol=tol, atol=tol)


# ---------------------------------------------------------------------------- stepping
def test_step_matches_plain_mujoco(model):
    sim, qpos0, qvel0 = _new_sim(model)
    assert sim.control_dt == pytest.approx(model.opt.timestep * SUBSTEPS)
    ctrls = _controls(N, 50, seed=1)
    for c in ctrls:
        sim.step(c)

    for i in range(N):
        d = _plain(model, qpos0[i], qvel0[i])
        for c in ctrls:
            _plain_step(model, d, c[i])
        _close(sim.qpos[i], d.qpos)
        _close(sim.qvel[i], d.qvel)
        # sensors: what mj_step's forward pass left (start of the last substep)
        _close(sim.sensordata[i], d.sensordata)
        for name in ("cart_pos", "cart_vel", "pole_axis", "pole_vel"):
            sid = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_SENSOR, name)
            adr, dim = model.sensor_adr[sid], model.sensor_dim[sid]
            _close(sim.sensor(name)[i], d.sensordata[adr : adr + dim])
        assert float(sim.time[i]) == pytest.approx(d.time)
    # sanity: the controls really made the envs differ
    assert not torch.allclose(sim.qpos[1], sim.qpos[2])
    assert not sim.unstable.any()


def test_sensor_unknown_name_raises(model):
    sim, _, _ = _new_sim(model, n=2)
    with pytest.raises(KeyError, match="cart_pos"):
        sim.sensor("no_such_sensor")


# ---------------------------------------------------------------------------- resets
def test_reset_writes_only_masked_envs(model):
    sim, _, _ = _new_sim(model)
    for c in _controls(N, 5, seed=2):
        sim.step(c)
    before = [t.clone() for t in (sim.qpos, sim.qvel, sim.sensordata)]
    time_before = sim.time.clone()

    mask = torch.zeros(N, dtype=torch.bool)
    mask[[0, 3, 6]] = True
    qpos = torch.full((N, model.nq), 99.0)  # unmasked rows are garbage and must be ignored
    qvel = torch.full((N, model.nv), -99.0)
    qpos[mask] = torch.tensor([[0.1, -0.2], [-0.4, 0.05], [0.0, 3.0]])
    qvel[mask] = torch.tensor([[0.3, 1.0], [0.0, -2.0], [-0.5, 0.25]])
    sim.reset(mask, qpos, qvel)

    assert torch.equal(sim.qpos[mask], qpos[mask])
    assert torch.equal(sim.qvel[mask], qvel[mask])
    assert torch.all(sim.time[mask] == 0.0)
    for i in np.flatnonzero(mask.numpy()):
        d = _plain(model, qpos[i], qvel[i])
        mujoco.mj_forward(model, d)
        _close(sim.sensordata[i], d.sensordata, tol=1e-7)

    keep = ~mask
    for now, old in zip((sim.qpos, sim.qvel, sim.sensordata), before):
        assert torch.equal(now[keep], old[keep])
    assert torch.equal(sim.time[keep], time_before[keep])

    # empty mask: nothing changes
    snap = [t.clone() for t in (sim.qpos, sim.qvel, sim.sensordata)]
    sim.reset(torch.zeros(N, dtype=torch.bool), qpos, qvel)
    for now, old in zip((sim.qpos, sim.qvel, sim.sensordata), snap):
        assert torch.equal(now, old)


def test_reset_env_then_steps_like_fresh_mujoco(model):
    """An env reset mid-run continues exactly like a new MjData from that state."""
    sim, _, _ = _new_sim(model)
    for c in _controls(N, 7, seed=3):
        sim.step(c)
    mask = torch.zeros(N, dtype=torch.bool)
    mask[4] = True
    qpos, qvel = _start_state(N, seed=9)
    sim.reset(mask, qpos, qvel)
    d = _plain(model, qpos[4], qvel[4])
    for c in _controls(N, 20, seed=4):
        sim.step(c)
        _plain_step(model, d, c[4])
    _close(sim.qpos[4], d.qpos)
    _close(sim.qvel[4], d.qvel)
    _close(sim.sensordata[4], d.sensordata)


# ---------------------------------------------------------------------------- randomization
def test_set_params_body_mass_only_masked_envs(model):
    cart = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_BODY, "cart")
    base_mass = model.body_mass.copy()
    dr, qpos0, qvel0 = _new_sim(model)
    plain, _, _ = _new_sim(model)

    mask = torch.tensor([True, False] * (N // 2))
    values = torch.as_tensor(base_mass, dtype=torch.float32).repeat(N, 1)
    values[:, cart] *= 3.0  # in every row: unmasked rows must be ignored
    dr.set_params("body_mass", mask, values)

    p = dr.params("body_mass")
    assert p.shape == (N, model.nbody)
    assert torch.equal(p[mask], values[mask])
    assert torch.equal(p[~mask], torch.as_tensor(base_mass, dtype=torch.float32).expand(N // 2, -1))
    np.testing.assert_array_equal(model.body_mass, base_mass)  # shared model untouched

    ctrl = torch.full((N, 1), 0.5)
    for _ in range(20):
        dr.step(ctrl)
        plain.step(ctrl)

    for now, ref in ((dr.qpos, plain.qpos), (dr.qvel, plain.qvel),
                     (dr.sensordata, plain.sensordata)):
        assert torch.equal(now[~mask], ref[~mask])
    # a 3x heavier cart travels less under the same push
    dx_dr = (dr.qpos[mask, 0] - qpos0[mask, 0]).abs()
    dx_plain = (plain.qpos[mask, 0] - qpos0[mask, 0]).abs()
    assert torch.all(dx_dr < 0.8 * dx_plain)

    # and exactly like plain MuJoCo on a model with that mass
    m2 = copy.deepcopy(model)
    m2.body_mass[cart] = float(values[0, cart])
    for i in np.flatnonzero(mask.numpy()):
        d = _plain(m2, qpos0[i], qvel0[i])
        for _ in range(20):
            _plain_step(m2, d, ctrl[i])
        _close(dr.qpos[i], d.qpos)
        _close(dr.qvel[i], d.qvel)


def check_set_params_rejects_bad_input(sim, model) -> None:
    """A sim of any backend refuses an unknown field (naming the accepted ones) and values
    of the wrong shape (also used by tests/test_mjx.py)."""
    n = sim.num_envs
    mask = torch.ones(n, dtype=torch.bool, device=sim.device)
    with pytest.raises(ValueError) as e:
        sim.set_params("body_masses", mask, torch.zeros(n, model.nbody))
    for f in RANDOMIZABLE_FIELDS:
        assert f in str(e.value)
    with pytest.raises(ValueError, match="accepted"):
        sim.params("opt_timestep")
    with pytest.raises(ValueError, match="shape"):
        sim.set_params("body_mass", mask, torch.zeros(3, model.nbody))
    with pytest.raises(ValueError, match="shape"):
        sim.set_params("body_mass", mask, torch.zeros(n, model.nbody + 1))
    with pytest.raises(ValueError, match="shape"):
        sim.set_params("geom_friction", mask, torch.zeros(n, model.ngeom))  # needs [n, ngeom, 3]


def test_set_params_bad_input(model):
    check_set_params_rejects_bad_input(_new_sim(model, n=4)[0], model)


# ---------------------------------------------------------------------------- instability
def test_unstable_after_reset_with_huge_velocity(model, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # MuJoCo writes MUJOCO_LOG.TXT to the cwd
    sim, qpos, qvel = _new_sim(model)
    for c in _controls(N, 3, seed=5):
        sim.step(c)
    mask = torch.zeros(N, dtype=torch.bool)
    mask[[1, 5]] = True
    qv = sim.qvel.clone()
    qv[mask] = 1e12
    sim.reset(mask, sim.qpos.clone(), qv)
    sim.step(torch.zeros(N, 1))
    assert torch.equal(sim.unstable, mask)


def test_unstable_mid_episode_divergence(model, tmp_path, monkeypatch):
    """A huge actuator gain in some envs makes qacc blow up mid-episode: MuJoCo resets those
    envs (with a warning); the sim must flag exactly them, others stay as a plain sim."""
    monkeypatch.chdir(tmp_path)  # MuJoCo writes MUJOCO_LOG.TXT to the cwd
    sim, _, _ = _new_sim(model)
    ref, _, _ = _new_sim(model)
    for c in _controls(N, 3, seed=6):
        sim.step(c)
        ref.step(c)
    mask = torch.zeros(N, dtype=torch.bool)
    mask[[2, 7]] = True
    gain = sim.params("actuator_gainprm").clone()
    gain[:, 0, 0] = 1e15
    sim.set_params("actuator_gainprm", mask, gain)

    sim.step(torch.ones(N, 1))
    ref.step(torch.ones(N, 1))
    assert torch.equal(sim.unstable, mask)
    assert torch.isfinite(sim.qpos).all() and torch.isfinite(sim.qvel).all()
    assert torch.isfinite(sim.sensordata).all()
    assert torch.equal(sim.qpos[~mask], ref.qpos[~mask])
    assert torch.equal(sim.qvel[~mask], ref.qvel[~mask])

    # a diverged env stays flagged until it is reset (the env loop's NaN guard does that)
    sim.step(torch.zeros(N, 1))
    assert torch.equal(sim.unstable, mask)
    sim.set_params("actuator_gainprm", mask, sim.params("actuator_gainprm").clone().fill_(10.0))
    sim.reset(mask, torch.zeros(N, model.nq), torch.zeros(N, model.nv))
    assert not sim.unstable.any()
    sim.step(torch.zeros(N, 1))
    assert not sim.unstable.any()


# ---------------------------------------------------------------------------- checkpoints
def test_state_dict_round_trip(model):
    sim, _, _ = _new_sim(model)
    mask = torch.tensor([False, True] * (N // 2))
    mass = sim.params("body_mass").clone()
    mass[:, 1] *= 2.0
    sim.set_params("body_mass", mask, mass)
    for c in _controls(N, 4, seed=7):
        sim.step(c)

    check_state_dict_round_trip(sim, CpuSim(model, N, SUBSTEPS), _controls(N, 15, seed=8))


def check_state_dict_round_trip(sim, fresh, ctrls, outputs=("qpos", "qvel", "sensordata")):
    """A sim of any backend, run through `ctrls` from its state_dict, repeats itself bitwise:
    reloaded into itself and into `fresh` (a new sim of the same model and N), whose body
    masses it must also restore. The state_dict is a snapshot, not a view of live state.
    Also used by tests/test_mjx.py."""
    sd = sim.state_dict()

    def run(s):
        for c in ctrls:
            s.step(c)
        return [getattr(s, k).clone() for k in outputs]

    first = run(sim)
    sd_copy = {k: v.clone() for k, v in sd.items()}
    sim.load_state_dict(sd)
    for a, b in zip(first, run(sim)):
        assert torch.equal(a, b)
    for k in sd:
        assert torch.equal(sd[k], sd_copy[k]), k
    fresh.load_state_dict(sd)
    assert torch.equal(fresh.params("body_mass"), sim.params("body_mass"))
    for a, b in zip(first, run(fresh)):
        assert torch.equal(a, b)


def test_constructor_rejects_bad_sizes(model):
    with pytest.raises(ValueError, match="num_envs"):
        CpuSim(model, 0)
    with pytest.raises(ValueError, match="substeps"):
        CpuSim(model, 2, substeps=0)


def test_kick_adds_velocity_to_masked_envs_only(model):
    sim, _, _ = _new_sim(model)
    for c in _controls(N, 3, seed=9):
        sim.step(c)
    before = sim.state_dict()["state"].clone()
    qvel = sim.qvel.clone()
    mask = torch.zeros(N, dtype=torch.bool)
    mask[[1, 4]] = True
    dq = torch.randn(N, model.nv, dtype=torch.float32)
    sim.kick(mask, dq)
    after = sim.state_dict()["state"]
    assert torch.equal(after[~mask], before[~mask])  # rows untouched, warmstart included
    assert torch.allclose(sim.qvel[mask], qvel[mask] + dq[mask], atol=1e-6)
    assert torch.equal(sim.qvel[~mask], qvel[~mask])
