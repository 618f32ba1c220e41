"""Rollout storage: preallocated, time-major [T, N, ...] tensors on the learner's device."""

from __future__ import annotations

from dataclasses import dataclass, fields

import torch
from torch import Tensor


@dataclass
class Rollout:
    obs: Tensor  # [T, N, P]
    critic_obs: Tensor  # [T, N, C]
    actions: Tensor  # [T, N, A] as sampled (before the env clips to [-1, 1])
    log_probs: Tensor  # [T, N] under the behaviour policy
    rewards: Tensor  # [T, N]
    terminated: Tensor  # [T, N] bool
    truncated: Tensor  # [T, N] bool
    values: Tensor  # [T, N] V(s_t), reward units
    final_critic_obs: Tensor  # [T, N, C] critic obs of the state each step reached
    action_mean: Tensor  # [T, N, A] behaviour policy's mean (for the KL)

    @classmethod
    def allocate(cls, t: int, n: int, obs_dim: int, critic_dim: int, action_dim: int,
                 device: torch.device) -> "Rollout":
        z = lambda *s, dtype=torch.float32: torch.zeros(t, n, *s, device=device,  # noqa: E731
                                                        dtype=dtype)
        return cls(z(obs_dim), z(critic_dim), z(action_dim), z(), z(), z(dtype=torch.bool),
                   z(dtype=torch.bool), z(), z(critic_dim), z(action_dim))

    def write(self, t: int, **values: Tensor) -> None:
        for k, v in values.items():
            getattr(self, k)[t].copy_(v)

    @property
    def steps(self) -> int:
        return self.rewards.shape[0]


@dataclass
class Batch:
    """A flat view [B, ...] of one rollout plus what GAE and PopArt derived from it."""

    obs: Tensor
    critic_obs: Tensor
    actions: Tensor
    log_probs: Tensor
    action_mean: Tensor
    advantages: Tensor
    returns: Tensor  # value targets, reward units
    values: Tensor  # old predictions, reward units

    def __getitem__(self, idx: Tensor | slice) -> "Batch":
        if isinstance(idx, slice):  # contiguous views
            return Batch(*(getattr(self, f.name)[idx] for f in fields(self)))
        # a gather: index_select is several times cheaper than advanced indexing on CPU
        return Batch(*(getattr(self, f.name).index_select(0, idx) for f in fields(self)))

    def __len__(self) -> int:
        return self.advantages.shape[0]
