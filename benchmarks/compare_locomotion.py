"""The go1-flat race: trot's PPO against rsl_rl's PPO on the same trot env, the same
number of envs and the same cores, one after the other in one invocation.

    python benchmarks/compare_locomotion.py --seeds 0 1 2 --out-dir docs/data/race_go1_flat
    python benchmarks/compare_locomotion.py --seeds 0 1 2 --out-dir docs/data/race_go1_flat --resume
    python benchmarks/compare_locomotion.py --seeds 0 1 2 --out-dir docs/data/race_go1_flat --table

The flags before `--` are this benchmark's; after it come `trot train`'s own (default
`go1-flat --num-envs 1024`): the task, `--num-envs`, `--env.FIELD V` (both learners' env),
`--agent.FIELD V` (trot's learner), `--run-dir` (the checkpoints' folder, default
OUT_DIR/runs). Each seed runs trot, then rsl_rl (the learners interleaved seed by seed),
each in its own process, each capped at `--minutes` of training wall-clock and stopped at
the first evaluation where it walks (tracking error <= `--max-error` m/s and falls <=
`--max-falls`). Every `--eval-every-min` minutes of training the clock pauses while the
deterministic policy plays one episode in each of `--episodes` fresh noise-free envs
(trot.benchmark's `locomotion_row`, the same for both: the same seed, starts and commands).

  trot    benchmarks/locomotion_cpu.py --stop-when-met, the task's registered settings
  rslrl   rsl_rl's OnPolicyRunner and PPO over trot.rslrl.TrotVecEnv with Isaac Lab's
          flat-ground Unitree settings (RSLRL_FLAT below): 24 steps, 5 epochs, 4
          minibatches, adaptive lr 1e-3 at KL 0.01, clip 0.2, entropy 0.01, gamma 0.99,
          lambda 0.95, empirical observation normalization, 128-128-128 ELU actor and
          critic (the critic sees trot's privileged group)

Both use trot's thread rule (one torch thread while MuJoCo steps, every core for the
update). Rows land in OUT_DIR/{trot,rslrl}_seedK.csv after each evaluation; `--resume`
continues each unfinished run from its checkpoint (trot's bitwise; rsl_rl's from its
saved model and optimizer with a fresh env, as rsl_rl's own resume does) and skips
finished ones. The table: per learner, the median (range) minutes and M env steps to
walk over the seeds ("not reached" past the cap), env-steps/s, and the ratio of median
wall-clock to walk, rsl_rl / trot.
"""

from __future__ import annotations

import dataclasses
import json
import math
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from trot.agents.train_config import TrainConfig
from trot.benchmark import Results, given_train_args, locomotion_row, main, spread

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
TRAIN = ("go1-flat", "--num-envs", "1024")
Learner = Literal["trot", "rslrl"]


@dataclass(frozen=True)
class Settings:
    seeds: tuple[int, ...] = (0, 1, 2)
    """the seeds each learner runs"""
    only: tuple[Learner, ...] = LEARNERS
    """the learners to run"""
    minutes: float = 30.0
    """training cap per run"""
    eval_every_min: float = 2.0
    """minutes of training between evaluations"""
    episodes: int = 128
    """episodes per evaluation, one per env"""
    max_error: float = 0.20
    """walk: tracking threshold, m/s"""
    max_falls: float = 0.02
    """walk: fall-rate threshold"""
    out_dir: str = "runs/race"
    """the CSVs, one per learner and seed"""
    resume: bool = False
    """continue the unfinished runs, skip the finished ones"""
    table: bool = False
    """only the table, from the CSVs"""
    leg: Literal["rslrl"] | None = None
    """(what the race starts for each rsl_rl run) run one rsl_rl seed, the train args'
    --seed, in this process and write its rows"""


def paths(s: Settings, cfg: TrainConfig, learner: str, seed: int) -> tuple[Path, Path]:
    """(its CSV, its run directory)."""
    root = Path(cfg.run_dir) if cfg.run_dir else Path(s.out_dir) / "runs"
    return Path(s.out_dir) / f"{learner}_seed{seed}.csv", root / f"{learner}_seed{seed}"


