"""`trot train ... --nproc K` on one machine: torchrun starts K copies of the command, their
output is copied live to this console from torchrun's log files, and a failed job names
each failed rank, its exit code or signal, and the last lines it printed."""

from __future__ import annotations

import sys
from pathlib import Path

from trot.tasks.sources import loaded_specs


def launch_torchrun(nproc: int, args: list[str]) -> int:
    """`trot train ... --nproc K` on one machine: torchrun starts K copies of this command.

    The workers' stdout and stderr go to files (torchrun --log-dir, --redirects) that are
    copied to this console as they grow, so a failed rank's last lines can be reported."""
    import tempfile

    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.run import main as torchrun

    # the workers learn the process count from torchrun (and --nproc would be an ambiguous
    # prefix of torchrun's own --nproc-per-node)
    worker_args = [a for i, a in enumerate(args) if not a.startswith("--nproc")
                   and not (i > 0 and args[i - 1] == "--nproc")]
    with tempfile.TemporaryDirectory(prefix="trot-torchrun-") as log_dir:
        try:
            with _WorkerOutput(Path(log_dir)):
                torchrun(["--standalone", f"--nproc_per_node={nproc}", "--log-dir", log_dir,
                          "--redirects", "3", "-m", "trot", "train", *_tasks_flags(),
                          *worker_args])
        except ChildFailedError as e:
            print(f"trot: error: distributed training failed: "
                  f"{_failure_report(e, Path(log_dir))}", file=sys.stderr)
            return 2
        except SignalException:  # Ctrl-C / SIGTERM: torchrun passed it on to the workers,
            return 0  # which checkpointed and printed how to resume, as one process does
    return 0


class _WorkerOutput:
    """Copies the workers' log files (`LOG_DIR/RUN_ATTEMPT/LOCAL_RANK/std{out,err}.log`, as
    torchrun lays them out) to this process's stdout and stderr, line by line as written."""

    def __init__(self, log_dir: Path, interval_s: float = 0.05):
        import threading

        self.log_dir, self.interval_s = log_dir, interval_s
        self._open: dict[Path, list] = {}  # path -> [file, partial last line]
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, name="trot-worker-output",
                                        daemon=True)

    def __enter__(self) -> None:
        self._thread.start()

    def __exit__(self, *_exc) -> None:
        self._done.set()
        self._thread.join()
        self._copy(final=True)  # whatever came after the last poll, unfinished lines too
        for f, _ in self._open.values():
            f.close()

    def _run(self) -> None:
        while not self._done.wait(self.interval_s):
            self._copy(final=False)

    def _copy(self, final: bool) -> None:
        for path in sorted(self.log_dir.glob("*/attempt_*/*/std*.log")):
            if path not in self._open:
                self._open[path] = [open(path, errors="replace"), ""]  # noqa: SIM115
            entry = self._open[path]
            text = entry[1] + entry[0].read()
            cut = len(text) if final else text.rfind("\n") + 1  # whole lines while running
            done, entry[1] = text[:cut], text[cut:]
            if done:
                dst = sys.stderr if path.name == "stderr.log" else sys.stdout
                dst.write(done)
                dst.flush()


def _failure_report(e, log_dir: Path, lines: int = 12) -> str:
    """Each failed rank with its exit code or signal, then the last lines it printed; the
    rank that failed first on its own comes first (torchrun stops the others, SIGTERM)."""
    import signal

    stopped = (-signal.SIGTERM, -signal.SIGKILL)
    failures = sorted(e.failures.items(),
                      key=lambda rf: (rf[1].exitcode in stopped, rf[1].timestamp, rf[0]))
    status = []
    for rank, f in failures:
        how = (f"was killed by signal {f.signal_name()} ({-f.exitcode})" if f.exitcode < 0
               else f"exited with code {f.exitcode}")
        status.append(f"rank {rank} {how} (pid {f.pid})")
    out = ["; ".join(status) or "a worker failed"]
    for rank, f in failures:
        tails = [(name, _last_lines(log_dir, f.local_rank, name, lines))
                 for name in ("stdout", "stderr")]
        if not any(t for _, t in tails):
            out.append(f"rank {rank} printed nothing")
        for name, tail in tails:
            if tail:
                out.append(f"last lines rank {rank} printed ({name}):")
                out += ["  " + line for line in tail]
    return "\n".join(out)


def _last_lines(log_dir: Path, local_rank: int, stream: str, n: int) -> list[str]:
    """The last n non-empty lines of a local rank's stream, from torchrun's latest attempt."""
    paths = sorted(log_dir.glob(f"*/attempt_*/{local_rank}/{stream}.log"),
                   key=lambda p: int(p.parent.parent.name.removeprefix("attempt_")))
    if not paths:
        return []
    text = paths[-1].read_text(errors="replace")
    return [line for line in text.splitlines() if line.strip()][-n:]


def _tasks_flags() -> list[str]:
    """--tasks for each user source this process loaded (for child processes)."""

    return [a for spec in loaded_specs() for a in ("--tasks", spec)]
