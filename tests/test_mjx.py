"""The mjx backend (`trot.sim.mjx.MjxSim`) against the cpu backend and plain MuJoCo, the same
contract as tests/test_sim_cpu.py and tests/test_env.py, plus what is MJX's own: zero-copy
DLPack hand-off, compile time, CUDA stream ordering (GPU only).

Runs where the `mjx` extra is installed (skipped otherwise). TROT_TEST_DEVICE=cuda runs it on
a GPU (benchmarks/gpu_check.sh); TROT_MJX_IMPL=jax|warp picks the implementation (default:
warp on CUDA when installed, else jax).

Compiling MJX for the CPU takes ~30 s here (2 cores), so every sim in this file has the same
model structure and N: one compiled step and reset serve the whole module (programs are cached
per process). A persistent JAX compilation cache in the temp dir makes reruns faster.
"""

from __future__ import annotations

import copy
import dataclasses
import math
import os
import tempfile
import time

import mujoco
import numpy as np
import pytest
import torch
from extras import need

jax = need("jax")
need("mujoco.mjx")

from test_env import _check_guard, _obs_from_sensordata  # noqa: E402
from test_sim_cpu import check_set_params_rejects_bad_input, check_state_dict_round_trip  # noqa: E402

import trot  # noqa: E402
from trot.agents.loop import save
from trot.agents.config import PPOConfig  # noqa: E402
from trot.agents.learners import build
from trot.agents.train_config import TrainConfig  # noqa: E402
from trot.sim.base import RANDOMIZABLE_FIELDS  # noqa: E402
from trot.sim.cpu import CpuSim  # noqa: E402
from trot.sim.mjx import IMPL_ENV, MjxSim, resolve_impl, to_jax, warp_available  # noqa: E402
from trot.tasks.registry import compile_model, get_task  # noqa: E402

if not os.environ.get("JAX_COMPILATION_CACHE_DIR"):
    jax.config.update("jax_compilation_cache_dir",
                      os.path.join(tempfile.gettempdir(), "trot-jax-cache"))

DEV = torch.device(os.environ.get("TROT_TEST_DEVICE", "cpu"))
if DEV.type == "cuda" and not torch.cuda.is_available():
    pytest.skip("TROT_TEST_DEVICE=cuda but torch sees no GPU", allow_module_level=True)

N = 64  # one N (and one model structure) for the whole module: one compilation
SUBSTEPS = 2
BAL, SWING = "cartpole-balance", "cartpole-swingup"
CROSS_TOL = 1e-3  # float32 MJX vs float64 MuJoCo C after 100 control steps


@pytest.fixture(autouse=True)
def _isolate(tmp_path, monkeypatch):
    """MuJoCo writes MUJOCO_LOG.TXT to the cwd on divergence; the Trainer sets torch's thread
    count and seeds the global RNG."""
    monkeypatch.chdir(tmp_path)
    threads, rng = torch.get_num_threads(), torch.get_rng_state()
    yield
    torch.set_num_threads(threads)
    torch.set_rng_state(rng)


@pytest.fixture(scope="module")
def model() -> mujoco.MjModel:
    entry = get_task(BAL)
    return compile_model(entry.task_cls(entry.config))


def _all(n: int = N) -> torch.Tensor:
    return torch.ones(n, dtype=torch.bool, device=DEV)


def _mask(*ids: int) -> torch.Tensor:
    m = torch.zeros(N, dtype=torch.bool, device=DEV)
    m[list(ids)] = True
    return m


def _start_state(seed: int, angle: float = 0.3) -> tuple[torch.Tensor, torch.Tensor]:
    """float32 start states well inside the rail."""
    g = torch.Generator().manual_seed(seed)
    u = lambda *s: 2.0 * torch.rand(*s, generator=g) - 1.0  # noqa: E731
    qpos = u(N, 2) * torch.tensor([0.3, angle])
    qvel = u(N, 2) * torch.tensor([0.3, 0.5])
    return qpos.to(DEV), qvel.to(DEV)


