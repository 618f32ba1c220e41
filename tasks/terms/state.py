"""`Term`: a piece of a task with per-env memory (feet air time, the gait clock, the
curriculum's levels). Its checkpoint state is every tensor, generator and number it holds,
found on the object itself, so a term cannot add state and forget to save it; `check_state`
refuses a term that keeps state the checkpoint cannot hold.

`HOOKS` declares, once, the methods a term may define for the task to call: each hook's
exact parameters, and when it runs. The task (tasks/velocity.py) binds its calls from it,
and `check_hooks` refuses, when the task binds, a hook with other parameters or a method
named like a hook that the task would never call (`post_stepp`, `on_reset`)."""

from __future__ import annotations

import difflib
import inspect
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from numbers import Number
from typing import Any

import torch
from torch import Tensor

SAVED = (Tensor, torch.Generator, Number)


@dataclass(frozen=True, eq=False)  # compared and hashed as itself: a key of bound calls
class Hook:
    """A method a term may define; the task calls it on every term that has it, in the
    order the declaration lists the terms."""

    name: str
    params: tuple[tuple[str, str], ...]
    """(name, type) of each parameter after self, in order: the task passes them so"""
    returns: str
    when: str

    @property
    def signature(self) -> str:
        return (f"{self.name}({', '.join(['self', *(f'{n}: {t}' for n, t in self.params)])})"
                f" -> {self.returns}")


_BODY, _MASK, _GEN = ("body", "Body"), ("mask", "Tensor"), ("gen", "torch.Generator")
PRE_STEP = Hook("pre_step", (_BODY, _GEN), "None",
                "every step, before the action reaches the motors and the physics")
POST_STEP = Hook("post_step", (("step", "Step"),), "None",
                 "every step after the physics, before the observation: the one place "
                 "memory advances (never in a reward)")
RESET = Hook("reset", (_BODY, _MASK, _GEN), "None",
             "at episode starts, for the envs where mask [N] is set, after the sim's reset")
RANDOMIZE = Hook("randomize", (_BODY, _MASK, _GEN), "None",
                 "at episode starts, before the sim's reset (so its forward sees the "
                 "parameters)")
EPISODE_END = Hook("episode_end", (_BODY, _MASK), "None",
                   "before those resets, on the ended envs' final states")
RESTART = Hook("restart", (), "None", "at Env.reset, before every env resets")
STAGGERED = Hook("staggered", (("elapsed", "Tensor"),), "None",
                 "after Env.reset(stagger=True): each first episode starts elapsed [N] s "
                 "into the env's clock")
PLACE = Hook("place", (_BODY, ("qpos", "Tensor"), _GEN), "None",
             "in initial_state, to move the start poses qpos [N, nq] in place (spawns)")
TRUNCATED = Hook("truncated", (_BODY,), "Tensor",
                 "every step: [N] bool episodes that end without a failure")
EPISODE_OUTCOMES = Hook("episode_outcomes", (), "dict[str, Tensor]",
                        "every evaluated step: [N] results read at each episode's last step")
ITERATION_METRICS = Hook("iteration_metrics", (), "dict[str, Tensor]",
                         "once per training iteration: 0-d tensors logged as task/NAME")
HOOKS = (PRE_STEP, POST_STEP, RESET, RANDOMIZE, EPISODE_END, RESTART, STAGGERED, PLACE,
         TRUNCATED, EPISODE_OUTCOMES, ITERATION_METRICS)
NEAR = 0.85
"""a public method whose name (less an `on_` prefix) is this close to a hook's (difflib's
ratio) is taken for a misspelled hook: post_setp 0.89, randomise 0.89; replace 0.83 is not"""


