"""V-trace's truncation level rho_bar (the seed chapter's figure and Exercise 19.6): on a
random MDP with 6 states, the fixed point of the expected V-trace operator is the value of
pi_rho_bar ∝ min(rho_bar mu, pi): the behaviour's value V^mu below the smallest ratio
pi/mu, the target's V^pi above the largest, and in between it can exceed both; and the
variance of the V-trace targets grows with rho_bar.

    python benchmarks/vtrace_rho.py --out-dir docs/data/vtrace_rho
    python benchmarks/vtrace_rho.py --out-dir docs/data/vtrace_rho --resume
    python benchmarks/vtrace_rho.py --out-dir docs/data/vtrace_rho --table

The MDP is the chapter's own (numpy default_rng(1): P, r, mu, then pi = softmax(1.5 z),
6 states, 3 actions, gamma 0.9). Per sampling seed K, `--trajectories` windows of
`--steps` steps start in each state and follow mu; the same windows serve every rho_bar
(they do not depend on it). The traces are truncated at min(--c-bar, rho_bar), the
chapter's choice, so that c_bar <= rho_bar.

Per rho_bar, log-spaced from --low to --high:
  fixed_s{x}  the fixed point of trot's V-trace operator (agents/vtrace.py's `vtrace`) in
              expectation over the windows: every step's target vs_t regresses V(x_t), so
              the operator is V -> the mean target per state. It is affine in V, so trot's
              vtrace evaluated at V = 0 and at V = e_1..e_6 gives its matrix and offset, and
              a linear solve gives the point that repeated application converges to (at
              rho_bar = 0.02 the operator contracts by about 0.998 a sweep: iterating it
              would take thousands of sweeps). `residual` is max |mean vtrace target at that
              V - V|, trot's vtrace applied once more: ~1e-12 if the point is fixed;
              `modulus` the operator's contraction factor in the max norm.
  exact_s{x}  V^{pi_rho_bar}, by a linear solve of the Bellman equation (no V-trace code)
  v_mu_s{x}, v_pi_s{x}  V^mu and V^pi, likewise
  target_var  the variance of trot's --steps-step target at the start state, with V the
              exact V^{pi_rho_bar}, over the windows from that state; mean over the states
Rows land in OUT_DIR/seed{K}.csv as each rho_bar ends; `--resume` skips those there. The
table: per rho_bar, the median over seeds of max_x |fixed - exact| and of target_var, and
the claim's checks. benchmarks/plots.py draws docs/img/vtrace_rho.png from those files.
"""

from __future__ import annotations

import itertools
import statistics
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from trot.agents.train_config import TrainConfig
from trot.agents.vtrace import vtrace
from trot.benchmark import Results, main

GAMMA = 0.9


@dataclass(frozen=True)
class Settings:
    out_dir: str
    """the CSVs' folder"""
    points: int = 15
    """rho_bar values, log-spaced from --low to --high"""
    low: float = 0.02
    """smallest rho_bar (below the smallest ratio pi/mu, 0.043)"""
    high: float = 50.0
    """largest rho_bar (above the largest ratio pi/mu, 22.5)"""
    seeds: tuple[int, ...] = (0, 1, 2)
    """the sampling seeds, one CSV each (the MDP stays the same)"""
    trajectories: int = 4000
    """windows sampled from mu per start state"""
    steps: int = 16
    """steps per window (T): each window's first target is a T-step target"""
    c_bar: float = 1.0
    """trace truncation, applied as min(c_bar, rho_bar)"""
    resume: bool = False
    """skip the rho_bar values the CSVs have"""
    table: bool = False
    """only print the CSVs' table"""


@dataclass(frozen=True)
class MDP:
    P: np.ndarray  # [S, A, S] transition probabilities
    R: np.ndarray  # [S, A] expected reward
    mu: np.ndarray  # [S, A] behaviour policy
    pi: np.ndarray  # [S, A] target policy


def chapter_mdp() -> MDP:
    """The chapter's random MDP, drawn in the chapter's order."""
    rng = np.random.default_rng(1)
    S, A = 6, 3
    P = rng.dirichlet(np.ones(S), size=(S, A))
    R = rng.normal(size=(S, A))
    mu = rng.dirichlet(np.ones(A), size=S)
    logits = rng.normal(size=(S, A)) * 1.5
    pi = np.exp(logits) / np.exp(logits).sum(1, keepdims=True)
    return MDP(P, R, mu, pi)


def value(m: MDP, policy: np.ndarray) -> np.ndarray:
    """Exact V^policy: (I - gamma P_policy) V = r_policy."""
    p_pol = np.einsum("xa,xay->xy", policy, m.P)  # [S, S]
    return np.linalg.solve(np.eye(len(m.R)) - GAMMA * p_pol, (policy * m.R).sum(1))


def pi_rho(m: MDP, rho_bar: float) -> np.ndarray:
    """pi_rho_bar ∝ min(rho_bar mu, pi), per state."""
    pol = np.minimum(rho_bar * m.mu, m.pi)  # [S, A]
    return pol / pol.sum(1, keepdims=True)


