"""The go1-flat race: trot's PPO against rsl_rl's PPO on the same trot env, the same
number of envs and the same cores, one after the other in one invocation.

    python benchmarks/compare_locomotion.py --seeds 0 1 2 --out-dir docs/data/race_go1_flat
    python benchmarks/compare_locomotion.py --seeds 0 1 2 --out-dir docs/data/race_go1_flat --resume
    python benchmarks/compare_locomotion.py --seeds 0 1 2 --out-dir docs/data/race_go1_flat --table

Each seed runs trot, then rsl_rl (the learners interleaved seed by seed), each in its own
process, each capped at --minutes of training wall-clock and stopped at the first
evaluation where it walks (tracking error <= --max-error m/s and falls <= --max-falls).
Every --eval-every-min minutes of training the clock pauses while the deterministic policy
plays one episode in each of --episodes fresh noise-free envs (locomotion_cpu.py's
evaluation, the same for both: the same seed, starts and commands).

  trot    benchmarks/locomotion_cpu.py --stop-when-met, the task's registered settings
  rslrl   rsl_rl's OnPolicyRunner and PPO over trot.rslrl.TrotVecEnv with Isaac Lab's
          flat-ground Unitree settings (RSLRL_FLAT below): 24 steps, 5 epochs, 4
          minibatches, adaptive lr 1e-3 at KL 0.01, clip 0.2, entropy 0.01, gamma 0.99,
          lambda 0.95, empirical observation normalization, 128-128-128 ELU actor and
          critic (the critic sees trot's privileged group)

Both use trot's thread rule (one torch thread while MuJoCo steps, every core for the
update). Rows land in OUT_DIR/{trot,rslrl}_seedK.csv after each evaluation; --resume
continues each unfinished run from its checkpoint (trot's bitwise; rsl_rl's from its
saved model and optimizer with a fresh env, as rsl_rl's own resume does) and skips
finished ones. The table: per learner, the median (range) minutes and M env steps to
walk over the seeds ("not reached" past the cap), env-steps/s, and the ratio of median
wall-clock to walk, rsl_rl / trot.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
LEARNERS = ("trot", "rslrl")
# Isaac Lab's UnitreeGo1/Go2 flat runner settings (rsl_rl 5 names); the network is the
# flat-ground 128-128-128 (its rough-ground one, 512-256-128, is for height scans)
RSLRL_FLAT = {
    "num_steps_per_env": 24,
    "algorithm": {"num_learning_epochs": 5, "num_mini_batches": 4, "learning_rate": 1e-3,
                  "schedule": "adaptive", "desired_kl": 0.01, "clip_param": 0.2,
                  "entropy_coef": 0.01, "gamma": 0.99, "lam": 0.95, "value_loss_coef": 1.0,
                  "use_clipped_value_loss": True, "max_grad_norm": 1.0,
                  "normalize_advantage_per_mini_batch": False},
    "actor": {"hidden_dims": [128, 128, 128], "activation": "elu", "obs_normalization": True,
              "distribution_cfg": {"class_name": "GaussianDistribution", "init_std": 1.0,
                                   "std_type": "scalar"}},
    "critic": {"hidden_dims": [128, 128, 128], "activation": "elu",
               "obs_normalization": True},
}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--task", default="go1-flat")
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--only", default="trot,rslrl", help="comma-separated: trot, rslrl")
    p.add_argument("--minutes", type=float, default=30.0, help="training cap per run")
    p.add_argument("--eval-every-min", type=float, default=2.0)
    p.add_argument("--episodes", type=int, default=128)
    p.add_argument("--num-envs", type=int, default=1024)
    p.add_argument("--max-error", type=float, default=0.20)
    p.add_argument("--max-falls", type=float, default=0.02)
    p.add_argument("--out-dir", default="runs/race", help="CSVs, one per learner and seed")
    p.add_argument("--run-dir", default=None, help="checkpoints (default OUT_DIR/runs)")
    p.add_argument("--resume", action="store_true")
    p.add_argument("--table", action="store_true", help="only the table, from the CSVs")
    p.add_argument("--leg", choices=LEARNERS, help=argparse.SUPPRESS)  # one run, in-process
    p.add_argument("--seed", type=int, default=0, help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    unknown = set(a.only.split(",")) - set(LEARNERS)
    if unknown:
        p.error(f"--only: unknown learners {sorted(unknown)}; choose from {LEARNERS}")
    a.out_dir = Path(a.out_dir)
    a.run_dir = Path(a.run_dir) if a.run_dir else a.out_dir / "runs"
    return a


def paths(a: argparse.Namespace, learner: str, seed: int) -> tuple[Path, Path]:
    """(its CSV, its run directory)."""
    return a.out_dir / f"{learner}_seed{seed}.csv", a.run_dir / f"{learner}_seed{seed}"


def read_rows(path: Path) -> list[dict[str, float]]:
    if not path.is_file():
        return []
    with open(path, newline="") as f:
        return [{k: float(v) if v else math.nan for k, v in r.items()}
                for r in csv.DictReader(f)]


def walked(a: argparse.Namespace, row: dict[str, float]) -> bool:
    return row["lin_vel_error"] <= a.max_error and row["fall_rate"] <= a.max_falls


def finished(a: argparse.Namespace, rows: list[dict[str, float]]) -> bool:
    return any(walked(a, r) for r in rows) or bool(rows) and \
        rows[-1]["train_s"] >= 60 * a.minutes - 1.0


def trot_command(a: argparse.Namespace, seed: int) -> list[str]:
    out, run = paths(a, "trot", seed)
    return [sys.executable, str(HERE / "locomotion_cpu.py"), "--task", a.task, "--seed",
            str(seed), "--budget-min", str(a.minutes), "--eval-every-min",
            str(a.eval_every_min), "--episodes", str(a.episodes), "--num-envs",
            str(a.num_envs), "--max-error", str(a.max_error), "--max-falls",
            str(a.max_falls), "--run-dir", str(run), "--out", str(out), "--stop-when-met",
            *(["--resume"] if a.resume else [])]


def rslrl_command(a: argparse.Namespace, seed: int) -> list[str]:
    keep = ["--task", a.task, "--minutes", str(a.minutes), "--eval-every-min",
            str(a.eval_every_min), "--episodes", str(a.episodes), "--num-envs",
            str(a.num_envs), "--max-error", str(a.max_error), "--max-falls",
            str(a.max_falls), "--out-dir", str(a.out_dir), "--run-dir", str(a.run_dir)]
    return [sys.executable, __file__, "--leg", "rslrl", "--seed", str(seed), *keep,
            *(["--resume"] if a.resume else [])]


def run_rslrl(a: argparse.Namespace, seed: int) -> None:
    """One rsl_rl run: learn in whole iterations until the next evaluation is due, evaluate
    with the clock paused, write the rows, save, until it walks or the cap."""
    import torch
    from locomotion_cpu import evaluate_now
    from rsl_rl.runners import OnPolicyRunner

    from trot.rslrl import TrotVecEnv, apply_overrides, make_config, trot_threads
    from trot.core.files import atomic_write

    out, run = paths(a, "rslrl", seed)
    run.mkdir(parents=True, exist_ok=True)
    torch.set_num_threads(1)
    torch.manual_seed(seed)
    # log_every: never; the training return comes from the env's statistics at each
    # evaluation (rsl_rl's own episode buffers fill only with a log writer)
    env = TrotVecEnv(a.task, a.num_envs, seed=seed, log_every=10**9)
    cfg = apply_overrides(make_config(a.task, a.num_envs), flat_overrides())
    runner = OnPolicyRunner(env, cfg, log_dir=None, device="cpu")
    trot_threads(runner)
    rows, state = read_rows(out), {"train_s": 0.0, "env_steps": 0}
    if a.resume and (run / "state.json").is_file():
        runner.load(str(run / "model.pt"))
        state = json.loads((run / "state.json").read_text())
        rows = [r for r in rows if r["env_steps"] <= state["env_steps"]]
    per_iteration = cfg["num_steps_per_env"] * a.num_envs
    while not finished(a, rows):
        t0, due = time.perf_counter(), min(60 * a.eval_every_min,
                                           60 * a.minutes - state["train_s"])
        while time.perf_counter() - t0 < due:
            runner.learn(1)
            state["env_steps"] += per_iteration
        state["train_s"] += time.perf_counter() - t0
        policy = runner.get_inference_policy("cpu").as_onnx(verbose=False).eval()
        rows.append({"train_s": state["train_s"], "env_steps": state["env_steps"],
                     "train_return": float(env.episode_log()["Episode/episode_return"])}
                    | evaluate_now(a.task, env.env.task.config, policy, a.episodes,
                                   10_000 + seed))
        print(f"rslrl seed {seed}: {rows[-1]['train_s'] / 60:.1f} min, "
              f"{rows[-1]['env_steps'] / 1e6:.2f} M env steps, tracking error "
              f"{rows[-1]['lin_vel_error']:.3f} m/s, falls {rows[-1]['fall_rate']:.3f}",
              flush=True)
        atomic_write(out, lambda p: write_rows(p, rows))  # rows first, as locomotion_cpu
        atomic_write(run / "model.pt", runner.save)
        atomic_write(run / "state.json", lambda p: p.write_text(json.dumps(state)))


def flat_overrides() -> dict:
    """RSLRL_FLAT as the dotted overrides apply_overrides takes."""
    def flat(prefix: str, d: dict) -> dict:
        return {k2: v2 for k, v in d.items() for k2, v2 in
                (flat(f"{prefix}{k}.", v).items() if isinstance(v, dict)
                 and k != "distribution_cfg" else [(f"{prefix}{k}", v)])}
    return flat("", RSLRL_FLAT)


def write_rows(path: Path, rows: list[dict[str, float]]) -> None:
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)


def summary(a: argparse.Namespace, learner: str) -> dict[str, object]:
    """Minutes and M env steps to walk per seed (NaN: not reached), and env-steps/s."""
    minutes, msteps, rates = [], [], []
    for seed in a.seeds:
        rows = read_rows(paths(a, learner, seed)[0])
        hit = next((r for r in rows if walked(a, r)), None)
        minutes.append(hit["train_s"] / 60 if hit else math.nan)
        msteps.append(hit["env_steps"] / 1e6 if hit else math.nan)
        if rows:
            rates.append(rows[-1]["env_steps"] / rows[-1]["train_s"])
    return {"minutes": minutes, "msteps": msteps, "rate": statistics.median(rates)
            if rates else math.nan, "runs": len(rates)}


def spread(values: list[float]) -> str:
    """median (min..max); a seed that never walked ranks above every other."""
    ranked = sorted(v if not math.isnan(v) else math.inf for v in values)
    if not ranked:
        return "-"
    if math.isinf(ranked[0]):
        return "not reached"
    fmt = lambda v: "not reached" if math.isinf(v) else f"{v:.1f}"  # noqa: E731
    return f"{fmt(statistics.median(ranked))} ({fmt(ranked[0])}..{fmt(ranked[-1])})"


def table(a: argparse.Namespace) -> str:
    s = {x: summary(a, x) for x in LEARNERS}
    lines = [f"{a.task}, {a.num_envs} envs, seeds {a.seeds}, cap {a.minutes:g} min, walk = "
             f"error <= {a.max_error} m/s and falls <= {100 * a.max_falls:g}%",
             f"{'learner':8} {'runs':>4} {'minutes to walk':>26} {'M env steps to walk':>26}"
             f" {'env-steps/s':>12}"]
    for x in LEARNERS:
        lines.append(f"{x:8} {s[x]['runs']:>4} {spread(s[x]['minutes']):>26} "
                     f"{spread(s[x]['msteps']):>26} {s[x]['rate']:>12,.0f}")
    med = {x: statistics.median(v if not math.isnan(v) else math.inf
                                for v in s[x]["minutes"]) for x in LEARNERS}
    if not math.isfinite(med["trot"]):
        lines.append("median wall-clock to walk, rsl_rl / trot: - (trot did not walk)")
    elif not math.isfinite(med["rslrl"]):  # the cap bounds rsl_rl's time from below
        lines.append(f"median wall-clock to walk, rsl_rl / trot: > {a.minutes / med['trot']:.2f}"
                     " (rsl_rl did not walk within the cap)")
    else:
        lines.append(f"median wall-clock to walk, rsl_rl / trot: {med['rslrl'] / med['trot']:.2f}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    a = parse_args(argv)
    if a.leg == "rslrl":
        run_rslrl(a, a.seed)
        return 0
    a.out_dir.mkdir(parents=True, exist_ok=True)
    commands = {"trot": trot_command, "rslrl": rslrl_command}
    for seed in [] if a.table else a.seeds:
        for learner in a.only.split(","):
            out, _ = paths(a, learner, seed)
            if a.resume and finished(a, read_rows(out)):
                print(f"== {learner} seed {seed}: finished earlier ({out})", flush=True)
                continue
            cmd = commands[learner](a, seed)
            print(f"== {learner} seed {seed}: {' '.join(cmd)}", flush=True)
            env = dict(os.environ, PYTHONPATH=os.pathsep.join(
                [str(HERE), os.environ.get("PYTHONPATH", "")]))
            if subprocess.run(cmd, env=env).returncode:
                print(f"== {learner} seed {seed} failed; its log is above", file=sys.stderr)
                return 1
    print(table(a))
    return 0


if __name__ == "__main__":
    sys.exit(main())
