"""Legged velocity tracking on the CPU default: tracking error and fall rate against
wall-clock, for any registered legged task.

    python benchmarks/locomotion_cpu.py --budget-min 60 --out docs/go1_curve.csv
    python benchmarks/locomotion_cpu.py --budget-min 20 --episodes 128 --max-error 0.25 \
        --max-falls 0.10 --out docs/data/go2_curve.csv -- go2-flat

The flags before `--` are this benchmark's; after it come `trot train`'s own (default
`go1-flat`): the task, `--seed`, `--num-envs`, `--agent.FIELD V`, `--env.FIELD V`,
`--run-dir` (default runs/TASK/locomotion_cpu), `--no-export`. The run trains through
trot's one loop (agents/loop.py) for `--budget-min` minutes of training clock; every
`--eval-every-min` minutes the clock pauses while the deterministic policy plays one full
episode in each of `--episodes` fresh envs with observation noise off, commands drawn from
the training ranges, domain randomization and pushes on (trot/benchmark.py's `Timed`). Each
evaluation is a row of `--out` (CSV, written as the run goes): iteration, training
wall-clock, env steps, training return, mean linear-velocity tracking error (m/s),
yaw-rate error (rad/s), fall rate, mean episode length (s), energy per meter. At the end it
prints the first time every goal held and leaves the run for `trot eval` / `trot sim2sim`.

The goals (`--goals`, default `walk`; several add up):
- walk: tracking error <= `--max-error` (default 0.20 m/s) and falls <= `--max-falls` (2%);
- gait: the humanoid's gait goals (docs/journal/g1.md): each foot's duty factor in
  0.3-0.7, both feet up at most 5% of the time, swings of 5 cm or more, the phase offset
  0.5 +- 0.1 and stance slip at most 5 cm;
- rough: the mean terrain level at least half the top row (`terrain_share` >= 0.5) and at
  least 80% of every course tile crossed (docs/journal/rough-terrain.md).

    python benchmarks/locomotion_cpu.py --goals walk gait --max-error 0.25 \
        --max-falls 0.05 --budget-min 30 --stop-when-met --out g1.csv -- g1-flat

Rough-terrain tasks add columns: the training envs' mean terrain level and, on the task's
fixed course, the share of episodes that crossed each tile without a fall, the tracking
error and the fall rate. Legged tasks add gait columns (tasks/gait.py), measured while the
commanded speed is above 0.2 m/s.

A long run may be split: `--resume` continues the run from its checkpoint (bitwise the
same training as one run) and its rows (none repeated); `--budget-min` is the total.
`--eval-only` re-measures a run's checkpoint without training or writing. `--eval-env
FIELD=VALUE` evaluates under other task settings than training's.

Seeds: `--seeds 0 1 2` trains each in turn (run dirs RUN_DIR_seedK, CSVs OUT_seedK.csv) and
prints their median and range; `--stacked` trains them together in one process (`trot
train --seeds`, one run directory), every seed evaluated at each evaluation.

    python benchmarks/locomotion_cpu.py --seeds 0 1 2 --budget-min 20 --eval-every-min 2 \
        --episodes 128 --out docs/data/go1_seeds.csv
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from trot.agents.checkpoint import Counters
from trot.agents.learners import resume
from trot.agents.modes import Seeds
from trot.agents.train_config import TrainConfig
from trot.benchmark import (Goal, Timed, course_row, locomotion_row, main, missed,
                            overrides, run_to_goals, spread)
from trot.tasks.registry import get_task

COLUMNS = ("train_s", "env_steps", "train_return", "lin_vel_error", "yaw_rate_error",
           "fall_rate", "episode_s", "energy_per_meter")
GOALS = {  # --goals; "walk" is built from --max-error and --max-falls
    "gait": (Goal("gait_duty_*", 0.3, 0.7), Goal("gait_flight", high=0.05),
             Goal("gait_swing_height", 0.05), Goal("gait_phase_offset", 0.4, 0.6),
             Goal("gait_stance_slip", high=0.05)),
    "rough": (Goal("terrain_share", 0.5), Goal("crossed_*", 0.8)),
}


@dataclass(frozen=True)
class Settings:
    max_error: float = 0.20
    """walk: tracking threshold, m/s"""
    max_falls: float = 0.02
    """walk: fall-rate threshold"""
    goals: tuple[Literal["walk", "gait", "rough"], ...] = ("walk",)
    """the goals a run meets (several add up)"""
    budget_min: float = 60.0
    """minutes of training clock, in all (a resumed run's included)"""
    eval_every_min: float = 4.0
    """minutes of training clock between evaluations"""
    episodes: int = 64
    """episodes per evaluation, one per env"""
    seeds: tuple[int, ...] = ()
    """train these seeds (in turn, or --stacked) and report their median and range"""
    stacked: bool = False
    """--seeds trained together in one process (trot train --seeds)"""
    out: str = "go1_curve.csv"
    """the rows' CSV (with --seeds: OUT_seedK.csv)"""
    stop_when_met: bool = False
    """end the run at the first evaluation where every goal holds"""
    resume: bool = False
    """continue the run and its rows"""
    eval_only: bool = False
    """evaluate the checkpoint once with today's metrics; print the row, write nothing"""
    eval_env: tuple[str, ...] = ()
    """FIELD=VALUE task settings for the evaluations only, over the run's own"""


def goals(s: Settings) -> tuple[Goal, ...]:
    walk = (Goal("lin_vel_error", high=s.max_error), Goal("fall_rate", high=s.max_falls))
    return sum(((GOALS | {"walk": walk})[g] for g in s.goals), ())


def eval_config(s: Settings, cfg: TrainConfig):
    """The run's task config with --eval-env's overrides (a field the task lacks: an error
    naming it, before any run directory is written)."""
    config = cfg.env or get_task(cfg.task).config
    try:
        return dataclasses.replace(config, **overrides(s.eval_env))
    except TypeError as e:
        raise SystemExit(f"--eval-env: {e}; the task's fields: "
                         f"{', '.join(f.name for f in dataclasses.fields(config))}") from None


def measure(s: Settings, trainer) -> dict[str, float]:
    """One evaluation of a one-seed learner (trainer) under the evaluation's config."""
    cfg, actor = trainer.cfg, trainer.ac.actor
    config, seed = eval_config(s, cfg), 10_000 + cfg.seed
    row = locomotion_row(cfg.task, config, actor, s.episodes, seed)
    if "terrain" in {f.name for f in dataclasses.fields(config)}:
        level = float(trainer.env.task.iteration_metrics()["terrain_level"])
        row |= {"terrain_level": level, "terrain_share": level / max(
            config.terrain_rows - 1, 1)} | course_row(cfg.task, config, actor, s.episodes,
                                                      seed)
    return row


def show(row: dict[str, float]) -> None:
    print(" ".join(f"{row[c]:>16.4g}" for c in COLUMNS), flush=True)
    extra = [f"{k} {v:.3g}" for k, v in row.items() if k not in (*COLUMNS, "iteration")]
    if extra:  # terrain and gait columns
        print("   " + ", ".join(extra), flush=True)


def summary(seed: int, rows: list[dict[str, float]], goal: tuple[Goal, ...],
            rate: float) -> dict[str, float]:
    hit = next((r for r in rows if not missed(goal, r)), None)
    return {"seed": seed, "rate": rate, "hit_min": hit["train_s"] / 60 if hit else math.nan,
            "hit_msteps": hit["env_steps"] / 1e6 if hit else math.nan}


def run_seed(s: Settings, cfg: TrainConfig, out: Path) -> dict[str, float]:
    """One seed trained to the budget (or its goals) with its evaluations; its summary."""
    if s.eval_only:
        trainer, train_s = resume(Path(cfg.run_dir))
        print(" ".join(f"{c:>16}" for c in COLUMNS), flush=True)
        show({"train_s": train_s, "env_steps": trainer.env_steps, "train_return": math.nan}
             | measure(s, trainer))
        return summary(cfg.seed, [], (), math.nan)
    print(" ".join(f"{c:>16}" for c in COLUMNS), flush=True)
    trainer, timed = run_to_goals(cfg, s.resume, lambda at: Timed(
        out, at, s.eval_every_min, lambda t: measure(s, t), goals(s), s.stop_when_met, show),
        export=_export)
    rows = timed.rows
    rate = rows[-1]["env_steps"] / max(rows[-1]["train_s"], 1e-9) if rows else math.nan
    got = summary(cfg.seed, rows, goals(s), rate)
    when = (f"{got['hit_min']:.1f} min, {got['hit_msteps']:.1f} M env steps"
            if not math.isnan(got["hit_min"]) else "not reached")
    print(f"\ntask={cfg.task} N={cfg.num_envs} seed={cfg.seed} env-steps/s={rate:,.0f} "
          f"budget={s.budget_min:g} min\nfirst time every goal held "
          f"({' '.join(s.goals)}; walk: tracking error <= {s.max_error:.2f} m/s and fall "
          f"rate <= {100 * s.max_falls:.0f}%): {when}\nrun directory: {cfg.run_dir}",
          flush=True)
    return got


class PerSeed:
    """Stacked seeds: each seed's own `Timed` evaluation (its CSV, its training return),
    due together."""

    checkpoints = True

    def __init__(self, timed: list[Timed]):
        self.timed = timed

    def due(self, stack, m, at: Counters) -> bool:
        return all([t.due(tr, own, at) for t, tr, own in zip(self.timed, stack.trainers,
                                                              stack.last)])

    def __call__(self, stack, at: Counters) -> None:
        for t, trainer in zip(self.timed, stack.trainers):
            t(trainer, at)

    def done(self) -> bool:
        return all(t.done() for t in self.timed)


def run_stacked(s: Settings, cfg: TrainConfig, out: Path) -> list[dict[str, float]]:
    """--seeds --stacked: the seeds trained together, every seed evaluated into its own
    CSV at each evaluation; each seed's summary."""
    outs = [out.with_name(f"{out.stem}_seed{k}{out.suffix}") for k in s.seeds]
    _, per_seed = run_to_goals(dataclasses.replace(cfg, mode=Seeds(s.seeds)), s.resume,
                               lambda at: PerSeed([Timed(
                                   o, at, s.eval_every_min, lambda t: measure(s, t),
                                   goals(s), s.stop_when_met, show) for o in outs]),
                               export=_export)
    rows = [t.rows for t in per_seed.timed]
    last = rows[0][-1] if rows[0] else None
    rate = last["env_steps"] / max(last["train_s"], 1e-9) if last else math.nan
    return [summary(k, own, goals(s), rate) for k, own in zip(s.seeds, rows)]


def _export(run_dir: Path) -> None:
    from trot.export.onnx import export_run  # the export extra, where installed

    export_run(run_dir)


def run(s: Settings, cfg: TrainConfig) -> None:
    if not s.resume and get_task(cfg.task).task_cls.command_dim == 0:
        raise SystemExit(f"{cfg.task} has no velocity command; pick a legged task")
    eval_config(s, cfg)  # a bad --eval-env fails now, not at a row
    base = Path(cfg.run_dir or f"runs/{cfg.task}/locomotion_cpu")
    cfg = dataclasses.replace(cfg, minutes=s.budget_min, max_env_steps=10**12,
                              run_dir=str(base))
    out = Path(s.out)
    if not s.seeds:
        run_seed(s, cfg, out)
        return
    results = run_stacked(s, cfg, out) if s.stacked else [
        run_seed(s, dataclasses.replace(cfg, seed=k, run_dir=f"{base}_seed{k}"),
                 out.with_name(f"{out.stem}_seed{k}{out.suffix}")) for k in s.seeds]
    print("\n  seed  env-steps/s  goals met at (min)  (M env steps)")
    for r in results:
        print(f"{r['seed']:>6}  {r['rate']:>11,.0f}  {r['hit_min']:>18.1f}  "
              f"{r['hit_msteps']:>13.1f}")
    if not any(math.isnan(r["hit_min"]) for r in results):  # every seed walks: by then
        last = max(r["hit_min"] for r in results) if s.stacked else sum(
            r["hit_min"] for r in results)
        print(f"{len(results)} walking seeds after {last:.1f} min of training "
              f"({'together' if s.stacked else 'one after another'})")
    print(f"median (range) over {len(results)} seeds: "
          f"{spread([r['hit_min'] for r in results])} min, "
          f"{spread([r['hit_msteps'] for r in results])} M env steps, "
          f"{statistics.median(r['rate'] for r in results):,.0f} env-steps/s")


if __name__ == "__main__":
    main(Settings, run, ("go1-flat",))
