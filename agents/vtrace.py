"""V-trace (Espeholt et al., 2018): off-policy value targets and policy-gradient advantages
for data collected by a behaviour policy mu that lags the learner's target policy pi.

Same conventions as `compute_gae` (agents/advantages.py): time-major [T, N] tensors,
`next_values` is the critic's value of the *true* next state of each step, termination zeroes
the bootstrap, and termination or truncation cuts the backward recursion.

With log_rhos = 0 (on-policy) and rho_bar, c_bar >= 1 the traces are c_t = lam and
`vs` equals `compute_gae`'s returns with the same lam.
"""

from __future__ import annotations

import torch
from torch import Tensor

from trot.agents.advantages import _check_inputs


@torch.no_grad()  # targets and advantage weights, never differentiated
def vtrace(
    rewards: Tensor,
    values: Tensor,
    next_values: Tensor,
    terminated: Tensor,
    truncated: Tensor,
    log_rhos: Tensor,
    gamma: float,
    lam: float,
    rho_bar: float,
    c_bar: float,
    *,
    weight_advantages: bool = True,
) -> tuple[Tensor, Tensor]:
    """V-trace value targets and policy-gradient advantages.

    Args:
      rewards: [T, N] reward of step t in env n.
      values: [T, N] V(x_t), the critic's value of the state step t acted on.
      next_values: [T, N] V of the true next state of step t (the final state where the
        episode ended at t; elsewhere values[t + 1] in practice).
      terminated: [T, N] bool, absorbing state reached on step t (bootstrap is 0).
      truncated: [T, N] bool, episode cut on step t (bootstrap from next_values).
      log_rhos: [T, N] log pi(a_t|x_t) - log mu(a_t|x_t), target minus behaviour.
      gamma: discount.
      lam: trace decay (lambda); multiplies the truncated traces.
      rho_bar: truncation of the importance weights rho_t = min(rho_bar, pi/mu) in the TD
        errors; it sets the fixed point, the value of pi_rho_bar ∝ min(rho_bar * mu, pi).
      c_bar: truncation of the traces c_t = lam * min(c_bar, pi/mu); it sets the speed of
        contraction, not the fixed point.
      weight_advantages: multiply the policy-gradient advantages by rho_t (IMPALA's
        off-policy policy gradient). False returns the unweighted
        r_t + gamma (1 - term_t) vs'_{t+1} - V_t, for objectives that apply the importance
        ratio themselves (PPO's clipped surrogate).

    Returns:
      vs: [T, N] V-trace targets, vs_t = V_t + delta_t + gamma (1 - done_t) c_t
        (vs_{t+1} - V_{t+1}) with delta_t = rho_t (r_t + gamma (1 - term_t) next_values_t
        - V_t), done = terminated | truncated, and the correction 0 past the rollout's end.
      advantages: [T, N] rho_t (r_t + gamma (1 - term_t) vs'_{t+1} - V_t), where vs'_{t+1}
        is vs_{t+1} inside an episode and next_values_t where step t ended the episode or
        the rollout.

    Raises:
      ValueError: if an input is not [T, N] like rewards or a done flag is not bool.
    """
    _check_inputs(rewards, values, next_values, terminated, truncated)
    if log_rhos.shape != rewards.shape:
        raise ValueError(f"log_rhos has shape {tuple(log_rhos.shape)}, expected "
                         f"{tuple(rewards.shape)} like rewards")
    dtype = values.dtype
    ratio = log_rhos.to(dtype).exp()  # [T, N]
    rhos = ratio.clamp(max=rho_bar)  # [T, N]
    cs = lam * ratio.clamp(max=c_bar)  # [T, N]
    not_terminated = (~terminated).to(dtype)  # [T, N]
    not_done = (~(terminated | truncated)).to(dtype)  # [T, N]

    deltas = rhos * (rewards + gamma * not_terminated * next_values - values)  # [T, N]
    decay = gamma * not_done * cs  # [T, N]
    corr = torch.empty_like(deltas)  # [T, N] vs_t - V_t
    running = torch.zeros_like(deltas[0])  # [N] vs_{t+1} - V_{t+1}; 0 past the rollout
    for t in range(deltas.shape[0] - 1, -1, -1):  # T small; N vectorized; no host sync
        running = deltas[t] + decay[t] * running
        corr[t] = running
    vs = values + corr  # [T, N]

    # vs'_{t+1}: vs_{t+1} inside an episode, next_values_t at an episode or rollout end
    vs_next = next_values.clone()  # [T, N]
    if vs.shape[0] > 1:
        vs_next[:-1] = torch.where(not_done[:-1].bool(), vs[1:], next_values[:-1])
    q = rewards + gamma * not_terminated * vs_next - values  # [T, N]
    return vs, (rhos * q if weight_advantages else q)
