"""Importing trot changes no process-wide state: no environment variables, no global torch
settings, no signal handlers. A module that set MUJOCO_GL at import broke `import mujoco` in
every child process of a machine without OSMesa (issue 16)."""

from __future__ import annotations

import importlib
import json
import pkgutil
import subprocess
import sys

import pytest
from extras import EXTRA_OF, skip_reason

SNAPSHOT = r"""
import json, os, signal, sys
import importlib
import torch, mujoco
for dep in ("jax", "gymnasium", "rl_games.torch_runner", "torch.utils.tensorboard",
            "onnxruntime", "onnx", "tyro"):  # third parties' own import-time settings
    try:                                   # are theirs: import them before the snapshot
        importlib.import_module(dep)
    except ImportError:
        pass

def snap():
    return {"env": dict(os.environ), "threads": torch.get_num_threads(),
            "interop": torch.get_num_interop_threads(),
            "dtype": str(torch.get_default_dtype()),
            "deterministic": torch.are_deterministic_algorithms_enabled(),
            "grad": torch.is_grad_enabled(),
            "signals": {s.name: repr(signal.getsignal(s)) for s in
                        (signal.SIGINT, signal.SIGTERM, signal.SIGCHLD, signal.SIGUSR1)},
            "rng": torch.get_rng_state().sum().item()}

before = snap()
import pkgutil, trot
packages = ["trot", "trot.sim", "trot.tasks", "trot.agents", "trot.export"]  # pyproject's
names = sorted(f"{p}.{m.name}" for p in packages  # package-dir map: walk each folder
               for m in pkgutil.iter_modules(importlib.import_module(p).__path__)
               if m.name != "__main__")  # running the CLI is not importing it
skipped = {}
for name in names:
    try:
        importlib.import_module(name)
    except ImportError as e:  # an optional extra that is not installed
        skipped[name] = str(e)
after = snap()
print(json.dumps({"before": before, "after": after, "modules": names, "skipped": skipped}))
"""


def test_importing_every_trot_module_changes_no_process_state():
    p = subprocess.run([sys.executable, "-c", SNAPSHOT], capture_output=True, text=True,
                       timeout=300, check=False)
    assert p.returncode == 0, p.stderr[-3000:]
    out = json.loads(p.stdout.strip().splitlines()[-1])
    before, after = out["before"], out["after"]
    assert "trot.play" in out["modules"] and "trot.sim.jax_bridge" in out["modules"]
    new = {k: v for k, v in after["env"].items() if before["env"].get(k) != v}
    gone = sorted(set(before["env"]) - set(after["env"]))
    assert not new and not gone, f"environment changed at import: set {new}, removed {gone}"
    for key in ("threads", "interop", "dtype", "deterministic", "grad", "signals", "rng"):
        assert after[key] == before[key], f"{key} changed at import: {before[key]} -> " \
                                          f"{after[key]}"


LAYERS = r"""
import importlib, json, sys
names = json.loads(sys.argv[1])
out = {}
for name in names:  # what each module brings of agents/export, or the module it lacks
    before = set(sys.modules)
    try:
        importlib.import_module(name)
        missing = None
    except ModuleNotFoundError as e:  # an optional extra that is not installed
        missing = e.name
    except ImportError as e:  # a module removed on purpose, whose import says so
        missing = "removed: " + str(e)
    new = sorted(m for m in set(sys.modules) - before
                 if m.startswith(("trot.agents", "trot.export")))
    out[name] = {"layers": new, "missing": missing}
before = set(sys.modules)
import trot.tasks.registry as r
r.get_task("go1-flat")  # loads plugins too
out["plugins"] = {"missing": None, "layers": sorted(
    m for m in set(sys.modules) - before if m.startswith(("trot.agents", "trot.export")))}
print(json.dumps(out))
"""
LAYERED = [m.name for p in ("trot.tasks", "trot.sim")  # every module, subpackages' too
           for m in pkgutil.walk_packages(importlib.import_module(p).__path__, p + ".")]
