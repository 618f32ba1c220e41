"""The code on docs/tasks.md runs as written: a user can add a task from that page."""

import re
from pathlib import Path

import torch

import trot
from trot.tasks.registry import _REGISTRY

DOC = Path(__file__).resolve().parents[1] / "docs" / "tasks.md"


def test_tasks_md_example_builds_and_steps(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(), flags=re.S)
    assert len(blocks) >= 2
    monkeypatch.setattr("trot.tasks.registry._REGISTRY", dict(_REGISTRY))  # keep global clean
    scope: dict = {}
    for code in blocks:
        exec(compile(code, str(DOC), "exec"), scope)
    assert "pendulum-swingup" in trot.task_names()
    env = scope["env"]
    for _ in range(300):  # past the 5 s limit: the example's episodes truncate
        res = env.step(torch.rand(64, env.action_dim) * 2 - 1)
    assert torch.isfinite(res.obs.policy).all()
    assert (env.episode_step < env.max_episode_steps).all()
