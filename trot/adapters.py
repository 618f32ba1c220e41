"""What the peer-learner adapters (trot/rlgames.py, trot/rslrl.py) share: a task's config
with some fields replaced, dotted `--set KEY=VALUE` overrides of the peer's own config, and
the command line both take."""

from __future__ import annotations

import argparse
import ast
import dataclasses
import json
from typing import Any

from trot.tasks.base import TaskConfig
from trot.tasks.registry import get_task


def config_with(task: str, overrides: dict[str, Any] | None) -> TaskConfig:
    """The task's registered config with some fields replaced (lists become tuples, as
    config.json round-trips them)."""
    cfg = get_task(task).config
    if overrides:
        cfg = dataclasses.replace(cfg, **{k: tuple(v) if isinstance(v, list) else v
                                          for k, v in overrides.items()})
    return cfg


def merge_dotted(node: dict[str, Any], overrides: dict[str, Any]) -> None:
    """Set {"a.b.c": value} entries into the nested dict `node`, in place (missing levels
    are created)."""
    for key, value in overrides.items():
        here = node
        *path, last = key.split(".")
        for p in path:
            here = here.setdefault(p, {})
        here[last] = value


def parse_value(text: str) -> Any:
    """A --set value: JSON (3e-4, [64, 64], true), a Python literal, else the string."""
    for parse in (json.loads, ast.literal_eval):
        try:
            return parse(text)
        except (ValueError, SyntaxError):
            pass
    return text


def parser(prog: str, description: str, set_help: str) -> argparse.ArgumentParser:
    """The arguments every adapter takes; each adds its own length and output flags."""
    p = argparse.ArgumentParser(prog=prog, description=description)
    p.add_argument("task")
    p.add_argument("--num-envs", type=int, default=256)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device", default="cpu")
    p.add_argument("--sim", default="cpu")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help=set_help)
    return p


def overrides(p: argparse.ArgumentParser, items: list[str]) -> dict[str, Any]:
    """The --set items as {key: value}; a malformed one is the parser's error."""
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep:
            p.error(f"--set wants KEY=VALUE, got {item!r}")
        out[key] = parse_value(value)
    return out