def _controls(steps: int, seed: int, amp: float = 1.0) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return [((2.0 * torch.rand(N, 1, generator=g) - 1.0) * amp).to(DEV) for _ in range(steps)]


def _pair(model, seed: int = 0, angle: float = 0.3):
    """An MjxSim and a CpuSim in the same start states."""
    mj, cpu = MjxSim(model, N, SUBSTEPS, device=DEV), CpuSim(model, N, SUBSTEPS)
    qpos, qvel = _start_state(seed, angle)
    mj.reset(_all(), qpos, qvel)
    cpu.reset(torch.ones(N, dtype=torch.bool), qpos.cpu(), qvel.cpu())
    return mj, cpu


def _np(t: torch.Tensor) -> np.ndarray:
    return t.detach().double().cpu().numpy()


def _close(actual: torch.Tensor, expected, tol: float) -> None:
    np.testing.assert_allclose(_np(actual), np.asarray(expected, dtype=np.float64),
                               rtol=tol, atol=tol)


# ---------------------------------------------------------------------------- construction
def test_impl_selection(monkeypatch):
    monkeypatch.delenv(IMPL_ENV, raising=False)
    assert resolve_impl(torch.device("cpu")) == "jax"
    want = "warp" if warp_available() else "jax"
    assert resolve_impl(torch.device("cuda")) == want  # a choice only: nothing is started
    monkeypatch.setenv(IMPL_ENV, "jax")
    assert resolve_impl(torch.device("cuda")) == "jax"
    monkeypatch.setenv(IMPL_ENV, "bogus")
    with pytest.raises(ValueError, match="jax, warp"):
        resolve_impl(torch.device("cpu"))
    assert resolve_impl(torch.device("cpu"), impl="jax") == "jax"  # the argument wins
    with pytest.raises(ValueError, match="accepted"):
        resolve_impl(torch.device("cpu"), impl="cpp")


def test_constructor_and_compile_time(model):
    """The sim builds on its device with its views in place, and its compile time does not
    grow with N (the traced program is one per batch). Slow (about 25 s): it compiles the
    programs at two batch sizes on JAX's CPU backend; full CI leg only."""
    sim = MjxSim(model, N, SUBSTEPS, device=DEV)
    assert sim.impl in ("jax", "warp")
    assert sim.control_dt == pytest.approx(model.opt.timestep * SUBSTEPS)
    assert sim.qpos.device == sim.qvel.device == sim.sensordata.device == DEV
    assert sim.qpos.dtype == sim.qvel.dtype == sim.sensordata.dtype == torch.float32
    assert sim.qpos.shape == (N, model.nq) and sim.sensordata.shape == (N, model.nsensordata)
    assert isinstance(sim.compile_seconds, float) and sim.compile_seconds >= 0.0
    assert not sim.unstable.any() and not sim.overflow.any()
    assert int(sim.overflow_steps) == 0
    # programs are cached per process: an equal model compiles nothing new
    t = time.perf_counter()
    again = MjxSim(copy.deepcopy(model), N, SUBSTEPS, device=DEV)
    assert time.perf_counter() - t < 5.0 and again.compile_seconds < 5.0
    with pytest.raises(ValueError, match="num_envs"):
        MjxSim(model, 0, device=DEV)
    with pytest.raises(ValueError, match="substeps"):
        MjxSim(model, 2, substeps=0, device=DEV)
    with pytest.raises(KeyError, match="cart_pos"):
        sim.sensor("no_such_sensor")


def _count_eqns(jaxpr) -> int:
    """Equations in a jaxpr and all the jaxprs nested in it (loop bodies, branches)."""
    n = 0
    for eqn in jaxpr.eqns:
        n += 1
        for p in eqn.params.values():
            for sub in p if isinstance(p, (list, tuple)) else (p,):
                inner = getattr(sub, "jaxpr", sub)
                if hasattr(inner, "eqns"):
                    n += _count_eqns(inner)
    return n


