"""GAE against a slow reference written from the definition (lambda-returns), not the recursion."""

from __future__ import annotations

import pytest
import torch
from torch import Tensor

from trot.agents.advantages import compute_gae

GAMMA, LAM = 0.97, 0.9


def make_rollout(T: int = 16, N: int = 8, seed: int = 0) -> dict[str, Tensor]:
    """Random float64 rollout with terminations and truncations mid-rollout and at the end.

    next_values[t] == values[t + 1] wherever the episode goes on (as a real rollout gives),
    and is the value of a distinct final observation wherever it ended or the rollout ends.
    """
    g = torch.Generator().manual_seed(seed)
    rewards = torch.randn(T, N, generator=g, dtype=torch.float64)
    values = 3.0 * torch.randn(T, N, generator=g, dtype=torch.float64)
    terminated = torch.rand(T, N, generator=g) < 0.12
    truncated = torch.rand(T, N, generator=g) < 0.12
    # Make sure every case occurs: end-of-rollout termination/truncation/both, mid-rollout
    # termination and truncation, and an env that never ends.
    terminated[:, :5] = False
    truncated[:, :5] = False
    terminated[T - 1, 0] = True
    truncated[T - 1, 1] = True
    terminated[T - 1, 2] = truncated[T - 1, 2] = True
    terminated[4, 3] = True
    truncated[9, 3] = True
    truncated[3, 4] = True
    terminated[10, 4] = True
    done = terminated | truncated
    final_values = 3.0 * torch.randn(T, N, generator=g, dtype=torch.float64) + 5.0
    next_values = torch.cat([values[1:], final_values[-1:]])  # [T, N]
    next_values = torch.where(done, final_values, next_values)
    return dict(rewards=rewards, values=values, next_values=next_values,
                terminated=terminated, truncated=truncated)


def reference_advantages(r: dict[str, Tensor], gamma: float, lam: float) -> Tensor:
    """A_t = G^lambda_t - V(s_t) with the lambda-return written out as a weighted sum of
    n-step returns, truncated at the episode end or the rollout end (explicit loops)."""
    rew, val, nxt = r["rewards"].tolist(), r["values"].tolist(), r["next_values"].tolist()
    term, trunc = r["terminated"].tolist(), r["truncated"].tolist()
    T, N = len(rew), len(rew[0])
    adv = [[0.0] * N for _ in range(T)]
    for n in range(N):
        for t in range(T):
            # K: number of steps from t up to and including the episode's last step here.
            K = 1
            while t + K - 1 < T - 1 and not (term[t + K - 1][n] or trunc[t + K - 1][n]):
                K += 1
            returns = []  # G^(k)_t for k = 1..K
            for k in range(1, K + 1):
                g = sum(gamma**i * rew[t + i][n] for i in range(k))
                last = t + k - 1
                g += 0.0 if term[last][n] else gamma**k * nxt[last][n]
                returns.append(g)
            g_lam = sum((1 - lam) * lam ** (k - 1) * returns[k - 1] for k in range(1, K))
            g_lam += lam ** (K - 1) * returns[K - 1]
            adv[t][n] = g_lam - val[t][n]
    return torch.tensor(adv, dtype=torch.float64)


def td_errors(r: dict[str, Tensor], gamma: float) -> Tensor:
    bootstrap = torch.where(r["terminated"], 0.0, r["next_values"])
    return r["rewards"] + gamma * bootstrap - r["values"]  # [T, N]


def buggy_gae(r: dict[str, Tensor], gamma: float, lam: float, mistake: str) -> Tensor:
    """The recursion with one classic mistake switched on."""
    term, trunc = r["terminated"], r["truncated"]
    values, next_values = r["values"], r["next_values"]
    if mistake == "truncation_as_termination":
        term = term | trunc
    if mistake == "bootstrap_after_reset":
        # values[t + 1] is the first observation of the next episode where step t ended.
        next_values = torch.cat([values[1:], next_values[-1:]])
    bootstrap = torch.where(term, 0.0, next_values)
    deltas = r["rewards"] + gamma * bootstrap - values
    cut = torch.zeros_like(term) if mistake == "leak_across_episodes" else term | trunc
    adv = torch.zeros_like(deltas)
    running = torch.zeros_like(deltas[0])
    for t in reversed(range(deltas.shape[0])):
        running = deltas[t] + gamma * lam * (~cut[t]).to(deltas.dtype) * running
        adv[t] = running
    return adv


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_matches_lambda_return_reference(seed: int) -> None:
    r = make_rollout(seed=seed)
    adv, ret = compute_gae(**r, gamma=GAMMA, lam=LAM)
    ref = reference_advantages(r, GAMMA, LAM)
    torch.testing.assert_close(adv, ref, rtol=0, atol=1e-10)
    torch.testing.assert_close(ret, ref + r["values"], rtol=0, atol=1e-10)
    assert adv.shape == ret.shape == r["rewards"].shape
    assert adv.dtype == torch.float64


