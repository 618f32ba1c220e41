"""Rollout storage: preallocated, time-major [T, N, ...] tensors on the learner's device."""

from __future__ import annotations

from dataclasses import dataclass, field, fields

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
    state0: Tensor  # [N, S] the actor's memory at the rollout's first step (S = 0: none)

    @classmethod
    def allocate(cls, t: int, n: int, obs_dim: int, critic_dim: int, action_dim: int,
                 device: torch.device, state_size: int = 0) -> "Rollout":
        z = lambda *s, dtype=torch.float32: torch.zeros(t, n, *s, device=device,  # noqa: E731
                                                        dtype=dtype)
        return cls(z(obs_dim), z(critic_dim), z(action_dim), z(), z(), z(dtype=torch.bool),
                   z(dtype=torch.bool), z(), z(critic_dim), z(action_dim),
                   torch.zeros(n, state_size, device=device))

    def starts(self) -> Tensor:
        """[T, N] bool: step t begins an episode after the rollout's first step (the one
        before it ended), where a recurrent actor's memory restarts from zero."""
        done = self.terminated | self.truncated
        return torch.cat([torch.zeros_like(done[:1]), done[:-1]])

    def head(self, t: int) -> Rollout:
        """The first t steps (views): a rollout cut short (a preempted straggler)."""
        return Rollout(*(getattr(self, f.name)[:t] if f.name != "state0" else self.state0
                         for f in fields(self)))

    def write(self, t: int, **values: Tensor) -> None:
        for k, v in values.items():
            getattr(self, k)[t].copy_(v)

    @property
    def steps(self) -> int:
        return self.rewards.shape[0]

    def state_dict(self) -> dict[str, Tensor]:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    def load_state_dict(self, state: dict[str, Tensor]) -> None:
        for f in fields(self):
            getattr(self, f.name).copy_(state[f.name])


@dataclass
class Sequences:
    """What a recurrent actor's update needs beside a batch's rows: the memory at each
    rollout's start and where episodes began. Rows are t-major, or env-major in minibatches."""

    state0: Tensor  # [n, S]
    starts: Tensor  # [T, n] bool
    env_major: bool = False


@dataclass
class Batch:
    """A flat view [B, ...] of one rollout plus what GAE and PopArt derived from it.

    Built with `Batch.packed`, every field is a column block of one [B, W] table, so a
    shuffle is a single row gather (several times cheaper on CPU than one per field)."""

    obs: Tensor
    critic_obs: Tensor
    actions: Tensor
    log_probs: Tensor
    action_mean: Tensor
    advantages: Tensor
    returns: Tensor  # value targets, reward units
    values: Tensor  # old predictions, reward units
    table: Tensor | None = field(default=None, repr=False)  # [B, W] the fields live in
    sequences: Sequences | None = field(default=None, repr=False)  # recurrent actors only

    @classmethod
    def packed(cls, *parts: Tensor) -> "Batch":
        """Copy the fields (in declaration order, each [B, ...]) into one table."""
        table = torch.cat([p.reshape(p.shape[0], -1) for p in parts], dim=1)  # [B, W]
        return cls._from_table(table, parts)

    @classmethod
    def _from_table(cls, table: Tensor, like: tuple[Tensor, ...]) -> "Batch":
        cols = table.split([p[0].numel() for p in like], dim=1)
        return cls(*(c.view(-1, *p.shape[1:]) for c, p in zip(cols, like)), table=table)

    def fields(self) -> tuple[Tensor, ...]:
        return tuple(getattr(self, f.name) for f in fields(self)
                     if f.name not in ("table", "sequences"))

    def __getitem__(self, idx: Tensor | slice) -> "Batch":
        parts = self.fields()
        if isinstance(idx, slice):  # views
            table = None if self.table is None else self.table[idx]
            return Batch(*(p[idx] for p in parts), table=table)
        if self.table is not None:
            return self.gather(idx, None)
        return Batch(*(p.index_select(0, idx) for p in parts))

    def gather(self, idx: Tensor, out: Tensor | None) -> "Batch":
        """Rows idx [B'] of a packed batch, written into `out` [B', W] when it fits (a
        buffer the caller reuses; see `reuse`)."""
        if self.table is None:
            return self[idx]
        out = reuse(out, (idx.shape[0], self.table.shape[1]), self.table)
        return Batch._from_table(torch.index_select(self.table, 0, idx, out=out), self.fields())

    def __len__(self) -> int:
        return self.advantages.shape[0]


def reuse(buf: Tensor | None, shape: tuple[int, ...], like: Tensor) -> Tensor:
    """`buf` if it has this shape, dtype and device, else a new empty tensor. On CPU a
    fresh tensor of tens of MB is an mmap whose page faults cost more than filling it:
    a [24576, 450] row gather takes 18 ms into a new tensor and 3 ms into a reused one."""
    if buf is not None and buf.shape == shape and buf.dtype == like.dtype \
            and buf.device == like.device:
        return buf
    return torch.empty(shape, dtype=like.dtype, device=like.device)
