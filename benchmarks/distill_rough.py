"""go1-rough, blind: a student distilled from a teacher that sees the height scan, against
a policy trained blind directly for the same total wall-clock, the teacher's time included
(issue 53, part 1).

    python benchmarks/distill_rough.py --teacher-min 20 --distill-min 10 --episodes 256 \
        --agent update-dtype=bfloat16 --run-root runs/distill_rough \
        --out docs/data/distill_go1_rough.csv

Three ordinary trot runs, one after the other, through the CLI (`trot.cli.main`, in this
process):
- teacher: `trot train go1-rough --env.scan-policy` (the scan in each of the policy's
  frames) for `--teacher-min` minutes of training;
- student: `trot distill TEACHER go1-rough` (the registered blind policy, a 4-frame
  history) for `--distill-min`;
- blind: `trot train go1-rough` for `--teacher-min` + `--distill-min`.
`--agent FIELD=VALUE` flags go to the teacher and the blind run alike, `--distill
FIELD=VALUE` to the student, `--flags='...'` (e.g. `--num-envs 512`) to all three. A run
whose directory under `--run-root` has a checkpoint resumes to its minutes (a finished one
returns at once), so an interrupted benchmark goes on with the same command.

Then each policy plays, as benchmarks/locomotion_cpu.py's evaluations do (noise off,
pushes on), `--episodes` episodes on the training terrain at the starting levels and
`--episodes` on the fixed course (15 degree slopes and 10 cm stairs, up and down). One row
per policy goes to `--out` and is printed: the wall-clock it stands for (the student's
includes its teacher's), env steps, tracking error, falls, the share of course tiles
crossed and the training envs' last mean terrain level.
"""

from __future__ import annotations

import argparse
import csv
import math
import shlex
import sys
from pathlib import Path

if str(Path(__file__).resolve().parent) not in sys.path:  # run as a script
    sys.path.insert(0, str(Path(__file__).resolve().parent))
from locomotion_cpu import _write_csv, evaluate_course, evaluate_now  # noqa: E402

from trot.cli import main as cli_main  # noqa: E402
from trot.core.files import atomic_write
from trot.agents.runs import CHECKPOINT, load_run, read_checkpoint  # noqa: E402
from trot.tasks.registry import get_task  # noqa: E402

TASK = "go1-rough"


def _flags(prefix: str, pairs: list[str]) -> list[str]:
    """FIELD=VALUE pairs as the CLI's `--prefix.field value` flags."""
    out = []
    for pair in pairs:
        field, _, value = pair.partition("=")
        out += [f"--{prefix}.{field.replace('_', '-')}", value]
    return out


def phases(a: argparse.Namespace) -> list[tuple[str, list[str], float]]:
    """(name, the command that starts it, its training minutes), in order."""
    root, agent, every = Path(a.run_root), _flags("agent", a.agent), shlex.split(a.flags)
    return [
        ("teacher", ["train", TASK, "--env.scan-policy", *agent, *every], a.teacher_min),
        ("student", ["distill", str(root / "teacher"), TASK, *_flags("distill", a.distill),
                     *every], a.distill_min),
        ("blind", ["train", TASK, *agent, *every], a.teacher_min + a.distill_min),
    ]


def run_phase(name: str, start: list[str], minutes: float, run_dir: Path) -> None:
    """Start the run, or resume it to `minutes` where it has a checkpoint (none: done)."""
    resume = (run_dir / CHECKPOINT).exists()
    if resume and read_checkpoint(run_dir).counters.wall_s >= 60 * minutes:
        return
    cmd = [start[0], "--resume", str(run_dir)] if resume else [
        *start, "--run-dir", str(run_dir), "--no-export"]
    cmd = [*cmd, "--minutes", str(minutes)]
    print(f"[{name}] trot {' '.join(cmd)}", flush=True)
    if cli_main(cmd) != 0:
        raise SystemExit(f"[{name}] trot {' '.join(cmd)} failed")


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
    seed = 10_000 + run.cfg.seed
    row = {"policy": name, "minutes": (before_s + at.wall_s) / 60,
           "own_minutes": at.wall_s / 60, "env_steps": at.env_steps,
           "terrain_level": last_level(run_dir)}
    env = run.cfg.env or get_task(TASK).config
    row |= evaluate_now(TASK, env, run.ac.actor, episodes, seed)
    row |= evaluate_course(TASK, env, run.ac.actor, episodes, seed)
    return row


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--teacher-min", type=float, default=20.0)
    p.add_argument("--distill-min", type=float, default=10.0)
    p.add_argument("--episodes", type=int, default=256,
                   help="evaluation episodes, each on the training terrain and the course")
    p.add_argument("--agent", nargs="*", default=[], metavar="FIELD=VALUE",
                   help="teacher's and blind run's --agent.FIELD flags, e.g. "
                        "update-dtype=bfloat16")
    p.add_argument("--distill", nargs="*", default=[], metavar="FIELD=VALUE",
                   help="the student's --distill.FIELD flags, e.g. learning-rate=3e-4")
    p.add_argument("--flags", default="",
                   help="further flags for all three runs, e.g. --flags='--num-envs 512'")
    p.add_argument("--run-root", default="runs/distill_rough")
    p.add_argument("--out", default="distill_go1_rough.csv")
    return p.parse_args(argv)


def train_all(a: argparse.Namespace) -> None:
    """The three runs, each started, resumed to its minutes, or left as it is if done."""
    for name, start, minutes in phases(a):
        run_phase(name, start, minutes, Path(a.run_root) / name)


def main(argv: list[str] | None = None) -> None:
    a = parse_args(argv)
    root = Path(a.run_root)
    train_all(a)
    teacher_s = read_checkpoint(root / "teacher").counters.wall_s
    rows = [evaluate(name, root / name, teacher_s if name == "student" else 0.0, a.episodes)
            for name, _, _ in phases(a)]
    atomic_write(Path(a.out), lambda path: _write_csv(path, rows))
    for r in rows:
        print(", ".join(f"{k} {v:.4g}" if isinstance(v, float) else f"{k} {v}"
                        for k, v in r.items()), flush=True)


if __name__ == "__main__":
    main()
