"""Multi-task PopArt on a small scale: one policy for cartpole-balance and
cartpole-swingup-x100 (rewards 100x apart), per-task PopArt against one shared PopArt.

    python benchmarks/multitask_cartpole.py --seeds 0 1 2 --out docs/data/multitask_cartpole.csv

Each (mode, seed) trains one policy on both tasks (`trot train cartpole-balance
cartpole-swingup-x100`, half the envs each) with cartpole-swingup's registered agent
settings, for --max-env-steps env steps in all. Every --eval-every iterations the clock
is paused and each task's own policy (its run directory's: the task fixed, agents/
multitask.py) plays one deterministic episode in each of 16 fresh envs (noise off):
- cartpole-balance: its single-task target, mean return >= 95% of the maximum (500);
- cartpole-swingup-x100: cartpole-swingup's registered target, the pole upright
  (cos > 0.9) for >= 80% of the episode's second half.
A row per evaluation is appended to --out as it comes (with --resume, finished (mode, seed)
runs are skipped and an unfinished one restarts). The summary gives, per mode, the median
and range over seeds of each task's last evaluation, and of the env steps and training
minutes at which both targets first held.
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import statistics
import time
from pathlib import Path

from trot.agents.config import tuned
from trot.agents.evaluate import run_episodes
from trot.agents.multitask import task_view
from trot.agents.learners import build
from trot.agents.train_config import Tasks, TrainConfig
from trot.core.files import atomic_write
from trot.tasks.registry import get_task, make_env

TASKS = ("cartpole-balance", "cartpole-swingup-x100")
FIELDS = ("mode", "seed", "iteration", "env_steps", "train_s", "balance_return",
          "swingup_upright", "both_met")
MODES = ("per-task", "shared")


def evaluate(trainer, eval_envs) -> tuple[float, float]:
    """(balance mean return, swing-up upright fraction of the second half)."""
    env = trainer.env
    out = []
    for k, (sub, ev) in enumerate(zip(env.envs, eval_envs)):
        view = task_view(trainer.ac, k, sub.obs_dim, sub.critic_obs_dim, sub.action_dim,
                         trainer.cfg.agent_effective)
        out.append(run_episodes(ev, view.actor, ev.num_envs))
    return out[0]["mean_return"], out[1]["upright_second_half"]


def train_one(mode: str, seed: int, a, write) -> None:
    agent = dataclasses.replace(tuned(get_task("cartpole-swingup").agent), popart_tasks=mode)
    cfg = TrainConfig(task=TASKS[0], mode=Tasks(TASKS[1:]), num_envs=a.num_envs, seed=seed,
                      agent=agent, max_env_steps=a.max_env_steps, export=False)
    trainer = build(cfg)
    eval_envs = [make_env(t, 16, seed=1000 + seed, config=dataclasses.replace(
        get_task(t).config, obs_noise=False)) for t in TASKS]
    train_s = 0.0
    while trainer.env_steps < a.max_env_steps:
        t0 = time.perf_counter()
        for _ in range(a.eval_every):
            trainer.iterate()
        train_s += time.perf_counter() - t0
        ret, upright = evaluate(trainer, eval_envs)
        met = ret >= 0.95 * 500 and upright >= 0.8
        write({"mode": mode, "seed": seed, "iteration": trainer.iteration,
               "env_steps": trainer.env_steps, "train_s": round(train_s, 2),
               "balance_return": round(ret, 2), "swingup_upright": round(upright, 4),
               "both_met": int(met)})
        print(f"{mode:8s} seed {seed} it {trainer.iteration:4d} {trainer.env_steps / 1e6:6.2f}M "
              f"{train_s:6.1f} s | balance return {ret:6.1f} | swing-up upright {upright:.2f}"
              f"{' | both met' if met else ''}", flush=True)


def summarize(rows: list[dict[str, str]], seeds: list[int]) -> None:
    def spread(xs: list[float], fmt: str) -> str:
        return f"{statistics.median(xs):{fmt}} ({min(xs):{fmt}}..{max(xs):{fmt}})"

    for mode in MODES:
        runs = [[r for r in rows if r["mode"] == mode and int(r["seed"]) == s] for s in seeds]
        runs = [r for r in runs if r]
        if not runs:
            continue
        last = [r[-1] for r in runs]
        print(f"{mode}: last evaluation over {len(runs)} seeds: balance return "
              f"{spread([float(r['balance_return']) for r in last], '.1f')} (target 475), "
              f"swing-up upright {spread([float(r['swingup_upright']) for r in last], '.2f')}"
              f" (target 0.80), at {spread([int(r['env_steps']) / 1e6 for r in last], '.2f')}"
              " M env steps")
        first = [next((r for r in run if r["both_met"] == "1"), None) for run in runs]
        hit = [r for r in first if r is not None]
        if hit:
            print(f"{mode}: both targets first met by {len(hit)} of {len(runs)} seeds, at "
                  f"{spread([int(r['env_steps']) / 1e6 for r in hit], '.2f')} M env steps, "
                  f"{spread([float(r['train_s']) / 60 for r in hit], '.2f')} min of training")
        else:
            print(f"{mode}: both targets met by none of {len(runs)} seeds")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--modes", nargs="+", default=list(MODES), choices=MODES)
    p.add_argument("--num-envs", type=int, default=1024, help="in all, half per task")
    p.add_argument("--max-env-steps", type=int, default=6_000_000, help="in all")
    p.add_argument("--eval-every", type=int, default=10, help="iterations")
    p.add_argument("--out", type=Path, default=Path("multitask_cartpole.csv"))
    p.add_argument("--resume", action="store_true",
                   help="keep --out's finished runs; an unfinished one starts again")
    a = p.parse_args()
    rows = []
    if a.resume and a.out.exists():
        with open(a.out, newline="") as f:
            rows = list(csv.DictReader(f))
    done = {(r["mode"], int(r["seed"])) for r in rows
            if int(r["env_steps"]) >= a.max_env_steps}
    rows = [r for r in rows if (r["mode"], int(r["seed"])) in done]

    def keep(tmp: Path) -> None:  # the finished runs' rows, then appended to as they come
        with open(tmp, "w", newline="") as f:
            w = csv.DictWriter(f, FIELDS)
            w.writeheader()
            w.writerows(rows)
    atomic_write(a.out, keep)
    with open(a.out, "a", newline="") as f:
        out = csv.DictWriter(f, FIELDS)

        def write(row: dict) -> None:
            out.writerow(row)
            f.flush()
            rows.append({k: str(v) for k, v in row.items()})

        for mode in a.modes:
            for seed in a.seeds:
                if (mode, seed) not in done:
                    train_one(mode, seed, a, write)
    summarize(rows, a.seeds)


if __name__ == "__main__":
    main()
