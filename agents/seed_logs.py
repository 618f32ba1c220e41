"""The outputs of seeds trained together (agents/seeds.py): each seed's own logs, the
summary across seeds (seeds.csv) and the progress line."""

from __future__ import annotations

import statistics
from collections.abc import Callable
from pathlib import Path

from trot.agents.logger import CsvRows, RunLogger, fmt_duration
from trot.agents.train_config import TrainConfig

SUMMARIZED = ("episode_return", "episode_length")  # besides task/*: medians in seeds.csv


def summarize(per_seed: list[dict[str, float]]) -> dict[str, float]:
    """The iteration across seeds: counters as one seed's (they agree), NaN updates summed,
    and the median, min and max of the episode and task metrics over the seeds that have
    them (a seed with no finished episode this iteration has none)."""
    first = per_seed[0]
    out = {"iteration": first["iteration"], "env_steps": first["env_steps"],
           "nan_updates": sum(m["nan_updates"] for m in per_seed)}
    names = dict.fromkeys(k for m in per_seed for k in m
                          if k in SUMMARIZED or k.startswith("task/"))
    for name in names:
        vals = [m[name] for m in per_seed if name in m]
        out |= {f"{name}/median": statistics.median(vals), f"{name}/min": min(vals),
                f"{name}/max": max(vals)}
    return out


def seeds_progress_line(m: dict[str, float], k: int, cfg: TrainConfig) -> str:
    rate = m["steps_per_s"]  # one seed's: every seed steps as many envs
    left = (cfg.max_env_steps - m["env_steps"]) / max(rate, 1e-9)
    if cfg.minutes > 0:
        left = min(left, 60 * cfg.minutes - m["wall_s"])
    left = max(left, 0.0)  # past the budget in its last iteration: none left, not less
    ret = "-" if "episode_return/median" not in m else (
        f"{m['episode_return/median']:.2f} ({m['episode_return/min']:.2f} to "
        f"{m['episode_return/max']:.2f})")
    task = "".join(f" | {k[5:-7]} {v:.3g}" for k, v in m.items()
                   if k.startswith("task/") and k.endswith("/median"))
    return (f"it {int(m['iteration']):5d} | {m['env_steps'] / 1e6:7.2f}M steps x {k} seeds | "
            f"{k * rate:8,.0f} steps/s | return median {ret}{task} | "
            f"{fmt_duration(m['wall_s'])} elapsed, ETA {fmt_duration(left)}")


class SeedLogs:
    """Each seed's metrics.csv and TensorBoard in its directory (RunLogger), and seeds.csv:
    the summary across seeds, one row per iteration, resume-safe as metrics.csv is.
    `last()`: each seed's metrics of the iteration being logged."""

    def __init__(self, dirs: list[Path], summary: Path, iteration: int, env_steps: int,
                 last: Callable[[], list[dict[str, float]]]):
        self.last = last
        self.loggers = [RunLogger(d, iteration=iteration, env_steps=env_steps) for d in dirs]
        self.summary = CsvRows(summary, ("iteration", "env_steps", "wall_s", "steps_per_s"),
                               iteration)

    def log(self, m: dict[str, float]) -> None:
        for logger, own in zip(self.loggers, self.last()):
            logger.log(own | {"wall_s": m["wall_s"], "steps_per_s": m["steps_per_s"]})
        self.summary.append(m)

    def flush(self) -> None:
        for logger in self.loggers:
            logger.flush()

    def close(self) -> None:
        for logger in self.loggers:
            logger.close()
