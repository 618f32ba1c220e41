"""RunningMeanStd against numpy; PopArt's output-preserving rescale and its effect on learning."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import Tensor, nn

from trot.agents.normalization import PopArt, RunningMeanStd, merge_moments


# ---------------------------------------------------------------- RunningMeanStd

def test_running_stats_match_numpy_over_concatenation() -> None:
    rng = np.random.default_rng(0)
    rms = RunningMeanStd((2, 3))
    batches = [rng.normal(5.0, 3.0, size=(b, 2, 3)).astype(np.float32) for b in (1, 7, 64, 300)]
    for b in batches:
        rms.update(torch.from_numpy(b))
    data = np.concatenate(batches).astype(np.float64)
    np.testing.assert_allclose(rms.mean.numpy(), data.mean(0), rtol=0, atol=1e-6)
    np.testing.assert_allclose(rms.var.numpy(), data.var(0), rtol=0, atol=1e-6)
    assert rms.count.item() == len(data)
    assert rms.mean.dtype == rms.var.dtype == torch.float64


def test_forward_normalizes_by_the_data_seen_and_keeps_dtype() -> None:
    """Two updates, then forward, against numpy's mean and population variance of all the
    rows seen (not the module's own statistics). The bugs: a merge that weights the batches
    wrongly or uses the sample variance, a forward that divides by var instead of its root
    or forgets eps or the clip, a float64 output from float64 statistics."""
    rng = np.random.default_rng(1)
    a, b = rng.normal(1.0, 0.5, size=(100, 4)), rng.normal(3.0, 1.5, size=(60, 4))
    rms = RunningMeanStd(4, eps=1e-2, clip=2.0)
    rms.update(torch.from_numpy(a))
    rms.update(torch.from_numpy(b))
    seen = np.concatenate([a, b])
    x = rng.normal(1.5, 3.0, size=(50, 4)).astype(np.float32)  # wide enough that some clip
    expected = np.clip((x - seen.mean(0)) / np.sqrt(seen.var(0) + 1e-2), -2.0, 2.0)
    out = rms(torch.from_numpy(x))
    assert out.dtype == torch.float32
    assert (np.abs(expected) == 2.0).any() and (np.abs(expected) < 2.0).any()
    np.testing.assert_allclose(out.numpy(), expected, rtol=1e-5, atol=1e-5)


def test_fresh_normalizer_is_identity_inside_clip() -> None:
    x = torch.linspace(-5, 5, 11)[:, None]
    torch.testing.assert_close(RunningMeanStd(1)(x), x)


def test_state_dict_round_trip() -> None:
    rms = RunningMeanStd(3)
    rms.update(torch.randn(32, 3) * 4 + 1)
    state = rms.state_dict()
    assert set(state) == {"mean", "var", "count"}
    other = RunningMeanStd(3)
    other.load_state_dict(state)
    x = torch.randn(8, 3)
    torch.testing.assert_close(other(x), rms(x), rtol=0, atol=0)
    assert torch.equal(other.count, rms.count)


def test_update_rejects_wrong_shape() -> None:
    with pytest.raises(ValueError):
        RunningMeanStd(3).update(torch.randn(10, 4))


def _batch(rng: np.random.Generator, n: int = 1024) -> np.ndarray:
    """[n, 6] observations with varied means and scales, as a policy sees."""
    return rng.normal([0.0, 3.0, -1.0, 0.0, 20.0, 0.5], [1.0, 0.1, 2.0, 5.0, 3.0, 0.01],
                      size=(n, 6))


@pytest.mark.parametrize("bad", [1e9, -1e5, float("nan")])
@pytest.mark.parametrize("fresh", [True, False])
def test_one_diverging_env_leaves_the_statistics_alone(bad: float, fresh: bool) -> None:
    """One env of 1e9 (or 1e5, or NaN) among 1,024: the mean stays within 0.01 std and
    the std within 1% of numpy's statistics without it. The bug: every row folded in, so
    one near-diverged env inflated the variance for the rest of the run."""
    rng = np.random.default_rng(3)
    rms = RunningMeanStd(6)
    clean = [_batch(rng) for _ in range(1 if fresh else 2)]
    if not fresh:
        rms.update(torch.from_numpy(clean[0]))
    poisoned = clean[-1].copy()
    poisoned[17] = bad  # every dimension of one env
    rms.update(torch.from_numpy(poisoned))
    data = np.concatenate(clean)
    std = data.std(0)
    assert np.all(np.abs(rms.mean.numpy() - data.mean(0)) <= 0.01 * std)
    assert np.all(np.abs(np.sqrt(rms.var.numpy()) / std - 1.0) <= 0.01)
    assert rms.count.item() == len(data) - 1


def test_a_moving_distribution_is_followed_not_locked_out() -> None:
    """Every row 1000 std away from the running mean is a shift (a command range that
    widened, a robot that learned to run), not an outlier: the statistics take it all. The
    bug: an outlier test against the running statistics alone, which then refuses every
    later batch."""
    rng = np.random.default_rng(4)
    first, moved = _batch(rng), _batch(rng) + 1000.0 * np.array([1.0, 0.1, 2.0, 5.0, 3.0, 0.01])
    rms = RunningMeanStd(6)
    rms.update(torch.from_numpy(first))
    rms.update(torch.from_numpy(moved))
    data = np.concatenate([first, moved])
    np.testing.assert_allclose(rms.mean.numpy(), data.mean(0), rtol=1e-9)
    np.testing.assert_allclose(rms.var.numpy(), data.var(0), rtol=1e-9)


def test_outliers_in_many_rows_of_a_dimension_are_kept() -> None:
    """2% of rows far out in one dimension: a heavy tail of that dimension, kept (the rule
    leaves out rare rows only), so the statistics are numpy's over the whole batch."""
    rng = np.random.default_rng(5)
    x = _batch(rng)
    x[::50, 3] = 1e4  # 21 of 1,024 rows
    rms = RunningMeanStd(6)
    rms.update(torch.from_numpy(x))
    np.testing.assert_allclose(rms.mean.numpy(), x.mean(0), rtol=1e-9)
    np.testing.assert_allclose(rms.var.numpy(), x.var(0), rtol=1e-9)
    assert rms.count.item() == len(x)


def test_a_batch_of_outliers_only_changes_nothing() -> None:
    """No row kept (one row, non-finite): the statistics stay finite and unchanged."""
    rms = RunningMeanStd(2)
    rms.update(torch.tensor([[1.0, 2.0], [3.0, 5.0]]))
    before = {k: v.clone() for k, v in rms.state_dict().items()}
    rms.update(torch.tensor([[float("inf"), 0.0]]))
    for k, v in rms.state_dict().items():
        assert torch.equal(v, before[k]), k


def test_merge_moments_associative_and_exact() -> None:
    rng = np.random.default_rng(2)
    parts = [rng.normal(rng.uniform(-10, 10), rng.uniform(0.1, 5), size=(n, 5)) for n in (3, 40, 17)]
    moments = [(torch.from_numpy(p.mean(0)), torch.from_numpy(p.var(0)), float(len(p)))
               for p in parts]
    a, b, c = moments
    left = merge_moments(*merge_moments(*a, *b), *c)
    right = merge_moments(*a, *merge_moments(*b, *c))
    data = np.concatenate(parts)
    for merged in (left, right):
        np.testing.assert_allclose(merged[0].numpy(), data.mean(0), rtol=0, atol=1e-10)
        np.testing.assert_allclose(merged[1].numpy(), data.var(0), rtol=0, atol=1e-10)
        assert merged[2] == len(data)
    # An empty side leaves the other unchanged.
    empty = (torch.zeros(5, dtype=torch.float64), torch.ones(5, dtype=torch.float64), 0.0)
    merged = merge_moments(*empty, *a)
    torch.testing.assert_close(merged[0], a[0], rtol=0, atol=0)
    torch.testing.assert_close(merged[1], a[1], rtol=0, atol=0)


# ---------------------------------------------------------------- PopArt

def _assert_preserved(after: Tensor, before: Tensor) -> None:
    scale = before.abs().max().item()
    torch.testing.assert_close(after, before, rtol=1e-4, atol=1e-4 * scale)


def test_popart_update_preserves_outputs() -> None:
    torch.manual_seed(0)
    head = nn.Linear(16, 1)
    popart = PopArt(head, beta=0.02)
    features = torch.randn(512, 16)
    with torch.no_grad():
        before = popart.denormalize(head(features))
    targets = torch.randn(1024) * 10.0 + 50.0  # float32
    popart.update(targets)
    # Debiasing: the first update adopts the batch statistics exactly.
    t64 = targets.double()
    torch.testing.assert_close(popart.mean, t64.mean().reshape(1))
    torch.testing.assert_close(popart.std, t64.std(unbiased=False).reshape(1))
    with torch.no_grad():
        after = popart.denormalize(head(features))
    assert after.dtype == torch.float32
    _assert_preserved(after, before)

    # Successive updates with moving statistics keep preserving the outputs.
    for mean, std in [(80.0, 20.0), (-30.0, 2.0), (500.0, 100.0), (0.0, 0.5)]:
        old_mean = popart.mean.clone()
        popart.update(torch.randn(256) * std + mean)
        assert not torch.equal(popart.mean, old_mean)
        with torch.no_grad():
            _assert_preserved(popart.denormalize(head(features)), before)


def test_popart_multiple_outputs_and_normalize_inverse() -> None:
    torch.manual_seed(1)
    head = nn.Linear(8, 3)
    popart = PopArt(head, beta=0.1)
    features = torch.randn(64, 8)
    with torch.no_grad():
        before = popart.denormalize(head(features))
        popart.update(torch.randn(200, 3) * torch.tensor([1.0, 10.0, 100.0]) + 7.0)
        _assert_preserved(popart.denormalize(head(features)), before)
    x = torch.randn(10, 3)
    torch.testing.assert_close(popart.denormalize(popart.normalize(x)), x)


def test_popart_std_floor_on_constant_targets() -> None:
    head = nn.Linear(4, 1)
    popart = PopArt(head, beta=0.5, eps=1e-4)
    popart.update(torch.full((32,), 3.0))
    assert popart.std.item() == pytest.approx(1e-4)
    assert torch.isfinite(head.weight).all() and torch.isfinite(head.bias).all()


def _target(x: Tensor) -> Tensor:
    """Smooth target of scale ~100 on an offset of ~360: [B, 8] -> [B]."""
    return 100.0 * (0.25 * x[:, :4].sum(1) + torch.cos(x[:, 4])) + 300.0


def _train_critic(popart: bool, steps: int = 400, seed: int = 0) -> float:
    """Train a small critic with Adam(1e-3); return held-out MSE / var(y) in reward units."""
    torch.manual_seed(seed)
    torso = nn.Sequential(nn.Linear(8, 64), nn.ELU(), nn.Linear(64, 64), nn.ELU())
    head = nn.Linear(64, 1)
    norm = PopArt(head, beta=0.02) if popart else None
    opt = torch.optim.Adam([*torso.parameters(), *head.parameters()], lr=1e-3)
    gen = torch.Generator().manual_seed(seed + 1)
    for _ in range(steps):
        x = torch.randn(256, 8, generator=gen)  # [B, 8]
        y = _target(x)  # [B]
        if norm is not None:
            norm.update(y)  # before the forward pass, so the loss sees the rescaled head
            y = norm.normalize(y)
        loss = (head(torso(x)).squeeze(-1) - y).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    x_test = torch.randn(4096, 8, generator=torch.Generator().manual_seed(123))
    y_test = _target(x_test)
    with torch.no_grad():
        pred = head(torso(x_test)).squeeze(-1)
        if norm is not None:
            pred = norm.denormalize(pred)
    return ((pred - y_test).pow(2).mean() / y_test.var()).item()


@pytest.fixture
def one_thread():
    # Tiny matmuls: intra-op threads only add contention on a loaded CI machine.
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def test_popart_makes_large_scale_regression_learnable(one_thread: None) -> None:
    # Measured (seeds 0-9): PopArt 0.02-0.04, raw targets 0.68-0.81.
    with_popart = _train_critic(popart=True)
    without = _train_critic(popart=False)
    assert with_popart < 0.1, with_popart
    assert without > 0.3, without
