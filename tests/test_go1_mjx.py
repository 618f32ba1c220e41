"""The Go1 on both backends: same start, same actions, same randomization draws.

MJX (float32, its own contact pipeline) and MuJoCo C (float64) agree to <= 1e-2 in qpos
after 50 control steps (measured: 9e-3 with actions of amplitude 0.5). The gap is the
contact solver's, not the task code's: before the feet load up (first 30 steps) the two
agree to 2e-4. Compiling the Go1 for MJX's JAX implementation takes 1-2 minutes on a
2-core CPU, so this is the one slow test.
"""

import dataclasses

import pytest
import torch

pytest.importorskip("jax")
pytest.importorskip("mujoco.mjx")

import trot  # noqa: E402
from trot.tasks.registry import get_task  # noqa: E402


def test_go1_cpu_and_mjx_agree_for_50_steps(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        cfg = dataclasses.replace(get_task("go1-flat").config, obs_noise=False)
        mjx = trot.make_env("go1-flat", num_envs=4, sim="mjx", seed=1, config=cfg)
        cpu = trot.make_env("go1-flat", num_envs=4, sim="cpu", seed=1, config=cfg)
        mjx.reset()
        cpu.reset()
        gen = torch.Generator().manual_seed(0)
        for t in range(50):
            # joint targets within +-0.125 rad of the home pose (action scale 0.5)
            action = 0.25 * (2 * torch.rand(4, 12, generator=gen) - 1)
            a, b = mjx.step(action), cpu.step(action)
            assert torch.equal(a.terminated.cpu(), b.terminated)
            if t == 29:  # before contact differences accumulate
                assert (mjx.sim.qpos.cpu() - cpu.sim.qpos).abs().max() < 1e-3
        assert (mjx.sim.qpos.cpu() - cpu.sim.qpos).abs().max() <= 1e-2
    finally:
        torch.set_num_threads(threads)


def test_go1_rough_cpu_and_mjx_agree_for_50_steps(tmp_path, monkeypatch):
    """go1-rough on a small map, envs on the hardest row of rough ground, both slopes and
    stairs up. MJX keeps at most 4 contacts per geom-heightfield pair (MuJoCo C one per
    touching prism, up to 50), so contact impulses differ from the landing on: joint
    angles part by up to 0.11 rad in transients, while the base, which the terrain
    carries, agrees to 1.3e-3 m after 5 steps (a misplaced or flipped terrain would be
    centimetres off there) and to 2.5e-2 m and 2.5e-2 in its quaternion after 50
    (measured). The tolerances are those numbers with some margin."""
    monkeypatch.chdir(tmp_path)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        cfg = dataclasses.replace(get_task("go1-rough").config, obs_noise=False,
                                  tile_size=3.0, terrain_rows=2, terrain_cols=7,
                                  terrain_border=1.5, spawn_spread=0.2, start_row=1,
                                  terrain_proportions=(0, 1, 1, 1, 1, 0, 0))
        envs = [trot.make_env("go1-rough", num_envs=4, sim=s, seed=1, config=cfg)
                for s in ("mjx", "cpu")]
        for env in envs:
            env.reset()
        mjx, cpu = envs
        gen = torch.Generator().manual_seed(0)
        for t in range(50):
            action = 0.25 * (2 * torch.rand(4, 12, generator=gen) - 1)
            a, b = mjx.step(action), cpu.step(action)
            assert torch.equal(a.terminated.cpu(), b.terminated)
            gap = (mjx.sim.qpos.cpu() - cpu.sim.qpos).abs()  # [N, nq]
            if t == 4:
                assert gap[:, :3].max() < 5e-3
        assert gap[:, :3].max() < 4e-2 and gap[:, 3:7].max() < 4e-2
        assert gap[:, 7:].max() < 0.2
    finally:
        torch.set_num_threads(threads)
