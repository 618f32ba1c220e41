"""What the scripts in benchmarks/ share, so that each holds its measurement and nothing
else (benchmarks/README in docs/benchmarks.md, "How the benchmarks run"):

- the command line, `main`: the benchmark's own settings, a frozen dataclass whose field
  docstrings are its --help, then, after `--`, exactly `trot train`'s arguments (the task,
  the mode, --seed, --agent.*, --env.*) for the run it trains: one parser for them all;
- the run, `run_to_goals`: a new or resumed run of that config through the one loop
  (agents/loop.py), evaluated every so many minutes of training clock (`Timed`: rows in a
  CSV as it goes, checked against `Goal`s), stopping at the budget or when every goal
  holds; a resumed run continues its rows from its checkpoint, with none repeated;
- over seeds, `spread`: the median and range, a seed that missed counted as the slowest.
"""

from __future__ import annotations

import csv
import dataclasses
import math
import statistics
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from fnmatch import fnmatch
from pathlib import Path
from typing import Any, TypeVar

import tyro

from trot.agents.checkpoint import Counters
from trot.agents.config import parse_override
from trot.agents.evaluate import evaluate_policy
from trot.agents.learners import resume, start
from trot.agents.logger import CsvRows
from trot.agents.loop import CHECKPOINT, Learner, train
from trot.agents.runs import course_changes, read_checkpoint
from trot.agents.train_config import TrainConfig
from trot.cli_train import parse_train
from trot.core.files import atomic_write

S = TypeVar("S")
Row = dict[str, float]


