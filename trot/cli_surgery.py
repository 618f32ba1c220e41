"""`trot surgery RUN_DIR --agent.actor-hidden W1 W2 [--agent.critic-hidden W1 W2] [--out D]`:
the run with wider hidden layers, acting and valuing as it did, written as a new run that
`trot train --resume D` continues (agents/surgery.py)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from trot.agents.runs import run_config
from trot.agents.surgery import surgery
from trot.cli_args import fail, parse_positional

PROG = "trot surgery RUN_DIR"
USAGE = f"{PROG} --agent.actor-hidden W ... [--agent.critic-hidden W ...] [--out D]"


@dataclass(frozen=True)
class Widths:
    """The new hidden sizes; each layer as wide as the run's or wider, as many layers."""

    actor_hidden: tuple[int, ...] = ()
    """the actor MLP's new hidden sizes (none given: the run's own)"""
    critic_hidden: tuple[int, ...] = ()
    """the critic MLP's new hidden sizes (none given: the run's own)"""


@dataclass(frozen=True)
class SurgeryFlags:
    """Widen a run's networks, keeping its actions and values, into a new run directory."""

    agent: Widths = field(default_factory=Widths)
    """the new widths"""
    out: str | None = None
    """the new run directory (default RUN_DIR-wide); it must not hold a run"""


def main(args: list[str]) -> int:
    if any(a.startswith("--env.") for a in args):
        return fail("trot surgery widens hidden layers only: adding observation terms "
                    "(--env.FIELD) is not supported yet; widen with --agent.actor-hidden and "
                    "--agent.critic-hidden")
    if not args or args[0].startswith("-") and args[0] not in ("-h", "--help"):
        raise ValueError(f"usage: {USAGE} (--help: what each does)")
    run, flags = parse_positional(SurgeryFlags, args, PROG)
    old = run_config(Path(run)).agent
    out, change = surgery(Path(run), Path(flags.out) if flags.out else None,
                          flags.agent.actor_hidden or None, flags.agent.critic_hidden or None)
    new = run_config(out).agent
    print(f"surgery: {run} -> {out}: actor {old.actor_hidden} -> {new.actor_hidden}, critic "
          f"{old.critic_hidden} -> {new.critic_hidden}; on 1000 observations its actions and "
          f"values are the old run's to {change:.1e} (relative)")
    print(f"continue it: trot train --resume {out} [--max-env-steps N] [--minutes M]")
    return 0
