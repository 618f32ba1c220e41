"""benchmarks/vtrace_rho.py: a small run of the rho_bar sweep (one seed, four rho_bar, 1,500
windows per state) writes its columns, and trot's V-trace fixed point is the exact value of
pi_rho_bar below, between and above the ratios pi/mu; a vtrace that truncates the traces
instead of rho fails that check; plots.py draws the committed CSVs. About 15 s on 2 cores."""

import csv
import itertools
import math
from pathlib import Path

import numpy as np
import pytest
from scripts import script

from trot.benchmark import main

ROOT = Path(__file__).resolve().parents[1]


vr = script("vtrace_rho")
plots = script("plots")

TOL = 0.3  # sampling error of 1,500 windows per state: ~0.1; the bugs below: >= 0.7
SMALL = ["--seeds", "0", "--trajectories", "1500", "--points", "4"]  # 0.02, 0.271, 3.68, 50


def _rows(path: Path) -> list[dict[str, float]]:
    with open(path) as f:
        return [{k: float(v) for k, v in r.items()} for r in csv.DictReader(f)]


def _state(row: dict, name: str) -> np.ndarray:
    return np.array([row[f"{name}_s{x}"] for x in range(6)])  # [S]


@pytest.fixture(scope="module")
def small(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("vtrace_rho")
    main(vr.Settings, vr.run, argv=["--out-dir", str(out), *SMALL])
    return out


def test_the_csv_has_every_column_and_resume_keeps_its_rows(small, capsys):
    """One row per rho_bar with trot's fixed point, the exact values and the variance per
    state; a rerun without --resume refuses, and with it computes nothing new. The bugs: a
    state's column missing or misnamed (the plot reads fixed_s{x}), a resumed sweep
    recomputing or duplicating its rows."""
    rows = _rows(small / "seed0.csv")
    want = ["rho_bar"] + [f"{n}_s{x}" for n in ("fixed", "exact", "v_mu", "v_pi")
                          for x in range(6)] + ["target_var", "residual", "modulus"]
    assert list(rows[0]) == want
    assert [r["rho_bar"] for r in rows] == [0.02, 0.271, 3.68, 50.0]
    with pytest.raises(SystemExit, match="--resume"):
        main(vr.Settings, vr.run, argv=["--out-dir", str(small), *SMALL])
    capsys.readouterr()
    main(vr.Settings, vr.run, argv=["--out-dir", str(small), *SMALL, "--resume"])
    assert "seed 0 rho_bar" not in capsys.readouterr().out  # no row recomputed
    assert _rows(small / "seed0.csv") == rows


def test_fixed_point_is_the_value_of_pi_rho_bar_below_between_and_above_the_ratios(small):
    """Below the smallest ratio pi/mu (0.043) trot's fixed point is V^mu, above the largest
    (22.5) V^pi, and at 3.68 the value of pi_3.68, which is far from both; trot's vtrace
    applied once more at that point returns it. The bugs: rho_bar truncating c instead of
    rho (the fixed point V^pi for every rho_bar), rho truncated at c_bar (the value of
    pi_1 at 3.68), the fixed point V^mu for every rho_bar (at 3.68 and 50), a target that
    is not affine in V or a wrong solve (the residual)."""
    m = vr.chapter_mdp()
    ratio = m.pi / m.mu
    rows = {r["rho_bar"]: r for r in _rows(small / "seed0.csv")}
    low, mid, high = rows[0.02], rows[3.68], rows[50.0]
    assert 0.02 < ratio.min() and 50.0 > ratio.max() and ratio.min() < 3.68 < ratio.max()
    np.testing.assert_allclose(_state(low, "exact"), _state(low, "v_mu"), atol=1e-5)
    np.testing.assert_allclose(_state(high, "exact"), _state(high, "v_pi"), atol=1e-5)
    for row in (low, mid, high):
        err = np.abs(_state(row, "fixed") - _state(row, "exact")).max()
        assert err < TOL, (row["rho_bar"], err)
        assert row["residual"] < 1e-9
    for other in ("v_mu", "v_pi"):  # the middle check is not V^mu's or V^pi's in disguise
        assert np.abs(_state(mid, "exact") - _state(mid, other)).max() > 2 * TOL
    assert np.abs(_state(mid, "exact") - vr.value(m, vr.pi_rho(m, 1.0))).max() > 2 * TOL


def test_target_variance_grows_with_rho_bar_until_the_largest_ratio(small):
    """The variance of trot's 16-step target rises with rho_bar and is near 0 when rho_bar
    (and so every rho and c) is 0.02. The bugs: the variance computed at one rho_bar (say
    trot's default 1.0) for every row (flat), TD errors left unweighted by rho (about the
    one-step TD variance, ~1, at rho_bar = 0.02)."""
    var = [r["target_var"] for r in _rows(small / "seed0.csv")]
    assert var[0] < 1e-2 and all(b > 2 * a for a, b in itertools.pairwise(var))


def test_truncating_the_traces_instead_of_rho_fails_the_check(monkeypatch):
    """The check has teeth: with a vtrace whose rho_bar truncates the traces c and leaves
    rho untruncated, the fixed point at rho_bar = 0.02 is V^pi instead of V^mu, off by far
    more than TOL, on the same windows where trot's vtrace is within it."""
    m = vr.chapter_mdp()
    w = vr.sample(m, 1500, 16, seed=0)
    v_mu, v_pi = vr.value(m, m.mu), vr.value(m, m.pi)
    right, *_ = vr.fixed_point(w, 6, 0.02, 1.0)
    real = vr.vtrace

    def c_truncated(*args):
        *head, rho_bar, _ = args
        return real(*head, math.inf, rho_bar)

    monkeypatch.setattr(vr, "vtrace", c_truncated)
    wrong, *_ = vr.fixed_point(w, 6, 0.02, 1.0)
    assert np.abs(right - v_mu).max() < TOL
    assert np.abs(wrong - v_mu).max() > 3 * TOL
    assert np.abs(wrong - v_pi).max() < 3 * TOL  # the bug's own fixed point


def test_the_plot_draws_trots_fixed_point_from_the_committed_seeds():
    """plots.py's vtrace_rho: one curve per state, its median over the 3 committed seeds at
    each rho_bar is the median of their fixed_s{x}, its band their range. The bugs: a curve
    reading the panel's column instead of its own state's, a seed's CSV left out."""
    plot = next(p for p in plots.PLOTS if p.name == "vtrace_rho")
    seeds = [_rows(ROOT / f"docs/data/vtrace_rho/seed{k}.csv") for k in range(3)]
    rows = plots.series(plot)
    for x in range(6):
        got = [r for r in rows if r["curve"] == f"state {x}"]
        assert [r["x"] for r in got] == [r["rho_bar"] for r in seeds[0]]
        ys = np.array([[r[f"fixed_s{x}"] for r in s] for s in seeds])  # [seeds, rho_bars]
        np.testing.assert_allclose([r["median"] for r in got], np.median(ys, 0), atol=1e-12)
        np.testing.assert_allclose([r["low"] for r in got], ys.min(0), atol=1e-12)
        assert {r["runs"] for r in got} == {3}