class Term:
    """A stateful term. Hooks a term may define (`HOOKS`; the task calls those it has, in
    the order the declaration lists the terms; other parameters are refused at bind):

    - `pre_step(self, body, gen)`: every step, before the physics;
    - `post_step(self, step)`: every step after the physics, before the observation: where
      memory advances, once per step, never in a reward;
    - `reset(self, body, mask, gen)`: at episode starts, after the sim's reset;
    - `randomize(self, body, mask, gen)`: at episode starts, before the sim's reset;
    - `episode_end(self, body, mask)`: before those resets, on the final states;
    - `restart(self)`: at `Env.reset`, before every env resets;
    - `staggered(self, elapsed)`: after `Env.reset(stagger=True)`, elapsed [N] s;
    - `place(self, body, qpos, gen)`: in initial_state, moves the start poses in place;
    - `truncated(self, body) -> [N] bool`: every step, ends without a failure;
    - `episode_outcomes(self) -> {name: [N]}`: evaluation's results at episodes' ends;
    - `iteration_metrics(self) -> {name: 0-d}`: logged every training iteration."""

    def state_dict(self) -> dict[str, Any]:
        """Every tensor (cloned), generator (its state) and number the term holds."""
        out: dict[str, Any] = {}
        for k, v in vars(self).items():
            if isinstance(v, Tensor):
                out[k] = v.clone()
            elif isinstance(v, torch.Generator):
                out[k] = v.get_state()
            elif isinstance(v, Number):
                out[k] = v
        return out

    def load_state_dict(self, state: dict[str, Any]) -> None:
        for k, v in state.items():
            mine = getattr(self, k)
            if isinstance(mine, Tensor):
                mine.copy_(v)
            elif isinstance(mine, torch.Generator):
                mine.set_state(v)
            else:
                setattr(self, k, v)


def check_state(name: str, term: object) -> None:
    """A ValueError where `term` holds state its state_dict leaves out: tensors or
    generators not among its keys (an overridden state_dict that forgot one, or an object
    that is not a Term), or tensors kept in containers (lists, dicts) no checkpoint sees."""
    held = {k for k, v in vars(term).items() if isinstance(v, (Tensor, torch.Generator))}
    saved = set(term.state_dict()) if hasattr(term, "state_dict") else set()
    missing = sorted(held - saved)
    if missing:
        raise ValueError(f"term {name!r} ({type(term).__name__}) holds {missing} but its "
                         "state_dict leaves them out, so a resumed run would diverge: derive "
                         "it from trot.tasks.terms.state.Term, which saves every tensor")
    hidden = sorted(k for k, v in vars(term).items() if isinstance(v, (list, dict, tuple))
                    and any(isinstance(x, Tensor) for x in (v.values() if isinstance(v, dict)
                                                           else v)))
    if hidden:
        raise ValueError(f"term {name!r} ({type(term).__name__}) keeps tensors in "
                         f"containers {hidden}, which no checkpoint holds: make each a "
                         "tensor attribute")


def check_hooks(term: object) -> None:
    """A ValueError naming the term's class, the method and the accepted signature where a
    method named as a hook takes other parameters (count, names or order), or a public
    method's name is a near miss of a hook's (`post_stepp`, `on_reset`): the task would
    call it wrongly, or never."""
    cls = type(term).__name__
    for h in HOOKS:
        if not hasattr(term, h.name):
            continue
        got = _params(getattr(term, h.name))
        if got != tuple(n for n, _ in h.params):
            raise ValueError(f"term {cls}.{h.name} takes ({', '.join(got)}); the task calls "
                             f"the hook as {h.signature}")
    names = {h.name: h for h in HOOKS}
    for name in _methods(type(term)):
        near = difflib.get_close_matches(name.removeprefix("on_"), names, 1, NEAR)
        if name not in names and near:
            raise ValueError(f"term {cls}.{name} is not a hook, so the task never calls "
                             f"it: did you mean {names[near[0]].signature}? (hooks: "
                             f"{', '.join(names)})")


def _params(fn: object) -> tuple[str, ...]:
    """The parameter names a bound method (or another callable) takes; `*args` and
    `**kwargs` as written, so that they match no hook."""
    if not callable(fn):
        return ("<not callable>",)
    kinds = {inspect.Parameter.VAR_POSITIONAL: "*", inspect.Parameter.VAR_KEYWORD: "**"}
    return tuple(kinds.get(p.kind, "") + p.name
                 for p in inspect.signature(fn).parameters.values())


def _methods(cls: type) -> list[str]:
    """The public methods a term class adds to Term's."""
    return [k for k in dir(cls) if not k.startswith("_") and not hasattr(Term, k)
            and isinstance(inspect.getattr_static(cls, k), (Callable, staticmethod,
                                                            classmethod))]


def bound_hooks(terms: Iterable[object]) -> dict[Hook, tuple[Callable, ...]]:
    """Each hook's calls, one per term that defines it, in the terms' order."""
    terms = tuple(terms)
    return {h: tuple(getattr(t, h.name) for t in terms if hasattr(t, h.name)) for h in HOOKS}