def test_program_size_does_not_grow_with_num_envs(model):
    """vmap: the traced step program is the same size for any N (so is its compile time)."""
    from trot.sim.mjx_programs import _broadcaster, _flat

    sim = MjxSim(model, N, SUBSTEPS, device=DEV)
    step, _ = sim._fns()

    def size(n: int) -> int:  # trace only: nothing is compiled for this n
        ms, m_leaves = _flat(sim._mx)
        tables = tuple(v[:n] for v in sim._params.values())
        d0 = sim._d0s.treedef.unflatten(sim._d0_leaves)
        ds, d_leaves = _flat(_broadcaster(sim.xla_options)(d0, sim._leaf("qpos")[:n]))
        traced = step.trace(ms, ds, m_leaves, tables, d_leaves, sim._unstable[:n],
                            sim._overflow_steps, jax.numpy.zeros((n, model.nu)))
        return _count_eqns(traced.jaxpr.jaxpr)

    assert size(3) == size(N) > 100


# ---------------------------------------------------------------------------- stepping
def test_step_matches_cpu_backend_balance(model):
    """Near-upright starts (balance), random full-range pushes: float32 MJX tracks float64
    MuJoCo C."""
    mj, cpu = _pair(model, seed=0, angle=0.1)
    assert torch.allclose(mj.sensordata.cpu(), cpu.sensordata, atol=1e-6)  # reset: forward
    worst = 0.0
    for c in _controls(100, seed=1):
        mj.step(c)
        cpu.step(c.cpu())
        worst = max(worst, float((mj.qpos.cpu() - cpu.qpos).abs().max()))
    print(f"\nmjx vs cpu, balance starts, 100 steps: max |dqpos| = {worst:.2e}, "
          f"final |dqvel| = {float((mj.qvel.cpu() - cpu.qvel).abs().max()):.2e}")
    assert worst <= CROSS_TOL
    _close(mj.qvel, cpu.qvel, 1e-2)
    _close(mj.sensordata, cpu.sensordata, 1e-2)  # mj_step's forward-pass sensors, both
    for name in ("cart_pos", "cart_vel", "pole_axis", "pole_vel"):
        _close(mj.sensor(name), cpu.sensor(name), 1e-2)
    _close(mj.time, cpu.time, 1e-5)
    assert not torch.allclose(mj.qpos[1], mj.qpos[2])  # the envs really differ
    assert not mj.unstable.any()


def test_env_matches_cpu_backend_swingup():
    """Env level (`make_env(..., sim="mjx")`): same seed, same actions as the cpu backend."""
    cfg = dataclasses.replace(get_task(SWING).config, obs_noise=False)
    envs = {s: trot.make_env(SWING, num_envs=N, sim=s, device=DEV if s == "mjx" else "cpu",
                             seed=3, config=cfg) for s in ("mjx", "cpu")}
    mj, cpu = envs["mjx"], envs["cpu"]
    obs_cpu = cpu.reset()
    mj.reset()
    # start both from the cpu env's states (on a GPU the env's generator draws differently)
    mj.sim.reset(_all(), cpu.sim.qpos.to(DEV), cpu.sim.qvel.to(DEV))
    _close(mj.observe().policy, obs_cpu.policy, 1e-5)
    worst = 0.0
    for a in _controls(100, seed=4):
        r_mj, r_cpu = mj.step(a), cpu.step(a.cpu())
        worst = max(worst, float((mj.sim.qpos.cpu() - cpu.sim.qpos).abs().max()))
        assert torch.equal(r_mj.terminated.cpu(), r_cpu.terminated)
        assert torch.equal(r_mj.truncated.cpu(), r_cpu.truncated)
    print(f"\nmjx vs cpu env, swing-up, 100 steps: max |dqpos| = {worst:.2e}")
    assert worst <= CROSS_TOL
    _close(r_mj.obs.policy, r_cpu.obs.policy, 1e-2)
    _close(r_mj.reward, r_cpu.reward, 1e-3)


