"""Memory on a velocity-blind cartpole: an MLP, a GRU and a history-4 MLP, same budget.

    python benchmarks/memory_cartpole.py --budget-s 180 --seeds 0 1 2 \
        --out docs/data/memory_cartpole.csv

The flags before `--` are this benchmark's; after it come `trot train`'s own (default
`cartpole-balance-blind`): the task, `--num-envs` (default 1024), `--agent.FIELD V` and
`--env.FIELD V` (changes to the task's registered settings, for every variant: screens),
`--run-dir` (default runs/TASK/memory_cartpole; each run in VARIANT_seedK under it).

`cartpole-balance-blind`'s policy sees the cart position and the pole direction only; its
critic sees the velocities too. Each variant (VARIANTS: the GRU with a (32,) head after its
cell) and seed trains through trot's one loop (agents/loop.py) for --budget-s of training
clock; at its end the deterministic policy plays one episode in each of --episodes fresh
envs (noise off). The goal (issue 21): the MLP below 60% of the maximum return (500), the
GRU and the history-4 MLP at 95% or more. One row per variant and seed goes to --out as
soon as it is done; `--resume` keeps --out's rows (their runs are not trained again) and
continues an unfinished run from its checkpoint. The summary prints the median and the
spread (min..max) over seeds, with env steps next to wall-clock.
"""

from __future__ import annotations

import dataclasses
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from trot.agents.evaluate import run_episodes
from trot.agents.train_config import TrainConfig
from trot.benchmark import Results, Timed, main, run_to_goals
from trot.tasks.registry import get_task, make_env

VARIANTS = {  # name: (agent changes, env changes)
    "mlp": ({}, {}),
    # the GRU's 32 units carry the features: a (32,) head after them balanced 98.3% of
    # the maximum, the registered (64, 64) head 88.4% (medians of 3 seeds,
    # docs/journal/memory.md)
    "gru": ({"rnn": "gru", "actor_hidden": (32,)}, {}),
    "history4": ({}, {"obs_history": 4}),
}
GOALS = {"mlp": lambda x: x < 0.60, "gru": lambda x: x >= 0.95,
         "history4": lambda x: x >= 0.95}


@dataclass(frozen=True)
class Settings:
    budget_s: float = 180.0
    """seconds of training clock per variant and seed"""
    seeds: tuple[int, ...] = (0,)
    """the seeds each variant trains"""
    variants: tuple[Literal["mlp", "gru", "history4"], ...] = ("mlp", "gru", "history4")
    """the variants to train"""
    episodes: int = 128
    """evaluation episodes at the end of each run, one per env"""
    out: str = "memory_cartpole.csv"
    """one row per variant and seed, written as each is done"""
    resume: bool = False
    """keep --out's rows; continue an unfinished run from its checkpoint"""


def variant_config(cfg: TrainConfig, variant: str, seed: int, base: Path) -> TrainConfig:
    """cfg with the variant's changes, as seed `seed`'s run in base/VARIANT_seedK."""
    agent_changes, env_changes = VARIANTS[variant]
    env = dataclasses.replace(cfg.env or get_task(cfg.task).config, **env_changes)
    return dataclasses.replace(cfg, seed=seed, env=env,
                               agent=dataclasses.replace(cfg.agent, **agent_changes),
                               run_dir=str(base / f"{variant}_seed{seed}"))


def train_one(s: Settings, cfg: TrainConfig, variant: str) -> dict:
    """One variant and seed trained for the budget, then evaluated: its row."""
    def measure(trainer) -> dict[str, float]:
        config = dataclasses.replace(cfg.env, obs_noise=False)
        env = make_env(cfg.task, s.episodes, seed=1000 + cfg.seed, config=config)
        r = run_episodes(env, trainer.ac.actor, s.episodes)
        return {"mean_return": r["mean_return"],
                "fraction_of_max": r["mean_return"] / env.task.max_return()}

    # one evaluation, due when the budget is spent: the run's end
    _, timed = run_to_goals(cfg, s.resume, lambda at: Timed(
        Path(cfg.run_dir) / "memory_eval.csv", at, cfg.minutes, measure,
        show=lambda row: None))
    end = timed.rows[-1]
    return {"variant": variant, "seed": cfg.seed, "train_s": round(end["train_s"], 1),
            "env_steps": end["env_steps"], "mean_return": end["mean_return"],
            "fraction_of_max": end["fraction_of_max"]}


def run(s: Settings, cfg: TrainConfig) -> None:
    base = Path(cfg.run_dir or f"runs/{cfg.task}/memory_cartpole")
    cfg = dataclasses.replace(cfg, minutes=s.budget_s / 60, max_env_steps=10**12)
    results = Results(Path(s.out), s.resume)
    for variant in s.variants:
        for seed in s.seeds:
            if results.find(variant=variant, seed=seed) is None:
                results.add(train_one(s, variant_config(cfg, variant, seed, base), variant))
                print(results.rows[-1], flush=True)
    print(f"\n{cfg.task}, {s.budget_s:.0f} s of training each, N={cfg.num_envs}, "
          f"{s.episodes} eval episodes, seeds {list(s.seeds)}")
    for variant in s.variants:
        mine = [r for r in results.rows if r["variant"] == variant and r["seed"] in s.seeds]
        frac = [r["fraction_of_max"] for r in mine]
        steps = statistics.median(r["env_steps"] for r in mine)
        med = statistics.median(frac)
        print(f"{variant:>9}: return {med:.1%} of max (median; {min(frac):.1%}..{max(frac):.1%})"
              f" after {steps / 1e6:.2f} M env steps; goal "
              f"{'met' if GOALS[variant](med) else 'MISSED'}")


if __name__ == "__main__":
    main(Settings, run, ("cartpole-balance-blind",))
