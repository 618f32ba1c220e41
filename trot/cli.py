"""`trot` and `python -m trot`: one CLI, generated from the frozen config dataclasses.
The commands are listed in trot/cli_args.py's USAGE."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable

from trot.cli_args import USAGE, fail, pop_tasks

COMMANDS = {
    "list": "trot.cli_run:cmd_list", "sim-bench": "trot.cli_run:cmd_sim_bench",
    "train": "trot.cli_train:train", "eval": "trot.cli_run:cmd_eval",
    "export": "trot.cli_run:cmd_export", "sim2sim": "trot.cli_run:cmd_sim2sim",
    "play": "trot.play:main", "view": "trot.viewer:main", "compare": "trot.compare:main",
    "rl-games": "trot.rlgames:main", "rsl-rl": "trot.rslrl:main",
    "distill": "trot.cli_train:distill", "surgery": "trot.cli_surgery:main",
}
"""Each command's function, as MODULE:NAME: imported when the command runs, so that `trot`,
`trot --help` and an unknown command answer without importing torch (seconds), and a
command imports only what it uses (play's GL, the viewer's viser, the adapters' rl_games
and rsl_rl are optional extras)."""


def command(name: str) -> Callable[[list[str]], int]:
    module, _, fn = COMMANDS[name].partition(":")
    return getattr(importlib.import_module(module), fn)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in ("-h", "--help"):
        print(USAGE)
        print("commands: " + ", ".join(COMMANDS))
        return 0 if argv else 2
    if argv[0] not in COMMANDS:
        return fail(f"unknown command {argv[0]!r}; accepted: {', '.join(COMMANDS)}")
    try:
        specs, args = pop_tasks(argv[1:])
        for spec in specs:  # before any task name is looked up or tyro builds flags
            importlib.import_module("trot.tasks.sources").load_tasks(spec)  # as COMMANDS
        return command(argv[0])(args)
    except (ValueError, OSError) as e:  # a message, not a traceback (CheckpointError too)
        return fail(str(e))


if __name__ == "__main__":
    sys.exit(main())
