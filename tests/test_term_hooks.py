"""Term hooks are one declaration (tasks/terms/state.py `HOOKS`): the task calls every hook
it declares, and refuses at bind a term whose hook it would call wrongly or never."""

from __future__ import annotations

import dataclasses
import re

import pytest
import torch

from trot.sim import make_sim
from trot.tasks.env import Env
from trot.tasks.go1 import GO1_FLAT
from trot.tasks.registry import compile_model
from trot.tasks.terms.body import Body
from trot.tasks.terms.state import HOOKS, POST_STEP, RESET, Term


def _env(*terms: type[Term], n: int = 2, **changes) -> Env:
    decl = dataclasses.replace(GO1_FLAT, memory=GO1_FLAT.memory + terms)
    task = decl(decl.defaults(**changes))
    return Env("test", task, make_sim("cpu", compile_model(task), n, task.config.substeps,
                                      "cpu"), 0)


class Recorder(Term):
    """Defines every hook the task may call, each noting that it was called."""

    def __init__(self, body: Body):
        self.calls: list[str] = []

    def pre_step(self, body, gen):
        self.calls.append("pre_step")

    def post_step(self, step):
        self.calls.append("post_step")

    def reset(self, body, mask, gen):
        self.calls.append("reset")

    def randomize(self, body, mask, gen):
        self.calls.append("randomize")

    def episode_end(self, body, mask):
        self.calls.append("episode_end")

    def restart(self):
        self.calls.append("restart")

    def staggered(self, elapsed):
        self.calls.append("staggered")

    def place(self, body, qpos, gen):
        self.calls.append("place")

    def truncated(self, body):
        self.calls.append("truncated")
        return torch.zeros(body.n, dtype=torch.bool, device=body.device)

    def episode_outcomes(self):
        self.calls.append("episode_outcomes")
        return {}

    def iteration_metrics(self):
        self.calls.append("iteration_metrics")
        return {}


def test_every_declared_hook_is_called_by_the_task():
    """A term defining every hook sees each called over a staggered reset, a few steps
    with time-limit resets, an evaluated step and an iteration's metrics. The bug: a hook
    declared (and so accepted at bind) that the task never calls, or a call dropped."""
    env = _env(Recorder, episode_seconds=0.1)  # 5 steps: the loop crosses a time limit
    env.reset(stagger=True)
    env.record_eval_metrics = True
    ended = 0
    for _ in range(6):
        res = env.step(torch.zeros(env.num_envs, env.action_dim))
        ended += int(res.truncated.sum())
    env.iteration_metrics()
    assert ended > 0
    calls = env.task.body.term(Recorder).calls
    assert set(calls) == {h.name for h in HOOKS}
    assert calls.count("pre_step") == calls.count("post_step") == 6


def test_the_term_docstring_names_every_hook():
    """The Term docstring is where a term's author looks: it lists every declared hook."""
    for h in HOOKS:
        assert f"`{h.name}(self" in Term.__doc__, h.name


class PostStepOnBody(Term):
    """post_step written like pre_step: it would be handed the Step as `body`."""

    def __init__(self, body: Body):
        pass

    def post_step(self, body):
        pass


class ResetArgsSwapped(Term):
    def __init__(self, body: Body):
        pass

    def reset(self, body, gen, mask):  # the task passes (body, mask, gen)
        pass


class PostSetp(Term):
    def __init__(self, body: Body):
        pass

    def post_setp(self, step):
        pass


class OnReset(Term):
    """The Task-level name of the reset hook, on a term."""

    def __init__(self, body: Body):
        pass

    def on_reset(self, body, mask, gen):
        pass


@pytest.mark.parametrize("term, message", [
    (PostStepOnBody, f"term PostStepOnBody.post_step takes (body); the task calls the hook "
                     f"as {POST_STEP.signature}"),
    (ResetArgsSwapped, f"term ResetArgsSwapped.reset takes (body, gen, mask); the task "
                       f"calls the hook as {RESET.signature}"),
    (PostSetp, f"term PostSetp.post_setp is not a hook, so the task never calls it: did you "
               f"mean {POST_STEP.signature}?"),
    (OnReset, f"term OnReset.on_reset is not a hook, so the task never calls it: did you "
              f"mean {RESET.signature}?"),
])
def test_a_hook_the_task_would_call_wrongly_or_never_is_refused_at_bind(term, message):
    """The bugs: a hook whose parameters differ from what the task passes (it would fail
    mid-run, or take the mask for the generator), and a misspelled hook (memory that
    silently never advances or resets)."""
    with pytest.raises(ValueError, match=re.escape(message)):
        _env(term)