def read_rows(path: Path) -> list[dict[str, float]]:
    return Results(path, resume=True).rows


def walked(s: Settings, row: dict[str, float]) -> bool:
    return row["lin_vel_error"] <= s.max_error and row["fall_rate"] <= s.max_falls


def finished(s: Settings, rows: list[dict[str, float]]) -> bool:
    return any(walked(s, r) for r in rows) or bool(rows) and \
        rows[-1]["train_s"] >= 60 * s.minutes - 1.0


def trot_command(s: Settings, cfg: TrainConfig, seed: int) -> list[str]:
    out, run_dir = paths(s, cfg, "trot", seed)
    return [sys.executable, str(HERE / "locomotion_cpu.py"), "--budget-min", str(s.minutes),
            "--eval-every-min", str(s.eval_every_min), "--episodes", str(s.episodes),
            "--max-error", str(s.max_error), "--max-falls", str(s.max_falls), "--out",
            str(out), "--stop-when-met", *(["--resume"] if s.resume else []), "--",
            *given_train_args(default=TRAIN), "--seed", str(seed), "--run-dir", str(run_dir)]


def rslrl_command(s: Settings, cfg: TrainConfig, seed: int) -> list[str]:
    root = paths(s, cfg, "rslrl", seed)[1].parent
    return [sys.executable, __file__, "--leg", "rslrl", "--minutes", str(s.minutes),
            "--eval-every-min", str(s.eval_every_min), "--episodes", str(s.episodes),
            "--max-error", str(s.max_error), "--max-falls", str(s.max_falls), "--out-dir",
            s.out_dir, *(["--resume"] if s.resume else []), "--",
            *given_train_args(default=TRAIN), "--seed", str(seed), "--run-dir", str(root)]


def run_rslrl(s: Settings, cfg: TrainConfig) -> None:
    """One rsl_rl run: learn in whole iterations until the next evaluation is due, evaluate
    with the clock paused, write the rows, save, until it walks or the cap."""
    import torch
    from rsl_rl.runners import OnPolicyRunner

    from trot.core.files import atomic_write
    from trot.rslrl import TrotVecEnv, apply_overrides, make_config, trot_threads

    seed = cfg.seed
    out, run_dir = paths(s, cfg, "rslrl", seed)
    run_dir.mkdir(parents=True, exist_ok=True)
    torch.set_num_threads(1)
    torch.manual_seed(seed)
    # log_every: never; the training return comes from the env's statistics at each
    # evaluation (rsl_rl's own episode buffers fill only with a log writer)
    env = TrotVecEnv(cfg.task, cfg.num_envs, seed=seed, log_every=10**9, task_config={
        f.name: getattr(cfg.env, f.name) for f in dataclasses.fields(cfg.env) if f.init})
    rcfg = apply_overrides(make_config(cfg.task, cfg.num_envs), flat_overrides())
    runner = OnPolicyRunner(env, rcfg, log_dir=None, device="cpu")
    trot_threads(runner)
    results, state = Results(out, resume=s.resume), {"train_s": 0.0, "env_steps": 0}
    if s.resume and (run_dir / "state.json").is_file():
        runner.load(str(run_dir / "model.pt"))
        state = json.loads((run_dir / "state.json").read_text())
    results.rows = [r for r in results.rows if r["env_steps"] <= state["env_steps"]]
    per_iteration = rcfg["num_steps_per_env"] * cfg.num_envs
    while not finished(s, results.rows):
        t0, due = time.perf_counter(), min(60 * s.eval_every_min,
                                           60 * s.minutes - state["train_s"])
        while time.perf_counter() - t0 < due:
            runner.learn(1)
            state["env_steps"] += per_iteration
        state["train_s"] += time.perf_counter() - t0
        policy = runner.get_inference_policy("cpu").as_onnx(verbose=False).eval()
        row = {"train_s": state["train_s"], "env_steps": state["env_steps"],
               "train_return": float(env.episode_log()["Episode/episode_return"])} | \
            locomotion_row(cfg.task, env.env.task.config, policy, s.episodes, 10_000 + seed)
        print(f"rslrl seed {seed}: {row['train_s'] / 60:.1f} min, "
              f"{row['env_steps'] / 1e6:.2f} M env steps, tracking error "
              f"{row['lin_vel_error']:.3f} m/s, falls {row['fall_rate']:.3f}", flush=True)
        results.add(row)  # rows first, as locomotion_cpu
        atomic_write(run_dir / "model.pt", runner.save)
        atomic_write(run_dir / "state.json", lambda p: p.write_text(json.dumps(state)))


