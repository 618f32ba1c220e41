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


def test_tasks_md_locomotion_variants_register_and_run(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(), flags=re.S)
    monkeypatch.setattr("trot.tasks.registry._REGISTRY", dict(_REGISTRY))
    scope: dict = {}
    for code in blocks:
        exec(compile(code, str(DOC), "exec"), scope)
    sprint = trot.make_env("go1-sprint", num_envs=256, seed=1)
    sprint.reset()
    cmd = sprint.task.command  # [N, 3] within the variant's ranges, none standing
    assert (cmd[:, 0] >= 1.0).all() and (cmd[:, 0] <= 2.0).all() and (cmd[:, 1] == 0).all()
    low = scope["low"]  # go1-low: the extra term is computed, weighted by dt and logged
    task = low.task
    raw = task.reward_terms(low.sim, torch.zeros(32, low.action_dim))["height"]
    h = low.sim.qpos[:, 2]
    assert torch.allclose(raw[1], (h - 0.24).square(), atol=1e-6)
    _, terms = task.reward(low.sim, torch.zeros(32, low.action_dim))
    assert torch.allclose(terms["height"], -50.0 * task.dt * (h - 0.24).square(), atol=1e-6)
