"""The installed layout: everything lives under `trot.*`; the repository's folder names
(sim, tasks, agents, export) are not installed as top-level packages."""

from __future__ import annotations

import json
import os
import subprocess
import sys

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
