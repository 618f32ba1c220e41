"""Same MDP, same wall-clock: trot vs Stable-Baselines3 PPO vs rl_games PPO on Ant-v5.

    bash benchmarks/peers/setup.sh                      # once: the peers' venv
    python benchmarks/compare_ant.py --minutes 12       # ~40 min: the three, one after another
    python benchmarks/compare_ant.py --only sb3 rlgames --minutes 1
    python benchmarks/compare_ant.py --from-csv runs/compare_ant/20260101-120000

The flags before `--` are this benchmark's; after it come `trot train`'s own for trot's run
(default `gym-ant --num-envs 64`): the task (gym-ant, or gym-ant-cfrc), `--seed` (the
peers' too), `--num-envs`, `--agent.FIELD V`, `--env.FIELD V`. Runs, sequentially and
each for `--minutes` of training wall-clock on this machine:
  trot     python -m trot train TASK ... --minutes M  (this python; the task is a replica
           of Gymnasium's Ant-v5 on trot's batched MuJoCo)      -> OUT/trot/metrics.csv
  sb3      benchmarks/peers/sb3_ant.py (RL Zoo's Ant settings)      -> OUT/sb3.csv
  rlgames  benchmarks/peers/rlgames_ant.py (rl_games' ant.yaml)      -> OUT/rlgames.csv
with the peers on `--peers-python` (the venv of benchmarks/peers/setup.sh). All three see
Ant-v5's 27-dim observation (qpos[2:] + qvel); the task gym-ant-cfrc switches all three to
v5's default 105 dims. Each stack's clock starts when its training loop starts (env and
model construction excluded), and returns are raw training-episode returns.

The table: env-steps/s over the whole run; the return at M/4, M/2 and M minutes (3/6/12 for
the default 12), read as the episode-weighted mean of the returns logged in the 10 s up to
the mark (trot logs each iteration, the peers every ~10 s, so this puts all three on the
same footing; with nothing logged in that window, the last return logged before the mark);
and the first wall-clock time that 10 s mean reached 1000 and 2000. "-": the run ended (or
logged no return) before the mark. `--from-csv` needs the `--minutes` the runs had.
"""

from __future__ import annotations

import shlex
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from trot.agents.train_config import TrainConfig
from trot.benchmark import fmt_time, given_train_args, main, read_rows, return_at

HERE = Path(__file__).resolve().parent
STACKS = ("trot", "sb3", "rlgames")
CSV_NAME = {"trot": "trot/metrics.csv", "sb3": "sb3.csv", "rlgames": "rlgames.csv"}
THRESHOLDS = (1000.0, 2000.0)
TRAIN = ("gym-ant", "--num-envs", "64")
OBSERVATION = {"gym-ant": "27", "gym-ant-cfrc": "105"}  # the peers match the task's
Stack = Literal["trot", "sb3", "rlgames"]


@dataclass(frozen=True)
class Settings:
    minutes: float = 12.0
    """training wall-clock per stack"""
    only: tuple[Stack, ...] = STACKS
    """the stacks to run (or to read back)"""
    out_dir: str | None = None
    """where the runs go (default runs/compare_ant/<timestamp>)"""
    peers_python: str = "/work/peers-venv/bin/python"
    """python of the venv from benchmarks/peers/setup.sh"""
    from_csv: tuple[str, ...] = ()
    """re-print the table: an --out-dir of an earlier run, or NAME=CSV (e.g.
    trot=runs/x/metrics.csv sb3=sb3.csv)"""
    rlgames_backend: Literal["envpool", "gymnasium"] = "envpool"
    """rl_games' simulator"""


def commands(s: Settings, cfg: TrainConfig, out: Path) -> dict[str, list[str]]:
    cfrc = ["--cfrc"] if cfg.task == "gym-ant-cfrc" else []
    m, seed = str(s.minutes), str(cfg.seed)
    return {
        "trot": [sys.executable, "-m", "trot", "train", *given_train_args(default=TRAIN),
                 "--minutes", m, "--max-env-steps", str(10**11), "--run-dir",
                 str(out / "trot"), "--no-export"],
        "sb3": [s.peers_python, str(HERE / "peers" / "sb3_ant.py"), "--minutes", m,
                "--seed", seed, "--out", str(out / CSV_NAME["sb3"]), *cfrc],
        "rlgames": [s.peers_python, str(HERE / "peers" / "rlgames_ant.py"), "--minutes", m,
                    "--seed", seed, "--backend", s.rlgames_backend,
                    "--out", str(out / CSV_NAME["rlgames"]), *cfrc],
    }


def run_stack(name: str, cmd: list[str], log: Path, timeout_s: float) -> int:
    """Run one stack, its output streamed to the console and to `log`."""
    print(f"\n== {name}: {shlex.join(cmd)}\n   (log: {log})", flush=True)
    t0 = time.monotonic()
    with open(log, "w") as f, subprocess.Popen(cmd, stdout=subprocess.PIPE,
                                               stderr=subprocess.STDOUT, text=True) as p:
        for line in p.stdout:
            f.write(line)
            if not line.startswith(("Warning", "  warn", "WARNING")):
                print(f"   {line}", end="", flush=True)
            if time.monotonic() - t0 > timeout_s:
                p.kill()
                print(f"== {name}: killed after {timeout_s:.0f} s", flush=True)
        rc = p.wait()
    print(f"== {name}: exit {rc} after {time.monotonic() - t0:.0f} s", flush=True)
    return rc


