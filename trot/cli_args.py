"""What every command of the CLI shares: the usage, the error line, and parsing
`CMD ARG [--flags]` and `--tasks`. trot/cli.py dispatches; the command modules import this,
never trot/cli.py, so the CLI has no import cycle."""

from __future__ import annotations

import dataclasses
import sys
from typing import Any

import tyro

USAGE = """`trot` and `python -m trot`: one CLI, generated from the frozen config dataclasses.

    trot list
    trot sim-bench TASK [--num-envs N]
    trot train TASK [--algo ppo|a2c|a3c|trpo] [--workers K] [--num-envs N] [--agent.FIELD V] [--env.FIELD V] ...
    trot train TASK --seeds S1 S2 ... (the seeds in one process, each in RUN_DIR/seed_S)
    trot train TASK_A TASK_B ... (one policy for several tasks, each in RUN_DIR/task_NAME)
    trot train [TASK] --resume RUN_DIR [--max-env-steps N] [--minutes M] [--no-export] ...
    trot distill TEACHER_RUN STUDENT_TASK [--distill.FIELD V] [train flags]
    trot surgery RUN_DIR [--agent.actor-hidden W ...] [--agent.critic-hidden W ...]
                 [--env.FIELD V ...] [--out D]
    trot eval RUN_DIR [--episodes K] [--json] [--sim cpu|mjx]
    trot export RUN_DIR [--out DIR]
    trot sim2sim RUN_DIR [--episodes K] [--json]
    trot play RUN_DIR [--video out.mp4] [--gif out.gif] [--episodes K] [--sim cpu|mjx]
    trot view RUN_DIR|TASK [--onnx] [--speed X] [--port P]
    trot compare RUN_DIR... [--out curves.png] [--group NAME=RUN_DIR,RUN_DIR ...]
    trot rl-games TASK [--num-envs N] [--max-epochs E] [--set KEY=VALUE ...]
    trot rsl-rl TASK [--num-envs N] [--max-iterations K] [--seed S] [--run-dir D]

Every command takes --tasks FILE_OR_MODULE (repeatable): your own task file or module,
imported before the task name is looked up. Runs remember it; later commands find it again.
"""


def fail(msg: str) -> int:
    print(f"trot: error: {msg}", file=sys.stderr)
    return 2


def parse_positional(cls: type, args: list[str], prog: str) -> tuple[str, Any]:
    """(args[0], `cls` parsed from the rest) for `prog` = "trot CMD ARG": `--help` prints
    cls's flags (and exits 0); a missing ARG is a ValueError giving the usage."""
    if args and args[0] in ("-h", "--help"):
        tyro.cli(cls, args=["--help"], prog=prog)
    if not args or args[0].startswith("-"):
        flags = " ".join(f"[--{f.name.replace('_', '-')}]" for f in dataclasses.fields(cls))
        raise ValueError(f"usage: {prog} {flags} (--help: what each does)")
    return args[0], tyro.cli(cls, args=args[1:], prog=prog)


def pop_tasks(argv: list[str]) -> tuple[list[str], list[str]]:
    """(the --tasks values in argv, argv without them); `--tasks X` and `--tasks=X`."""
    specs, rest, i = [], [], 0
    while i < len(argv):
        a = argv[i]
        if a == "--tasks":
            if i + 1 >= len(argv) or argv[i + 1].startswith("-"):
                raise ValueError("--tasks needs a value: a task file (FILE.py) or a module name")
            specs.append(argv[i + 1])
            i += 2
            continue
        if a.startswith("--tasks="):
            specs.append(a.removeprefix("--tasks="))
        else:
            rest.append(a)
        i += 1
    return specs, rest
