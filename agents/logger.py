"""Run outputs: metrics.csv (and eval.csv through CsvRows), TensorBoard events, curve.png and a progress line,
and with --wandb the same rows to Weights & Biases (WandbSink).
Called once per iteration with plain floats (after the iteration's single host sync)."""

from __future__ import annotations

import csv
import math
import secrets
import time
from pathlib import Path

from trot.core.files import atomic_write

CORE_COLUMNS = ("iteration", "env_steps", "wall_s", "steps_per_s", "episode_return",
                "episode_length", "episodes", "unstable_envs", "nan_updates")


def fmt_duration(seconds: float) -> str:
    if not math.isfinite(seconds):
        return "?"
    m, s = divmod(int(seconds), 60)
    h, m = divmod(m, 60)
    return f"{h}h{m:02d}m" if h else f"{m}m{s:02d}s"


class CsvRows:
    """A CSV of one row per iteration, appended as the run goes. `iteration` is where the run
    stands (its checkpoint's on resume): rows a crashed process wrote after that checkpoint
    are dropped, so the file continues from the checkpoint with no repeated iteration.
    Columns that appear later widen the file (earlier rows leave them empty); every rewrite
    is atomic, and an append adds whole rows (a torn last row is dropped on resume)."""

    def __init__(self, path: Path, core: tuple[str, ...], iteration: int = 0):
        self.path, self.core = path, core
        self.columns: list[str] | None = None
        self.kept: list[dict[str, str]] = []  # the rows kept from a resumed run's file
        if path.exists():
            self._truncate(iteration)

    def _truncate(self, iteration: int) -> None:
        with open(self.path, newline="") as f:
            reader = csv.DictReader(f)
            columns, rows = reader.fieldnames, list(reader)
        keep = [r for r in rows if _row_iteration(r) is not None
                and _row_iteration(r) <= iteration]  # a torn last row has no iteration
        self.columns = list(columns) if columns and iteration > 0 else None
        if len(keep) < len(rows) or self.columns is None:
            self._rewrite(keep)
        self.kept = keep

    def append(self, m: dict[str, float | None]) -> None:
        new = sorted(k for k in m if k not in (self.columns or self.core))
        if self.columns is None or new:  # first row, or metrics that appear later (reward
            self._widen(new)             # terms once the first episode has ended)
        with open(self.path, "a", newline="") as f:
            csv.writer(f).writerow([_cell(m.get(c)) for c in self.columns])

    def _widen(self, new: list[str]) -> None:
        """Rewrite the file with `new` columns appended (earlier rows leave them empty)."""
        rows: list[dict[str, str]] = []
        if self.columns is not None and self.path.exists():
            with open(self.path, newline="") as f:
                rows = list(csv.DictReader(f))
        self.columns = (self.columns or list(self.core)) + new
        self._rewrite(rows)

    def _rewrite(self, rows: list[dict[str, str]]) -> None:
        """The file as exactly these rows (atomically; no file when there are no columns)."""
        if self.columns is None:
            self.path.unlink(missing_ok=True)
            return
        columns = self.columns

        def write(path: Path) -> None:
            with open(path, "w", newline="") as f:
                w = csv.DictWriter(f, fieldnames=columns, extrasaction="ignore")
                w.writeheader()
                w.writerows(rows)

        atomic_write(self.path, write)


class RunLogger:
    """Appends one row per iteration to metrics.csv (CsvRows: on resume it continues from
    the checkpoint's `iteration`), and its events to TensorBoard, purged past `env_steps`."""

    def __init__(self, run_dir: Path, tensorboard: bool = True, curve_every_s: float = 10.0,
                 iteration: int = 0, env_steps: int = 0):
        self.dir = run_dir
        self.csv_path = run_dir / "metrics.csv"
        self.curve_every_s = curve_every_s
        self._last_curve = 0.0
        self.tb = None
        if tensorboard:
            from torch.utils.tensorboard import SummaryWriter

            # events at env steps after the checkpoint's are discarded (the x-axis)
            self.tb = SummaryWriter(str(run_dir / "tb"), purge_step=env_steps + 1 if
                                    env_steps else None)
        self.rows = CsvRows(self.csv_path, CORE_COLUMNS, iteration)
        # (env_steps, wall_s, return) for curve.png
        self.history: list[tuple[float, float, float]] = [
            (float(r["env_steps"]), float(r["wall_s"]), float(r["episode_return"]))
            for r in self.rows.kept if r.get("episode_return")]

    def log(self, m: dict[str, float]) -> None:
        self.rows.append(m)
        if self.tb is not None:
            for k, v in m.items():
                if k not in ("iteration", "env_steps") and v is not None:
                    self.tb.add_scalar(k, v, int(m["env_steps"]))
        if m.get("episode_return") is not None:
            self.history.append((m["env_steps"], m["wall_s"], m["episode_return"]))
        if time.monotonic() - self._last_curve > self.curve_every_s:
            self.draw_curve()

    def draw_curve(self) -> None:
        self._last_curve = time.monotonic()
        if not self.history:
            return
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        steps, wall, ret = zip(*self.history)
        fig, axes = plt.subplots(1, 2, figsize=(10, 3.5))
        axes[0].plot(steps, ret)
        axes[0].set_xlabel("env steps")
        axes[1].plot(wall, ret)
        axes[1].set_xlabel("wall-clock (s)")
        for ax in axes:
            ax.set_ylabel("mean episode return")
            ax.grid(alpha=0.3)
        fig.suptitle(self.dir.parent.name)
        fig.tight_layout()
        atomic_write(self.dir / "curve.png", lambda p: fig.savefig(p, format="png", dpi=80))
        plt.close(fig)

    def flush(self) -> None:
        """Put TensorBoard's buffered events on disk. Called before each checkpoint: a
        crash right after it would lose them, and the resumed run does not log them again."""
        if self.tb is not None:
            self.tb.flush()

    def close(self) -> None:
        self.draw_curve()
        if self.tb is not None:
            self.tb.close()


