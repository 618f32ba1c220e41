"""`trot view` without a browser: the scene's meshes against MuJoCo's own geometry, the
drivers (trot/view_sim.py) on go1-flat, g1-flat and go1-rough, the command held at the
sliders, the push, a run's checkpoint, the terrain switch, and bad sources named. The page
itself is tested in a real browser in tests/test_viewer_browser.py."""

from __future__ import annotations

import dataclasses
import socket
from pathlib import Path

import mujoco
import numpy as np
import pytest
import torch

from trot.agents.loop import save
from trot.cli import main as cli_main
from trot.view_scene import geom_mesh
from trot.view_sim import OnnxDriver, run_driver, task_driver

REPO = Path(__file__).resolve().parents[1]
WALKER = REPO / "tests" / "data" / "go1_walker"

SHAPES = """
<mujoco>
  <asset><mesh name="tet" vertex="0 0 0  0.3 0 0  0 0.2 0  0 0 0.1"/></asset>
  <worldbody>
    <body pos="0 0 1"><freejoint/>
      <geom type="box" size="0.1 0.2 0.3"/>
      <geom type="sphere" size="0.15" pos="1 0 0"/>
      <geom type="capsule" size="0.05 0.2" pos="0 1 0" euler="30 0 0"/>
      <geom type="cylinder" size="0.07 0.12" pos="1 1 0"/>
      <geom type="ellipsoid" size="0.1 0.2 0.05" pos="2 0 0"/>
      <geom type="mesh" mesh="tet" pos="2 1 0"/>
    </body>
  </worldbody>
</mujoco>"""


def test_geom_meshes_fill_mujocos_bounding_boxes():
    """Each primitive's mesh spans exactly MuJoCo's box around that geom (geom_aabb, in the
    geom's frame). The bugs: full sizes read as half sizes, a capsule's half-length taken
    as its length, an ellipsoid's radii in the wrong order, a mesh asset's vertices read
    from the wrong offset."""
    model = mujoco.MjModel.from_xml_string(SHAPES)
    assert model.ngeom == 6
    for g in range(model.ngeom):
        verts, faces = geom_mesh(model, g)
        assert faces.min() >= 0 and faces.max() < len(verts)
        lo, hi = verts.min(0), verts.max(0)
        centre, half = model.geom_aabb[g, :3], model.geom_aabb[g, 3:]
        np.testing.assert_allclose((lo + hi) / 2, centre, atol=1e-6)
        np.testing.assert_allclose((hi - lo) / 2, half, atol=1e-6)


def test_heightfield_mesh_is_the_ground_mujoco_collides_with():
    """go1-rough's terrain mesh (every k-th sample of a 1,160-sample side) against rays
    MuJoCo casts down onto its heightfield, at 200 of the mesh's vertices. The bugs: rows
    and columns swapped, the subsampled grid stretched back over the whole field (its last
    sample then sits off the field's edge), heights not scaled by the field's size."""
    model = task_driver("go1-rough", "zero", 0).model
    data = mujoco.MjData(model)
    mujoco.mj_forward(model, data)
    g = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_GEOM, "terrain")
    verts, faces = geom_mesh(model, g)
    assert len(verts) < 200_000 and faces.max() < len(verts)
    rng = np.random.default_rng(0)
    pos, hits = data.geom_xpos[g], 0
    for v in verts[rng.choice(len(verts), 200, replace=False)]:
        start = np.array([v[0] + pos[0], v[1] + pos[1], 20.0])
        geomid = np.array([-1], dtype=np.int32)
        dist = mujoco.mj_ray(model, data, start, np.array([0.0, 0.0, -1.0]), None, 1, -1,
                             geomid)
        if geomid[0] != g:  # the field's very edge; rays may slip past it
            continue
        hits += 1
        assert 20.0 - dist == pytest.approx(v[2] + pos[2], abs=2e-3), v
    assert hits > 150


@pytest.mark.parametrize("task", ["go1-flat", "g1-flat", "go1-rough"])
def test_driver_holds_the_sliders_command_through_episodes(task):
    """Random actions until an episode has ended (each robot falls within seconds): the
    task's command is the sliders' at every step, the new episode's too, in the task and in
    the observation the policy acts on, and the clock and return restart. The readout
    names the task's reward terms and feet. The bugs: a reset drawing a command the
    sliders no longer set, the policy acting on the frame Env.step
    built with the drawn command, a heading controller steering the yaw rate, episode time
    running on across episodes."""
    d = task_driver(task, "random", 0)
    want = [0.4, -0.1, 0.2]
    d.set_command(want)
    assert d.task.config.push is False and d.task.config.randomize is False
    col = next(t for t in d.env.policy_layout.to_json() if t["source"]["kind"] == "command")
    seen = slice(d.obs.policy.shape[1] - d.env.frame_dim + col["start"], None)
    times = []
    for _ in range(600):
        d._hold()  # as step() does first: what the policy acts on
        policy_sees = d.obs.policy[0, seen][:3] / col["scale"] + torch.tensor(col["offset"])
        assert policy_sees.tolist() == pytest.approx(want, abs=1e-6)
        d.step()
        assert d.task.command[0].tolist() == pytest.approx(want)
        times.append(d.readout.time)
        if d.readout.episodes >= 1 and d.readout.time > 0.1:
            break
    assert d.readout.episodes >= 1, "no episode ended"
    assert min(times) == 0.0 and max(times) > d.readout.time  # the clock restarted
    assert d.readout.command == pytest.approx(dict(zip(d.command_ranges(), want)))
    assert set(d.readout.contacts) == set(d.task.robot.feet)
    assert list(d.readout.terms) == [r.name for r in d.task.decl.rewards]