REMOVED = {"trot.tasks.legged"}  # the task class tree (2026-12-05): its import says what to do


@pytest.fixture(scope="module")
def layering() -> dict:
    """Imports every module of trot.tasks and trot.sim in one child process."""
    p = subprocess.run([sys.executable, "-c", LAYERS, json.dumps(LAYERED)],
                       capture_output=True, text=True, timeout=300, check=False)
    assert p.returncode == 0, p.stderr[-3000:]
    return json.loads(p.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("name", [*LAYERED, "plugins"])
def test_tasks_and_sims_do_not_import_the_agents(layering, name):
    """The dependency runs one way: agents (and exports) read tasks, never the reverse. The
    bug: a task module importing trot.agents.config for its tuned settings. The removed
    task class module must say where to migrate. A module whose
    optional extra is missing skips naming the extra; a module missing anything else fails
    (a hard dependency that pyproject does not declare)."""
    res = layering[name]
    if name in REMOVED:  # a user's old task file meets the migration, not a bare error
        assert res["missing"].startswith("removed: ") and "docs/tasks.md" in res["missing"]
        return
    if (missing := res["missing"]) is not None:
        known = [m for m in EXTRA_OF if missing == m or missing.startswith(m + ".")]
        assert known, f"{name} needs {missing!r}, which no extra in tests/extras.py brings"
        pytest.skip(skip_reason(known[0]))
    assert res["layers"] == [], f"{name} imports {res['layers']}"


def test_registered_agent_overrides_are_read_and_unknown_names_refused():
    import dataclasses

    import pytest

    from trot.agents.config import PPOConfig, tuned
    from trot.tasks.registry import get_task

    go1 = tuned(get_task("go1-flat").agent)
    assert (go1.rollout_steps, go1.actor_hidden) == (24, (128, 64, 32))
    assert dataclasses.replace(go1, rollout_steps=16, actor_hidden=(64, 64),
                               critic_hidden=(64, 64), entropy_coef=0.0,
                               init_log_std=0.0) == PPOConfig()
    with pytest.raises(ValueError, match=r"unknown PPOConfig fields \['epoch'\].*epochs"):
        tuned((("epoch", 3),))


READERS = ["trot.agents.runs", "trot.export.runner", "trot.export.contract", "trot.export.onnx",
           "trot.export.sim2sim", "trot.agents.evaluate", "trot.play"]
NO_LOOP = r"""
import importlib, json, sys
out = {}
for name in json.loads(sys.argv[1]):  # in one process: the first to bring the loop is named
    try:
        importlib.import_module(name)
        out[name] = {"loop": "trot.agents.trainer" in sys.modules, "missing": None}
    except ModuleNotFoundError as e:  # an optional extra that is not installed
        out[name] = {"loop": False, "missing": e.name}
print(json.dumps(out))
"""


def test_reading_a_run_does_not_import_the_training_loop():
    """Export, evaluation, play and sim2sim read a run directory (agents/runs.py) and never
    import the training loop, directly or through another module. The bug: runs.py taking
    the checkpoint's file name from agents/trainer.py, so exporting a policy on a robot's
    computer imports the trainer, its distributed layer and everything they import."""
    p = subprocess.run([sys.executable, "-c", NO_LOOP, json.dumps(READERS)],
                       capture_output=True, text=True, timeout=300, check=False)
    assert p.returncode == 0, p.stderr[-3000:]
    out = json.loads(p.stdout.strip().splitlines()[-1])
    unknown = {n: r["missing"] for n, r in out.items()
               if r["missing"] and not any(r["missing"].split(".")[0] == m.split(".")[0]
                                           for m in EXTRA_OF)}
    assert not unknown, f"modules need what no extra brings: {unknown}"
    loop = [n for n in READERS if out[n]["loop"]]
    assert not loop, f"{loop[0]} imports trot.agents.trainer"
