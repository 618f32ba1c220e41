"""The code on docs/tasks.md runs as written: a user can add a task from that page.

Blocks headed `# NAME.py` are the user's files: they are saved under that name in a
temporary folder outside the repository (a `(continued)` block appends). The other Python
blocks run in one scope that imports those files; the shell blocks run line by line in
that folder, in new processes, exactly as printed. docs/export.md's shell commands run the
same way, from the repository root."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import trot
from trot.tasks.registry import _REGISTRY

DOC = Path(__file__).resolve().parents[1] / "docs" / "tasks.md"
REPO = DOC.parents[1]
USER_MODULES = ("my_tasks", "my_go1", "my_robot")
FILE_HEAD = re.compile(r"^# (\w+\.py)( \(continued\))?\n")


def _blocks(lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", DOC.read_text(), flags=re.S)


def _write_user_files(folder: Path) -> list[str]:
    """The page's files, and its robot MJCF (the synthetic one the tests ship)."""
    (folder / "my_quadruped.xml").write_text((REPO / "tests" / "data" /
                                               "other_quadruped.xml").read_text())
    names = []
    for code in _blocks("python"):
        m = FILE_HEAD.match(code)
        if m:
            with open(folder / m[1], "a" if m[2] else "w") as f:
                f.write(code)
            names.append(m[1])
    return sorted(set(names))


@pytest.fixture
def doc_scope(monkeypatch, tmp_path) -> dict:
    """Run the page's script blocks, with its files importable (a fresh registry copy)."""
    monkeypatch.chdir(tmp_path)
    assert _write_user_files(tmp_path) == ["my_go1.py", "my_robot.py", "my_tasks.py"]
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr("trot.tasks.registry._REGISTRY", dict(_REGISTRY))  # keep global clean
    for name in USER_MODULES:
        monkeypatch.delitem(sys.modules, name, raising=False)
    scope: dict = {}
    for code in _blocks("python"):
        if not FILE_HEAD.match(code):
            exec(compile(code, str(DOC), "exec"), scope)
    yield scope
    for name in USER_MODULES:
        sys.modules.pop(name, None)


def test_tasks_md_example_builds_and_steps(doc_scope):
    assert "pendulum-swingup" in trot.task_names()
    env = doc_scope["env"]
    for _ in range(300):  # past the 5 s limit: the example's episodes truncate
        res = env.step(torch.rand(64, env.action_dim) * 2 - 1)
    assert torch.isfinite(res.obs.policy).all()
    assert (env.episode_step < env.max_episode_steps).all()


def test_tasks_md_locomotion_variants_register_and_run(doc_scope):
    """The page's variants: go1-sprint's ranges; go1-high-steps' new term on hand-set
    heights (worked out here), weighted per second; go2-rough on the terrain with the
    curriculum. The bugs: a term added to a declaration but not run, weighted without dt,
    or a ground that the composition does not build."""
    sprint = trot.make_env("go1-sprint", num_envs=256, seed=1)
    sprint.reset()
    cmd = sprint.task.command  # [N, 3] within the variant's ranges, none standing
    assert (cmd[:, 0] >= 1.0).all() and (cmd[:, 0] <= 2.0).all() and (cmd[:, 1] == 0).all()
    assert sprint.task.weights["lin_vel"] == 2.0
    high = doc_scope["high"]
    task, sim = high.task, high.sim
    assert task.dt == 0.02 and task.config.clearance == 0.06
    q, v = sim.qpos.clone(), torch.zeros_like(sim.qvel)
    q[0] = task.body.home_qpos  # env 0 at home, lifted 2 cm: every foot in the air, 4 cm
    q[0, 2] += 0.02  # short of the clearance
    sim.reset(torch.ones(32, dtype=torch.bool), q, v)
    feet_up = task.body.feet_height()[0]  # [4] m above home, MuJoCo's forward kinematics
    assert feet_up.tolist() == pytest.approx([0.02] * 4, abs=2e-3)
    assert not task.body.foot_contact()[0].any()
    _, terms = task.reward(sim, torch.zeros(32, high.action_dim))
    want = -20.0 * 0.02 * float(((0.06 - feet_up) ** 2).sum())  # x w -20 x dt 0.02
    assert terms["foot_clearance"][0].item() == pytest.approx(want, rel=1e-4)
    assert want < -5e-4
    rough = trot.make_env("go2-rough", num_envs=8, seed=0)
    rough.reset()
    assert rough.task.floor() == "terrain" and rough.task.truncated(rough.sim) is not None
    assert "terrain_level" in rough.task.iteration_metrics()


