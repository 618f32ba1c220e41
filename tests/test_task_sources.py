"""User tasks from anywhere (tasks/sources.py): `--tasks FILE_OR_MODULE`, the entry-point
group `trot.tasks`, and the record that lets later commands find a run's task again."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from trot.tasks import registry, sources
from trot.tasks.sources import TaskSource, load_recorded, load_tasks

TASK_FILE = '''
from trot.tasks.cartpole import Cartpole, CartpoleConfig
from trot.tasks import register

register({name!r}, Cartpole, CartpoleConfig(), "a user's cartpole")
'''


@pytest.fixture
def clean_registry(monkeypatch):
    """A registry copy and an empty record of loaded sources, restored afterwards."""
    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))
    monkeypatch.setattr(sources, "_loaded", {})


def _task_file(folder: Path, name: str, filename: str = "user_tasks.py") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / filename
    path.write_text(TASK_FILE.format(name=name))
    return path


def test_a_file_registers_with_its_path_and_hash(clean_registry, tmp_path):
    path = _task_file(tmp_path, "user-cartpole")
    src = load_tasks(str(path))
    entry = registry.get_task("user-cartpole")
    assert entry.source == src == TaskSource("file", str(path.resolve()),
                                             hashlib.sha256(path.read_bytes()).hexdigest())
    assert load_tasks(str(path)) is src  # imported once, not registered twice


def test_two_sources_of_one_name_is_an_error_naming_both(clean_registry, tmp_path):
    load_tasks(str(_task_file(tmp_path / "a", "twice")))
    with pytest.raises(ValueError, match=r"'twice' is registered twice: by file .*a/user_tas"
                                         r"ks\.py and by file .*b/user_tasks\.py"):
        load_tasks(str(_task_file(tmp_path / "b", "twice")))


def test_missing_file_or_module_is_a_clear_error(clean_registry, tmp_path):
    with pytest.raises(ValueError, match="no such file"):
        load_tasks(str(tmp_path / "nope.py"))
    with pytest.raises(ValueError, match="no module 'no_such_module_xyz'"):
        load_tasks("no_such_module_xyz")


def test_recorded_file_moved_changed_or_inside_the_run(clean_registry, tmp_path):
    path = _task_file(tmp_path / "code", "recorded")
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    run = tmp_path / "run"
    run.mkdir()
    gone = TaskSource("file", str(tmp_path / "moved.py"), digest).to_json()
    with pytest.raises(ValueError, match=f"is gone: {tmp_path / 'moved.py'}"):
        load_recorded(gone, run)
    inside = _task_file(run, "sneaky", "planted.py")
    planted = TaskSource("file", str(inside), "0" * 64).to_json()
    with pytest.raises(ValueError, match="lies inside"):
        load_recorded(planted, run)
    assert not registry.is_registered("sneaky")  # never imported
    edited = TaskSource("file", str(path), "f" * 64).to_json()
    with pytest.warns(UserWarning, match=f"sha256 {'f' * 64} then, {digest} now"):
        load_recorded(edited, run)
    assert registry.is_registered("recorded")


def test_unknown_task_says_how_to_add_one(clean_registry):
    with pytest.raises(ValueError, match=r"--tasks FILE\.py .*entry-point group 'trot\.tasks'"):
        registry.get_task("no-such-task")


def _plugin_site(root: Path, entry_points: str, modules: dict[str, str]) -> Path:
    """A folder that looks like site-packages holding one installed distribution."""
    info = root / "trot_plugin_demo-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: trot-plugin-demo\n"
                                   "Version: 0.1\n")
    (info / "entry_points.txt").write_text(textwrap.dedent(entry_points))
    for name, code in modules.items():
        (root / f"{name}.py").write_text(code)
    return root


def _trot(args: list[str], cwd: Path, pythonpath: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(pythonpath))
    return subprocess.run([sys.executable, "-m", "trot", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=300, check=False)


def test_entry_point_plugins_register_and_a_broken_one_is_skipped(tmp_path):
    site = _plugin_site(tmp_path / "site", """
        [trot.tasks]
        demo = demo_tasks
        broken = broken_tasks
        """, {"demo_tasks": TASK_FILE.format(name="plugin-cartpole"),
              "broken_tasks": "raise RuntimeError('this plugin is broken')\n"})
    p = _trot(["list"], tmp_path, site)
    assert p.returncode == 0, p.stderr
    assert "plugin-cartpole" in p.stdout and "[entry point demo = demo_tasks]" in p.stdout
    assert "cartpole-balance" in p.stdout
    assert "task plugin 'broken' (broken_tasks" in p.stderr and "is broken" in p.stderr
    run = tmp_path / "run"
    p = _trot(["train", "plugin-cartpole", "--num-envs", "8", "--agent.rollout-steps", "8",
               "--max-env-steps", "128", "--no-export", "--run-dir", str(run)], tmp_path, site)
    assert p.returncode == 0, p.stderr[-2000:]
    p = _trot(["eval", str(run), "--episodes", "2"], tmp_path, site)  # found via the plugin
    assert p.returncode == 0, p.stderr[-2000:]


def test_a_plugin_that_reuses_a_name_is_an_error_naming_both(tmp_path):
    site = _plugin_site(tmp_path / "site", """
        [trot.tasks]
        clash = clash_tasks
        """, {"clash_tasks": TASK_FILE.format(name="cartpole-balance")})
    p = _trot(["list"], tmp_path, site)
    assert p.returncode == 2
    assert ("'cartpole-balance' is registered twice: by trot and by entry point clash = "
            "clash_tasks") in p.stderr


def test_nproc_passes_the_task_file_to_every_worker(tmp_path):
    """--tasks reaches torchrun's workers: each imports the file before the name lookup."""
    path = _task_file(tmp_path / "code", "user-cartpole-dp")
    run = tmp_path / "run"
    p = _trot(["train", "user-cartpole-dp", "--tasks", str(path), "--nproc", "2",
               "--num-envs", "8", "--agent.rollout-steps", "8", "--max-env-steps", "256",
               "--no-export", "--run-dir", str(run)], tmp_path, tmp_path)
    assert p.returncode == 0, p.stderr[-3000:]
    assert (run / "checkpoint.pt").is_file()