def tail(log: Path, n: int = 20) -> str:
    lines = [ln for ln in log.read_text(errors="replace").splitlines() if ln.strip()]
    return "\n".join(f"   {ln}" for ln in lines[-n:])


def summarize(rows, minutes: float) -> dict:
    marks = (minutes / 4, minutes / 2, minutes)
    wall, steps = rows[-1][0], rows[-1][1]
    out = {"steps_per_s": steps / wall if wall > 0 else float("nan"), "env_steps": steps,
           "wall_s": wall, "at": [return_at(rows, 60.0 * m + 1e-6) if 60.0 * m <= wall + 5.0
                                  else None for m in marks]}  # None: the run ended before
    for thr in THRESHOLDS:
        hit = next((w for w, *_ in rows if (r := return_at(rows, w)) is not None and r >= thr),
                   None)
        out[thr] = hit
    return out


def fmt_ret(v: float | None) -> str:
    return "-" if v is None else f"{v:,.0f}"


def fmt_min(m: float) -> str:
    return f"{m:g} min"


def table(csvs: dict[str, Path], minutes: float) -> str:
    marks = (minutes / 4, minutes / 2, minutes)
    head = ["stack", "env-steps/s", "env steps", "wall (s)"]
    head += [f"return @ {fmt_min(m)}" for m in marks]
    head += [f"first >= {thr:,.0f}" for thr in THRESHOLDS]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for name, path in csvs.items():
        rows = read_rows(path, name) if path.is_file() else []
        if not rows:
            lines.append(f"| {name} | no rows in {path} |" + " |" * (len(head) - 2))
            continue
        s = summarize(rows, minutes)
        cells = [name, f"{s['steps_per_s']:,.0f}", f"{s['env_steps']:,.0f}", f"{s['wall_s']:.0f}",
                 *[fmt_ret(v) for v in s["at"]], *[fmt_time(s[thr]) for thr in THRESHOLDS]]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


PEER_VERSIONS = """
import importlib.metadata as md
for p in ("stable-baselines3", "rl-games", "gymnasium", "mujoco", "torch", "envpool", "numpy"):
    try: print(p, md.version(p))
    except md.PackageNotFoundError: print(p, "-")
"""


def versions(peers_python: str | None) -> str:
    import importlib.metadata as md

    ours = {}
    for p in ("trot", "mujoco", "gymnasium", "torch", "numpy"):
        try:
            ours[p] = md.version(p)
        except md.PackageNotFoundError:
            ours[p] = "-"
    peers = {}
    if peers_python and Path(peers_python).exists():
        res = subprocess.run([peers_python, "-c", PEER_VERSIONS], capture_output=True,
                             text=True, timeout=120, check=False)
        peers = dict(line.split(" ", 1) for line in res.stdout.splitlines() if " " in line)
    names = list(dict.fromkeys([*ours, *peers]))
    lines = ["| package | trot's python | peers' venv |", "|---|---|---|"]
    lines += [f"| {n} | {ours.get(n, '')} | {peers.get(n, '')} |" for n in names]
    return "\n".join(lines)


def earlier(s: Settings) -> dict[str, Path]:
    """--from-csv's CSVs, by stack."""
    csvs: dict[str, Path] = {}
    for item in s.from_csv:
        if "=" in item:
            name, path = item.split("=", 1)
            if name not in STACKS:
                raise SystemExit(f"--from-csv: unknown stack {name!r}; choose from "
                                 f"{','.join(STACKS)}")
            csvs[name] = Path(path)
        else:
            csvs.update({n: Path(item) / CSV_NAME[n] for n in STACKS
                         if (Path(item) / CSV_NAME[n]).is_file()})
    return {n: p for n, p in csvs.items() if n in s.only}


def race(s: Settings, cfg: TrainConfig) -> dict[str, Path] | None:
    """The stacks run one after another: their CSVs, or None where one failed (its log's
    last lines printed)."""
    out = Path(s.out_dir) if s.out_dir else \
        Path("runs/compare_ant") / time.strftime("%Y%m%d-%H%M%S")
    out.mkdir(parents=True, exist_ok=True)
    cmds = commands(s, cfg, out)
    failed = [name for name in s.only
              if run_stack(name, cmds[name], out / f"{name}.log", 60 * s.minutes + 600)]
    print(f"\nresults in {out}")
    if failed:  # a table with a stack missing reads as a result: refuse to print one
        for name in failed:
            print(f"\n== {name} failed; the last lines of {out / f'{name}.log'}:")
            print(tail(out / f"{name}.log"))
        print(f"\ncompare_ant: failed: {', '.join(failed)}; no table", file=sys.stderr)
        return None
    return {n: out / CSV_NAME[n] for n in s.only}


def run(s: Settings, cfg: TrainConfig) -> int:
    if cfg.task not in OBSERVATION:
        raise SystemExit(f"compare_ant races Ant-v5: the task is gym-ant or gym-ant-cfrc, "
                         f"got {cfg.task}")
    csvs = earlier(s) if s.from_csv else race(s, cfg)
    if csvs is None:
        return 1
    print(f"\n## Ant-v5, {fmt_min(s.minutes)} of training each "
          f"({OBSERVATION[cfg.task]}-dim observation)\n")
    print(table(csvs, s.minutes))
    print("\n" + versions(s.peers_python))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(Settings, run, TRAIN))