def test_walker_readout_measures_the_base_and_push_kicks_like_training():
    """The exported walker through the runner: the measured velocity is the base's own
    (MuJoCo's free-joint velocity turned into the base frame), the contacts are the feet
    MuJoCo has in contact, and a push adds at most push_velocity m/s to the base's world
    x and y velocity and nothing else. The bugs: a world-frame velocity shown as the base's,
    contacts of the wrong feet, a kick on the wrong joints or larger than training's."""
    d = OnnxDriver(WALKER, seed=0)
    d.set_command([0.5, 0.0, 0.0])
    m, data = d.model, d.data
    feet = {f: mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_GEOM, f) for f in d.task.robot.feet}
    agree = 0
    for _ in range(100):
        d.step()
        rot = data.xmat[d.task.body.base_id].reshape(3, 3)
        vel = rot.T @ data.qvel[:3]
        meas = d.readout.measured
        assert [meas["lin_vel_x"], meas["lin_vel_y"]] == pytest.approx(vel[:2], abs=0.05)
        touching = {f for f, g in feet.items() for c in data.contact[:data.ncon]
                    if g in (c.geom1, c.geom2)}
        agree += touching == {f for f, on in d.readout.contacts.items() if on}
    assert agree >= 85, f"contacts agreed with MuJoCo's at {agree} of 100 steps"
    before = data.qvel.copy()
    d.push()
    kick = data.qvel - before
    limit = d.task.config.push_velocity
    assert np.abs(kick[:2]).max() <= limit and np.abs(kick[:2]).max() > 0
    assert not kick[2:].any()


def test_run_checkpoint_drives_without_pushes_or_randomization(tmp_path, capsys):
    """`trot view RUN_DIR`: the run's checkpoint acts on the cpu sim with the watching
    changes applied over the run's own config (which keeps pushes and randomization on),
    and the command serves it. The bug: load_run dropping the changes, so random pushes
    and new masses at every reset show in the viewer, or the viewer driving zeros instead
    of the policy."""
    from trot.agents.config import PPOConfig
    from trot.agents.learners import start
    from trot.agents.train_config import TrainConfig

    threads, rng = torch.get_num_threads(), torch.get_rng_state()
    agent = dataclasses.replace(PPOConfig(), actor_hidden=(16,), critic_hidden=(16,))
    trainer, run_dir = start(TrainConfig(task="go1-flat", num_envs=4, agent=agent,
                                             run_dir=str(tmp_path / "run")))
    save(trainer, run_dir)
    torch.set_num_threads(threads)
    torch.set_rng_state(rng)
    assert trainer.env.task.config.push and trainer.env.task.config.randomize
    d = run_driver(run_dir, seed=0)
    c = d.task.config
    assert (c.push, c.randomize, c.obs_noise, c.resample_seconds) == (False, False, False, 1e6)
    obs = d.obs.policy.clone()
    d.step()
    assert d.env.last_action.abs().sum() > 0  # the policy's action, not zeros
    assert not torch.equal(d.obs.policy, obs)
    from extras import need

    need("viser")
    port = _free_port()
    assert cli_main(["view", str(run_dir), "--seconds", "0.2", "--speed", "0", "--host",
                     "127.0.0.1", "--port", str(port)]) == 0
    out = capsys.readouterr().out
    assert f"trot view: go1-flat at http://127.0.0.1:{port}" in out and "simulated 0.20 s" in out


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_terrain_switch_rebuilds_on_the_course():
    """The page's terrain choice on go1-rough: 'course' rebuilds the env on the course (its
    floor geom, the robot spawned on it, beside the training map along +x) and redraws the
    scene; the command stays the sliders'. The bug: the dropdown changing the label only."""
    from extras import need

    need("viser")
    from trot.viewer import ViewArgs, Viewer

    v = Viewer("go1-rough", ViewArgs(host="127.0.0.1", port=_free_port()))
    try:
        assert v.driver.task.floor() == "terrain"
        v.sliders["lin_vel_x"].value = 0.3
        v.ops.get()()  # the slider's queued update
        v.terrain.value = "course"
        v.ops.get()()
        assert v.driver.task.floor() == "course"
        assert float(v.driver.sim.qpos[0, 0]) > 29.0  # the training map is 58 m wide
        assert v.driver.task.command[0].tolist() == pytest.approx([0.3, 0.0, 0.0])
        assert v.scene.frames and v.scene.model is v.driver.model
    finally:
        v.close()


@pytest.mark.parametrize("args, says", [
    (["not-a-task"], "neither a directory"),
    (["{empty}"], "not a trot run directory"),
    (["{walker}"], "is an export (policy.onnx, no config.json), not a run: view it with --onnx"),
    (["go1-flat", "--onnx"], "--onnx needs a run or export directory"),
    (["go1-flat", "--course"], "has no terrain course"),
    (["go1-flat", "--actions", "wild"], "--actions must be one of zero, random"),
    (["{empty}", "--onnx"], "missing policy.onnx, policy.json, model.xml"),
])
def test_bad_sources_are_named(args, says, tmp_path, capsys):
    """Each bad source or flag ends with exit code 2 and a message naming it and what is
    accepted, before any server starts."""
    subst = {"{empty}": str(tmp_path), "{walker}": str(WALKER)}
    assert cli_main(["view", *(subst.get(a, a) for a in args)]) == 2
    err = capsys.readouterr().err
    assert says in err, err