# ---------------------------------------------------------------------------- zero copy
def test_a_block_of_rows_acts_on_its_rows_alone_on_mjx(model):
    """Seeds trained together on mjx (`trot train TASK --sim mjx --seeds ...`) step blocks
    of one MjxSim: tests/test_seeds.py's block check, for two rounds, on the backend whose
    step rebinds its tensors. Catches a block that keeps the tensors it first read (stale
    after the first step: its rows would stay at their start while the parent moves) and
    a reset, push or parameter reaching another block's rows. float32 on XLA: the same
    rows in batches of 3N and N may round apart in the last place."""
    from test_seeds import check_block_rows

    check_block_rows(lambda n: MjxSim(model, n, SUBSTEPS, device=DEV),
                     lambda a, b: torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6),
                     rounds=2, n=N)  # the module's N: only the parent's size compiles anew


def test_dlpack_zero_copy(model):
    sim = MjxSim(model, N, SUBSTEPS, device=DEV)
    for _ in range(2):
        pairs = [(sim.qpos, "qpos"), (sim.qvel, "qvel"), (sim.sensordata, "sensordata"),
                 (sim.time, "time")]
        for t, name in pairs:
            assert t.data_ptr() == sim._leaf(name).unsafe_buffer_pointer(), name
        assert sim.unstable.data_ptr() == sim._unstable.unsafe_buffer_pointer()
        sim.step(torch.zeros(N, model.nu, device=DEV))
    # torch -> JAX: the action buffer itself, no host round trip
    ctrl = torch.rand(N, model.nu, device=DEV)
    assert to_jax(ctrl).unsafe_buffer_pointer() == ctrl.data_ptr()
    # a view of the sensor slice is a view of the JAX buffer too
    s = sim.sensor("pole_axis")
    assert s.untyped_storage().data_ptr() == sim.sensordata.untyped_storage().data_ptr()


# ---------------------------------------------------------------------------- resets
@pytest.mark.parametrize("envs", [(0, 3, 6, 40), (1, 2, 62), tuple(range(0, N, 5))],
                         ids=["gathered", "gathered-padded", "whole-batch"])
def test_reset_writes_only_masked_envs(model, envs):
    """Up to N / 16 envs reset by gathering their rows (forward of those only), more by a
    forward of the whole batch: either way the masked rows are MuJoCo C's mj_forward of
    the new state and the others are untouched bit for bit. The bugs: a gather scattered
    into the wrong rows, its padding index writing the last row."""
    sim = MjxSim(model, N, SUBSTEPS, device=DEV)
    assert sim.reset_capacity == N // 16 == 4  # the first two masks fit, the third not
    sim.reset(_all(), *_start_state(0))
    for c in _controls(5, seed=2, amp=0.3):
        sim.step(c)
    before = [t.clone() for t in (sim.qpos, sim.qvel, sim.sensordata, sim.time)]

    mask = _mask(*envs)
    gen = torch.Generator().manual_seed(len(envs))
    qpos = torch.full((N, model.nq), 99.0, device=DEV)  # unmasked rows: garbage, ignored
    qvel = torch.full((N, model.nv), -99.0, device=DEV)
    qpos[mask] = (torch.rand(len(envs), model.nq, generator=gen) - 0.5).to(DEV)
    qvel[mask] = (torch.rand(len(envs), model.nv, generator=gen) - 0.5).to(DEV)
    sim.reset(mask, qpos, qvel)

    assert torch.equal(sim.qpos[mask], qpos[mask])
    assert torch.equal(sim.qvel[mask], qvel[mask])
    assert torch.all(sim.time[mask] == 0.0)
    for i in mask.nonzero().flatten().tolist():
        d = mujoco.MjData(model)
        d.qpos[:], d.qvel[:] = _np(qpos[i]), _np(qvel[i])
        mujoco.mj_forward(model, d)
        _close(sim.sensordata[i], d.sensordata, 1e-6)
    keep = ~mask
    for now, old in zip((sim.qpos, sim.qvel, sim.sensordata, sim.time), before):
        assert torch.equal(now[keep], old[keep])  # bit-identical

    snap = [t.clone() for t in (sim.qpos, sim.qvel, sim.sensordata, sim.time)]
    sim.reset(torch.zeros(N, dtype=torch.bool, device=DEV), qpos, qvel)  # empty mask
    for now, old in zip((sim.qpos, sim.qvel, sim.sensordata, sim.time), snap):
        assert torch.equal(now, old)
    with pytest.raises(ValueError, match="shape"):
        sim.reset(mask, qpos[:, :1], qvel)


