"""Multi-task PopArt on a small scale: one policy for cartpole-balance and
cartpole-swingup-x100 (rewards 100x apart), per-task PopArt against one shared PopArt.

    python benchmarks/multitask_cartpole.py --seeds 0 1 2 --out docs/data/multitask_cartpole.csv

The flags before `--` are this benchmark's; after it come `trot train`'s own (default
`cartpole-balance cartpole-swingup-x100 --num-envs 1024 --max-env-steps 6000000`): the two
tasks, `--num-envs` (in all, half per task), `--max-env-steps` (in all), `--agent.FIELD
V`, `--env.TASK.FIELD V`, `--run-dir` (default runs/TASKS/multitask_cartpole; each run in
MODE_seedK under it). The agent is cartpole-swingup's registered one (`trot train` would
give a run of several tasks the first task's) with the `--agent.*` changes given, and each
mode's `popart_tasks`.

Each (mode, seed) trains one policy on both tasks through trot's one loop (agents/loop.py)
to its env-step budget. Every --eval-every iterations, and at the budget, the clock is
paused and each task's own policy (its run directory's: the task fixed, agents/
multitask.py) plays one deterministic episode in each of 16 fresh envs (noise off):
- cartpole-balance: its single-task target, mean return >= 95% of the maximum (500);
- cartpole-swingup-x100: cartpole-swingup's registered target, the pole upright
  (cos > 0.9) for >= 80% of the episode's second half.
A row per evaluation goes to --out as it comes (with --resume, finished (mode, seed) runs
are skipped and an unfinished one continues from its checkpoint). The summary gives, per
mode, the median and range over seeds of each task's last evaluation, and of the env steps
and training minutes at which both targets first held.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from trot.agents.checkpoint import Counters
from trot.agents.config import PPOConfig, tuned
from trot.agents.evaluate import run_episodes
from trot.agents.multitask import task_view
from trot.agents.train_config import TrainConfig
from trot.benchmark import Results, main, run_to_goals, spread
from trot.tasks.registry import get_task, make_env

TASKS = ("cartpole-balance", "cartpole-swingup-x100")
AGENT = "cartpole-swingup"  # the registered task whose agent settings both tasks train with
MODES = ("per-task", "shared")


@dataclass(frozen=True)
class Settings:
    seeds: tuple[int, ...] = (0, 1, 2)
    """the seeds each mode trains"""
    modes: tuple[Literal["per-task", "shared"], ...] = MODES
    """PopArt per task, or one shared (agent.popart_tasks)"""
    eval_every: int = 10
    """iterations between evaluations"""
    out: str = "multitask_cartpole.csv"
    """a row per evaluation, written as it comes"""
    resume: bool = False
    """keep --out's finished runs; continue an unfinished one from its checkpoint"""


def agent_of(cfg: TrainConfig, mode: str) -> PPOConfig:
    """AGENT's registered settings with the train args' --agent.* changes (the fields that
    differ from the first task's registered ones) and the mode's PopArt."""
    first = tuned(get_task(cfg.task).agent)
    changed = {f.name: getattr(cfg.agent, f.name) for f in dataclasses.fields(first)
               if getattr(cfg.agent, f.name) != getattr(first, f.name)}
    return dataclasses.replace(tuned(get_task(AGENT).agent),
                               **{**changed, "popart_tasks": mode})


def evaluate(trainer, eval_envs) -> tuple[float, float]:
    """(balance mean return, swing-up upright fraction of the second half)."""
    env = trainer.env
    out = []
    for k, (sub, ev) in enumerate(zip(env.envs, eval_envs)):
        view = task_view(trainer.ac, k, sub.obs_dim, sub.critic_obs_dim, sub.action_dim,
                         trainer.cfg.agent_effective)
        out.append(run_episodes(ev, view.actor, ev.num_envs))
    return out[0]["mean_return"], out[1]["upright_second_half"]


