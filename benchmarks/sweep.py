"""One `--agent.FIELD` swept over given values and seeds: per run, the env steps and training
seconds at which the deterministic policy's evaluation return first reached a goal.

    python benchmarks/sweep.py --field value-scale --values 1 3 10 30 --seeds 0 1 2 3 4 5 \\
        --label no_popart --goal 475 --eval-every 5 --max-env-steps 1000000 \\
        --out-dir docs/data/critic_scale -- cartpole-balance --algo a2c --agent.no-popart
    python benchmarks/sweep.py --field lam --values 0 0.5 0.95 --seeds 0 1 2 \\
        --out-dir docs/data/lambda_sweep -- cartpole-balance
    python benchmarks/sweep.py --field lam --out-dir docs/data/lambda_sweep --table

The flags before `--` are this benchmark's; after it come `trot train`'s own (default
`cartpole-balance`): the task, --algo, --num-envs, other `--agent.*` and `--env.*` flags,
the same for every run. Each (value, seed) is one new process,

    python -m trot train TASK ... --agent.FIELD V --seed S --eval-every K
        --max-env-steps M --run-dir TMP --no-export

whose eval.csv (agents/periodic_eval.py: every K iterations, the deterministic policy on
32 fresh envs, the training clock paused) gives the run's row: the value under the
field's name, goal_env_steps and goal_train_s (the first evaluation whose mean_return >=
--goal; blank if none), goal_env_steps_capped (the same, or the run's last env steps
where the goal was never reached: a lower bound that a plot can keep), final_return,
best_return, reached, env_steps and train_s at the end, and wall_s (the whole process, its
start-up included). Rows land in OUT_DIR/{label}_seed{S}.csv as each run ends (`--label`,
default the field, names the curve, so two sweeps may share a folder); `--resume` skips
the runs already there. The table: per label and value, how many seeds reached the goal
and the median (min..max) env steps to it, a seed that missed counted as the slowest.
benchmarks/plots.py draws docs/img/critic_scale.png and lambda_sweep.png from such files.
"""

from __future__ import annotations

import csv
import dataclasses
import math
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from trot.agents.config import PPOConfig
from trot.agents.periodic_eval import EVAL_CSV
from trot.agents.train_config import TrainConfig
from trot.benchmark import Results, given_train_args, main, number, spread
from trot.cli_train import parse_train

TRAIN = ("cartpole-balance",)
SET_HERE = ("--seed", "--eval-every", "--max-env-steps", "--run-dir", "--export",
            "--no-export")  # each run's own flags: given after `--` they would clash


@dataclass(frozen=True)
class Settings:
    out_dir: str
    """the CSVs' folder"""
    field: str = "lam"
    """the PPOConfig field swept (`--agent.FIELD`), as lam or value-scale"""
    values: tuple[str, ...] = ()
    """its values, as `trot train` takes them after --agent.FIELD"""
    seeds: tuple[int, ...] = (0,)
    """the seeds each value runs"""
    label: str = ""
    """the curve's name: its CSVs are OUT_DIR/{label}_seed{S}.csv (default: the field)"""
    goal: float = 475.0
    """the deterministic policy's mean evaluation return that counts as reached"""
    eval_every: int = 5
    """iterations between evaluations (the resolution of the env steps to the goal)"""
    max_env_steps: int = 2_000_000
    """each run's budget in env steps"""
    resume: bool = False
    """skip the runs the CSVs have"""
    table: bool = False
    """only print the CSVs' table"""


def field_name(s: Settings) -> str:
    """The PPOConfig field swept, refused with the accepted names if there is none."""
    name = s.field.replace("-", "_")
    names = {f.name for f in dataclasses.fields(PPOConfig)}
    if name not in names:
        raise SystemExit(f"--field {s.field}: PPOConfig has no such field; accepted: "
                         f"{', '.join(sorted(names))}")
    return name


def label(s: Settings) -> str:
    return s.label or field_name(s)


def goal_row(eval_csv: Path, goal: float) -> dict:
    """A run's row read from its eval.csv: where mean_return first reached `goal` (NaN
    where it never did), and how it ended."""
    with open(eval_csv, newline="") as f:
        rows = [{k: number(v) for k, v in r.items()} for r in csv.DictReader(f)]
    if not rows:
        raise ValueError(f"{eval_csv} has no evaluation: the budget ended before the "
                         "first --eval-every iterations")
    first = next((r for r in rows if r["mean_return"] >= goal), None)
    last = rows[-1]
    return {"goal_env_steps": first["env_steps"] if first else math.nan,
            "goal_train_s": round(first["wall_s"], 2) if first else math.nan,
            "goal_env_steps_capped": (first or last)["env_steps"],
            "final_return": round(last["mean_return"], 1),
            "best_return": round(max(r["mean_return"] for r in rows), 1),
            "reached": int(first is not None), "env_steps": last["env_steps"],
            "train_s": round(last["wall_s"], 2)}