WANDB_ID = "wandb_id"  # in the run directory: the W&B run that a resumed run continues


class WandbSink:
    """`trot train --wandb PROJECT`: the rows of metrics.csv (`log`; seeds.csv's under
    --seeds) and eval.csv (`log(row, "eval/")`), the config, and at the end curve.png, to
    one W&B run whose id the run directory keeps, so that `--resume` continues it. W&B's
    step is the row's iteration: a resumed run logs from its checkpoint's on, and rows W&B
    already has (a crashed process logged past its checkpoint) are skipped, as W&B would
    drop them."""

    def __init__(self, run_dir: Path, project: str, config: dict):
        try:
            import wandb  # defers the optional wandb extra to the runs that ask for it
        except ModuleNotFoundError as e:
            raise ModuleNotFoundError(f"--wandb {project} needs the 'wandb' extra: pip "
                                      "install -e \".[wandb]\"", name=e.name) from None
        self.dir, self.image = Path(run_dir), wandb.Image
        path = self.dir / WANDB_ID
        run_id = path.read_text().strip() if path.exists() else secrets.token_hex(4)
        if not path.exists():  # before W&B knows the run: a crash after it still resumes it
            atomic_write(path, lambda p: p.write_text(run_id + "\n"))
        self.run = wandb.init(project=project, id=run_id, resume="allow",
                              name=f"{self.dir.parent.name}/{self.dir.name}")
        self.run.config.update(config, allow_val_change=True)  # a resume's raised budgets
        self.first = int(getattr(self.run, "step", 0) or 0)  # W&B's next step: 0 if new
        self.last: int | None = None  # the step logged last by this process

    def log(self, m: dict[str, float | None], prefix: str = "") -> None:
        step = int(m["iteration"])
        if step < self.first:
            return
        self.run.log({prefix + k: v for k, v in m.items() if v is not None}, step=step)
        self.last = step

    def close(self) -> None:
        """After the run's logger closed: its last curve.png goes with the last row."""
        curve = self.dir / "curve.png"
        if curve.exists() and self.last is not None:
            self.run.log({"curve": self.image(str(curve))}, step=self.last)
        self.run.finish()


class Tee:
    """A run's logger (RunLogger, SeedLogs) whose rows also go to a sink (WandbSink); the
    sink closes after the logger, which draws the last curve as it closes."""

    def __init__(self, logger, sink: WandbSink):
        self.logger, self.sink = logger, sink

    def log(self, m: dict[str, float]) -> None:
        self.logger.log(m)
        self.sink.log(m)

    def flush(self) -> None:
        self.logger.flush()

    def close(self) -> None:
        try:
            self.logger.close()
        finally:
            self.sink.close()


def _row_iteration(row: dict[str, str]) -> int | None:
    try:
        return int(float(row["iteration"])) if None not in row.values() else None
    except (KeyError, TypeError, ValueError):
        return None


def _cell(v: float | None) -> str:
    """Counts (int: env steps, iterations) exactly; measurements to 6 digits."""
    if v is None:
        return ""
    return str(v) if isinstance(v, int) and not isinstance(v, bool) else f"{v:.6g}"


def progress_line(m: dict[str, float], max_steps: float, deadline_s: float) -> str:
    rate = m["steps_per_s"]
    left = (max_steps - m["env_steps"]) / max(rate, 1e-9)
    if deadline_s > 0:
        left = min(left, deadline_s - m["wall_s"])
    left = max(left, 0.0)  # the last iteration runs past the budget: none left, not less
    ret = m.get("episode_return")
    ret_s = f"{ret:9.2f}" if ret is not None else "        -"
    tasks = {k[:-15]: v for k, v in m.items() if k.endswith("/episode_return")}
    if tasks:  # several tasks: each one's own
        ret_s = ", ".join(f"{k} {v:.4g}" for k, v in tasks.items())
    task = "".join(f" | {k[5:]} {v:.3g}" for k, v in m.items() if k.startswith("task/"))
    diverged = m.get("unstable_envs") or 0  # the physics' own blow-ups: reset and counted
    blowup = f" | {int(diverged)} envs diverged (physics; reset)" if diverged else ""
    return (f"it {int(m['iteration']):5d} | {m['env_steps'] / 1e6:7.2f}M steps | "
            f"{rate:8,.0f} steps/s | return {ret_s}{task}{blowup} | "
            f"{fmt_duration(m['wall_s'])} elapsed, ETA {fmt_duration(left)}")