class EveryK:
    """The loop's evaluation (agents/loop.py's `Evaluation`): both tasks' policies every
    `every` iterations and at the budget, a row each in `results`. A resumed run's rows past
    its checkpoint are dropped (a checkpoint follows each row)."""

    checkpoints = True

    def __init__(self, cfg: TrainConfig, mode: str, every: int, results: Results,
                 at: Counters):
        self.mode, self.seed, self.every, self.results = mode, cfg.seed, every, results
        results.rows = [r for r in results.rows if not self._mine(r)
                        or r["iteration"] <= at.iteration]
        self.envs = [make_env(t, 16, seed=1000 + cfg.seed, config=dataclasses.replace(
            c or get_task(t).config, obs_noise=False)) for t, c in cfg.tasks]

    def _mine(self, row: dict) -> bool:
        return row["mode"] == self.mode and row["seed"] == self.seed

    def due(self, trainer, m: dict[str, float], at: Counters) -> bool:
        return trainer.iteration % self.every == 0 or trainer.cfg.spent(at.env_steps,
                                                                        at.wall_s)

    def __call__(self, trainer, at: Counters) -> None:
        ret, upright = evaluate(trainer, self.envs)
        met = ret >= 0.95 * 500 and upright >= 0.8
        self.results.add({"mode": self.mode, "seed": self.seed, "iteration": at.iteration,
                          "env_steps": at.env_steps, "train_s": round(at.wall_s, 2),
                          "balance_return": round(ret, 2),
                          "swingup_upright": round(upright, 4), "both_met": int(met)})
        print(f"{self.mode:8s} seed {self.seed} it {at.iteration:4d} "
              f"{at.env_steps / 1e6:6.2f}M {at.wall_s:6.1f} s | balance return {ret:6.1f} | "
              f"swing-up upright {upright:.2f}{' | both met' if met else ''}", flush=True)

    def done(self) -> bool:
        return False


def summarize(rows: list[dict], seeds: tuple[int, ...], modes: tuple[str, ...]) -> None:
    for mode in modes:
        runs = [[r for r in rows if r["mode"] == mode and r["seed"] == s] for s in seeds]
        runs = [r for r in runs if r]
        if not runs:
            continue
        last = [r[-1] for r in runs]
        print(f"{mode}: last evaluation over {len(runs)} seeds: balance return "
              f"{spread([r['balance_return'] for r in last], 1)} (target 475), "
              f"swing-up upright {spread([r['swingup_upright'] for r in last], 2)}"
              f" (target 0.80), at {spread([r['env_steps'] / 1e6 for r in last], 2)}"
              " M env steps")
        first = [next((r for r in run if r["both_met"] == 1), None) for run in runs]
        hit = [r for r in first if r is not None]
        if hit:
            print(f"{mode}: both targets first met by {len(hit)} of {len(runs)} seeds, at "
                  f"{spread([r['env_steps'] / 1e6 for r in hit], 2)} M env steps, "
                  f"{spread([r['train_s'] / 60 for r in hit], 2)} min of training")
        else:
            print(f"{mode}: both targets met by none of {len(runs)} seeds")


def run(s: Settings, cfg: TrainConfig) -> None:
    if tuple(t for t, _ in cfg.tasks) != TASKS:
        raise SystemExit(f"this benchmark trains {' and '.join(TASKS)} (its evaluation is "
                         f"theirs), got {', '.join(t for t, _ in cfg.tasks)}")
    base = Path(cfg.run_dir or f"runs/{'+'.join(TASKS)}/multitask_cartpole")
    results = Results(Path(s.out), s.resume)
    done = {(r["mode"], r["seed"]) for r in results.rows
            if r["env_steps"] >= cfg.max_env_steps}
    for mode in s.modes:
        for seed in s.seeds:
            if (mode, seed) in done:
                continue
            one = dataclasses.replace(cfg, seed=seed, agent=agent_of(cfg, mode),
                                      export=False, run_dir=str(base / f"{mode}_seed{seed}"))
            run_to_goals(one, s.resume, lambda at: EveryK(one, mode, s.eval_every, results,
                                                          at))
    summarize(results.rows, s.seeds, s.modes)


if __name__ == "__main__":
    main(Settings, run, (*TASKS, "--num-envs", "1024", "--max-env-steps", "6000000"))
