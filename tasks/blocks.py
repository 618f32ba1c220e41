"""K envs on consecutive blocks of rows of one sim (`make_block_envs`) seen as one env of
K x N rows, block after block: each block's task, clocks, resets and random streams are
its own, and one physics call steps them all (agents/seeds.py's stacked seeds)."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from trot.tasks.base import Observation, StepResult
from trot.tasks.env import Env


def _joined(parts: Sequence[Observation]) -> Observation:
    return Observation(torch.cat([o.policy for o in parts]),
                       torch.cat([o.critic for o in parts]))


class Blocks:
    """The blocks' envs as one: observations [K N, P] and [K N, C], actions [K N, A]."""

    def __init__(self, envs: Sequence[Env]):
        self.envs = list(envs)
        self.sim = envs[0].sim.parent  # sim/rows.py's SimRows: the blocks' one sim
        self.device, self.action_dim = envs[0].device, envs[0].action_dim
        self.num_envs = sum(e.num_envs for e in envs)
        self.ctrl = torch.zeros(self.num_envs, self.sim.model.nu, device=self.device)

    @property
    def obs(self) -> Observation:
        return _joined([e.obs for e in self.envs])

    def step(self, action: Tensor) -> StepResult:  # action [K N, A]
        per_block = action.view(len(self.envs), -1, action.shape[-1])  # [K, N, A]
        begun = [e.begin_step(a) for e, a in zip(self.envs, per_block)]
        torch.cat([ctrl for _, _, ctrl in begun], out=self.ctrl)  # [K N, nu]
        self.sim.step(self.ctrl)
        res = [e.end_step(a, bad) for e, (a, bad, _) in zip(self.envs, begun)]
        return StepResult(_joined([r.obs for r in res]),
                          *(torch.cat([getattr(r, f) for r in res]) for f in
                            ("reward", "terminated", "truncated")),
                          _joined([r.final_obs for r in res]),
                          {"unstable": sum(r.metrics["unstable"] for r in res)})
