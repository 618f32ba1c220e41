"""`trot surgery RUN_DIR [--agent.actor-hidden W ...] [--agent.critic-hidden W ...]
[--env.FIELD V ...] [--out D]`: the run with wider hidden layers and, where the --env
overrides of its task config add observation terms, those new inputs, acting and valuing
as it did on the old inputs, written as a new run that `trot train --resume D` continues
(agents/surgery.py, agents/surgery_inputs.py)."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path

import tyro

from trot.agents.runs import run_config
from trot.agents.surgery import RECORD, surgery
from trot.agents.surgery_inputs import task_config
from trot.cli_args import parse_positional

PROG = "trot surgery RUN_DIR"
USAGE = (f"{PROG} [--agent.actor-hidden W ...] [--agent.critic-hidden W ...] "
         "[--env.FIELD V ...] [--out D]")


@dataclass(frozen=True)
class Widths:
    """The new hidden sizes; each layer as wide as the run's or wider, as many layers."""

    actor_hidden: tuple[int, ...] = ()
    """the actor MLP's new hidden sizes (none given: the run's own)"""
    critic_hidden: tuple[int, ...] = ()
    """the critic MLP's new hidden sizes (none given: the run's own)"""


@dataclass(frozen=True)
class SurgeryFlags:
    """Widen a run's networks and add observation inputs, keeping its actions and values,
    into a new run directory. --env.FIELD V: the run's task settings, as `trot train`
    takes them (given RUN_DIR, --help lists its task's)."""

    agent: Widths = field(default_factory=Widths)
    """the new widths"""
    out: str | None = None
    """the new run directory (default RUN_DIR-wide); it must not hold a run"""


def _parse(args: list[str]):
    """(RUN_DIR, flags): `--env.*` typed by the run's task config, its values the default."""
    if args and args[0] in ("-h", "--help"):
        return parse_positional(SurgeryFlags, args, PROG)  # prints the flags, exits
    if not args or args[0].startswith("-"):
        raise ValueError(f"usage: {USAGE} (--help: what each does)")
    env = task_config(run_config(Path(args[0])))
    cls = dataclasses.make_dataclass("SurgeryFlags", [
        ("agent", Widths, field(default_factory=Widths)),
        ("env", type(env), field(default=env)),
        ("out", str | None, field(default=None))], frozen=True)
    cls.__doc__ = SurgeryFlags.__doc__
    return args[0], tyro.cli(cls, args=args[1:], prog=PROG, default=cls(env=env))


def main(args: list[str]) -> int:
    run, flags = _parse(args)
    cfg = run_config(Path(run))
    asked = any(a.startswith("--env.") for a in args)
    out, change = surgery(Path(run), Path(flags.out) if flags.out else None,
                          flags.agent.actor_hidden or None, flags.agent.critic_hidden or None,
                          flags.env if asked else None)
    new = run_config(out)
    record = json.loads((out / RECORD).read_text())
    added = record["added_inputs"]
    print(f"surgery: {run} -> {out}: actor {cfg.agent.actor_hidden} -> "
          f"{new.agent.actor_hidden}, critic {cfg.agent.critic_hidden} -> "
          f"{new.agent.critic_hidden}; new inputs: policy {added['policy'] or 'none'}, critic "
          f"{added['critic'] or 'none'}; on 1000 observations its actions and values are the "
          f"old run's to {change:.1e} (relative); envs {record['envs'].split(' ')[0]}")
    print(f"continue it: trot train --resume {out} [--max-env-steps N] [--minutes M]")
    return 0