# ---------------------------------------------------------------------- the command line
def main(settings: type[S], run: Callable[[S, TrainConfig], Any],
         train_args: Sequence[str] = ("cartpole-balance",),
         argv: Sequence[str] | None = None) -> Any:
    """`python benchmarks/NAME.py [SETTINGS] [-- TASK TRAIN FLAGS]`: `settings` parsed from
    the flags before `--`, the TrainConfig of `trot train` from those after it (default:
    `train_args`), then run(settings, cfg)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    cut = argv.index("--") if "--" in argv else len(argv)
    _refuse_train_flags(settings, argv[:cut])
    own = tyro.cli(settings, args=argv[:cut], prog=Path(sys.argv[0]).name,
                   description=sys.modules[settings.__module__].__doc__)
    cfg = parse_train(given_train_args(argv, train_args), prog="... --")
    return run(own, cfg)


def _refuse_train_flags(settings: type, flags: Sequence[str]) -> None:
    """A training flag given before `--` (the form before 2026-12-07: `--task T --agent
    FIELD=VALUE`) is refused with the spelling that works now."""
    own = {f.name for f in dataclasses.fields(settings)}
    train = {f.name for f in dataclasses.fields(TrainConfig)} | {"agent", "env", "train"}
    for flag in flags:
        name = flag.split("=")[0].removeprefix("--").replace("-", "_")
        if flag.startswith("--") and name not in own and name.split(".")[0] in train:
            raise SystemExit(
                f"{flag} is a setting of the run this benchmark trains: give it after `--`, "
                "as `trot train` takes it (the task first, then e.g. --seed 1 --num-envs "
                "1024 --agent.symmetry augment --env.obs-history 4): python "
                f"{Path(sys.argv[0]).name} [its own flags] -- TASK [trot train flags]")


def given_train_args(argv: Sequence[str] | None = None,
                     default: Sequence[str] = ("cartpole-balance",)) -> list[str]:
    """The `trot train` arguments after `--` (default: `default`), as given: for a
    benchmark that runs `trot train` itself, in new processes."""
    argv = list(sys.argv[1:] if argv is None else argv)
    return argv[argv.index("--") + 1:] if "--" in argv and argv[-1] != "--" else list(default)


def overrides(pairs: Sequence[str]) -> dict[str, Any]:
    """FIELD=VALUE pairs (the value a Python literal where it parses as one)."""
    return dict(map(parse_override, pairs))


# ---------------------------------------------------------------------- goals
@dataclass(frozen=True)
class Goal:
    """Every row column matching `column` (fnmatch: each foot, each course tile) lies in
    [low, high]; a missing or NaN value does not hold."""

    column: str
    low: float = -math.inf
    high: float = math.inf

    def missed(self, row: Row) -> list[str]:
        """The matching columns outside the goal, as 'column value (goal)'."""
        got = {k: v for k, v in row.items() if fnmatch(k, self.column)} or {self.column: None}
        want = (f"<= {self.high:g}" if self.low == -math.inf else f">= {self.low:g}"
                if self.high == math.inf else f"{self.low:g}..{self.high:g}")
        return [f"{k} {v if v is None else round(v, 3)} ({want})" for k, v in got.items()
                if v is None or v != v or not self.low <= v <= self.high]


def missed(goals: Sequence[Goal], row: Row) -> list[str]:
    return [m for g in goals for m in g.missed(row)]


# ---------------------------------------------------------------------- locomotion
def locomotion_row(task: str, config, actor, episodes: int, seed: int) -> Row:
    """agents/evaluate.py's evaluation of a velocity-tracking policy (cpu backend, noise
    off) as the benchmarks' columns: tracking errors, fall rate, episode length (s),
    energy per meter, and the gait and course-crossing columns where the task has them."""
    r, env = evaluate_policy(task, config, actor, episodes, seed)
    return {"lin_vel_error": r["lin_vel_error"], "yaw_rate_error": r["yaw_rate_error"],
            "fall_rate": r["terminated_rate"], "episode_s": r["mean_length"] * env.control_dt,
            "energy_per_meter": r["power"] / max(r["speed"], 1e-6)} | {
            k.replace("/", "_"): math.nan if v is None else v
            for k, v in r.items() if k.startswith(("crossed/", "gait/"))
            and not k.endswith("_second_half")}


def course_row(task: str, config, actor, episodes: int, seed: int) -> Row:
    """A terrain task on its fixed course: crossed_TYPE, course error and falls."""
    r = locomotion_row(task, dataclasses.replace(config, **course_changes(task, config)),
                       actor, episodes, seed)
    return {f"course_{k}" if not k.startswith("crossed_") else k: v for k, v in r.items()
            if k in ("lin_vel_error", "fall_rate") or k.startswith("crossed_")}


# ---------------------------------------------------------------------- rows
def number(text: str) -> float:
    """A CSV cell as written: ints stay ints (a resumed run rewrites its rows unchanged),
    a blank is NaN."""
    if not text:
        return math.nan
    return int(text) if text.lstrip("-").isdigit() else float(text)


class Results:
    """A benchmark's result rows (one per run, seed or configuration) in a CSV rewritten
    atomically after each row, so a long benchmark leaves its rows as it goes; `resume`
    reads the file's rows back (numbers as written) so that a rerun skips what is done
    (`find`). Columns that appear later widen the file (earlier rows leave them blank)."""

    def __init__(self, path: Path, resume: bool = False):
        self.path = Path(path)
        self.rows: list[Row] = []
        if resume and self.path.is_file():
            with open(self.path, newline="") as f:
                self.rows = [{k: _cell_value(v) for k, v in r.items()}
                             for r in csv.DictReader(f)]

    def find(self, **key: Any) -> Row | None:
        """The first row whose columns equal `key` (a configuration already run)."""
        return next((r for r in self.rows if all(r.get(k) == v for k, v in key.items())),
                    None)

    def add(self, row: Row) -> None:
        self.rows.append(row)
        columns = list(dict.fromkeys(k for r in self.rows for k in r))

        def write(path: Path) -> None:
            with open(path, "w", newline="") as f:
                w = csv.DictWriter(f, fieldnames=columns)
                w.writeheader()  # NaN as blank, as it is read back
                w.writerows({k: "" if isinstance(v, float) and v != v else v
                             for k, v in r.items()} for r in self.rows)

        atomic_write(self.path, write)


def _cell_value(text: str) -> Any:
    """A cell read back: a number where it is one, else the text."""
    try:
        return number(text)
    except ValueError:
        return text


class Timed:
    """The loop's evaluation (agents/loop.py's `Evaluation`) every `every_min` minutes of
    training clock: `measure(learner)` gives the row's measurements, which are appended to
    `path` with the counters (iteration, train_s, env_steps) and the training return so
    far, printed, and checked against `goals`. A checkpoint follows each row, and a
    resumed run drops any row past its checkpoint (agents/logger.py's CsvRows)."""

    checkpoints = True

    def __init__(self, path: Path, at: Counters, every_min: float,
                 measure: Callable[[Learner], Row], goals: Sequence[Goal] = (),
                 stop_when_met: bool = False, show: Callable[[Row], None] = print):
        self.csv = CsvRows(Path(path), ("iteration", "train_s", "env_steps"), at.iteration)
        self.rows = [{k: number(v) for k, v in r.items()} for r in self.csv.kept]
        self.every_s, self.measure, self.goals = 60 * every_min, measure, tuple(goals)
        self.stop_when_met, self.show = stop_when_met, show
        self.next_s = (math.floor(at.wall_s / self.every_s) + 1) * self.every_s
        self.last_return = self.rows[-1].get("train_return", math.nan) if self.rows \
            else math.nan

    def due(self, learner: Learner, m: Row, at: Counters) -> bool:
        self.last_return = m.get("episode_return", self.last_return)
        return at.wall_s >= self.next_s

    def __call__(self, learner: Learner, at: Counters) -> None:
        row = {"iteration": at.iteration, "train_s": at.wall_s, "env_steps": at.env_steps,
               "train_return": self.last_return} | self.measure(learner)
        self.rows.append(row)
        self.csv.append(row)
        self.next_s += self.every_s
        self.show(row)
        if self.goals:
            print("   goals missed: " + (", ".join(missed(self.goals, row)) or "none"),
                  flush=True)

    def done(self) -> bool:
        return self.stop_when_met and self.first_met() is not None

    def first_met(self) -> Row | None:
        """The first row where every goal held."""
        return next((r for r in self.rows if self.goals and not missed(self.goals, r)), None)


def run_to_goals(cfg: TrainConfig, again: bool, evaluation: Callable[[Counters], Timed],
                 export: Callable[[Path], None] | None = None) -> tuple[Learner, Timed]:
    """The run of cfg in cfg.run_dir to its budget (cfg.minutes, cfg.max_env_steps) or its
    goals, evaluated by evaluation(where it starts); `again`: continue the run there from
    its checkpoint (a run without one yet starts). Returns the learner and the evaluation
    (its rows)."""
    run_dir = Path(cfg.run_dir)
    if again and (run_dir / CHECKPOINT).is_file():
        spent = read_checkpoint(run_dir).counters  # a budget already spent: kept as it is
        budgets = {"max_env_steps": cfg.max_env_steps} if cfg.max_env_steps > \
            spent.env_steps else {}
        budgets |= {"minutes": cfg.minutes} if 60 * cfg.minutes > spent.wall_s else {}
        learner, wall_s = resume(run_dir, changes=budgets)
    else:
        (learner, run_dir), wall_s = start(cfg), 0.0
    timed = evaluation(Counters(learner.iteration, learner.env_steps, wall_s))
    if not timed.done():
        train(learner, run_dir, wall_s, quiet=True, export=export, evaluation=timed)
    return learner, timed


# ---------------------------------------------------------------------- peers' logs
RETURN_COL = {"trot": "episode_return", "sb3": "mean_return", "rlgames": "mean_return"}
"""each stack's return column in its training log (benchmarks/compare_ant.py's race)"""
WINDOW_S = 10.0
"""the window of a return read at a time: the episodes that ended in the last WINDOW_S"""


def read_rows(path: Path, name: str) -> list[tuple[float, float, float | None, float]]:
    """(wall_s, env_steps, return or None, episodes) per logged row."""
    rows = []
    with open(path) as f:
        for r in csv.DictReader(f):
            ret = r.get(RETURN_COL[name]) or ""
            eps = float(r.get("episodes") or 0.0)
            rows.append((float(r["wall_s"]), float(r["env_steps"]),
                         float(ret) if ret.strip() else None, eps if ret.strip() else 0.0))
    return rows


def return_at(rows, t: float) -> float | None:
    """Episode-weighted mean return of the rows in (t - WINDOW_S, t]; else the last before t."""
    win = [(ret, eps) for w, _, ret, eps in rows if t - WINDOW_S < w <= t and ret is not None]
    n = sum(max(eps, 1.0) for _, eps in win)
    if win:
        return sum(ret * max(eps, 1.0) for ret, eps in win) / n
    before = [ret for w, _, ret, _ in rows if w <= t and ret is not None]
    return before[-1] if before else None



def fmt_time(t: float | None) -> str:
    """Seconds as the peers' table writes a time (1m05s), or 'not reached'."""
    return "not reached" if t is None else f"{int(t // 60)}m{int(t % 60):02d}s"


# ---------------------------------------------------------------------- seeds
def spread(values: Sequence[float], digits: int = 1) -> str:
    """median (min..max) over seeds; a seed that never reached it (NaN) counts as above
    the rest, and a median it decides is 'not reached'."""
    met = [v for v in values if not math.isnan(v)]
    if len(met) * 2 <= len(values):  # the median itself was not reached
        return f"not reached by {len(values) - len(met)} of {len(values)} seeds"
    ranked = sorted(met) + [math.inf] * (len(values) - len(met))
    top = "not reached" if math.isinf(ranked[-1]) else f"{ranked[-1]:.{digits}f}"
    return f"{statistics.median(ranked):.{digits}f} ({ranked[0]:.{digits}f}..{top})"


def seed_config(cfg: TrainConfig, seed: int, run_dir: Path) -> TrainConfig:
    """cfg as seed `seed`'s own run in run_dir."""
    return dataclasses.replace(cfg, seed=seed, run_dir=str(run_dir))
