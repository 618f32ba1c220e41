"""Data-parallel runs that end well: K consecutive `trot train --nproc 2` trainings, counted.

    python benchmarks/dist_exit_loop.py                      # 30 runs of 40,000 env steps
    python benchmarks/dist_exit_loop.py --runs 15 --max-env-steps 100000 --num-envs 1024

Each run is a fresh `python -m trot train TASK --nproc 2 ... --no-export` in a temporary
directory. Prints one line per run (exit status, seconds) and then how many exited 0; for
each failure its exit status (a signal as its name) and the last lines of its output. A
failure is also a run whose stderr says "terminate called" or "SIGABRT" (an abort at exit
that a launcher could still have reported as success). Exits 1 if any run failed.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def status(rc: int) -> str:
    if rc < 0:
        try:
            return f"signal {signal.Signals(-rc).name}"
        except ValueError:
            return f"signal {-rc}"
    return f"exit {rc}"


def _text(x: str | bytes | None) -> str:  # TimeoutExpired may hold bytes despite text=True
    return x.decode(errors="replace") if isinstance(x, bytes) else (x or "")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runs", type=int, default=30)
    p.add_argument("--task", default="cartpole-balance")
    p.add_argument("--nproc", type=int, default=2)
    p.add_argument("--max-env-steps", type=int, default=40_000)
    p.add_argument("--num-envs", type=int, default=64, help="per process")
    p.add_argument("--timeout-s", type=float, default=300.0, help="per run")
    p.add_argument("--tail", type=int, default=15, help="lines shown of a failed run")
    a = p.parse_args()

    failures: list[tuple[int, str, str]] = []
    t_all = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="dist-exit-loop-") as tmp:
        for i in range(1, a.runs + 1):
            cmd = [sys.executable, "-m", "trot", "train", a.task, "--nproc", str(a.nproc),
                   "--max-env-steps", str(a.max_env_steps), "--num-envs", str(a.num_envs),
                   "--no-export", "--run-dir", str(Path(tmp) / f"run{i}")]
            t0 = time.monotonic()
            try:
                r = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp,
                                   timeout=a.timeout_s, env=dict(os.environ), check=False)
                rc, out, err = r.returncode, r.stdout, r.stderr
                what = status(rc)
            except subprocess.TimeoutExpired as e:
                rc, what = -1, f"timed out after {a.timeout_s:.0f} s"
                out, err = _text(e.stdout), _text(e.stderr)
            aborted = "terminate called" in err or "SIGABRT" in err
            ok = rc == 0 and not aborted
            if rc == 0 and aborted:
                what += ", but an abort in stderr"
            print(f"run {i:>3}/{a.runs}: {what:<24} {time.monotonic() - t0:6.1f} s",
                  flush=True)
            if not ok:
                tail = [ln for ln in (out + err).splitlines() if ln.strip()][-a.tail:]
                failures.append((i, what, "\n".join("    " + ln for ln in tail)))
    n_ok = a.runs - len(failures)
    print(f"\n{n_ok}/{a.runs} runs exited 0 ({a.task}, --nproc {a.nproc}, "
          f"--max-env-steps {a.max_env_steps}, --num-envs {a.num_envs}; "
          f"{time.monotonic() - t_all:.0f} s in all)")
    for i, what, tail in failures:
        print(f"\nrun {i} failed: {what}; its last lines:\n{tail}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
