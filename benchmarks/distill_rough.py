"""go1-rough, blind: a student distilled from a teacher that sees the height scan, against
a policy trained blind directly for the same total wall-clock, the teacher's time included
(issue 53, part 1).

    python benchmarks/distill_rough.py --teacher-min 20 --distill-min 10 --episodes 256 \
        --out docs/data/distill_go1_rough.csv -- go1-rough --agent.update-dtype bfloat16 \
        --run-dir runs/distill_rough

The flags before `--` are this benchmark's; after it come `trot train`'s own (default
`go1-rough`), for all three runs: the task, `--num-envs`, `--seed`, `--agent.FIELD V`,
`--env.FIELD V`, `--run-dir` (the three runs' folder, default runs/distill_rough). Three
ordinary trot runs, one after the other, in this process through trot's one loop
(agents/loop.py):
- teacher: `trot train TASK --env.scan-policy` (the scan in each of the policy's frames)
  for `--teacher-min` minutes of training;
- student: `trot distill TEACHER TASK` (the registered blind policy, a 4-frame history)
  for `--distill-min`, with `--distill FIELD=VALUE` as its `--distill.FIELD VALUE`;
- blind: `trot train TASK` for `--teacher-min` + `--distill-min`.
A run whose directory has a checkpoint resumes to its minutes (a finished one returns at
once), so an interrupted benchmark goes on with the same command.

Then each policy plays, as benchmarks/locomotion_cpu.py's evaluations do (noise off,
pushes on), `--episodes` episodes on the training terrain at the starting levels and
`--episodes` on the fixed course (15 degree slopes and 10 cm stairs, up and down). One row
per policy goes to `--out` and is printed: the wall-clock it stands for (the student's
includes its teacher's), env steps, tracking error, falls, the share of course tiles
crossed and the training envs' last mean terrain level.
"""

from __future__ import annotations

import csv
import dataclasses
import math
from dataclasses import dataclass
from pathlib import Path

from trot.agents.config import DistillSettings
from trot.agents.learners import resume, start
from trot.agents.loop import train
from trot.agents.runs import CHECKPOINT, load_run, read_checkpoint
from trot.agents.modes import Distill
from trot.agents.train_config import TrainConfig
from trot.benchmark import Results, course_row, locomotion_row, main, overrides
from trot.tasks.registry import get_task

TRAIN = ("go1-rough",)
ROOT = "runs/distill_rough"  # the runs' folder when the train args give no --run-dir


@dataclass(frozen=True)
class Settings:
    teacher_min: float = 20.0
    """the teacher's minutes of training"""
    distill_min: float = 10.0
    """the student's minutes of distillation (the blind run trains for both)"""
    episodes: int = 256
    """evaluation episodes, each on the training terrain and on the course"""
    distill: tuple[str, ...] = ()
    """the student's FIELD=VALUE distillation settings (trot distill's --distill.FIELD),
    e.g. learning_rate=3e-4"""
    out: str = "distill_go1_rough.csv"
    """the rows' CSV, one row per policy"""


def phases(s: Settings, cfg: TrainConfig) -> list[tuple[str, str, TrainConfig]]:
    """(name, the trot command it is, its config), in order."""
    root, env = Path(cfg.run_dir or ROOT), cfg.env or get_task(cfg.task).config
    base = dataclasses.replace(cfg, export=False)
    try:
        teacher_env = dataclasses.replace(env, scan_policy=True)
        distill = dataclasses.replace(DistillSettings(), **{
            k.replace("-", "_"): v for k, v in overrides(s.distill).items()})
    except TypeError as e:
        raise SystemExit(f"{cfg.task}'s teacher or --distill: {e}") from None
    teacher = dataclasses.replace(base, env=teacher_env, minutes=s.teacher_min,
                                  run_dir=str(root / "teacher"))
    student = dataclasses.replace(base, mode=Distill(str((root / "teacher").resolve()),
                                                     distill),
                                  minutes=s.distill_min, run_dir=str(root / "student"))
    blind = dataclasses.replace(base, minutes=s.teacher_min + s.distill_min,
                                run_dir=str(root / "blind"))
    return [("teacher", f"train {cfg.task} --env.scan-policy", teacher),
            ("student", f"distill {root / 'teacher'} {cfg.task}", student),
            ("blind", f"train {cfg.task}", blind)]


def run_phase(name: str, command: str, cfg: TrainConfig) -> None:
    """Start the run, or resume it to its minutes where it has a checkpoint (none: done)."""
    run_dir = Path(cfg.run_dir)
    again = (run_dir / CHECKPOINT).exists()
    if again and read_checkpoint(run_dir).counters.wall_s >= 60 * cfg.minutes:
        return
    print(f"[{name}] trot {command}: {cfg.minutes:g} min of training in {run_dir}"
          f"{' (resumed)' if again else ''}", flush=True)
    try:
        if again:
            learner, wall_s = resume(run_dir, changes={"minutes": cfg.minutes})
        else:
            (learner, run_dir), wall_s = start(cfg), 0.0
    except ValueError as e:
        raise SystemExit(f"[{name}] trot {command}: {e}") from None
    train(learner, run_dir, wall_s)


def train_all(s: Settings, cfg: TrainConfig) -> None:
    """The three runs, each started, resumed to its minutes, or left as it is if done."""
    for name, command, phase in phases(s, cfg):
        run_phase(name, command, phase)


def last_level(run_dir: Path) -> float:
    """The training envs' mean terrain level in the run's last logged iteration."""
    with open(run_dir / "metrics.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    value = rows[-1].get("task/terrain_level") or rows[-1].get("terrain_level") if rows else ""
    return float(value) if value else math.nan


def evaluate(name: str, run_dir: Path, before_s: float, episodes: int) -> dict:
    """One row: the policy in run_dir on the training terrain and on the course."""
    run = load_run(run_dir, num_envs=1)
    at = read_checkpoint(run_dir).counters
    task, seed = run.cfg.task, 10_000 + run.cfg.seed
    row = {"policy": name, "minutes": (before_s + at.wall_s) / 60,
           "own_minutes": at.wall_s / 60, "env_steps": at.env_steps,
           "terrain_level": last_level(run_dir)}
    env = run.cfg.env or get_task(task).config
    row |= locomotion_row(task, env, run.ac.actor, episodes, seed)
    row |= course_row(task, env, run.ac.actor, episodes, seed)
    return row


def run(s: Settings, cfg: TrainConfig) -> None:
    train_all(s, cfg)
    dirs = {name: Path(phase.run_dir) for name, _, phase in phases(s, cfg)}
    teacher_s = read_checkpoint(dirs["teacher"]).counters.wall_s
    results = Results(Path(s.out))
    for name, run_dir in dirs.items():
        results.add(evaluate(name, run_dir, teacher_s if name == "student" else 0.0,
                             s.episodes))
    for r in results.rows:
        print(", ".join(f"{k} {v:.4g}" if isinstance(v, float) else f"{k} {v}"
                        for k, v in r.items()), flush=True)


if __name__ == "__main__":
    main(Settings, run, TRAIN)
