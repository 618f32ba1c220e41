"""Reading a run back (agents/runs.py) for export, eval and play: a run trained on the mjx
backend exports (and, with --sim cpu, evaluates and plays) without importing JAX. The
export's own contract checks: one the exporter would write wrong is refused before anything
is written, and a robot whose standing keyframe is not named 'home' gets its own."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import mujoco
import numpy as np
import pytest
import torch

from trot.agents.loop import train
from trot.agents.config import PPOConfig
from trot.agents.learners import start
from trot.agents.train_config import TrainConfig
from trot.export import contract
from trot.export.checks import check_model
from trot.export.onnx import FILES, OPSET, ExportError, export_run
from trot.tasks import registry
from trot.tasks.locomotion import flat
from trot.tasks.legged_robot import LeggedRobot
from trot.tasks.registry import make_env, register


@pytest.fixture(scope="module")
def mjx_run(tmp_path_factory) -> Path:
    """A tiny cartpole run trained on cpu whose config then says sim=mjx: the commands under
    test read only the config's `sim`, and training on MJX here would take minutes."""
    base = tmp_path_factory.mktemp("mjx_run")
    threads, rng = torch.get_num_threads(), torch.get_rng_state()
    agent = PPOConfig(actor_hidden=(16,), critic_hidden=(16,))
    cfg = TrainConfig(task="cartpole-balance", num_envs=16, max_env_steps=16 * 16, seed=0,
                      run_dir=str(base / "run"), agent=agent)
    trainer, run_dir = start(cfg)
    train(trainer, run_dir, quiet=True)
    torch.set_num_threads(threads)
    torch.set_rng_state(rng)
    path = Path(run_dir) / "config.json"
    path.write_text(json.dumps(json.loads(path.read_text()) | {"sim": "mjx"}))
    return Path(run_dir)


def _can_render() -> bool:
    """Probed in a child: a failed GL import leaves PyOpenGL half-initialized."""
    p = subprocess.run([sys.executable, "-c", "from trot.play import probe_gl; probe_gl()"],
                       capture_output=True, text=True, timeout=120, check=False)
    return p.returncode == 0


def test_mjx_run_exports_evaluates_and_plays_without_jax(mjx_run, tmp_path):
    """Export never builds the run's mjx sim (MuJoCo C gives the model and observations);
    eval and play take --sim cpu. Play runs where OpenGL loads."""
    play = _can_render()
    code = textwrap.dedent(f"""
        import json, sys
        from trot.cli import main
        run, out = {str(mjx_run)!r}, {str(tmp_path / "out")!r}
        assert json.load(open(run + "/config.json"))["sim"] == "mjx"
        assert main(["export", run, "--out", out]) == 0
        assert main(["eval", run, "--sim", "cpu", "--episodes", "2", "--json"]) == 0
        if {play}:
            assert main(["play", run, "--sim", "cpu", "--seconds", "0.1", "--gif",
                         out + "/play.gif"]) == 0
        print(json.dumps(sorted(m for m in sys.modules if m.split(".")[0] == "jax"
                                or "mjx" in m)))
    """)
    p = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True,
                       text=True, timeout=300, check=False)
    assert p.returncode == 0, p.stderr[-3000:]
    assert json.loads(p.stdout.strip().splitlines()[-1]) == [], "JAX was imported"
    written = {f.name for f in (tmp_path / "out").iterdir()}
    assert written >= set(FILES) and (not play or "play.gif" in written)


def test_export_refuses_a_contract_the_load_check_would_refuse(mjx_run, tmp_path,
                                                              monkeypatch):
    """An exporter bug (here: a wrong joint in the action map) fails the export; nothing is
    written."""
    build = contract.build_contract

    def wrong_joint(*args, **kwargs):
        c = build(*args, **kwargs)
        first = dataclasses.replace(c.actions[0], joint="hinge")
        return dataclasses.replace(c, actions=(first, *c.actions[1:]))

    monkeypatch.setattr("trot.export.onnx.build_contract", wrong_joint)
    with pytest.raises(ExportError, match=r"actions\[0\]\.joint"):
        export_run(mjx_run, tmp_path / "out", quiet=True)
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


def test_contract_home_is_the_robot_s_own_keyframe(monkeypatch):
    """tests/data/other_quadruped.xml stands in keyframe 'standing': default_joint_pos and
    the position servos' offsets are that pose (not qpos0), and the load check agrees."""
    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))  # keep it clean
    legs = ("LF", "RF", "LH", "RH")
    robot = LeggedRobot(
        mjcf=Path(__file__).parent / "data" / "other_quadruped.xml",
        joints=tuple(f"{leg}_{j}" for leg in legs for j in ("HAA", "HFE", "KFE")),
        feet=tuple(f"{leg}_FOOT" for leg in legs), base="torso",
        terminate_contacts=("torso",), home="standing")
    task = flat(robot)
    register("standing-flat", task, task.defaults(), "a robot whose home is 'standing'")
    env = make_env("standing-flat", 1)
    model = mujoco.MjModel.from_xml_string(env.task.build().to_xml())
    c = contract.build_contract(env, env.task.config, 0, OPSET, "0" * 64, {})
    standing = model.key_qpos[mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_KEY, "standing")]
    want = [standing[model.jnt_qposadr[model.actuator_trnid[i, 0]]] for i in range(model.nu)]
    assert c.home_keyframe == "standing"
    assert np.allclose(c.default_joint_pos, want) and np.allclose(c.action_offset, want)
    assert not np.allclose(want, model.qpos0[7:])  # the test tells them apart
    check_model(c, model)
