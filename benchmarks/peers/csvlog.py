"""The peers' shared training log (imported by sb3_ant.py and rlgames_ant.py, which run as
scripts from this folder under the peers' venv)."""

from __future__ import annotations

import csv
from pathlib import Path

COLUMNS = ("wall_s", "env_steps", "mean_return", "mean_length", "episodes", "steps_per_s")


class CsvLog:
    """Rows of COLUMNS; mean_return over the episodes finished since the previous row."""

    def __init__(self, path: Path, tag: str):
        path.parent.mkdir(parents=True, exist_ok=True)
        self.tag = tag
        self.f = open(path, "w", newline="")  # noqa: SIM115 (open for the run)
        self.w = csv.writer(self.f)
        self.w.writerow(COLUMNS)
        self.f.flush()
        self.returns: list[float] = []
        self.lengths: list[int] = []
        self.last_wall, self.last_steps = 0.0, 0

    def row(self, wall_s: float, env_steps: int) -> None:
        n = len(self.returns)
        mean = f"{sum(self.returns) / n:.2f}" if n else ""
        length = f"{sum(self.lengths) / n:.1f}" if n else ""
        rate = (env_steps - self.last_steps) / max(wall_s - self.last_wall, 1e-9)
        self.w.writerow([f"{wall_s:.2f}", env_steps, mean, length, n, f"{rate:.1f}"])
        self.f.flush()
        print(f"[{self.tag}] {wall_s:7.1f} s  {env_steps:>9,d} steps  {rate:7.0f} steps/s  "
              f"return {mean or '-':>9} length {length or '-':>6} ({n} episodes)", flush=True)
        self.returns.clear()
        self.lengths.clear()
        self.last_wall, self.last_steps = wall_s, env_steps