def test_a_value_error_in_a_tasks_file_names_the_file_and_line(clean_registry, tmp_path):
    """`trot ... --tasks FILE` prints a ValueError's message alone (no traceback), which
    said what was wrong but not where: now it starts with the file and the line in it."""
    path = tmp_path / "bad_robot.py"
    path.write_text("from trot.tasks.legged_robot import LeggedRobot\n\n"
                    "ROBOT = LeggedRobot(mjcf='x.xml', joints='hip', feet=('foot',), "
                    "base='torso')\n")
    with pytest.raises(ValueError, match=rf"{path}, line 3: LeggedRobot.joints must be a "
                                         r"tuple of names"):
        load_tasks(str(path))


def test_a_module_in_the_working_directory_is_recorded_by_its_file(clean_registry, tmp_path,
                                                                    monkeypatch):
    """`python -m trot train ... --tasks my_tasks` from the module's folder: that folder is
    on the path only there, so a run recorded as "module my_tasks" could not be evaluated
    from anywhere else. It is recorded by its file and hash, and loads again by path."""
    path = _task_file(tmp_path, "cwd-cartpole", filename="cwd_tasks_mod.py")
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    src = load_tasks("cwd_tasks_mod")
    assert src == TaskSource("file", str(path.resolve()),
                             hashlib.sha256(path.read_bytes()).hexdigest())
    assert registry.get_task("cwd-cartpole").source == src
    monkeypatch.chdir(tmp_path.parent)  # elsewhere, with a fresh registry
    monkeypatch.setattr(sources, "_loaded", {})
    registry._REGISTRY.pop("cwd-cartpole")
    load_recorded(src.to_json(), tmp_path / "run")
    assert registry.get_task("cwd-cartpole").source == src
