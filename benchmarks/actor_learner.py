"""Acting and learning apart, measured on the same cores in one invocation: synchronous
PPO against its asynchronous and distributed arrangements.

    python benchmarks/actor_learner.py --task go1-flat --minutes 3 --out docs/data/actor_learner/go1_flat.csv
    python benchmarks/actor_learner.py --task cartpole-balance --minutes 1 --target 475 --out docs/data/actor_learner/cartpole.csv

Each arrangement trains TASK for --minutes of training wall-clock, one after the other,
from the same seed, with the task's registered settings and --num-envs envs in all:
  sync        trot train TASK (one process: collect, then update)
  async       --async-collect --actor-lag 1 (the next rollout collected on a thread
              while the update runs)
  actors      --actors 1 (an actor process streams rollouts to a learner process)
  nproc       --nproc 2 (data-parallel, each rank half the envs)
  preempt     --nproc 2 --preempt-fraction 0.5 (DD-PPO's straggler preemption)
The table: env steps per second of training wall-clock (the run's metrics.csv), its ratio
to sync, and the training minutes and env steps at which the logged episode return first
reached --target (if given). Rows land in --out as each run ends; --resume skips those.
"""

from __future__ import annotations

import argparse
import csv
import subprocess
import sys
import tempfile
from pathlib import Path

ARRANGEMENTS = {
    "sync": [],
    "async": ["--async-collect", "--actor-lag", "1"],
    "actors": ["--actors", "1"],
    "nproc": ["--nproc", "2"],
    "preempt": ["--nproc", "2", "--preempt-fraction", "0.5"],
}
# the ranks of --nproc 2 each simulate half the envs
HALF = {"nproc", "preempt"}
FIELDS = ("arrangement", "task", "num_envs", "minutes", "env_steps", "steps_per_s",
          "target", "minutes_to_target", "env_steps_to_target")


def parse() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--task", default="go1-flat")
    p.add_argument("--num-envs", type=int, default=1024, help="envs in all")
    p.add_argument("--minutes", type=float, default=3.0, help="training wall-clock per run")
    p.add_argument("--target", type=float, default=None, help="episode return to reach")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--only", nargs="+", choices=list(ARRANGEMENTS), default=list(ARRANGEMENTS))
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--resume", action="store_true")
    p.add_argument("--table", action="store_true", help="only print the CSV's table")
    return p.parse_args()


def run(a: argparse.Namespace, name: str) -> dict:
    envs = a.num_envs // 2 if name in HALF else a.num_envs
    with tempfile.TemporaryDirectory(prefix="trot-actor-learner-") as d:
        run_dir = Path(d) / "run"
        cmd = [sys.executable, "-m", "trot", "train", a.task, "--num-envs", str(envs),
               "--seed", str(a.seed), "--minutes", str(a.minutes), "--max-env-steps",
               str(10**10), "--no-export", "--log-every", "1000000", "--run-dir",
               str(run_dir), *ARRANGEMENTS[name]]
        p = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if p.returncode != 0:
            raise SystemExit(f"{' '.join(cmd)} failed:\n{p.stderr[-3000:]}")
        with open(run_dir / "metrics.csv", newline="") as f:
            rows = list(csv.DictReader(f))
    last = rows[-1]
    hit = next((r for r in rows if a.target is not None and r.get("episode_return")
                and float(r["episode_return"]) >= a.target), None)
    return {"arrangement": name, "task": a.task, "num_envs": a.num_envs,
            "minutes": f"{float(last['wall_s']) / 60:.2f}", "env_steps": last["env_steps"],
            "steps_per_s": f"{int(last['env_steps']) / float(last['wall_s']):.0f}",
            "target": "" if a.target is None else a.target,
            "minutes_to_target": "" if hit is None else f"{float(hit['wall_s']) / 60:.2f}",
            "env_steps_to_target": "" if hit is None else hit["env_steps"]}


def table(rows: list[dict]) -> str:
    base = next((float(r["steps_per_s"]) for r in rows if r["arrangement"] == "sync"), None)
    out = [f"{'arrangement':12} {'env-steps/s':>12} {'vs sync':>8} {'min to target':>14} "
           f"{'M steps to target':>18}"]
    for r in rows:
        ratio = f"{float(r['steps_per_s']) / base:.2f}" if base else "-"
        to = r["minutes_to_target"] or ("not reached" if r["target"] != "" else "-")
        steps = (f"{int(r['env_steps_to_target']) / 1e6:.2f}" if r["env_steps_to_target"]
                 else "-")
        out.append(f"{r['arrangement']:12} {float(r['steps_per_s']):>12,.0f} {ratio:>8} "
                   f"{to:>14} {steps:>18}")
    return "\n".join(out)


def main() -> None:
    a = parse()
    rows = []
    if a.out.is_file():
        if not (a.resume or a.table):
            raise SystemExit(f"{a.out} exists: give --resume to continue it")
        with open(a.out, newline="") as f:
            rows = list(csv.DictReader(f))
    if not a.table:
        done = {r["arrangement"] for r in rows}
        for name in a.only:
            if name in done:
                continue
            row = run(a, name)
            rows.append(row)
            a.out.parent.mkdir(parents=True, exist_ok=True)
            with open(a.out, "a", newline="") as f:
                w = csv.DictWriter(f, FIELDS)
                if f.tell() == 0:
                    w.writeheader()
                w.writerow(row)
            print(f"{name}: {row['steps_per_s']} env-steps/s", flush=True)
    print(f"{a.task}, {a.num_envs} envs in all, {a.minutes:g} min each, seed {a.seed}")
    print(table(rows))


if __name__ == "__main__":
    main()
