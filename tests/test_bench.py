"""Benchmark plumbing that decides what a ratio means: the ceiling's start states."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import mujoco
import numpy as np
import torch

import trot
from trot.bench import RawRollout, full_physics_columns


def test_ceiling_starts_from_the_env_states_it_is_given():
    """The FULLPHYSICS columns of a cpu-backend state row are what mj_getState gives for
    that env, and a rollout from them matches mj_step from the env's MjData."""
    env = trot.make_env("go1-flat", num_envs=3, seed=4)
    env.reset()
    g = torch.Generator().manual_seed(0)
    for _ in range(5):
        env.step(torch.rand(3, env.action_dim, generator=g) * 2 - 1)
    m, full = env.sim.model, mujoco.mjtState.mjSTATE_FULLPHYSICS.value
    states = env.sim.state_dict()["state"].numpy()[:, full_physics_columns(m)]
    raw = RawRollout(m, 3, 4, nthread=1)
    raw.start_from(states)
    raw.seconds()
    for i in range(3):
        d = mujoco.MjData(m)
        env.sim._b.get_data(i, d)
        want = np.zeros(mujoco.mj_stateSize(m, full))
        mujoco.mj_getState(m, d, want, full)
        np.testing.assert_array_equal(states[i], want)
        d.ctrl[:] = 0.0
        for _ in range(4):
            mujoco.mj_step(m, d)
        np.testing.assert_allclose(raw.out_s[i, -1, 1:1 + m.nq], d.qpos, atol=1e-6)
    raw.close()


def test_compare_ant_fails_loudly_when_a_stack_fails(tmp_path):
    """A stack that dies must fail the comparison with its last log lines, not leave a table
    with its row missing (issue 54: trot's run died at once and the table went on)."""
    script = Path(__file__).resolve().parents[1] / "benchmarks" / "compare_ant.py"
    # 0 envs parses as a train flag and fails in trot's run itself
    p = subprocess.run([sys.executable, str(script), "--only", "trot", "--minutes", "0.05",
                        "--out-dir", str(tmp_path), "--", "gym-ant", "--num-envs", "0"],
                       capture_output=True, text=True, timeout=120, check=False)
    assert p.returncode == 1, p.stdout[-2000:] + p.stderr[-2000:]
    assert "compare_ant: failed: trot; no table" in p.stderr
    assert "num_envs must be a positive integer" in p.stdout.split("== trot failed")[-1]
    assert "| stack |" not in p.stdout
