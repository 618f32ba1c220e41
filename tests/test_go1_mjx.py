"""The Go1 and the G1 on both backends: same start, same actions, same randomization draws.

MJX (float32, its own contact pipeline) and MuJoCo C (float64) agree to <= 1e-2 in qpos
after 50 control steps (measured: 6e-3 with actions of amplitude 0.25). The gap is the
contact solver's, not the task code's: until a foot first lifts off (step 17 in this draw;
the feet touch down by step 12) the two agree to 1.2e-4, and a wrong gain, mass or reset
would part them from the first step. Compiling the Go1 for MJX's JAX implementation takes 1-2 minutes on a
2-core CPU, so this is the one slow test.
"""

import dataclasses
import os

import torch
from extras import need

need("jax")
need("mujoco.mjx")

import trot  # noqa: E402
from trot.tasks.registry import get_task  # noqa: E402

DEV = os.environ.get("TROT_TEST_DEVICE", "cpu")  # the mjx side's (benchmarks/gpu_check.sh)


def _lockstep(task, cfg, amplitude, steps=50):
    """Step `task` on both backends (4 envs, seed 1, one torch thread) with the same
    uniform random actions in +-amplitude; yield (t, |qpos_mjx - qpos_cpu|) [N, nq] after
    each step, having checked that the same envs terminated."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        envs = [trot.make_env(task, num_envs=4, sim=s, device=d, seed=1, config=cfg)
                for s, d in (("mjx", DEV), ("cpu", "cpu"))]
        for env in envs:
            env.reset()
        mjx, cpu = envs
        gen = torch.Generator().manual_seed(0)
        for t in range(steps):
            action = amplitude * (2 * torch.rand(4, 12, generator=gen) - 1)  # [N, A]
            a, b = mjx.step(action.to(mjx.device)), cpu.step(action)
            assert torch.equal(a.terminated.cpu(), b.terminated), t
            yield t, (mjx.sim.qpos.cpu() - cpu.sim.qpos).abs()
    finally:
        torch.set_num_threads(threads)


def test_go1_cpu_and_mjx_agree_for_50_steps(tmp_path, monkeypatch):
    """go1-flat on both backends from the same states under the same joint targets: within
    1e-3 before the first lift-off, 1e-2 after. Catches an mjx model or step that is not the
    cpu one (gains, contacts, substeps). Slow (about 45 s): compiling go1-flat's MJX programs
    on JAX's CPU backend; full CI leg only."""
    monkeypatch.chdir(tmp_path)
    cfg = dataclasses.replace(get_task("go1-flat").config, obs_noise=False)
    # joint targets within +-0.125 rad of the home pose (action scale 0.5)
    for t, gap in _lockstep("go1-flat", cfg, amplitude=0.25):
        if t == 15:  # before the first lift-off (contact events part the solvers)
            assert gap.max() < 1e-3
    assert gap.max() <= 1e-2


def test_go1_rough_cpu_and_mjx_agree_for_50_steps(tmp_path, monkeypatch):
    """go1-rough on a small map, envs on the hardest row of rough ground, both slopes and
    stairs up. MJX keeps at most 4 contacts per geom-heightfield pair (MuJoCo C one per
    touching prism, up to 50), so contact impulses differ from the landing on: joint
    angles part by up to 0.11 rad in transients, while the base, which the terrain
    carries, agrees to 1.3e-3 m after 5 steps (a misplaced or flipped terrain would be
    centimetres off there) and to 2.5e-2 m and 2.5e-2 in its quaternion after 50
    (measured). The tolerances are those numbers with some margin.
    Slow (about 100 s on 2 cores): compiling go1-rough's MJX step (contacts with the
    heightfield) on JAX's CPU backend is most of it; CI runs it in the full leg only (the
    mjx extra)."""
    monkeypatch.chdir(tmp_path)
    cfg = dataclasses.replace(get_task("go1-rough").config, obs_noise=False,
                              tile_size=3.0, terrain_rows=2, terrain_cols=7,
                              terrain_border=1.5, spawn_spread=0.2, start_row=1,
                              terrain_proportions=(0, 1, 1, 1, 1, 0, 0))
    for t, gap in _lockstep("go1-rough", cfg, amplitude=0.25):
        if t == 4:
            assert gap[:, :3].max() < 5e-3
    assert gap[:, :3].max() < 4e-2 and gap[:, 3:7].max() < 4e-2
    assert gap[:, 7:].max() < 0.2


