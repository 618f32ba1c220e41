"""Generalized advantage estimation (Schulman et al., 2016) over a batched rollout.

Terminated and truncated episodes are treated differently, as they must be:

* termination (the MDP reached an absorbing state) zeroes the bootstrap, because the value of
  an absorbing state is 0;
* truncation (time limit, reset for any non-MDP reason) keeps the bootstrap from the critic's
  value of the *final* observation, because the episode would have gone on;
* either one cuts the backward recursion, because the next row of the rollout belongs to a
  new episode and its advantage says nothing about this one.
"""

from __future__ import annotations

import torch
from torch import Tensor


def _check_inputs(
    rewards: Tensor,
    values: Tensor,
    next_values: Tensor,
    terminated: Tensor,
    truncated: Tensor,
) -> None:
    """Raise ValueError naming the first argument whose shape or dtype is wrong."""
    if rewards.dim() != 2:
        raise ValueError(f"rewards must be 2-D [T, N], got shape {tuple(rewards.shape)}")
    shape = rewards.shape
    named = {"values": values, "next_values": next_values,
             "terminated": terminated, "truncated": truncated}
    for name, tensor in named.items():
        if tensor.shape != shape:
            raise ValueError(
                f"{name} has shape {tuple(tensor.shape)}, expected {tuple(shape)} like rewards"
            )
    for name in ("terminated", "truncated"):
        if named[name].dtype != torch.bool:
            raise ValueError(f"{name} must be a bool tensor, got {named[name].dtype}")


@torch.no_grad()  # advantages and returns are regression/weighting targets, never differentiated
def compute_gae(
    rewards: Tensor,
    values: Tensor,
    next_values: Tensor,
    terminated: Tensor,
    truncated: Tensor,
    gamma: float,
    lam: float,
) -> tuple[Tensor, Tensor]:
    """Compute GAE advantages and the matching value targets.

    Args:
      rewards: [T, N] reward received on step t by env n.
      values: [T, N] critic value of the observation on which step t acted.
      next_values: [T, N] critic value of the true next observation of step t. Where the
        episode ended at t this is the value of its final observation (not the first one of
        the next episode); elsewhere it equals values[t + 1] in practice.
      terminated: [T, N] bool, the episode reached an absorbing state on step t.
      truncated: [T, N] bool, the episode was cut on step t (e.g. time limit).
      gamma: discount factor.
      lam: GAE lambda; 0 gives one-step TD errors, 1 gives Monte Carlo returns minus values
        (bootstrapped where the rollout or a truncated episode ends).

    Returns:
      advantages: [T, N] A_t = sum_k (gamma * lam)^k delta_{t+k} within the episode.
      returns: [T, N] advantages + values, the critic's regression target.

    Raises:
      ValueError: if an input is not [T, N] like rewards or a done flag is not bool.
    """
    _check_inputs(rewards, values, next_values, terminated, truncated)
    dtype = values.dtype
    not_terminated = (~terminated).to(dtype)  # [T, N] 0 where the bootstrap must vanish
    not_done = (~(terminated | truncated)).to(dtype)  # [T, N] 0 where the recursion is cut

    # One-step TD errors; the bootstrap always comes from next_values so that an episode
    # end never bootstraps from the first observation of the following episode.
    deltas = rewards + gamma * not_terminated * next_values - values  # [T, N]
    decay = (gamma * lam) * not_done  # [T, N]

    advantages = torch.empty_like(deltas)  # [T, N]
    running = torch.zeros_like(deltas[0])  # [N] advantage of step t + 1, 0 past the rollout
    for t in range(deltas.shape[0] - 1, -1, -1):  # T is small; N is vectorized, no host sync
        running = deltas[t] + decay[t] * running
        advantages[t] = running
    return advantages, advantages + values