def flat_overrides() -> dict:
    """RSLRL_FLAT as the dotted overrides apply_overrides takes."""
    def flat(prefix: str, d: dict) -> dict:
        return {k2: v2 for k, v in d.items() for k2, v2 in
                (flat(f"{prefix}{k}.", v).items() if isinstance(v, dict)
                 and k != "distribution_cfg" else [(f"{prefix}{k}", v)])}
    return flat("", RSLRL_FLAT)


def summary(s: Settings, cfg: TrainConfig, learner: str) -> dict[str, object]:
    """Minutes and M env steps to walk per seed (NaN: not reached), and env-steps/s."""
    minutes, msteps, rates = [], [], []
    for seed in s.seeds:
        rows = read_rows(paths(s, cfg, learner, seed)[0])
        hit = next((r for r in rows if walked(s, r)), None)
        minutes.append(hit["train_s"] / 60 if hit else math.nan)
        msteps.append(hit["env_steps"] / 1e6 if hit else math.nan)
        if rows:
            rates.append(rows[-1]["env_steps"] / rows[-1]["train_s"])
    return {"minutes": minutes, "msteps": msteps, "rate": statistics.median(rates)
            if rates else math.nan, "runs": len(rates)}


def table(s: Settings, cfg: TrainConfig) -> str:
    got = {x: summary(s, cfg, x) for x in LEARNERS}
    lines = [f"{cfg.task}, {cfg.num_envs} envs, seeds {list(s.seeds)}, cap {s.minutes:g} "
             f"min, walk = error <= {s.max_error} m/s and falls <= {100 * s.max_falls:g}%",
             f"{'learner':8} {'runs':>4} {'minutes to walk':>26} {'M env steps to walk':>26}"
             f" {'env-steps/s':>12}"]
    for x in LEARNERS:
        lines.append(f"{x:8} {got[x]['runs']:>4} {spread(got[x]['minutes']):>26} "
                     f"{spread(got[x]['msteps']):>26} {got[x]['rate']:>12,.0f}")
    med = {x: statistics.median(v if not math.isnan(v) else math.inf
                                for v in got[x]["minutes"]) for x in LEARNERS}
    if not math.isfinite(med["trot"]):
        lines.append("median wall-clock to walk, rsl_rl / trot: - (trot did not walk)")
    elif not math.isfinite(med["rslrl"]):  # the cap bounds rsl_rl's time from below
        lines.append(f"median wall-clock to walk, rsl_rl / trot: > {s.minutes / med['trot']:.2f}"
                     " (rsl_rl did not walk within the cap)")
    else:
        lines.append(f"median wall-clock to walk, rsl_rl / trot: {med['rslrl'] / med['trot']:.2f}")
    return "\n".join(lines)


def run(s: Settings, cfg: TrainConfig) -> int:
    if s.leg == "rslrl":
        run_rslrl(s, cfg)
        return 0
    Path(s.out_dir).mkdir(parents=True, exist_ok=True)
    commands = {"trot": trot_command, "rslrl": rslrl_command}
    for seed in () if s.table else s.seeds:
        for learner in s.only:
            out, _ = paths(s, cfg, learner, seed)
            if s.resume and finished(s, read_rows(out)):
                print(f"== {learner} seed {seed}: finished earlier ({out})", flush=True)
                continue
            cmd = commands[learner](s, cfg, seed)
            print(f"== {learner} seed {seed}: {' '.join(cmd)}", flush=True)
            if subprocess.run(cmd).returncode:
                print(f"== {learner} seed {seed} failed; its log is above", file=sys.stderr)
                return 1
    print(table(s, cfg))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(Settings, run, TRAIN))
