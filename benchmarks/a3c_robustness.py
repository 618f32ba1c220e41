"""A3C's robustness to the learning rate, on a small scale (Mnih et al., 2016, Figure 2's
question): cartpole-balance over learning rates spread across two orders of magnitude,
A3C against A2C with the same total envs, rollout length and wall-clock budget.

    python benchmarks/a3c_robustness.py --out-dir docs/data/a3c_robustness
    python benchmarks/a3c_robustness.py --out-dir docs/data/a3c_robustness --resume
    python benchmarks/a3c_robustness.py --out-dir docs/data/a3c_robustness --table

Each (algo, rate, seed) is one `trot train` of --seconds of training wall-clock (the
workers' start-up and the envs' build excluded, as a run's own clock excludes them):
  a3c  --algo a3c --workers W, --num-envs E per worker (the paper's RMSProp, shared)
  a2c  --algo a2c, W * E envs in one process (trot's A2C: Adam)
both with --agent.rollout-steps T (the paper's t_max = 5). Then `trot eval` plays 32
episodes with the deterministic policy; a pair succeeds at >= 95% of the maximum return
(500). Rows land in OUT_DIR/{a3c,a2c}_seedK.csv as each run ends (one row per rate);
--resume skips the runs already there. The table: per algo, the fraction of (rate, seed)
pairs that succeeded, and each rate's median return over the seeds. benchmarks/plots.py
draws docs/img/a3c_robustness.png from those files.
"""

from __future__ import annotations

import argparse
import csv
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

FIELDS = ("learning_rate", "mean_return", "env_steps", "success")
MAX_RETURN = 500.0


def parse() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out-dir", type=Path, required=True, help="the CSVs' folder")
    p.add_argument("--rates", type=int, default=10, help="learning rates, log-spaced")
    p.add_argument("--low", type=float, default=1e-4, help="lowest learning rate")
    p.add_argument("--high", type=float, default=1e-2, help="highest learning rate")
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    p.add_argument("--seconds", type=float, default=60.0, help="training wall-clock per run")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--envs-per-worker", type=int, default=32)
    p.add_argument("--rollout-steps", type=int, default=5)
    p.add_argument("--resume", action="store_true", help="skip the runs the CSV has")
    p.add_argument("--table", action="store_true", help="only print the CSV's table")
    return p.parse_args()


def rates(a: argparse.Namespace) -> list[float]:
    return [float(f"{r:.3g}") for r in np.geomspace(a.low, a.high, a.rates)]


def train_args(a: argparse.Namespace, algo: str, lr: float, seed: int) -> list[str]:
    envs = a.envs_per_worker if algo == "a3c" else a.envs_per_worker * a.workers
    return (["train", "cartpole-balance", "--algo", algo, "--num-envs", str(envs),
             "--seed", str(seed), "--minutes", str(a.seconds / 60),
             "--max-env-steps", str(10**9), "--agent.learning-rate", str(lr),
             "--agent.rollout-steps", str(a.rollout_steps), "--log-every", "1000000",
             "--no-export"] + (["--workers", str(a.workers)] if algo == "a3c" else []))


def trot(args: list[str]) -> str:
    p = subprocess.run([sys.executable, "-m", "trot", *args], capture_output=True, text=True,
                       check=False)
    if p.returncode != 0:
        raise SystemExit(f"trot {' '.join(args)} failed:\n{p.stderr[-3000:]}")
    return p.stdout


def one(a: argparse.Namespace, algo: str, lr: float, seed: int) -> dict:
    with tempfile.TemporaryDirectory(prefix="trot-a3c-robust-") as d:
        run = Path(d) / "run"
        trot([*train_args(a, algo, lr, seed), "--run-dir", str(run)])
        ev = json.loads(trot(["eval", str(run), "--episodes", "32", "--json"]))
    ret = ev["mean_return"]
    return {"algo": algo, "learning_rate": lr, "seed": seed, "mean_return": f"{ret:.1f}",
            "env_steps": int(ev["env_steps"]), "success": int(ret >= 0.95 * MAX_RETURN)}


def read(out_dir: Path) -> list[dict]:
    """Every run in OUT_DIR, each row with its algo and seed."""
    rows = []
    for path in sorted(out_dir.glob("*_seed*.csv")):
        algo, _, seed = path.stem.partition("_seed")
        with open(path, newline="") as f:
            rows += [r | {"algo": algo, "seed": int(seed)} for r in csv.DictReader(f)]
    return rows


def append(out_dir: Path, row: dict) -> None:
    path = out_dir / f"{row['algo']}_seed{row['seed']}.csv"
    new = not path.is_file()
    out_dir.mkdir(parents=True, exist_ok=True)
    with open(path, "a", newline="") as f:
        w = csv.DictWriter(f, FIELDS, extrasaction="ignore")
        if new:
            w.writeheader()
        w.writerow(row)


def table(rows: list[dict]) -> str:
    """The fraction of successful (rate, seed) pairs per algo, and each rate's median."""
    lines = []
    for algo in ("a3c", "a2c"):
        mine = [r for r in rows if r["algo"] == algo]
        if not mine:
            continue
        ok = sum(int(r["success"]) for r in mine)
        lines.append(f"{algo}: {ok}/{len(mine)} (rate, seed) pairs reached "
                     f"{0.95 * MAX_RETURN:.0f}; median env steps per run "
                     f"{statistics.median(int(r['env_steps']) for r in mine) / 1e6:.2f} M")
        by_rate: dict[float, list[float]] = {}
        for r in mine:
            by_rate.setdefault(float(r["learning_rate"]), []).append(float(r["mean_return"]))
        lines.append("  " + "  ".join(f"{lr:.3g}: {statistics.median(v):.0f}"
                                      for lr, v in sorted(by_rate.items())))
    return "\n".join(lines)


def main() -> None:
    a = parse()
    if not a.table:
        done = {(r["algo"], float(r["learning_rate"]), r["seed"]) for r in read(a.out_dir)}
        if done and not a.resume:
            raise SystemExit(f"{a.out_dir} holds runs: give --resume to continue them")
        for seed in a.seeds:  # the algos interleaved, run by run
            for lr in rates(a):
                for algo in ("a3c", "a2c"):
                    if (algo, lr, seed) in done:
                        continue
                    row = one(a, algo, lr, seed)
                    append(a.out_dir, row)
                    print(f"{algo} lr {lr:.3g} seed {seed}: return {row['mean_return']} "
                          f"after {row['env_steps'] / 1e6:.2f} M env steps", flush=True)
    print(table(read(a.out_dir)))


if __name__ == "__main__":
    main()
