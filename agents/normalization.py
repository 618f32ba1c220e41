"""Running input statistics and PopArt value-target normalization.

Statistics are kept in float64 buffers: over billions of samples a float32 running mean drifts
and the incremental variance loses precision. Outputs keep the dtype of the input.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn


def merge_moments(
    mean_a: Tensor, var_a: Tensor, n_a: Tensor | float,
    mean_b: Tensor, var_b: Tensor, n_b: Tensor | float,
) -> tuple[Tensor, Tensor, Tensor | float]:
    """Merge two sets of (mean, population variance, count) into those of their union.

    Chan et al.'s parallel update; exact (up to rounding) for any split of the data, so it
    serves batch updates and a cross-process merge alike. Either count may be 0.

    Args:
      mean_a, var_a: [*S] moments of the first set; n_a its count (scalar).
      mean_b, var_b: [*S] moments of the second set; n_b its count (scalar).

    Returns:
      mean, var: [*S] moments of the union; n: n_a + n_b.
    """
    n = n_a + n_b
    safe = n.clamp(min=1e-300) if isinstance(n, Tensor) else max(n, 1e-300)  # both empty
    delta = mean_b - mean_a  # [*S]
    mean = mean_a + delta * (n_b / safe)
    # Sum of squared deviations of the union = both partial sums + a between-set term.
    m2 = var_a * n_a + var_b * n_b + delta * delta * (n_a * n_b / safe)
    return mean, m2 / safe, n


CHUNK_ROWS = 4096
"""rows per pass over a batch: its float64 and mask temporaries stay a few MB, in cache and
off mmap (a whole-batch temporary of tens of MB costs more in page faults than in work)"""


def row_chunks(b: int) -> list[slice]:
    return [slice(i, min(i + CHUNK_ROWS, b)) for i in range(0, b, CHUNK_ROWS)]


def masked_moments(x: Tensor, keep: Tensor | None = None) -> tuple[Tensor, Tensor, Tensor]:
    """Mean [*S], population var [*S] and count (0-d) of the rows of x [B, *S] where keep
    [B] is true (all rows when None), in float64 whatever x's dtype: two passes (mean, then
    squared deviations), each a sum of row-weighted matrix-vector products over chunks of
    rows. No rows: mean 0, var 0 and count 0, which any merge absorbs."""
    flat = x.flatten(1)  # [B, D]
    w = torch.ones(flat.shape[0], dtype=torch.float64, device=x.device) if keep is None \
        else keep.to(torch.float64)  # [B] row weights 0/1
    n = w.sum()

    def chunks():  # (w [R], rows [R, D] float64, left-out rows zeroed: NaN * 0 is NaN)
        for r in row_chunks(flat.shape[0]):
            rows = flat[r].to(torch.float64)
            yield w[r], rows if keep is None else torch.where(keep[r, None], rows, 0.0)
    zero = torch.zeros(flat.shape[1], dtype=torch.float64, device=x.device)
    mean = sum((wr @ rows for wr, rows in chunks()), zero) / n.clamp(min=1.0)  # [D]
    var = sum((wr @ (rows - mean).square_() for wr, rows in chunks()), zero) \
        / n.clamp(min=1.0)  # [D]
    return mean.view(x.shape[1:]), var.view(x.shape[1:]), n


class RunningMeanStd(nn.Module):
    """Normalizes inputs with running statistics: clamp((x - mean) / sqrt(var + eps), +-clip).

    The caller decides when to call `update` (e.g. on rollout observations only, never while
    evaluating or after export). `forward` uses only elementwise ops so it exports to ONNX.

    Outlier rows stay out of the statistics (`inliers`): the count-weighted update never
    forgets, so one env near divergence (values of 1e9, below the sim's 1e10 instability
    mark) would otherwise inflate the variance for the rest of the run.
    """

    SPREADS = 100.0
    """a value is an outlier beyond this many spreads from the batch median"""
    FLOOR = 1.0
    """least spread, in input units: observation terms are scaled to O(1)"""
    SAMPLE = 1024
    """rows the median and MAD are taken over (every k-th): robust, and cheap to sort"""
    MAX_FRACTION = 0.01
    """a dimension with more outlier rows than this is shifting, not diverging: kept"""

    mean: Tensor
    var: Tensor
    count: Tensor

    def __init__(self, shape: int | tuple[int, ...], eps: float = 1e-8, clip: float = 10.0):
        super().__init__()
        self.shape = (shape,) if isinstance(shape, int) else tuple(shape)
        self.eps = float(eps)
        self.clip = float(clip)
        # Start as the identity map (mean 0, var 1) with no evidence (count 0), so the first
        # update replaces the statistics outright.
        self.register_buffer("mean", torch.zeros(self.shape, dtype=torch.float64))
        self.register_buffer("var", torch.ones(self.shape, dtype=torch.float64))
        self.register_buffer("count", torch.zeros((), dtype=torch.float64))

    @torch.no_grad()
    def update(self, x: Tensor) -> None:
        """Fold a batch x: [B, *shape] into the statistics."""
        if tuple(x.shape[1:]) != self.shape:
            raise ValueError(f"x has shape {tuple(x.shape)}, expected [B, *{self.shape}]")
        if x.shape[0] == 0:
            return
        xb = x.detach().to(self.mean.device)  # [B, *shape]
        self.merge(*masked_moments(xb, self.inliers(xb)))

    @torch.no_grad()
    def inliers(self, x: Tensor) -> Tensor:
        """[B] bool: rows of x [B, *shape] to fold into the statistics. A value is an
        outlier when it is non-finite or farther than SPREADS spreads from the batch's
        median, the spread being the largest of 1.4826 MAD (the batch's robust std), the
        running std and FLOOR. Rows with an outlier are left out, unless a dimension has
        more than MAX_FRACTION of them: then that dimension moved, and it keeps its rows
        (rows with a non-finite value are left out in any case)."""
        xb = x.detach().to(self.mean.device).flatten(1)  # [B, D] in its own dtype: a test
        # against 100 spreads needs no float64, and the batch pass is the costly part
        sample = xb[::max(1, xb.shape[0] // self.SAMPLE)].double()  # [<= 2 SAMPLE, D]
        med = sample.nanmedian(0).values  # [D]
        mad = (sample - med).abs().nanmedian(0).values  # [D]
        run = torch.where(self.count > 0, self.var.sqrt().flatten(), torch.zeros_like(mad))
        spread = torch.maximum(torch.maximum(1.4826 * mad, run),
                               torch.full_like(mad, self.FLOOR))
        med, limit = med.to(xb.dtype), (self.SPREADS * spread).to(xb.dtype)
        bad = torch.empty(xb.shape, dtype=torch.bool, device=xb.device)  # [B, D], NaN is bad
        count = torch.zeros(xb.shape[1], dtype=xb.dtype, device=xb.device)  # [D]
        for r in row_chunks(xb.shape[0]):
            torch.le((xb[r] - med).abs_(), limit, out=bad[r])
            bad[r].logical_not_()
            count += bad[r].to(xb.dtype).sum(0)  # as floats: 6x faster than summing bools
        rare = count.double() / xb.shape[0] <= self.MAX_FRACTION  # [D]
        return ~((bad & rare).any(1) | ~xb.isfinite().all(1))  # non-finite: always out

    @torch.no_grad()
    def merge(self, mean: Tensor, var: Tensor, count: Tensor | float) -> None:
        """Fold externally computed moments ([*shape] mean and population var) into ours."""
        mean_b = mean.to(self.mean.device, torch.float64)
        var_b = var.to(self.var.device, torch.float64)
        new_mean, new_var, new_count = merge_moments(
            self.mean, self.var, self.count, mean_b, var_b, count
        )
        some = torch.as_tensor(new_count, dtype=torch.float64, device=self.count.device) > 0
        # no rows on either side: keep the statistics (no host sync to ask)
        self.mean.copy_(torch.where(some, new_mean, self.mean))
        self.var.copy_(torch.where(some, new_var, self.var))
        self.count.copy_(new_count)

    def forward(self, x: Tensor) -> Tensor:
        """x: [..., *shape] -> normalized and clipped [..., *shape] in x's dtype."""
        # Cast the float64 statistics down first: the op then runs in x's dtype and the ONNX
        # graph keeps float32 inputs/outputs.
        mean = self.mean.to(x.dtype)
        std = self.std().to(x.dtype)
        return torch.clamp((x - mean) / std, -self.clip, self.clip)

    def std(self) -> Tensor:
        """[*shape] float64: what `forward` divides by, sqrt(var + eps)."""
        return torch.sqrt(self.var + self.eps)

    def extra_repr(self) -> str:
        return f"shape={self.shape}, eps={self.eps}, clip={self.clip}"


class PopArt(nn.Module):
    """Preserving Outputs Precisely while Adaptively Rescaling Targets (van Hasselt et al., 2016).

    The critic's last layer `head` predicts normalized values; `denormalize(head(features))`
    is the value in reward units. `update(targets)` moves the target statistics and rescales
    `head` so that every denormalized prediction is unchanged by the move.

    Statistics are debiased exponential moving averages of the first and second moments,
    with Adam-style bias correction: after k updates the effective step is
    beta / (1 - (1 - beta)^k), so the first update adopts the batch statistics exactly.

    The optimizer's state for `head` (e.g. Adam moments) is *not* rescaled, as in the paper,
    which used SGD; the rescale is a change of units for the parameters, and Adam's update
    size does not depend on gradient scale, so the stale moments only matter transiently.
    """

    mu: Tensor
    nu: Tensor
    count: Tensor

    def __init__(self, head: nn.Linear, beta: float, eps: float = 1e-4):
        super().__init__()
        if not 0.0 < beta <= 1.0:
            raise ValueError(f"beta must be in (0, 1], got {beta}")
        # Keep a plain reference, not a submodule: the head belongs to the critic, and
        # registering it here too would duplicate its parameters in optimizers and
        # state_dicts built from both modules.
        object.__setattr__(self, "head", head)
        self.beta = float(beta)
        self.eps = float(eps)
        k = head.out_features
        device = head.weight.device
        self.register_buffer("mu", torch.zeros(k, dtype=torch.float64, device=device))  # [K]
        self.register_buffer("nu", torch.ones(k, dtype=torch.float64, device=device))  # [K]
        self.register_buffer("count", torch.zeros((), dtype=torch.float64, device=device))

    @staticmethod
    def _std(mu: Tensor, nu: Tensor, eps: float) -> Tensor:
        # Floor the std so near-constant targets cannot blow up the rescale.
        return torch.sqrt(torch.clamp(nu - mu * mu, min=eps * eps))

    @property
    def mean(self) -> Tensor:
        """[K] float64 running mean of the targets."""
        return self.mu

    @property
    def std(self) -> Tensor:
        """[K] float64 running standard deviation of the targets, floored at eps."""
        return self._std(self.mu, self.nu, self.eps)

    @torch.no_grad()
    def update(self, targets: Tensor) -> None:
        """Move the statistics toward targets: [B] (K = 1) or [B, K]; rescale head in place."""
        y = targets.detach().to(self.mu.device, torch.float64)
        y = y.reshape(-1, self.head.out_features)  # [B, K]
        self.update_from_moments(y.mean(0), (y * y).mean(0))

    @torch.no_grad()
    def update_from_moments(self, mean: Tensor, mean_sq: Tensor) -> None:
        """`update` from the targets' first and second moments [K] (e.g. merged over
        processes, trot.agents.distributed); rescale head in place."""
        head = self.head
        old_mu, old_std = self.mu.clone(), self.std  # [K]
        # Debiased EMA: with c_k = 1 - (1 - beta)^k the debiased average obeys
        # m_k = m_{k-1} + (beta / c_k) * (x_k - m_{k-1}).
        self.count += 1
        step = self.beta / (1.0 - (1.0 - self.beta) ** self.count)  # scalar tensor
        self.mu.lerp_(mean.to(self.mu), step)
        self.nu.lerp_(mean_sq.to(self.nu), step)
        new_mu, new_std = self.mu, self.std  # [K]

        # Keep denormalize(head(f)) fixed: s'(w'f + b') + m' == s(wf + b) + m for all f.
        w = head.weight.to(torch.float64)  # [K, F]
        b = head.bias.to(torch.float64)  # [K]
        head.weight.copy_(w * (old_std / new_std)[:, None])
        head.bias.copy_((old_std * b + old_mu - new_mu) / new_std)

    def normalize(self, x: Tensor) -> Tensor:
        """x: [..., K] (or [...] when K = 1) in reward units -> normalized, same dtype."""
        return ((x - self.mu) / self.std).to(x.dtype)

    def denormalize(self, x: Tensor) -> Tensor:
        """x: [..., K] (or [...] when K = 1) normalized -> reward units, same dtype."""
        return (x * self.std + self.mu).to(x.dtype)

    def extra_repr(self) -> str:
        return f"out_features={self.head.out_features}, beta={self.beta}, eps={self.eps}"
