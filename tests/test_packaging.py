"""The installed layout: everything lives under `trot.*`; the repository's folder names
(sim, tasks, agents, export) are not installed as top-level packages."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import sysconfig
import venv
from pathlib import Path

import pytest

SCRIPT = r"""
import importlib, importlib.util, json
mods = {}
for name in ("trot", "trot.sim", "trot.tasks", "trot.agents", "trot.export"):
    mods[name] = importlib.import_module(name).__name__
top = {name: importlib.util.find_spec(name) is not None
       for name in ("sim", "tasks", "agents", "export")}
import trot
print(json.dumps({"mods": mods, "top": top, "make_env": callable(trot.make_env)}))
"""


def test_installed_packages_only_under_trot(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    out = subprocess.run([sys.executable, "-c", SCRIPT], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    res = json.loads(out.stdout.strip().splitlines()[-1])
    assert res["mods"] == {m: m for m in res["mods"]}
    assert res["make_env"]
    assert res["top"] == {"sim": False, "tasks": False, "agents": False, "export": False}


ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def regular_install(tmp_path_factory) -> Path:
    """A fresh venv holding a regular (non-editable) install of this clone, its dependencies
    borrowed from this interpreter's site-packages through a path file. Path files inside
    a borrowed folder are not run, so an editable install's import hook there cannot rescue
    a clone's `trot/` that shadows the installed one: the bug of issue 54."""
    base = tmp_path_factory.mktemp("regular")
    venv.create(base / "venv", with_pip=False)
    py = base / "venv" / "bin" / "python"
    where = "import sysconfig; print(sysconfig.get_paths()['purelib'])"
    site = Path(subprocess.run([py, "-c", where], capture_output=True, text=True,
                               check=True).stdout.strip())
    ours = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}
    (site / "borrowed.pth").write_text("\n".join(sorted(ours)) + "\n")
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps",
                    "--no-build-isolation", "--target", str(site), str(ROOT)],
                   check=True, capture_output=True, text=True, timeout=300)
    assert not any(site.glob("__editable__*")), "the install must be a regular one"
    return py


def _from_root(py: Path, *args: str, timeout: int = 120) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return subprocess.run([str(py), *args], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=timeout, check=False)


def test_python_m_trot_from_the_clone_root_with_a_regular_install(regular_install):
    """`python -m trot` in the clone's root imports the clone's trot/, which shadows the
    installed package; its subpackages must still be found, and be the clone's."""
    p = _from_root(regular_install, "-m", "trot", "list")
    assert p.returncode == 0, p.stderr[-2000:]
    assert "go1-flat" in p.stdout and "cartpole-balance" in p.stdout
    p = _from_root(regular_install, "-c", "import trot.tasks, trot.agents, trot.export.runner "
                   "as r; print(trot.tasks.__file__); print(r.__file__)")
    assert p.returncode == 0, p.stderr[-2000:]
    assert [Path(f).parent for f in p.stdout.split()] == [ROOT / "tasks", ROOT / "export"]


def test_torchrun_from_the_clone_root_with_a_regular_install(regular_install, tmp_path):
    """torchrun's workers run `python -m trot` in the current folder too."""
    run_dir = tmp_path / "run"
    p = _from_root(regular_install, "-m", "torch.distributed.run", "--standalone",
                   "--nproc_per_node=2", "-m", "trot", "train", "cartpole-balance",
                   "--num-envs", "16", "--max-env-steps", "1024", "--no-export",
                   "--agent.rollout-steps", "8", "--agent.actor-hidden", "16", "16",
                   "--agent.critic-hidden", "16", "16", "--run-dir", str(run_dir),
                   timeout=240)
    assert p.returncode == 0, (p.stdout + p.stderr)[-3000:]
    assert (run_dir / "checkpoint.pt").is_file()


def test_the_extras_table_names_extras_that_bring_those_modules():
    """tests/extras.py maps import names to pyproject's extras; the skip reasons, and the
    newcomer leg of `.ci/run`, trust it. The bug: an extra renamed in pyproject, or a module
    attributed to an extra that does not bring it."""
    import importlib.metadata as md
    import re

    import tomllib
    from extras import EXTRA_OF

    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"]
    dists = md.packages_distributions()
    for module, extra in EXTRA_OF.items():
        assert extra in extras, f"{module}: no extra {extra!r} in pyproject ({sorted(extras)})"
        wanted = {re.split(r"[\[<>=!~ ;]", r, maxsplit=1)[0].lower().replace("_", "-")
                  for r in extras[extra]}
        top = module.split(".")[0]
        provided = {d.lower().replace("_", "-") for d in dists.get(top, [])}
        if module == "mujoco.mjx":
            provided = {"mujoco-mjx"} if importlib.util.find_spec("mujoco.mjx") else set()
        if provided:  # installed here: one of its distributions is in the extra
            assert provided & wanted, f"{module} comes from {provided}, not from [{extra}]"
