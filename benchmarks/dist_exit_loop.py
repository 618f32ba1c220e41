"""Data-parallel runs that end well: K consecutive `trot train --nproc 2` trainings, counted.

    python benchmarks/dist_exit_loop.py                      # 30 runs of 40,000 env steps
    python benchmarks/dist_exit_loop.py --runs 15 -- cartpole-balance --nproc 2 \
        --max-env-steps 100000 --num-envs 1024

The flags before `--` are this benchmark's; after it come `trot train`'s own, the run
repeated (default `cartpole-balance --nproc 2 --max-env-steps 40000 --num-envs 64`;
`--num-envs` is per process). Each run is a fresh `python -m trot train ... --no-export`
in a temporary directory. Prints one line per run (exit status, seconds) and then how many
exited 0; for each failure its exit status (a signal as its name) and the last lines of
its output. A failure is also a run whose stderr says "terminate called" or "SIGABRT" (an
abort at exit that a launcher could still have reported as success). Exits 1 if any run
failed.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from trot.agents.train_config import TrainConfig
from trot.benchmark import given_train_args, main

TRAIN = ("cartpole-balance", "--nproc", "2", "--max-env-steps", "40000", "--num-envs", "64")


@dataclass(frozen=True)
class Settings:
    runs: int = 30
    """trainings, one after another"""
    timeout_s: float = 300.0
    """seconds a run may take before it counts as failed"""
    tail: int = 15
    """lines shown of a failed run's output"""


def status(rc: int) -> str:
    if rc < 0:
        try:
            return f"signal {signal.Signals(-rc).name}"
        except ValueError:
            return f"signal {-rc}"
    return f"exit {rc}"


def _text(x: str | bytes | None) -> str:  # TimeoutExpired may hold bytes despite text=True
    return x.decode(errors="replace") if isinstance(x, bytes) else (x or "")


def one(s: Settings, run_dir: Path) -> tuple[bool, str, str]:
    """One training: (whether it ended well, its status, its output)."""
    cmd = [sys.executable, "-m", "trot", "train", *given_train_args(default=TRAIN),
           "--no-export", "--run-dir", str(run_dir)]
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, cwd=run_dir.parent,
                           timeout=s.timeout_s, env=dict(os.environ), check=False)
        rc, out, err = r.returncode, r.stdout, r.stderr
        what = status(rc)
    except subprocess.TimeoutExpired as e:
        rc, what = -1, f"timed out after {s.timeout_s:.0f} s"
        out, err = _text(e.stdout), _text(e.stderr)
    aborted = "terminate called" in err or "SIGABRT" in err
    if rc == 0 and aborted:
        what += ", but an abort in stderr"
    return rc == 0 and not aborted, what, out + err


def run(s: Settings, cfg: TrainConfig) -> int:
    failures: list[tuple[int, str, str]] = []
    t_all = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="dist-exit-loop-") as tmp:
        for i in range(1, s.runs + 1):
            t0 = time.monotonic()
            ok, what, output = one(s, Path(tmp) / f"run{i}")
            print(f"run {i:>3}/{s.runs}: {what:<24} {time.monotonic() - t0:6.1f} s",
                  flush=True)
            if not ok:
                tail = [ln for ln in output.splitlines() if ln.strip()][-s.tail:]
                failures.append((i, what, "\n".join("    " + ln for ln in tail)))
    n_ok = s.runs - len(failures)
    print(f"\n{n_ok}/{s.runs} runs exited 0 ({cfg.task}, --nproc {cfg.processes}, "
          f"--max-env-steps {cfg.max_env_steps}, --num-envs {cfg.num_envs}; "
          f"{time.monotonic() - t_all:.0f} s in all)")
    for i, what, tail in failures:
        print(f"\nrun {i} failed: {what}; its last lines:\n{tail}")
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main(Settings, run, TRAIN))
