"""Importing trot changes no process-wide state: no environment variables, no global torch
settings, no signal handlers. A module that set MUJOCO_GL at import broke `import mujoco` in
every child process of a machine without OSMesa (issue 16)."""

from __future__ import annotations

import json
import subprocess
import sys

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