def rho_bars(s: Settings) -> list[float]:
    return [float(f"{r:.3g}") for r in np.geomspace(s.low, s.high, s.points)]


@dataclass(frozen=True)
class Windows:
    states: torch.Tensor  # [T + 1, N] long: x_0 .. x_T
    rewards: torch.Tensor  # [T, N]
    log_rhos: torch.Tensor  # [T, N] log pi - log mu of the action taken


def sample(m: MDP, per_state: int, steps: int, seed: int) -> Windows:
    """per_state windows from each state (column n starts in state n // per_state),
    actions from mu and next states from P by inverse CDF; rewards are the expected
    r(x, a), the noise the chapter's MDP has not."""
    rng = np.random.default_rng(seed)
    S, A = m.R.shape
    cum_mu, cum_p = m.mu.cumsum(1), m.P.cumsum(2)  # [S, A], [S, A, S]
    x = np.repeat(np.arange(S), per_state)  # [N]
    xs, acts = [x], []
    for _ in range(steps):
        u = rng.random((2, x.size, 1))
        a = np.minimum((u[0] > cum_mu[x]).sum(1), A - 1)  # min: a CDF's last entry < 1
        x = np.minimum((u[1] > cum_p[x, a]).sum(1), S - 1)
        xs.append(x)
        acts.append(a)
    xs, acts = np.stack(xs), np.stack(acts)  # [T + 1, N], [T, N]
    log_ratio = np.log(m.pi) - np.log(m.mu)  # [S, A]
    return Windows(torch.from_numpy(xs), torch.from_numpy(m.R[xs[:-1], acts]),
                   torch.from_numpy(log_ratio[xs[:-1], acts]))


def targets(w: Windows, V: torch.Tensor, rho_bar: float, c_bar: float) -> torch.Tensor:
    """trot's V-trace targets of every window under each value table: V [K, S] ->
    vs [K, T, N]. The windows are cut from a continuing chain, so nothing terminates and the
    correction stops at the window's end (vtrace's convention: bootstrap from V(x_T))."""
    K, (T, N) = V.shape[0], w.rewards.shape
    values = V[:, w.states[:-1]].permute(1, 0, 2).reshape(T, K * N)  # [T, K N]
    next_values = V[:, w.states[1:]].permute(1, 0, 2).reshape(T, K * N)  # [T, K N]
    no = torch.zeros(T, K * N, dtype=torch.bool)
    vs, _ = vtrace(w.rewards.repeat(1, K), values, next_values, no, no,
                   w.log_rhos.repeat(1, K), GAMMA, 1.0, rho_bar, min(c_bar, rho_bar))
    return vs.reshape(T, K, N).permute(1, 0, 2)  # [K, T, N]


def mean_target(w: Windows, V: torch.Tensor, rho_bar: float, c_bar: float) -> torch.Tensor:
    """The sampled expected operator: per state x, the mean of vs_t over the steps with
    x_t = x. V [K, S] -> [K, S]."""
    vs = targets(w, V, rho_bar, c_bar)  # [K, T, N]
    x = w.states[:-1].flatten()  # [T N]
    S = V.shape[1]
    total = torch.zeros(V.shape[0], S, dtype=vs.dtype).index_add_(1, x, vs.flatten(1))
    return total / torch.bincount(x, minlength=S).clamp(min=1)  # [K, S]


def fixed_point(w: Windows, S: int, rho_bar: float,
                c_bar: float) -> tuple[np.ndarray, float, float]:
    """The fixed point of `mean_target` (affine in V, read off trot's vtrace at V = 0 and
    at the unit vectors), the residual of one more application of it there, and its
    contraction modulus in the max norm."""
    probes = torch.cat([torch.zeros(1, S), torch.eye(S)]).double()  # [S + 1, S]
    out = mean_target(w, probes, rho_bar, c_bar).numpy()  # [S + 1, S]
    offset, matrix = out[0], (out[1:] - out[0]).T  # R V = matrix V + offset
    V = np.linalg.solve(np.eye(S) - matrix, offset)  # [S]
    again = mean_target(w, torch.from_numpy(V)[None], rho_bar, c_bar)[0].numpy()
    return V, float(np.abs(again - V).max()), float(np.abs(matrix).sum(1).max())


def start_variance(w: Windows, V: np.ndarray, rho_bar: float, c_bar: float) -> float:
    """The variance of trot's T-step target at the window's start state, per start state,
    averaged over the states."""
    vs0 = targets(w, torch.from_numpy(V)[None], rho_bar, c_bar)[0, 0]  # [N]
    x0 = w.states[0]  # [N]
    return float(np.mean([vs0[x0 == x].var().item() for x in range(len(V))]))


