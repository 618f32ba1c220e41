"""NaN or Inf made by the task's own code, traced to the piece that made it without a host
sync in the step (docs/tasks.md, "When your code gives NaN").

Each step the env notes, on its device, which of the task's pieces gave a non-finite value
where the physics was finite: each observation column (so each observation term), each
reward term and the reward's total, and the start states `initial_state` returned. Only
the first step where any did is kept: its pieces and its envs. `fired()` is a 0-d bool that
joins the learner's one host sync per iteration; `error()` then reads the record on the
host, once, off the hot path, and names the task, the piece, the envs and the step.

A diverged simulation is another case: its state is non-finite (the sim's `unstable`), and
the env's NaN guard resets the robot and counts it (`unstable_envs`), as before; those envs
are left out here, so a blow-up of the physics is never blamed on the task's code.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor


class TaskCodeError(ValueError):
    """The task's own code gave NaN or Inf where the physics was finite (`NonFinite`)."""


class NonFinite:
    """The record: per group of pieces (observation columns, reward terms, start states) a
    [P] flag each, the envs [N] and the step of the first faulty step."""

    def __init__(self, task: str, n: int, device: torch.device):
        self.task = task
        self.groups: dict[str, tuple[tuple[str, ...], Tensor]] = {}  # name: (pieces, [P])
        self.envs = torch.zeros(n, dtype=torch.bool, device=device)  # [N]
        self.step = torch.full((), -1, dtype=torch.int64, device=device)  # first faulty step
        self.now = torch.zeros((), dtype=torch.int64, device=device)  # env steps so far

    def add(self, group: str, pieces: Sequence[str]) -> None:
        """A group of pieces to watch (the reward's terms are known at the first step)."""
        self.groups[group] = (tuple(pieces), torch.zeros(len(pieces), dtype=torch.bool,
                                                         device=self.envs.device))

    def note(self, group: str, bad: Tensor, envs: Tensor) -> None:
        """This step's faults of a group: bad [P] bool per piece, envs [N] bool where any
        was. Kept only if no earlier step had one."""
        first = bad.any() & ((self.step < 0) | (self.step == self.now))  # 0-d
        self.groups[group][1].logical_or_(bad & first)
        self.envs.logical_or_(envs & first)
        torch.where(first, self.now, self.step, out=self.step)

    def watch_rewards(self, terms: Sequence[str]) -> None:
        """The reward's pieces, once its terms are known (the first step, or a load)."""
        self.add("reward", ["Task.reward (its total)"] + [f"reward term {k!r}" for k in terms])

    def tick(self) -> None:
        self.now += 1

    def fired(self) -> Tensor:
        """0-d bool: a piece gave NaN or Inf (no host sync: read it in the iteration's)."""
        return self.step >= 0

    def error(self, where: str = "") -> TaskCodeError:
        """The error naming the pieces, the first envs and the step (host: call once)."""
        pieces = list(dict.fromkeys(p for names, bad in self.groups.values()
                                    for p, b in zip(names, bad.tolist()) if b))
        envs = self.envs.nonzero().flatten().tolist()
        shown = ", ".join(map(str, envs[:8])) + (", ..." if len(envs) > 8 else "")
        return TaskCodeError(
            f"task {self.task!r}: {' and '.join(pieces) or 'a piece'} gave NaN or Inf in "
            f"envs [{shown}] ({len(envs)} of {self.envs.numel()}) at env step "
            f"{int(self.step)}{where}, where the physics was finite: the task's own code "
            "made it (a physics blow-up would be reset and counted as unstable_envs "
            "instead). Fix that piece; training stopped, and the last checkpoint is kept")

    def state_dict(self) -> dict[str, Tensor]:
        return {"now": self.now.clone()}

    def load_state_dict(self, state: dict[str, Tensor]) -> None:
        self.now.copy_(state["now"])


class AnyOf:
    """Several envs' records as one (tasks/multi.py's tasks): fired where any has."""

    def __init__(self, records: Sequence[NonFinite]):
        self.records = list(records)

    def fired(self) -> Tensor:
        return torch.stack([r.fired() for r in self.records]).any()

    def error(self, where: str = "") -> TaskCodeError:
        return next(r for r in self.records if bool(r.fired())).error(where)


def watching(task: str, n: int, device: torch.device, policy_slots, critic_slots
             ) -> NonFinite:
    """The record of an env of `task` (n envs): its start states and each observation
    column, named by the term that owns it (slots: a layout's, tasks/observation.py;
    critic_slots None where the critic reads the policy's observation)."""
    record = NonFinite(task, n, device)
    record.add("init", ["Task.initial_state (its qpos or qvel)"])
    kinds = (("policy", policy_slots), ("critic", critic_slots or ()))
    record.add("obs", [f"{kind} observation term {s.term.name!r}" for kind, slots in kinds
                       for s in slots for _ in range(s.size)])
    return record