# g1-flat, measured: the base 2.6e-3 m apart after 10 steps and 1.2e-2 after 50; joints up
# to 6.5e-2 rad apart in transients (random targets into the joint limits). About 3x that:
G1_EARLY, G1_BASE, G1_JOINTS = 1e-2, 4e-2, 0.15


def test_g1_cpu_and_mjx_agree_for_50_steps(tmp_path, monkeypatch):
    """g1-flat with randomization and pushes on, random joint targets. The soles touch the
    ground through corner spheres, whose contacts MJX computes as MuJoCo C does (MJX's
    box-plane keeps fewer corners: the backends parted within one step with box soles).
    A robot standing in one backend and falling in the other (a wrong model, gain, reset
    or randomization) is decimetres apart; the tolerances are the measured gaps x 3.
    Slow (about 70 s): compiling g1-flat's MJX programs on JAX's CPU backend; full CI leg only."""
    monkeypatch.chdir(tmp_path)
    cfg = dataclasses.replace(get_task("g1-flat").config, obs_noise=False)
    for t, gap in _lockstep("g1-flat", cfg, amplitude=0.5):  # +-0.125 rad
        assert gap[:, 7:].max() < G1_JOINTS, t
        if t == 9:
            assert gap[:, :3].max() < G1_EARLY
    assert gap[:, :3].max() < G1_BASE


def test_go1_env_step_is_two_xla_executions_without_flattens_or_transfers(monkeypatch):
    """Per env.step of go1-flat on mjx (randomization and pushes on, every env resetting
    now and then): at most 2 XLA executions (the step program, the reset program), counted
    where JAX executes a compiled program (pxla.ExecuteReplicated, with jit's C++ fast path
    turned off so that every call passes there), no flatten of the MJX model, and no
    host<->device transfer, explicit or implicit (jax.transfer_guard). The bugs: a kick or
    a parameter table updated by a program of its own (8 executions per step before),
    the model re-flattened per set_params, a numpy or Python value handed to a program.
    Slow (about 75 s): it compiles go1-flat's step and reset programs on JAX's CPU backend to
    count their executions; full CI leg only."""
    import jax
    from jax._src import pjit
    from jax._src.interpreters import pxla
    from mujoco import mjx

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        # every call through Python from now on: no fast-path entries, old ones dropped
        monkeypatch.setattr(pjit, "_get_fastpath_data", lambda *a, **k: None)
        cfg = dataclasses.replace(get_task("go1-flat").config, episode_seconds=0.2)
        env = trot.make_env("go1-flat", num_envs=4, sim="mjx", device=DEV, seed=1, config=cfg)
        for program in env.sim._fns():
            program.clear_cache()
        env.reset(stagger=True)
        for _ in range(3):
            env.step(torch.zeros(4, 12, device=env.device))
        runs, flats = [0], [0]
        execute, flatten = pxla.ExecuteReplicated.__call__, jax.tree_util.tree_flatten

        def counted(self, *a, **k):
            runs[0] += 1
            return execute(self, *a, **k)

        def flat(tree, *a, **k):
            flats[0] += isinstance(tree, mjx.Model)
            return flatten(tree, *a, **k)

        monkeypatch.setattr(pxla.ExecuteReplicated, "__call__", counted)
        monkeypatch.setattr(jax.tree_util, "tree_flatten", flat)
        gen = torch.Generator().manual_seed(0)
        ended, resetting = 0, 0
        with jax.transfer_guard("disallow_explicit"):
            for _ in range(20):  # 0.2 s episodes: every env resets at least once
                res = env.step((0.5 * (2 * torch.rand(4, 12, generator=gen) - 1)).to(env.device))
                done = res.terminated | res.truncated
                ended += int(done.sum())
                resetting += bool(done.any())
        assert ended >= 4 and 0 < resetting < 20
        # on the CPU the host knows for free when no env ended, and the reset program is
        # skipped then (sim/mjx.py `_known_empty`); on a GPU it runs with an empty mask
        want = 20 + (resetting if env.device.type == "cpu" else 20)
        assert runs[0] == want, (runs[0], want)
        assert flats[0] == 0
    finally:
        torch.set_num_threads(threads)