def one(m: MDP, w: Windows, rho_bar: float, c_bar: float) -> dict:
    """One rho_bar's row: trot's fixed point, the exact values, the target variance."""
    S = len(m.R)
    fixed, residual, modulus = fixed_point(w, S, rho_bar, c_bar)
    exact = value(m, pi_rho(m, rho_bar))
    v_mu, v_pi = value(m, m.mu), value(m, m.pi)
    row: dict = {"rho_bar": rho_bar}
    for name, v in (("fixed", fixed), ("exact", exact), ("v_mu", v_mu), ("v_pi", v_pi)):
        row |= {f"{name}_s{x}": round(float(v[x]), 6) for x in range(S)}
    return row | {"target_var": round(start_variance(w, exact, rho_bar, c_bar), 6),
                  "residual": float(f"{residual:.3g}"), "modulus": round(modulus, 4)}


def columns(row: dict, name: str) -> np.ndarray:
    return np.array([v for k, v in row.items() if k.startswith(f"{name}_s")])  # [S]


def results(out_dir: Path) -> list[Results]:
    return [Results(p, resume=True) for p in sorted(out_dir.glob("seed*.csv"))]


def checks(m: MDP, by_rho: dict[float, list[dict]]) -> list[str]:
    """The claim's checks, on the seeds' median fixed point."""
    ratio = m.pi / m.mu
    lo, hi = ratio.min(), ratio.max()
    v_mu, v_pi = value(m, m.mu), value(m, m.pi)
    both = np.maximum(v_mu, v_pi)  # [S]
    med = {rb: np.median([columns(r, "fixed") for r in rows], 0) for rb, rows in by_rho.items()}
    below = [rb for rb in med if rb < lo]
    above = [rb for rb in med if rb > hi]
    lines = [f"ratios pi/mu: smallest {lo:.4f}, largest {hi:.2f}"]
    if below:
        lines.append(f"rho_bar < {lo:.4f} ({', '.join(f'{rb:g}' for rb in below)}): max |fixed"
                     f" - V^mu| = {max(np.abs(med[rb] - v_mu).max() for rb in below):.4f}")
    if above:
        lines.append(f"rho_bar > {hi:.2f} ({', '.join(f'{rb:g}' for rb in above)}): max |fixed"
                     f" - V^pi| = {max(np.abs(med[rb] - v_pi).max() for rb in above):.4f}")
    pairs = [(rb, x) for rb in med if lo <= rb <= hi for x in range(len(both))]
    over = {(rb, x): med[rb][x] - both[x] for rb, x in pairs if med[rb][x] > both[x]}
    exact = {(rb, x) for rb, x in pairs if value(m, pi_rho(m, rb))[x] > both[x]}
    lines.append(f"in between: V^pi_rho_bar exceeds both V^mu and V^pi at {len(exact)} "
                 f"(rho_bar, state) pairs, in states {sorted({x for _, x in exact})}; trot's "
                 f"fixed point at {len(over)} ({len(exact & over.keys())} of the same), "
                 "largest excess " + (f"{max(over.values()):.3f}" if over else "none"))
    var = [statistics.median(r["target_var"] for r in by_rho[rb]) for rb in sorted(by_rho)]
    rises = all(b >= a for a, b in itertools.pairwise(var))
    lines.append(f"target variance {'never falls' if rises else 'falls somewhere'} as rho_bar "
                 f"grows: {var[0]:.2g} at the smallest rho_bar, {var[-1]:.3g} at the largest")
    return lines


def table(m: MDP, found: list[Results]) -> str:
    by_rho: dict[float, list[dict]] = {}
    for res in found:
        for r in res.rows:
            by_rho.setdefault(float(r["rho_bar"]), []).append(r)
    if not by_rho:
        return "no rows"
    lines = [f"{len(found)} seeds; median over seeds",
             "   rho_bar   max|fixed - exact|   target_var   residual   modulus"]
    for rb, rows in sorted(by_rho.items()):
        err = statistics.median(np.abs(columns(r, "fixed") - columns(r, "exact")).max()
                                for r in rows)
        var = statistics.median(r["target_var"] for r in rows)
        res = max(r["residual"] for r in rows)
        mod = statistics.median(r["modulus"] for r in rows)
        lines.append(f"   {rb:7.3g}   {err:18.4f}   {var:10.4g}   {res:8.1e}   {mod:7.4f}")
    return "\n".join(lines + checks(m, by_rho))


def run(s: Settings, cfg: TrainConfig | None = None) -> str:
    out_dir, m = Path(s.out_dir), chapter_mdp()
    if not s.table:
        if any(r.rows for r in results(out_dir)) and not s.resume:
            raise SystemExit(f"{out_dir} holds rows: give --resume to continue them")
        out_dir.mkdir(parents=True, exist_ok=True)
        for seed in s.seeds:
            res = Results(out_dir / f"seed{seed}.csv", resume=True)
            todo = [rb for rb in rho_bars(s) if not res.find(rho_bar=rb)]
            w = sample(m, s.trajectories, s.steps, seed) if todo else None
            for rb in todo:
                res.add(one(m, w, rb, s.c_bar))
                print(f"seed {seed} rho_bar {rb:g}: target variance "
                      f"{res.rows[-1]['target_var']:.4g}", flush=True)
    text = table(m, results(out_dir))
    print(text)
    return text


if __name__ == "__main__":
    main(Settings, run)
