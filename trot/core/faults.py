"""Deterministic fault injection for tests: crash or stall a process at a named point.

Random kills make flaky tests; named points make a crash reproducible. Two environment
variables, read when a point is passed (never at import, so importing trot sets nothing):

    TROT_CRASH_AT="POINT[:K[:R]]"      os._exit(CRASH_EXIT) the K-th time (default 1st) this
                                       process passes POINT, only on rank R if given
    TROT_DELAY_AT="POINT:SECONDS[:R]"  sleep SECONDS at POINT, only on rank R if given

A process's rank is the RANK that torchrun sets, an A3C worker's index (`set_rank`), or 0.

Several entries may be given, separated by commas. Points are passed a few times per
iteration (checkpoint and log writes, shutdown), and one per control step (below).

Points: "tmp-written-NAME" (the temporary file of NAME, e.g. checkpoint.pt, is complete, not
yet renamed), "checkpoint-saved"
(after checkpoint.pt's rename), "logged" (after a metrics row, before that iteration's
checkpoint), "evaluated" (after an eval.csv row, inside the evaluation's
pause of the training clock), "before-shutdown" (a rank is about to leave its process group),
"rollout" (a rollout is collected, before its update: once per iteration), "env-step" (before
each control step of a rollout: the one per-step point, for a slow rank; with neither variable
set a point costs two dictionary lookups).
"""

from __future__ import annotations

import os
import time

CRASH_ENV = "TROT_CRASH_AT"
DELAY_ENV = "TROT_DELAY_AT"
CRASH_EXIT = 86
"""exit status of an injected crash (distinct from Python's 1 and the CLI's 2)"""

_passes: dict[str, int] = {}
_rank: str | None = None  # set_rank's, for processes torchrun did not start


def set_rank(rank: int) -> None:
    """This process's rank for the filters above (an A3C worker's index)."""
    global _rank
    _rank = str(rank)


def _entries(var: str) -> list[list[str]]:
    raw = os.environ.get(var, "")
    return [e.strip().split(":") for e in raw.split(",") if e.strip()]


def point(name: str) -> None:
    """Pass the named point: crash or sleep here if the environment asks for it."""
    if CRASH_ENV not in os.environ and DELAY_ENV not in os.environ:
        return
    _passes[name] = n = _passes.get(name, 0) + 1
    rank = _rank if _rank is not None else os.environ.get("RANK", "0")
    for e in _entries(CRASH_ENV):
        if e[0] == name and n == (int(e[1]) if len(e) > 1 else 1) and (len(e) < 3 or
                                                                       e[2] == rank):
            os._exit(CRASH_EXIT)  # no cleanup, no finally blocks: as a kill -9 would
    for e in _entries(DELAY_ENV):
        if e[0] == name and (len(e) < 3 or e[2] == rank):
            time.sleep(float(e[1]))