def test_tasks_md_robot_and_its_primitive_collision_variant_build(doc_scope):
    import mujoco

    import my_robot

    task = my_robot.MY_QUADRUPED_PRIMITIVES(trot.tasks.get_task("my-quadruped-flat").config)
    m = task.build().compile()
    shank = mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_BODY, "LF_shank")
    added = [g for g in range(m.ngeom) if m.geom_bodyid[g] == shank
             and m.geom_type[g] == mujoco.mjtGeom.mjGEOM_CAPSULE and m.geom_conaffinity[g]]
    assert added, "the example's shank capsule collides"
    assert not any(m.geom_type[g] == mujoco.mjtGeom.mjGEOM_MESH and m.geom_contype[g]
                   for g in range(m.ngeom))


def _shell_lines(doc: Path) -> list[str]:
    blocks = re.findall(r"```bash\n(.*?)```", doc.read_text(), flags=re.S)
    return [ln for b in blocks for ln in b.splitlines() if ln.strip()]


def _run_as_printed(line: str, cwd: Path) -> tuple[list[str], subprocess.CompletedProcess]:
    """A page's `trot ...` line, in a new process from `cwd`; it must succeed."""
    argv = shlex.split(line)
    assert argv[0] == "trot", line
    p = subprocess.run([sys.executable, "-m", "trot", *argv[1:]], cwd=cwd,
                       capture_output=True, text=True, timeout=600, check=False)
    assert p.returncode == 0, f"{line}\n{p.stdout[-1500:]}\n{p.stderr[-3000:]}"
    return argv, p


def test_export_md_commands_and_robot_loop_run_as_printed(tmp_path, monkeypatch):
    """docs/export.md's commands, from a fresh folder holding the committed
    tests/data/go1_walker export: the Go1 walks in sim2sim; the GRU and history-4
    cartpoles train, and each sim2sim mean return is within 5% of its eval. Then the
    page's recurrent robot loop runs as printed on the GRU export and keeps the pole up.
    The bugs: a memory policy that sim2sim runs without its state or history (its return
    collapses), a loop on the page that no longer matches the runner's API.
    Slow (about 60 s): the page's runs train as printed, each command a new process that imports
    torch."""
    (tmp_path / "tests" / "data").mkdir(parents=True)
    (tmp_path / "tests" / "data" / "go1_walker").symlink_to(REPO / "tests" / "data" /
                                                            "go1_walker")
    doc = REPO / "docs" / "export.md"
    lines = _shell_lines(doc)
    assert any(ln.startswith("trot sim2sim tests/data/go1_walker") for ln in lines)
    evals: dict[str, float] = {}
    for line in lines:
        argv, p = _run_as_printed(line, tmp_path)
        if "--json" not in argv:
            continue
        out = json.loads(p.stdout.strip().splitlines()[-1])
        if "go1_walker" in line:
            assert out["episodes"] >= 1 and out["terminated_rate"] == 0.0, out  # it walks
        elif argv[1] == "eval":
            evals[argv[2]] = out["mean_return"]
        else:  # the export driven through the runner, against the training env's eval
            want = evals[argv[2]]
            assert abs(out["mean_return"] - want) <= 0.05 * want, (line, out, want)
    assert sorted(evals) == ["runs/gru", "runs/history4"]
    loop = next(b for b in re.findall(r"```python\n(.*?)```", doc.read_text(), flags=re.S)
                if b.startswith("# robot_loop.py"))
    scope: dict = {}
    monkeypatch.chdir(tmp_path)
    exec(compile(loop, "robot_loop.py", "exec"), scope)
    assert scope["policy"].contract.recurrent_state[0].input == "h"
    assert abs(scope["robot"].qpos[1]) < 0.25  # the pole is still up after 250 steps


def test_tasks_md_shell_commands_run_as_printed(tmp_path):
    """The user's path: files in their own folder, trot on the command line. Every command
    after the first finds the task again without --tasks (the run recorded it).
    Slow (about 45 s): each of the page's commands is a new process (train, eval, export,
    sim2sim, play), as a user types them."""
    _write_user_files(tmp_path)
    lines = _shell_lines(DOC)
    assert any("--tasks my_tasks.py" in ln for ln in lines)
    assert any(ln.startswith("trot sim2sim") for ln in lines)
    for line in lines:
        argv, p = _run_as_printed(line, tmp_path)
        if "--tasks" not in argv and "pendulum" in line:  # found through the record
            assert f"importing task file {tmp_path / 'my_tasks.py'}" in p.stderr, p.stderr
    assert (tmp_path / "runs" / "pendulum" / "policy.onnx").is_file()
    assert not str(tmp_path).startswith(str(REPO))


