"""Legged velocity tracking on the CPU default: tracking error and fall rate against
wall-clock, for any registered legged task (`--task`, default go1-flat).

    python benchmarks/locomotion_cpu.py --budget-min 60 --out docs/go1_curve.csv
    python benchmarks/locomotion_cpu.py --task go2-flat --budget-min 20 --episodes 128 \
        --max-error 0.25 --max-falls 0.10 --out docs/data/go2_curve.csv

Trains the task with its registered defaults (cpu backend, the task's tuned PPO) and,
every `--eval-every-min` minutes of training, pauses the clock while the deterministic
policy plays one full episode (20 s) in each of `--episodes` fresh envs with observation
noise off, commands drawn from the training ranges, domain randomization and pushes on.
It prints, and writes to `--out` as CSV, one row per evaluation:
training wall-clock, env steps, training return, mean linear-velocity tracking error
(m/s), yaw-rate error (rad/s), fall rate, mean episode length (s) and energy per meter.
The CSV is rewritten after every evaluation, so a long run leaves its rows as it goes.
At the end it prints the first time every goal held and leaves the run in `--run-dir`
(checkpoint, config, metrics.csv, policy.onnx) for `trot eval` / `trot sim2sim`.

The goals (`--goals`, default `walk`; several add up, a table below):
- walk: tracking error <= `--max-error` (default 0.20 m/s) and falls <= `--max-falls` (2%);
- gait: the humanoid's gait goals (docs/journal/g1.md): each foot's duty factor in
  0.3-0.7, both feet up at most 5% of the time, swings of 5 cm or more, the phase offset
  0.5 +- 0.1 and stance slip at most 5 cm;
- rough: the mean terrain level at least half the top row (`terrain_share` >= 0.5) and at
  least 80% of every course tile crossed (docs/journal/rough-terrain.md).
Each evaluation prints the goals it missed, with their values.

    python benchmarks/locomotion_cpu.py --task g1-flat --goals walk gait --max-error 0.25 \
        --max-falls 0.05 --budget-min 30 --stop-when-met --out g1.csv

Rough-terrain tasks (a config with `terrain`, e.g. go1-rough) add columns: the training
envs' mean terrain level (0 = the easiest row) and, on the task's fixed course
(`--env.terrain course`: one column each of 15 degree slopes and 10 cm stairs, up and
down), the share of episodes that crossed each tile without a fall, the tracking error
and the fall rate, over the same `--episodes`.

    python benchmarks/locomotion_cpu.py --task go1-rough --budget-min 40 --episodes 128 \
        --out docs/data/go1_rough_curve.csv

Legged tasks add gait columns (tasks/gait.py: duty factor per foot, flight share, swing
height, stance slip, phase offset between the first two feet), measured while the
commanded speed is above 0.2 m/s.

    python benchmarks/locomotion_cpu.py --task g1-flat --budget-min 120 --episodes 128 \
        --max-error 0.25 --max-falls 0.05 --out docs/data/g1_curve.csv

Policies with memory: `--agent rnn=gru` (a recurrent actor), `--env obs_history=4`.
Collection overlapped with learning: `--train async_collect=True actor_lag=1`.

A long run may be split: `--resume` continues the run in `--run-dir` from its checkpoint
(training is bitwise the same as one run) and appends to the rows in `--out`, summing the
training wall-clock; `--budget-min` is then the total. Every evaluation plays fresh envs
of the same seed, so evaluations see the same starts and commands.

`--eval-only` re-measures a run's checkpoint (e.g. after a metric changed) without
training or writing.

Seeds: `--seeds 0 1 2` trains each seed in turn (run dirs `RUN_DIR_seedK`, CSVs
`OUT_seedK.csv`), prints for each the env steps and training wall-clock at which every
goal first held and its env-steps/s, then their median and range, and the training
time until every seed walked. With `--resume` every seed continues from its own checkpoint
(a finished seed is only re-reported; one without a checkpoint yet starts).
`--stacked` trains the seeds together in one process instead (`trot train --seeds`,
agents/seeds.py; one run directory RUN_DIR with RUN_DIR/seed_K), evaluating every seed at
each evaluation. It is not the default: on 2 CPU cores it is no faster (docs/benchmarks.md,
"Seeds in one process"): the physics, most of an iteration, costs the same for K x N envs
in one sim as for N envs K times, and vmap's batched matrix products run slower on the CPU
than the same products one seed at a time.

    python benchmarks/locomotion_cpu.py --seeds 0 1 2 --budget-min 20 --eval-every-min 2 \
        --episodes 128 --out docs/data/go1_seeds.csv
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import math
import statistics
import time
from dataclasses import dataclass
from fnmatch import fnmatch
from pathlib import Path

from trot.agents.loop import save
from trot.agents.evaluate import evaluate_policy
from trot.agents.logger import RunLogger
from trot.agents.learners import build, resume
from trot.agents.learners import start as start_learner
from trot.agents.config import parse_override, tuned
from trot.agents.train_config import Seeds, Sync, TrainConfig, save_json
from trot.core.files import atomic_write
from trot.agents.runs import CHECKPOINT, course_changes
from trot.tasks.registry import get_task

COLUMNS = ("train_s", "env_steps", "train_return", "lin_vel_error", "yaw_rate_error",
           "fall_rate", "episode_s", "energy_per_meter")


@dataclass(frozen=True)
class Goal:
    """Every evaluation column matching `column` (fnmatch: each foot, each course tile) lies
    in [low, high]; a missing or NaN value does not hold."""

    column: str
    low: float = -math.inf
    high: float = math.inf

    def missed(self, row: dict[str, float]) -> list[str]:
        """The matching columns outside the goal, as 'column value (goal)'."""
        got = {k: v for k, v in row.items() if fnmatch(k, self.column)} or {self.column: None}
        want = (f"<= {self.high:g}" if self.low == -math.inf else f">= {self.low:g}"
                if self.high == math.inf else f"{self.low:g}..{self.high:g}")
        return [f"{k} {v if v is None else round(v, 3)} ({want})" for k, v in got.items()
                if v is None or not self.low <= v <= self.high]


GOALS = {  # --goals; "walk" is built from --max-error and --max-falls
    "gait": (Goal("gait_duty_*", 0.3, 0.7), Goal("gait_flight", high=0.05),
             Goal("gait_swing_height", 0.05), Goal("gait_phase_offset", 0.4, 0.6),
             Goal("gait_stance_slip", high=0.05)),
    "rough": (Goal("terrain_share", 0.5), Goal("crossed_*", 0.8)),
}


def goals(a: argparse.Namespace) -> tuple[Goal, ...]:
    walk = (Goal("lin_vel_error", high=a.max_error), Goal("fall_rate", high=a.max_falls))
    return sum(((GOALS | {"walk": walk})[g] for g in a.goals), ())


def missed(a: argparse.Namespace, row: dict[str, float]) -> list[str]:
    return [m for g in goals(a) for m in g.missed(row)]


def evaluate_now(task: str, config, actor, episodes: int, seed: int) -> dict[str, float]:
    """agents/evaluate.py's evaluation (cpu backend, noise off), as this script's columns."""
    r, env = evaluate_policy(task, config, actor, episodes, seed)
    return {"lin_vel_error": r["lin_vel_error"], "yaw_rate_error": r["yaw_rate_error"],
            "fall_rate": r["terminated_rate"], "episode_s": r["mean_length"] * env.control_dt,
            "energy_per_meter": r["power"] / max(r["speed"], 1e-6)} | {
            k.replace("/", "_"): math.nan if v is None else v
            for k, v in r.items() if k.startswith(("crossed/", "gait/"))
            and not k.endswith("_second_half")}


def evaluate_course(task: str, config, actor, episodes: int, seed: int) -> dict[str, float]:
    """A terrain task on its fixed course: crossed_TYPE, course error and falls."""
    r = evaluate_now(task, dataclasses.replace(config, **course_changes(task, config)), actor,
                     episodes, seed)
    return {f"course_{k}" if not k.startswith("crossed_") else k: v for k, v in r.items()
            if k in ("lin_vel_error", "fall_rate") or k.startswith("crossed_")}


def _write_csv(path: Path, rows: list[dict[str, float]]) -> None:
    with open(path, "w", newline="") as f:  # columns added since the first row: blank there
        w = csv.DictWriter(f, fieldnames=list(dict.fromkeys(k for r in rows for k in r)))
        w.writeheader()  # nan as blank, as _read_csv reads it
        w.writerows({k: "" if v != v else v for k, v in r.items()} for r in rows)


def _number(text: str) -> float:
    """A CSV cell as written: ints stay ints, so a resumed run rewrites its rows unchanged."""
    if not text:
        return math.nan
    return int(text) if text.lstrip("-").isdigit() else float(text)


def _read_csv(path: Path) -> list[dict[str, float]]:
    with open(path, newline="") as f:
        return [{k: _number(v) for k, v in row.items()} for row in csv.DictReader(f)]


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--task", default="go1-flat", help="a registered legged task")
    p.add_argument("--max-error", type=float, default=0.20, help="tracking threshold, m/s")
    p.add_argument("--max-falls", type=float, default=0.02, help="fall-rate threshold")
    p.add_argument("--goals", nargs="+", default=["walk"], choices=["walk", *GOALS],
                   help="the goals a run meets (several add up): walk (the two thresholds), "
                        "gait (the humanoid's), rough (terrain level and course)")
    p.add_argument("--budget-min", type=float, default=60.0)
    p.add_argument("--eval-every-min", type=float, default=4.0)
    p.add_argument("--episodes", type=int, default=64)
    p.add_argument("--num-envs", type=int, default=1024)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--seeds", type=int, nargs="+", default=None,
                   help="train these seeds in turn and report their median and range")
    p.add_argument("--stacked", action="store_true",
                   help="--seeds trained together in one process (agents/seeds.py) "
                        "instead of in turn")
    p.add_argument("--sim", default="cpu", help="physics backend for training: cpu or mjx")
    p.add_argument("--device", default="cpu", help="the learner's (and mjx's) device")
    p.add_argument("--run-dir", default=None, help="default runs/TASK/locomotion_cpu")
    p.add_argument("--out", default="go1_curve.csv")
    p.add_argument("--stop-when-met", action="store_true",
                   help="end the run at the first evaluation where every goal holds "
                        "(the time to walk is then known; compare_locomotion.py's race)")
    p.add_argument("--resume", action="store_true",
                   help="continue the run in --run-dir and the rows of --out")
    p.add_argument("--eval-only", action="store_true",
                   help="evaluate the checkpoint in --run-dir once with today's metrics; "
                        "print the row, write nothing")
    p.add_argument("--agent", nargs="*", default=[], metavar="FIELD=VALUE",
                   help="PPOConfig overrides over the task's registered ones, e.g. "
                        "symmetry=augment epochs=4 (for screening a change)")
    p.add_argument("--env", nargs="*", default=[], metavar="FIELD=VALUE",
                   help="task config overrides, e.g. obs_history=4")
    p.add_argument("--eval-env", nargs="*", default=[], metavar="FIELD=VALUE",
                   help="task config overrides for the evaluations only, over the run's "
                        "own: train under one condition, measure under another, e.g. "
                        "--env push_interval_seconds=(3,6) --eval-env "
                        "push_interval_seconds=(10,15)")
    p.add_argument("--train", nargs="*", default=[], metavar="FIELD=VALUE",
                   help="TrainConfig overrides, e.g. async_collect=True actor_lag=1")
    a = p.parse_args()
    entry = get_task(a.task)
    a.resume = a.resume or a.eval_only
    if not a.resume and entry.task_cls.command_dim == 0:
        p.error(f"{a.task} has no velocity command; pick a legged task")
    return a


def start(a: argparse.Namespace, seed: int, run_dir: Path, out: Path | None):
    """(trainer, rows so far, training seconds so far): resumed from run_dir, or new (also
    under --resume when run_dir has no checkpoint yet: a seed the split run never began)."""
    if a.resume and (a.eval_only or (run_dir / CHECKPOINT).exists()):
        # the run's own task, whatever --task says
        trainer, wall_s = resume(run_dir)
        a.task = trainer.cfg.task
        return trainer, [] if out is None else _read_csv(out), wall_s
    entry = get_task(a.task)
    agent = tuned(entry.agent + tuple(parse_override(x) for x in a.agent))
    env_cfg = dataclasses.replace(entry.config, **dict(map(parse_override, a.env)))
    train = dict(map(parse_override, a.train))
    mode = Sync(**{k: train.pop(k) for k in list(train)
                   if k in {f.name for f in dataclasses.fields(Sync)}})
    cfg = TrainConfig(task=a.task, num_envs=a.num_envs, seed=seed, agent=agent,
                      sim=a.sim, device=a.device, mode=mode,
                      env=env_cfg, max_env_steps=10**12, run_dir=str(run_dir), **train)
    trainer = build(cfg)
    run_dir.mkdir(parents=True, exist_ok=True)
    save_json(run_dir / "config.json", cfg)
    return trainer, [], 0.0


def _met(a: argparse.Namespace, row: dict[str, float]) -> bool:
    return not missed(a, row)


def eval_config(a: argparse.Namespace, config):
    """The run's task config with --eval-env's overrides (a field the task lacks: an error
    naming it, raised before any run directory is written since main calls this first)."""
    try:
        return dataclasses.replace(config, **dict(map(parse_override, a.eval_env)))
    except TypeError as e:
        raise SystemExit(f"--eval-env: {e}; the task's fields: "
                         f"{', '.join(f.name for f in dataclasses.fields(config))}") from None


def evaluation_row(a, trainer, train_s: float, last_return: float) -> dict[str, float]:
    config, seed = eval_config(a, trainer.cfg.env), 10_000 + trainer.cfg.seed
    row = {"train_s": train_s, "env_steps": trainer.env_steps,
           "train_return": last_return} | evaluate_now(a.task, config, trainer.ac.actor,
                                                        a.episodes, seed)
    if "terrain" in {f.name for f in dataclasses.fields(config)}:
        level = float(trainer.env.task.iteration_metrics()["terrain_level"])
        row |= {"terrain_level": level, "terrain_share": level / max(
            config.terrain_rows - 1, 1)} | evaluate_course(a.task, config, trainer.ac.actor,
                                                  a.episodes, seed)
    print(" ".join(f"{row[c]:>16.4g}" for c in COLUMNS), flush=True)
    extra = [f"{k} {v:.3g}" for k, v in row.items() if k not in COLUMNS]
    if extra:  # terrain and gait columns
        print("   " + ", ".join(extra), flush=True)
    print("   goals missed: " + (", ".join(missed(a, row)) or "none"), flush=True)
    return row


def run_seed(a: argparse.Namespace, seed: int, run_dir: Path, out: Path) -> dict:
    """Train one seed to the budget with its evaluations; returns its summary."""
    trainer, rows, train_s = start(a, seed, run_dir, None if a.eval_only else out)
    if a.eval_only:
        print(" ".join(f"{c:>16}" for c in COLUMNS), flush=True)
        row = evaluation_row(a, trainer, train_s, math.nan)
        return {"seed": trainer.cfg.seed, "rate": trainer.env_steps / max(train_s, 1e-9),
                "hit_min": math.nan, "hit_msteps": math.nan} | row
    # metrics.csv with per-term reward sums; curve.png redrawn rarely (it costs train time)
    logger = RunLogger(run_dir, tensorboard=False, curve_every_s=600.0,
                       iteration=trainer.iteration, env_steps=trainer.env_steps)
    prev = (train_s, trainer.env_steps)
    last_return = float("nan")
    print(" ".join(f"{c:>16}" for c in COLUMNS), flush=True)
    while train_s < 60 * a.budget_min:
        if a.stop_when_met and any(_met(a, r) for r in rows):
            break
        t0 = time.perf_counter()
        while time.perf_counter() - t0 < 60 * a.eval_every_min and \
                train_s + time.perf_counter() - t0 < 60 * a.budget_min:
            m = trainer.iterate()
            now = train_s + time.perf_counter() - t0
            logger.log(m | {"wall_s": now, "steps_per_s": (trainer.env_steps - prev[1])
                            / max(now - prev[0], 1e-9)})
            prev = (now, trainer.env_steps)
            last_return = m.get("episode_return", last_return)
        train_s += time.perf_counter() - t0
        rows.append(evaluation_row(a, trainer, train_s, last_return))
        # the rows first: a kill between the two leaves a row that --resume re-trains past
        # (the checkpoint is the one before it), never a checkpoint without its row
        atomic_write(out, lambda path: _write_csv(path, rows))
        save(trainer, run_dir, train_s)
    logger.close()
    try:
        from trot.export.onnx import export_run

        if trainer.cfg.export:  # --train export=False: as trot train's --no-export
            export_run(run_dir)
    except ImportError:
        pass
    hit = next((r for r in rows if _met(a, r)), None)
    rate = trainer.env_steps / max(train_s, 1e-9)
    print(f"\ntask={a.task} N={trainer.env.num_envs} seed={trainer.cfg.seed} "
          f"agent overrides={a.agent or None} env overrides={a.env or None} "
          f"threads={getattr(trainer.env.sim, 'nthread', 0)} "
          f"env-steps/s={rate:,.0f} budget={a.budget_min:.0f} min")
    when = (f"{hit['train_s'] / 60:.1f} min, {hit['env_steps'] / 1e6:.1f} M env steps"
            if hit else "not reached")
    print(f"first time every goal held ({' '.join(a.goals)}; tracking error <= "
          f"{a.max_error:.2f} m/s and fall rate <= {100 * a.max_falls:.0f}% with walk): "
          + when)
    print(f"run directory: {run_dir}", flush=True)
    return {"seed": trainer.cfg.seed, "rate": rate,
            "hit_min": hit["train_s"] / 60 if hit else math.nan,
            "hit_msteps": hit["env_steps"] / 1e6 if hit else math.nan}


def run_stacked(a: argparse.Namespace, run_dir: Path, out: Path) -> list[dict]:
    """--seeds --stacked: the seeds trained together to the budget (or, with
    --stop-when-met, until every seed has met the thresholds), every seed evaluated at
    each evaluation; one CSV per seed. Returns each seed's summary (its rate: the stack's
    env-steps/s of all seeds over the number of seeds)."""
    outs = [out.with_name(f"{out.stem}_seed{k}{out.suffix}") for k in a.seeds]
    if a.resume and (run_dir / CHECKPOINT).exists():
        (stack, train_s), rows = resume(run_dir), [_read_csv(o) for o in outs]
    else:
        entry = get_task(a.task)
        cfg = TrainConfig(task=a.task, num_envs=a.num_envs, mode=Seeds(tuple(a.seeds)),
                          agent=tuned(entry.agent + tuple(parse_override(x) for x in a.agent)),
                          env=dataclasses.replace(entry.config, **dict(map(parse_override,
                                                                          a.env))),
                          max_env_steps=10**12, run_dir=str(run_dir),
                          **dict(map(parse_override, a.train)))
        (stack, _), rows, train_s = start_learner(cfg), [[] for _ in a.seeds], 0.0
    returns = [math.nan] * len(a.seeds)  # each seed's last known
    print(" ".join(f"{c:>16}" for c in COLUMNS), flush=True)
    while train_s < 60 * a.budget_min and not (
            a.stop_when_met and all(any(_met(a, r) for r in own) for own in rows)):
        t0 = time.perf_counter()
        while time.perf_counter() - t0 < 60 * a.eval_every_min and \
                train_s + time.perf_counter() - t0 < 60 * a.budget_min:
            stack.iterate()
            returns = [m.get("episode_return", r) for m, r in zip(stack.last, returns)]
        train_s += time.perf_counter() - t0
        for own, tr, o, ret in zip(rows, stack.trainers, outs, returns):
            own.append(evaluation_row(a, tr, train_s, ret))
            atomic_write(o, lambda path, own=own: _write_csv(path, own))
        save(stack, run_dir, train_s)
    hits = [next((r for r in own if _met(a, r)), None) for own in rows]
    return [{"seed": s, "rate": stack.env_steps / max(train_s, 1e-9),
             "hit_min": h["train_s"] / 60 if h else math.nan,
             "hit_msteps": h["env_steps"] / 1e6 if h else math.nan}
            for s, h in zip(a.seeds, hits)]


def _spread(values: list[float]) -> str:
    """median (min..max); a seed that never met the thresholds counts as above the rest."""
    met = [v for v in values if not math.isnan(v)]
    if len(met) * 2 <= len(values):  # the median itself was not reached
        return f"not reached by {len(values) - len(met)} of {len(values)} seeds"
    ranked = sorted(met) + [math.inf] * (len(values) - len(met))
    top = "not reached" if math.isinf(ranked[-1]) else f"{ranked[-1]:.1f}"
    return f"{statistics.median(ranked):.1f} ({ranked[0]:.1f}..{top})"


def main() -> None:
    a = parse_args()
    eval_config(a, get_task(a.task).config)  # a bad --eval-env fails now, not at a row
    base_dir = Path(a.run_dir or f"runs/{a.task}/locomotion_cpu")
    out = Path(a.out)
    if a.seeds is None:
        run_seed(a, a.seed, base_dir, out)
        return
    results = run_stacked(a, base_dir, out) if a.stacked else [
        run_seed(a, k, base_dir.with_name(f"{base_dir.name}_seed{k}"),
                 out.with_name(f"{out.stem}_seed{k}{out.suffix}")) for k in a.seeds]
    print("\n  seed  env-steps/s  goals met at (min)  (M env steps)")
    for r in results:
        print(f"{r['seed']:>6}  {r['rate']:>11,.0f}  {r['hit_min']:>18.1f}  "
              f"{r['hit_msteps']:>13.1f}")
    if not any(math.isnan(r["hit_min"]) for r in results):  # every seed walks: by then
        last = max(r["hit_min"] for r in results) if a.stacked else sum(  # in turn: the sum
            r["hit_min"] for r in results)
        print(f"{len(results)} walking seeds after {last:.1f} min of training "
              f"({'together' if a.stacked else 'one after another'})")
    print(f"median (range) over {len(results)} seeds: "
          f"{_spread([r['hit_min'] for r in results])} min, "
          f"{_spread([r['hit_msteps'] for r in results])} M env steps, "
          f"{statistics.median(r['rate'] for r in results):,.0f} env-steps/s")


if __name__ == "__main__":
    main()
