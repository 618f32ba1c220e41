"""Several tasks as one env for one policy: `trot train TASK_A TASK_B ...`.

Each task keeps its own `Env` (its own model and sim, its own clocks, resets, rewards and
episode statistics); `MultiEnv` steps them in turn and shows the learner one env of all
their envs, task after task in the rows. Both observations gain the task's one-hot index
[N, T] as their last T columns, so the policy and the critic know which task a row is
(the critic reads it to pick that task's value output, agents/networks.py).

The tasks must *agree* (`check_agree`): the same action dimension, and policy and critic
observations of the same terms in the same order, each of the same size, with the same
history. Scales, offsets, joint orders and rewards may differ: each task's export carries
its own (agents/multitask.py).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from itertools import accumulate

import torch
from torch import Tensor

from trot.tasks.base import Observation, StepResult
from trot.tasks.env import Env
from trot.tasks.nonfinite import AnyOf


def split_envs(num_envs: int, shares: Sequence[float]) -> list[int]:
    """num_envs split between the tasks in proportion to their shares (largest remainders,
    ties to the earlier task), every task at least one env: task k's share of every
    rollout. Equal shares give the first tasks one more where it does not divide."""
    if num_envs < len(shares):
        raise ValueError(f"num_envs {num_envs} cannot give each of {len(shares)} tasks an env")
    quotas = [num_envs * w / sum(shares) for w in shares]
    sizes = [max(1, int(q)) for q in quotas]
    by_remainder = sorted(range(len(shares)), key=lambda k: (sizes[k] - quotas[k], k))
    for k in by_remainder[:max(0, num_envs - sum(sizes))]:  # the envs left, largest
        sizes[k] += 1                                          # remainder first
    while sum(sizes) > num_envs:  # a task raised to its one env: the largest gives it back
        sizes[sizes.index(max(sizes))] -= 1
    return sizes


def _signature(env: Env) -> dict[str, object]:
    """What must be equal across the tasks of one policy, by what it is called."""
    terms = lambda layout: [(s.term.name, s.size) for s in layout.slots]  # noqa: E731
    return {"action dimension": env.action_dim, "policy observation terms (name, size)":
            terms(env.policy_layout), "observation history": env.history,
            "critic observation terms (name, size)": terms(env.critic_layout)}


def check_agree(names: Sequence[str], envs: Sequence[Env]) -> None:
    """A ValueError naming the first thing in which a task differs from the first one."""
    first = _signature(envs[0])
    for name, env in zip(names[1:], envs[1:]):
        for what, value in _signature(env).items():
            if value != first[what]:
                raise ValueError(
                    f"tasks {names[0]!r} and {name!r} cannot train one policy: their {what} "
                    f"differ ({first[what]} against {value}). One policy needs the same "
                    "action dimension and the same observation terms, sizes and history "
                    "(register a variant of one task with the other's observation setup)")


class MultiEnv:
    """T tasks' envs seen as one env of their N = N_1 + ... + N_T envs (rows task-major),
    observations [N, P + T] and [N, C + T] ending in the one-hot task index."""

    def __init__(self, names: Sequence[str], envs: Sequence[Env]):
        check_agree(names, envs)
        self.names, self.envs = tuple(names), list(envs)
        self.num_tasks = len(envs)
        self.device = envs[0].device
        self.num_envs = sum(e.num_envs for e in envs)
        self.action_dim = envs[0].action_dim
        self.obs_dim = envs[0].obs_dim + self.num_tasks
        self.critic_obs_dim = envs[0].critic_obs_dim + self.num_tasks
        ends = list(accumulate(e.num_envs for e in envs))
        self.rows = [slice(end - e.num_envs, end) for end, e in zip(ends, envs)]  # task k's
        self.task_index = torch.cat([torch.full((e.num_envs,), k, device=self.device)
                                     for k, e in enumerate(envs)])  # [N] int64
        self.onehot = torch.nn.functional.one_hot(self.task_index, self.num_tasks
                                                  ).float()  # [N, T]
        self.obs: Observation | None = None

    def _joined(self, parts: list[Observation]) -> Observation:
        """The tasks' observations stacked by rows, each with the one-hot index appended."""
        return Observation(torch.cat([torch.cat([o.policy for o in parts]), self.onehot], 1),
                           torch.cat([torch.cat([o.critic for o in parts]), self.onehot], 1))

    def capture(self, compile_fn: Callable[[Callable], Callable]) -> None:
        for e in self.envs:
            e.capture(compile_fn)

    def reset(self, stagger: bool = False) -> Observation:
        self.obs = self._joined([e.reset(stagger) for e in self.envs])
        return self.obs

    def step(self, action: Tensor) -> StepResult:  # action [N, A]
        res = [e.step(action[rows]) for e, rows in zip(self.envs, self.rows)]
        self.obs = self._joined([r.obs for r in res])
        return StepResult(self.obs, *(torch.cat([getattr(r, f) for r in res]) for f in
                                      ("reward", "terminated", "truncated")),
                          self._joined([r.final_obs for r in res]),
                          {"unstable": sum(r.metrics["unstable"] for r in res)})

    @property
    def nonfinite(self) -> AnyOf:
        """Every task's record of its own NaN (tasks/nonfinite.py) as one."""
        return AnyOf([e.nonfinite for e in self.envs])

    def pop_stats(self) -> tuple[list[str], Tensor]:
        """Every task's episode statistics under its name (`NAME/episode_return`, ...),
        after the episode and unstable-env counts of all of them."""
        names, vals = [], []
        for name, e in zip(self.names, self.envs):
            n, v = e.pop_stats()
            names += [f"{name}/{k}" for k in n]
            vals.append(v)
        counts = torch.stack([v[:2] for v in vals]).sum(0)  # [2] episodes, unstable envs
        return ["episodes", "unstable_envs"] + names, torch.cat([counts, *vals])

    def iteration_metrics(self) -> dict[str, Tensor]:
        return {f"{name}/{k}": v for name, e in zip(self.names, self.envs)
                for k, v in e.iteration_metrics().items()}

    def state_dict(self) -> dict:
        return {"tasks": list(self.names), "envs": [e.state_dict() for e in self.envs]}

    def load_state_dict(self, state: dict) -> None:
        if list(state.get("tasks", [])) != list(self.names):
            raise ValueError(f"the checkpoint's env state is of tasks {state.get('tasks')}, "
                             f"this run's are {list(self.names)}")
        for e, s in zip(self.envs, state["envs"]):
            e.load_state_dict(s)
        self.obs = self._joined([e.obs for e in self.envs])
