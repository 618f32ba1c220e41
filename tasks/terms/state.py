"""`Term`: a piece of a task with per-env memory (feet air time, the previous action, the
gait clock, the curriculum's levels). Its checkpoint state is every tensor, generator and
number it holds, found on the object itself, so a term cannot add state and forget to save
it; `check_state` refuses a term that keeps state the checkpoint cannot hold."""

from __future__ import annotations

from numbers import Number
from typing import Any

import torch
from torch import Tensor

SAVED = (Tensor, torch.Generator, Number)


class Term:
    """A stateful term. Hooks a term may define (the task calls those it has, in the order
    the declaration lists the terms): `pre_step(body, gen)` before physics,
    `post_step(step)` after it (where memory advances: once per step, never in a reward),
    `reset(body, mask, gen)` at episode starts, `episode_end(body, mask)` before them,
    `restart()` at `Env.reset`, `staggered(elapsed)` after a staggered reset."""

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