def test_default_budgets_table_is_the_registry_and_train_help_shows_it():
    """The table in docs/tasks.md states each task's registered budget; `trot train NAME
    --help` shows it as the default. The bugs: a budget registered but ignored by the CLI
    (5,000,000 shown), or the docs left stale after a budget changed."""
    from trot.agents.train_config import TrainConfig
    from trot.tasks.registry import get_task, task_names

    text = DOC.read_text().split("## Default budgets", 1)[1]
    rows = dict(re.findall(r"^\| `([\w-]+)` \| ([\d,]+) \|", text, re.M))
    builtin = [n for n in task_names()  # trot's own, not the page's examples
               if get_task(n).task_cls.__module__.startswith("trot.")]
    assert sorted(rows) == sorted(builtin)
    for name, shown in rows.items():
        budget = get_task(name).budget or TrainConfig.max_env_steps
        assert int(shown.replace(",", "")) == budget, name
    out = subprocess.run([sys.executable, "-m", "trot", "train", "go1-flat", "--help"],
                         capture_output=True, text=True, check=True).stdout
    assert re.search(r"--max-env-steps INT[^╭]*15000000", out), out


def test_terrain_md_shell_commands_run_as_printed(tmp_path):
    """docs/terrain.md's commands from a fresh folder: go1-rough trains with the scan in the
    policy, evaluates on the course and runs exported (model.xml with terrain.bin and
    course.bin beside it; the runner computes the scan). Then the export's terrain files
    are checked: a changed or missing one is refused by name.
    Slow (about 30 s): go1-rough trains briefly, then eval and sim2sim on the course, each a new
    process."""
    from trot.export.runner import ContractError, OnnxPolicy

    lines = _shell_lines(REPO / "docs" / "terrain.md")
    assert [ln.split()[1] for ln in lines] == ["train", "eval", "sim2sim"]
    for line in lines:
        argv, p = _run_as_printed(line, tmp_path)
        if argv[1] == "train":  # the progress line shows the mean terrain level
            assert re.search(r"\| terrain_level [\d.]+ \|", p.stdout), p.stdout
        if argv[1] == "eval":
            assert "crossed/stairs_up" in p.stdout, p.stdout
        if "--json" in argv:
            out = json.loads(p.stdout.strip().splitlines()[-1])
            tiles = {f"crossed/{t}" for t in ("slope_up", "slope_down", "stairs_up",
                                               "stairs_down")}
            # the tiles its 4 episodes drew at random
            assert {k for k in out if k.startswith("crossed/")} & tiles, out
    export = tmp_path / "runs" / "rough"
    contract = json.loads((export / "policy.json").read_text())
    assert sorted(contract["model_files"]) == ["course.bin", "terrain.bin"]
    scan = [t for t in contract["observation"] if t["source"]["kind"] == "height_scan"]
    assert len(scan) == 1 and scan[0]["size"] == 187  # --env.scan-policy: the runner's scan
    assert scan[0]["source"]["frame"] == "yaw-aligned base" and len(
        scan[0]["source"]["points"]) == 187
    blob = bytearray((export / "terrain.bin").read_bytes())
    blob[-1] ^= 1
    (export / "terrain.bin").write_bytes(bytes(blob))
    with pytest.raises(ContractError, match="terrain.bin hash"):
        OnnxPolicy(export)
    (export / "course.bin").unlink()
    with pytest.raises(ContractError, match="missing course.bin"):
        OnnxPolicy(export)


def test_viewer_md_commands_run_as_printed(tmp_path):
    """docs/viewer.md's commands from a folder holding docs/tasks.md's files and the
    committed walker export, each with `--seconds 0.5 --speed 0` added (the page says so:
    a viewer runs until Ctrl-C) and a free port: the walker through --onnx, go1-rough under
    random actions, g1-flat and the user's own task through --tasks. Each prints the
    address it serves and simulates its half second. The bugs: a documented flag or source
    the command refuses, a user task the viewer cannot find."""
    import socket

    from extras import need

    need("viser")
    _write_user_files(tmp_path)
    (tmp_path / "tests" / "data").mkdir(parents=True)
    (tmp_path / "tests" / "data" / "go1_walker").symlink_to(REPO / "tests" / "data" /
                                                            "go1_walker")
    lines = _shell_lines(REPO / "docs" / "viewer.md")
    assert [shlex.split(ln)[2:3] for ln in lines] == [
        ["tests/data/go1_walker"], ["go1-rough"], ["g1-flat"], ["my-quadruped-flat"]]
    for line in lines:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        argv = [*shlex.split(line), "--seconds", "0.5", "--speed", "0", "--host", "127.0.0.1",
                "--port", str(port)]
        p = subprocess.run([sys.executable, "-m", "trot", *argv[1:]], cwd=tmp_path,
                           capture_output=True, text=True, timeout=300, check=False)
        assert p.returncode == 0, f"{line}\n{p.stdout[-1500:]}\n{p.stderr[-3000:]}"
        task = "go1-flat" if "--onnx" in argv else argv[2]
        assert f"trot view: {task} at http://127.0.0.1:{port} (stops after 0.5 s simulated)" \
            in p.stdout, p.stdout
        assert "simulated 0.50 s" in p.stdout, p.stdout