def test_reset_env_then_steps_like_fresh_mujoco(model):
    """An env reset mid-run continues like a new MjData from that state (zero warmstart,
    time, act), to float32 accuracy."""
    sim = MjxSim(model, N, SUBSTEPS, device=DEV)
    sim.reset(_all(), *_start_state(0))
    for c in _controls(7, seed=3, amp=0.3):
        sim.step(c)
    qpos, qvel = _start_state(9, angle=0.1)
    sim.reset(_mask(4), qpos, qvel)
    d = mujoco.MjData(model)
    d.qpos[:], d.qvel[:] = _np(qpos[4]), _np(qvel[4])
    for c in _controls(20, seed=4, amp=0.3):
        sim.step(c)
        d.ctrl[:] = _np(c[4])
        for _ in range(SUBSTEPS):
            mujoco.mj_step(model, d)
    _close(sim.qpos[4], d.qpos, 1e-4)
    _close(sim.sensordata[4], d.sensordata, 1e-4)
    assert float(sim.time[4]) == pytest.approx(d.time, abs=1e-6)


# ---------------------------------------------------------------------------- randomization
def test_set_params_body_mass_only_masked_envs(model):
    cart = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_BODY, "cart")
    base_mass = model.body_mass.copy()
    dr, cpu = _pair(model, seed=5, angle=0.1)
    plain = MjxSim(model, N, SUBSTEPS, device=DEV)
    plain.reset(_all(), dr.qpos.clone(), dr.qvel.clone())
    qpos0 = dr.qpos.clone()

    mask = torch.tensor([True, False] * (N // 2), device=DEV)
    values = torch.as_tensor(base_mass, dtype=torch.float32, device=DEV).repeat(N, 1)
    values[:, cart] *= 3.0  # in every row: unmasked rows must be ignored
    dr.set_params("body_mass", mask, values)
    cpu.set_params("body_mass", mask.cpu(), values.cpu())

    p = dr.params("body_mass")
    assert p.shape == (N, model.nbody) and p.device == DEV
    assert torch.equal(p[mask], values[mask])
    assert torch.equal(p[~mask], torch.as_tensor(base_mass, dtype=torch.float32,
                                                 device=DEV).expand(N // 2, -1))
    np.testing.assert_array_equal(model.body_mass, base_mass)  # shared model untouched
    p.fill_(0.0)  # params() is a copy: writing it changes nothing
    assert torch.equal(dr.params("body_mass")[mask], values[mask])

    ctrl = torch.full((N, 1), 0.5, device=DEV)
    for _ in range(20):
        dr.step(ctrl)
        plain.step(ctrl)
        cpu.step(ctrl.cpu())
    for now, ref in ((dr.qpos, plain.qpos), (dr.qvel, plain.qvel),
                     (dr.sensordata, plain.sensordata)):
        assert torch.equal(now[~mask], ref[~mask])  # other envs: exactly as without DR
    dx_dr = (dr.qpos[mask, 0] - qpos0[mask, 0]).abs()
    dx_plain = (plain.qpos[mask, 0] - qpos0[mask, 0]).abs()
    assert torch.all(dx_dr < 0.8 * dx_plain)  # a 3x heavier cart travels less
    _close(dr.qpos, cpu.qpos, 1e-4)  # and like MuJoCo C with that mass


def test_set_params_bad_input(model):
    sim = MjxSim(model, N, SUBSTEPS, device=DEV)
    assert set(sim.randomized_fields) == set(RANDOMIZABLE_FIELDS)
    check_set_params_rejects_bad_input(sim, model)


# ---------------------------------------------------------------------------- instability
def test_unstable_after_reset_with_huge_velocity(model):
    sim = MjxSim(model, N, SUBSTEPS, device=DEV)
    sim.reset(_all(), *_start_state(0))
    for c in _controls(3, seed=5, amp=0.3):
        sim.step(c)
    mask = _mask(1, 5, 63)
    qv = sim.qvel.clone()
    qv[mask] = 1e12
    sim.reset(mask, sim.qpos.clone(), qv)
    assert not sim.unstable.any()  # flagged by a step, as on the cpu backend
    sim.step(torch.zeros(N, 1, device=DEV))
    assert torch.equal(sim.unstable, mask)
    sim.step(torch.zeros(N, 1, device=DEV))
    assert torch.equal(sim.unstable, mask)  # stays flagged until reset
    sim.reset(mask, torch.zeros(N, model.nq, device=DEV), torch.zeros(N, model.nv, device=DEV))
    assert not sim.unstable.any()
    sim.step(torch.zeros(N, 1, device=DEV))
    assert not sim.unstable.any()


def test_unstable_mid_episode_divergence(model):
    sim = MjxSim(model, N, SUBSTEPS, device=DEV)
    ref = MjxSim(model, N, SUBSTEPS, device=DEV)
    start = _start_state(0, angle=0.1)
    sim.reset(_all(), *start)
    ref.reset(_all(), *start)
    for c in _controls(3, seed=6, amp=0.3):
        sim.step(c)
        ref.step(c)
    mask = _mask(2, 7)
    gain = sim.params("actuator_gainprm")
    gain[:, 0, 0] = 1e15
    sim.set_params("actuator_gainprm", mask, gain)
    push = torch.ones(N, 1, device=DEV)
    sim.step(push)
    ref.step(push)
    assert torch.equal(sim.unstable, mask)
    assert torch.equal(sim.qpos[~mask], ref.qpos[~mask])
    assert torch.equal(sim.qvel[~mask], ref.qvel[~mask])


def test_env_nan_guard_after_injected_velocity():
    n = N
    env = trot.make_env(BAL, num_envs=n, sim="mjx", device=DEV,
                        config=dataclasses.replace(get_task(BAL).config, obs_noise=False))
    env.reset()
    zero = torch.zeros(n, 1, device=DEV)
    for _ in range(3):
        env.step(zero)
    mask = _mask(1, 5)
    qvel = env.sim.qvel.clone()
    qvel[mask] = 1e12
    env.sim.reset(mask, env.sim.qpos.clone(), qvel)
    r = env.step(zero)
    _check_guard(env, r, mask, steps_before=3)  # the cpu backend's checks
    assert not env.sim.unstable.any()  # the guard reset them


# ---------------------------------------------------------------------------- time limit
def test_truncation_at_time_limit_with_final_obs():
    """tests/test_env.py's truncation test on the mjx backend (float32 tolerances)."""
    n = N
    cfg = dataclasses.replace(get_task(SWING).config, episode_seconds=0.2, obs_noise=False)
    env = trot.make_env(SWING, num_envs=n, sim="mjx", device=DEV, config=cfg)
    model, substeps = env.sim.model, env.sim.substeps
    assert env.max_episode_steps == 10
    env.reset()
    datas = []
    for i in range(n):
        d = mujoco.MjData(model)
        d.qpos[:], d.qvel[:] = _np(env.sim.qpos[i]), _np(env.sim.qvel[i])
        datas.append(d)

    for k, a in enumerate(_controls(10, seed=7), start=1):
        r = env.step(a)
        for i, d in enumerate(datas):
            d.ctrl[:] = _np(a[i])
            for _ in range(substeps):
                mujoco.mj_step(model, d)
        assert not r.terminated.any()
        if k < 10:
            assert not r.truncated.any(), k
            assert torch.equal(r.final_obs.policy, r.obs.policy)
            assert torch.equal(env.episode_step, torch.full((n,), k, device=DEV))
    assert r.truncated.all() and not r.terminated.any()
    # final_obs: the sensors of mj_step's forward pass (start of the last substep)
    want = np.stack([_obs_from_sensordata(env, d) for d in datas])
    _close(r.final_obs.policy, want, 1e-4)
    # obs: a fresh episode (new start state, clock at 0, hanging: angle pi +- 0.2)
    assert torch.equal(env.episode_step, torch.zeros(n, dtype=torch.int64, device=DEV))
    assert torch.all(env.sim.time == 0.0)
    assert torch.all((env.sim.qpos[:, 1] - math.pi).abs() <= 0.2 + 1e-6)
    assert not torch.allclose(r.obs.policy, r.final_obs.policy)
    for k, a in enumerate(_controls(10, seed=8), start=1):
        r = env.step(a)
        assert bool(r.truncated.all()) == (k == 10), k


# ---------------------------------------------------------------------------- checkpoints
def test_state_dict_round_trip(model):
    sim = MjxSim(model, N, SUBSTEPS, device=DEV)
    sim.reset(_all(), *_start_state(0))
    mass = sim.params("body_mass")
    mass[:, 1] *= 2.0
    sim.set_params("body_mass", torch.tensor([False, True] * (N // 2), device=DEV), mass)
    for c in _controls(4, seed=7, amp=0.3):
        sim.step(c)
    check_state_dict_round_trip(sim, MjxSim(model, N, SUBSTEPS, device=DEV),
                                _controls(15, seed=8, amp=0.3),
                                outputs=("qpos", "qvel", "sensordata", "time"))


# ---------------------------------------------------------------------------- training
def test_ppo_learns_cartpole_balance_on_mjx(tmp_path):
    """`trot train cartpole-balance --sim mjx` in small: ~15 s on 2 CPU cores."""
    agent = dataclasses.replace(PPOConfig(), actor_hidden=(32, 32), critic_hidden=(32, 32),
                                rollout_steps=16)
    cfg = TrainConfig(task=BAL, num_envs=N, sim="mjx", device=str(DEV), agent=agent,
                      max_env_steps=10**7, run_dir=str(tmp_path / "run"))
    trainer = build(cfg)
    t0, returns = time.monotonic(), []
    for _ in range(30):
        m = trainer.iterate()
        if "episode_return" in m:
            returns.append(m["episode_return"])
    elapsed = time.monotonic() - t0
    print(f"\nmjx PPO, {N} envs x 16 steps x 30 iterations: {elapsed:.1f} s; returns {returns}")
    assert trainer.nan_updates == 0
    first, last = sum(returns[:3]) / 3, sum(returns[-8:]) / 8
    assert last > 3 * first and last > 100, (first, last, returns)


def test_training_resume_is_bitwise_identical(tmp_path):
    """Trainer checkpoints hold the mjx sim state: a resumed run continues exactly."""
    from pathlib import Path

    from trot.agents.learners import resume
    from trot.agents.train_config import save_json

    agent = dataclasses.replace(PPOConfig(), actor_hidden=(16, 16), critic_hidden=(16, 16),
                                rollout_steps=8)
    cfg = TrainConfig(task=BAL, num_envs=N, sim="mjx", device=str(DEV), agent=agent,
                      max_env_steps=10**7, run_dir=str(tmp_path / "run"))
    def drop(m: dict) -> dict:
        return {k: v for k, v in m.items() if k not in ("wall_s", "steps_per_s")}

    straight = build(cfg)
    m_straight = [drop(straight.iterate()) for _ in range(4)]
    first = build(cfg)
    run_dir = Path(cfg.run_dir)
    run_dir.mkdir(parents=True)
    save_json(run_dir / "config.json", cfg)
    m_split = [drop(first.iterate()) for _ in range(2)]
    save(first, run_dir)
    second = resume(run_dir)[0]
    m_split += [drop(second.iterate()) for _ in range(2)]
    assert m_split == m_straight
    assert torch.equal(second.env.sim.qpos, straight.env.sim.qpos)
    assert torch.equal(second.env.sim.sensordata, straight.env.sim.sensordata)


# ---------------------------------------------------------------------------- CUDA streams
@pytest.mark.skipif(DEV.type != "cuda", reason="needs a CUDA GPU: stream ordering "
                    "(TROT_TEST_DEVICE=cuda)")
def test_cuda_handoff_is_stream_ordered(model):
    """A missing stream dependency shows up as stale data. torch -> JAX: the action is
    written at the end of a long queue of torch kernels and handed over at once; JAX must
    read the final values. JAX -> torch: torch reads the new state right after the step
    is queued; it must see the finished step, not the old or a half-written buffer."""
    sim = MjxSim(model, N, SUBSTEPS, device=DEV)
    ref = MjxSim(model, N, SUBSTEPS, device=DEV)
    start = _start_state(0, angle=0.1)
    sim.reset(_all(), *start)
    ref.reset(_all(), *start)
    big = torch.randn(4096, 4096, device=DEV)
    for c in _controls(20, seed=9):
        torch.cuda.synchronize()
        ref.step(c)
        torch.cuda.synchronize()
        want = ref.qpos.clone()
        torch.cuda.synchronize()

        ctrl = torch.zeros(N, 1, device=DEV)
        x = big
        for _ in range(8):  # ~tens of ms of queued torch work before the action is written
            x = torch.tanh(x @ big)
        ctrl.copy_(c + 0.0 * x[:N, :1])  # written only after the matmuls
        sim.step(ctrl)  # no synchronize: the DLPack stream hand-off must order it
        got = sim.qpos.clone()  # read on torch's stream right after the step is queued
        torch.cuda.synchronize()
        # a stale action or a stale/half-written state is off by ~1e-3; Warp's atomics may
        # reorder float sums, hence not bit-equality
        assert torch.allclose(got, want, rtol=0.0, atol=1e-5)


def test_kick_matches_cpu_backend(model):
    sim, ref = _pair(model, seed=4)
    mask = _mask(0, 3)
    dq = torch.randn(N, model.nv, generator=torch.Generator().manual_seed(2))
    before = sim.qvel.clone()
    sim.kick(mask, dq)
    ref.kick(mask, dq)
    _close(sim.qvel, ref.qvel, 1e-5)
    assert torch.equal(sim.qvel[~mask], before[~mask])
    for c in _controls(20, seed=5):
        sim.step(c)
        ref.step(c)
    _close(sim.qpos, ref.qpos, 1e-3)


MOCAP_XML = """<mujoco><worldbody>
  <body name="a" mocap="true" pos="0.3 -0.2 0.5" quat="0.7071068 0 0.7071068 0">
    <geom size="0.05" contype="0" conaffinity="0"/></body>
  <body name="slider" pos="0 0 1"><joint name="x" type="slide" axis="1 0 0"/>
    <geom size="0.1" contype="0" conaffinity="0"/></body>
  <body name="b" mocap="true" pos="1 2 3"><geom size="0.05" contype="0" conaffinity="0"/></body>
</worldbody><actuator><motor joint="x"/></actuator></mujoco>"""


def test_mocap_bodies_start_and_reset_at_their_model_pose():
    """Mocap bodies are at their model pose after construction, after steps and after a
    partial reset, as mj_resetData puts them: a reset template or program that zeroed or
    reordered mocap_pos / mocap_quat (MuJoCo C keeps them through steps) fails this."""
    m = mujoco.MjModel.from_xml_string(MOCAP_XML)
    ref = mujoco.MjData(m)  # mj_resetData's pose
    n = 4
    sim = MjxSim(m, n, device=DEV, fields=("mocap_pos", "mocap_quat"))

    def check():
        for f in ("mocap_pos", "mocap_quat"):
            want = np.broadcast_to(getattr(ref, f), (n, m.nmocap, len(getattr(ref, f)[0])))
            np.testing.assert_allclose(sim.data(f).cpu().numpy(), want, atol=1e-6, err_msg=f)

    check()
    for _ in range(3):
        sim.step(torch.ones(n, m.nu, device=DEV))
    assert (sim.qpos[:, 0] != 0).all()  # the slider moved: the steps ran
    check()
    mask = torch.tensor([True, False, True, False], device=DEV)
    sim.reset(mask, torch.zeros(n, m.nq, device=DEV), torch.zeros(n, m.nv, device=DEV))
    check()
