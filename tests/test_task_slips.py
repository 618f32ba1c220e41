"""A user's slips in a task, its config or its hooks are named where they happen: the hook,
the field, and what is accepted, instead of a torch or MuJoCo error far from the task."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from trot.sim import make_sim
from trot.tasks.env import Env
from trot.tasks.registry import compile_model, get_task, register


def _cartpole_with(**hooks) -> Env:
    """cartpole-balance with some Task hooks replaced (a user's task with a slip in it)."""
    entry = get_task("cartpole-balance")
    task = type("Slipped", (entry.task_cls,), hooks)(entry.config)
    sim = make_sim("cpu", compile_model(task), 4, entry.config.substeps)
    return Env("slipped", task, sim, 0)


@pytest.mark.parametrize("hooks, message", [
    (dict(reward=lambda self, sim, a: (lambda r, t: (r[:, None], t))(
        *get_task("cartpole-balance").task_cls.reward(self, sim, a))),
     r"Task.reward \(its total\) must return a torch.float32 tensor of shape \(4,\) on cpu, "
     r"got torch.float32 of shape \(4, 1\)"),
    (dict(terminated=lambda self, sim: torch.zeros(4)),
     r"Task.terminated must return a torch.bool tensor .* got torch.float32 of shape \(4,\)"),
    (dict(initial_state=lambda self, sim, gen: (sim.qpos.clone()[:1], sim.qvel.clone())),
     r"Task.initial_state's qpos must return .* shape \(4, 2\) .* got .* shape \(1, 2\)"),
])
def test_malformed_task_outputs_are_named(hooks, message):
    """A [N, 1] reward broadcast against [N] terminations into [N, N] (or failed deep in
    torch.stack); a float termination failed in `|` with a dtype error; a short start state
    in the sim's reset. Each now names the hook and the shape, dtype and device it owes."""
    env = _cartpole_with(**hooks)
    with pytest.raises(ValueError, match=message):
        env.reset()
        env.step(torch.zeros(4, env.action_dim))


def test_a_range_written_as_a_list_is_checked_as_a_range():
    """Written in Python, (1.25, 0.5) as a list was skipped by every field rule (they read
    tuples only) and trained on an inverted friction range."""
    cfg = dataclasses.replace(get_task("go1-flat").config, friction_range=[1.25, 0.5])
    with pytest.raises(ValueError, match=r"env.friction_range must be a range \(low, high\)"):
        cfg.validate()
    dataclasses.replace(cfg, friction_range=[0.5, 1.25]).validate()


def test_a_config_subclass_without_its_own_dataclass_is_refused():
    """`class MyConfig(CartpoleConfig): episode_seconds = 3.0` without @dataclass: the
    body's value is no field, the parent's __init__ sets 10.0, and the user's default
    vanished silently. register() now says to decorate it."""
    entry = get_task("cartpole-balance")
    undecorated = type("MyConfig", (type(entry.config),), {"episode_seconds": 3.0})
    assert undecorated().episode_seconds != 3.0  # the trap itself
    with pytest.raises(TypeError, match=r"config class MyConfig .* without "
                                        r"@dataclass\(frozen=True\) of its own"):
        register("never-registered", entry.task_cls, undecorated(), "a slip")


def test_an_action_affine_of_the_wrong_length_is_named():
    """One scale short: the affine broadcast failed (or, for one number, silently scaled
    every actuator alike) at the first step, far from the task's code."""
    with pytest.raises(ValueError, match=r"action_affine must return \(scale, offset\) with "
                                         r"one number per actuator \(1\), got 2 and 1"):
        _cartpole_with(action_affine=lambda self, model: ((1.0, 2.0), (0.0,)))


def test_a_task_without_observation_terms_is_named():
    """An empty policy_terms() built a 0-column observation and failed inside the network's
    first layer (or its normalizer) far from the task."""
    with pytest.raises(ValueError, match=r"Slipped.policy_terms\(\) is empty"):
        _cartpole_with(policy_terms=lambda self: [])
