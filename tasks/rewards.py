"""Reward terms: small pure functions of tensors, shared by tasks and checked by tests."""

from __future__ import annotations

from torch import Tensor


def gaussian(x: Tensor, std: float) -> Tensor:
    """exp(-(x/std)^2): 1 at 0, smooth, bounded in (0, 1]."""
    return (-(x / std).square()).exp()


def tracking_exp(sq_error: Tensor, std: float) -> Tensor:
    """exp(-err^2 / std^2) of an already-squared error [N]."""
    return (-sq_error / (std * std)).exp()