def flags(s: Settings, value: str, seed: int) -> list[str]:
    """This run's `trot train` flags after the given ones."""
    return [f"--agent.{field_name(s).replace('_', '-')}", value, "--seed", str(seed),
            "--eval-every", str(s.eval_every), "--max-env-steps", str(s.max_env_steps),
            "--log-every", "1000000", "--no-export"]


def check(s: Settings, given: list[str]) -> None:
    """Refuse, before any run, train args that set what each run sets, and any value whose
    config `trot train` would refuse (e.g. value_scale with PopArt on)."""
    swept = f"--agent.{field_name(s).replace('_', '-')}"
    clash = [a for a in given if a.split("=")[0] in (*SET_HERE, swept)]
    if clash:
        raise SystemExit(f"{' '.join(clash)}: the sweep sets this for each run; give the "
                         "sweep's own --field/--values/--seeds/--eval-every/--max-env-steps")
    if not s.values and not s.table:
        raise SystemExit("--values: give the values to sweep")
    for v in s.values:
        try:
            parse_train([*given, *flags(s, v, 0)]).validate()
        except (ValueError, SystemExit) as e:
            raise SystemExit(f"--field {s.field} {v}: trot train refuses it: {e}") from e


def one(s: Settings, given: list[str], value: str, seed: int) -> dict:
    """One run trained in a temporary directory: its row."""
    with tempfile.TemporaryDirectory(prefix="trot-sweep-") as d:
        run = Path(d) / "run"
        t0 = time.perf_counter()
        p = subprocess.run([sys.executable, "-m", "trot", "train", *given,
                            *flags(s, value, seed), "--run-dir", str(run)],
                           capture_output=True, text=True, check=False)
        wall = time.perf_counter() - t0
        if p.returncode != 0:
            raise SystemExit(f"seed {seed}, {s.field} {value} failed:\n{p.stderr[-3000:]}")
        row = goal_row(run / EVAL_CSV, s.goal)
    return {field_name(s): number(value), "seed": seed} | row | {"wall_s": round(wall, 1)}


def results(out_dir: Path) -> dict[tuple[str, int], Results]:
    """Every (label, seed)'s rows in OUT_DIR."""
    return {(name, int(seed)): Results(path, resume=True)
            for path in sorted(out_dir.glob("*_seed*.csv"))
            for name, _, seed in [path.stem.rpartition("_seed")] if seed.isdigit()}


def table(found: dict[tuple[str, int], Results], field: str) -> str:
    """Per label and value: seeds that reached the goal, median (min..max) env steps."""
    lines = []
    for name in sorted({n for n, _ in found}):
        by_value: dict[float, list[dict]] = {}
        for (n, _), res in sorted(found.items()):
            for r in res.rows if n == name else ():
                if field in r:
                    by_value.setdefault(r[field], []).append(r)
        if not by_value:
            continue
        lines.append(f"{name}: {field}, seeds at the goal, env steps to it in M "
                     "(median (min..max)), final return (median), run wall-clock (median)")
        for v, rows in sorted(by_value.items()):
            ok = sum(int(r["reached"]) for r in rows)
            steps = spread([r["goal_env_steps"] / 1e6 for r in rows], 2)
            lines.append(f"  {v:<8g} {ok}/{len(rows)}  {steps}  "
                         f"final {statistics.median(r['final_return'] for r in rows):.0f}  "
                         f"{statistics.median(r['wall_s'] for r in rows):.0f} s")
    return "\n".join(lines)


def run(s: Settings, cfg: TrainConfig) -> None:
    """cfg (parsed by `main` from the args after `--`) checks them; each run is a new
    process given those args as written."""
    out_dir, name = Path(s.out_dir), label(s)
    given = given_train_args(default=TRAIN)
    check(s, given)
    if not s.table:
        found = results(out_dir)
        if any(r.rows for (n, _), r in found.items() if n == name) and not s.resume:
            raise SystemExit(f"{out_dir} holds runs of {name}: give --resume to continue")
        out_dir.mkdir(parents=True, exist_ok=True)
        for seed in s.seeds:  # each seed's values in turn: a partial sweep spans values
            res = found.setdefault((name, seed), Results(
                out_dir / f"{name}_seed{seed}.csv", resume=True))
            for v in s.values:
                if res.find(**{field_name(s): number(v)}):
                    continue
                row = one(s, given, v, seed)
                res.add(row)
                print(f"{name} {s.field} {v} seed {seed}: goal at "
                      f"{row['goal_env_steps']} env steps, {row['goal_train_s']} s; final "
                      f"{row['final_return']}; {row['wall_s']} s wall", flush=True)
    print(table(results(out_dir), field_name(s)))


if __name__ == "__main__":
    main(Settings, run, TRAIN)