def test_reference_agrees_with_discounted_td_sum() -> None:
    # The lambda-return form and the sum_k (gamma lam)^k delta_{t+k} form are the same thing;
    # checking the reference both ways guards the reference itself.
    r = make_rollout(seed=3)
    delta = td_errors(r, GAMMA).tolist()
    done = (r["terminated"] | r["truncated"]).tolist()
    T, N = len(delta), len(delta[0])
    expected = torch.zeros(T, N, dtype=torch.float64)
    for n in range(N):
        for t in range(T):
            total, k = 0.0, 0
            while t + k < T:
                total += (GAMMA * LAM) ** k * delta[t + k][n]
                if done[t + k][n]:
                    break
                k += 1
            expected[t, n] = total
    torch.testing.assert_close(reference_advantages(r, GAMMA, LAM), expected, rtol=0, atol=1e-10)


def test_lambda_zero_is_td_error() -> None:
    r = make_rollout(seed=4)
    adv, _ = compute_gae(**r, gamma=GAMMA, lam=0.0)
    torch.testing.assert_close(adv, td_errors(r, GAMMA), rtol=0, atol=1e-12)


def test_lambda_one_is_bootstrapped_return_minus_value() -> None:
    r = make_rollout(seed=5)
    adv, ret = compute_gae(**r, gamma=GAMMA, lam=1.0)
    rew, nxt = r["rewards"], r["next_values"]
    term, done = r["terminated"], r["terminated"] | r["truncated"]
    T, N = rew.shape
    expected = torch.zeros(T, N, dtype=torch.float64)
    for n in range(N):
        for t in range(T):
            g, k = 0.0, t
            while True:
                g += GAMMA ** (k - t) * rew[k, n].item()
                if done[k, n] or k == T - 1:
                    if not term[k, n]:
                        g += GAMMA ** (k - t + 1) * nxt[k, n].item()
                    break
                k += 1
            expected[t, n] = g
    torch.testing.assert_close(ret, expected, rtol=0, atol=1e-10)
    torch.testing.assert_close(adv, expected - r["values"], rtol=0, atol=1e-10)


@pytest.mark.parametrize(
    "mistake", ["truncation_as_termination", "bootstrap_after_reset", "leak_across_episodes"]
)
def test_classic_mistakes_are_caught(mistake: str) -> None:
    r = make_rollout(seed=6)
    ref = reference_advantages(r, GAMMA, LAM)
    adv, _ = compute_gae(**r, gamma=GAMMA, lam=LAM)
    torch.testing.assert_close(adv, ref, rtol=0, atol=1e-10)
    # The buggy variant must disagree clearly, so the reference test would fail on it.
    assert (buggy_gae(r, GAMMA, LAM, mistake) - ref).abs().max() > 1e-3
    # And the buggy harness without the mistake is the correct recursion (the gap is the bug).
    torch.testing.assert_close(buggy_gae(r, GAMMA, LAM, "none"), ref, rtol=0, atol=1e-10)


def test_uses_next_values_not_shifted_values() -> None:
    # Envs that never end, but next_values deliberately differ from values[t + 1]: the
    # bootstrap must come from next_values everywhere.
    r = make_rollout(seed=7)
    r["terminated"][:] = False
    r["truncated"][:] = False
    r["next_values"] = r["next_values"] + 1.0
    adv, _ = compute_gae(**r, gamma=GAMMA, lam=0.0)
    torch.testing.assert_close(adv, td_errors(r, GAMMA), rtol=0, atol=1e-12)


def test_float32_keeps_dtype() -> None:
    r = {k: (v.float() if v.is_floating_point() else v) for k, v in make_rollout(seed=8).items()}
    adv, ret = compute_gae(**r, gamma=GAMMA, lam=LAM)
    assert adv.dtype == ret.dtype == torch.float32
    ref = reference_advantages({k: v.double() if v.is_floating_point() else v
                                for k, v in r.items()}, GAMMA, LAM)
    torch.testing.assert_close(adv.double(), ref, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name", ["rewards", "values", "next_values", "terminated", "truncated"])
def test_bad_shape_names_argument(name: str) -> None:
    r = make_rollout(T=12, N=6)
    r[name] = r[name][:, :2]
    with pytest.raises(ValueError, match=name):
        compute_gae(**r, gamma=GAMMA, lam=LAM)


def test_not_two_dimensional_raises() -> None:
    r = {k: v.reshape(-1) for k, v in make_rollout(T=12, N=6).items()}
    with pytest.raises(ValueError, match="rewards"):
        compute_gae(**r, gamma=GAMMA, lam=LAM)


def test_non_bool_done_flag_raises() -> None:
    r = make_rollout(T=12, N=6)
    r["truncated"] = r["truncated"].float()
    with pytest.raises(ValueError, match="truncated"):
        compute_gae(**r, gamma=GAMMA, lam=LAM)
