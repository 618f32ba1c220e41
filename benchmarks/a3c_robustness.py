"""A3C's robustness to the learning rate, on a small scale (Mnih et al., 2016, Figure 2's
question): cartpole-balance over learning rates spread across two orders of magnitude,
A3C against A2C with the same total envs, rollout length and wall-clock budget.

    python benchmarks/a3c_robustness.py --out-dir docs/data/a3c_robustness
    python benchmarks/a3c_robustness.py --out-dir docs/data/a3c_robustness --resume
    python benchmarks/a3c_robustness.py --out-dir docs/data/a3c_robustness --table

The flags before `--` are this benchmark's; after it come `trot train`'s own (default
`cartpole-balance --num-envs 32 --agent.rollout-steps 5`): the task, `--num-envs` per
A3C worker, `--agent.FIELD V` (the paper's t_max = 5 as the rollout length),
`--env.FIELD V`. Each (algo, rate, seed) is one `trot train` of that run for `--seconds`
of training wall-clock (the workers' start-up and the envs' build excluded, as a run's
own clock excludes them), with the rate as `--agent.learning-rate` and the seed as
`--seed`:
  a3c  --algo a3c --workers W, the --num-envs per worker (the paper's RMSProp, shared)
  a2c  --algo a2c, W times the --num-envs in one process (trot's A2C: Adam)

Then `trot eval` plays 32 episodes with the deterministic policy; a pair succeeds at >=
95% of the maximum return (500). Rows land in OUT_DIR/{a3c,a2c}_seedK.csv as each run ends
(one row per rate); `--resume` skips the runs already there. The table: per algo, the
fraction of (rate, seed) pairs that succeeded, and each rate's median return over the
seeds. benchmarks/plots.py draws docs/img/a3c_robustness.png from those files.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from trot.agents.train_config import TrainConfig
from trot.benchmark import Results, given_train_args, main

TRAIN = ("cartpole-balance", "--num-envs", "32", "--agent.rollout-steps", "5")
MAX_RETURN = 500.0


@dataclass(frozen=True)
class Settings:
    out_dir: str
    """the CSVs' folder"""
    rates: int = 10
    """learning rates, log-spaced from --low to --high"""
    low: float = 1e-4
    """lowest learning rate"""
    high: float = 1e-2
    """highest learning rate"""
    seeds: tuple[int, ...] = (0, 1)
    """the seeds each (algo, rate) runs"""
    seconds: float = 60.0
    """training wall-clock per run"""
    workers: int = 2
    """A3C's worker processes (A2C: as many times the envs in one process)"""
    resume: bool = False
    """skip the runs the CSVs have"""
    table: bool = False
    """only print the CSVs' table"""


def rates(s: Settings) -> list[float]:
    return [float(f"{r:.3g}") for r in np.geomspace(s.low, s.high, s.rates)]


def train_args(s: Settings, cfg: TrainConfig, algo: str, lr: float, seed: int) -> list[str]:
    """The run's `trot train` command line: the given train args and this run's flags."""
    mode = ["--algo", "a3c", "--workers", str(s.workers)] if algo == "a3c" else [
        "--algo", "a2c", "--num-envs", str(cfg.num_envs * s.workers)]
    return ["train", *given_train_args(default=TRAIN), "--seed", str(seed), "--minutes",
            str(s.seconds / 60), "--max-env-steps", str(10**9), "--agent.learning-rate",
            str(lr), "--log-every", "1000000", "--no-export", *mode]


def trot(args: list[str]) -> str:
    p = subprocess.run([sys.executable, "-m", "trot", *args], capture_output=True, text=True,
                       check=False)
    if p.returncode != 0:
        raise SystemExit(f"trot {' '.join(args)} failed:\n{p.stderr[-3000:]}")
    return p.stdout


def one(s: Settings, cfg: TrainConfig, algo: str, lr: float, seed: int) -> dict:
    """One run trained and evaluated: its row."""
    with tempfile.TemporaryDirectory(prefix="trot-a3c-robust-") as d:
        run = Path(d) / "run"
        trot([*train_args(s, cfg, algo, lr, seed), "--run-dir", str(run)])
        ev = json.loads(trot(["eval", str(run), "--episodes", "32", "--json"]))
    ret = ev["mean_return"]
    return {"learning_rate": lr, "mean_return": round(ret, 1),
            "env_steps": int(ev["env_steps"]), "success": int(ret >= 0.95 * MAX_RETURN)}


def results(out_dir: Path) -> dict[tuple[str, int], Results]:
    """Every (algo, seed)'s rows in OUT_DIR."""
    return {(algo, int(seed)): Results(path, resume=True)
            for path in sorted(out_dir.glob("*_seed*.csv"))
            for algo, _, seed in [path.stem.partition("_seed")]}


def table(found: dict[tuple[str, int], Results]) -> str:
    """The fraction of successful (rate, seed) pairs per algo, and each rate's median."""
    lines = []
    for algo in ("a3c", "a2c"):
        mine = [r for (a, _), res in found.items() if a == algo for r in res.rows]
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


def run(s: Settings, cfg: TrainConfig) -> None:
    out_dir = Path(s.out_dir)
    if not s.table:
        found = results(out_dir)
        if any(r.rows for r in found.values()) and not s.resume:
            raise SystemExit(f"{out_dir} holds runs: give --resume to continue them")
        out_dir.mkdir(parents=True, exist_ok=True)
        for seed in s.seeds:  # the algos interleaved, run by run
            for lr in rates(s):
                for algo in ("a3c", "a2c"):
                    res = found.setdefault((algo, seed), Results(
                        out_dir / f"{algo}_seed{seed}.csv", resume=True))
                    if res.find(learning_rate=lr):
                        continue
                    row = one(s, cfg, algo, lr, seed)
                    res.add(row)
                    print(f"{algo} lr {lr:.3g} seed {seed}: return {row['mean_return']} "
                          f"after {row['env_steps'] / 1e6:.2f} M env steps", flush=True)
    print(table(results(out_dir)))


if __name__ == "__main__":
    main(Settings, run, TRAIN)
