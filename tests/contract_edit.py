"""Test helper (not a test module): edit an export's contract where the runner reads it."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path


def edited_export(src: Path, dst: Path, edit: Callable[[dict], None]) -> Path:
    """A copy of the export in `src` (policy.onnx, policy.json, model.xml) at `dst`, with
    `edit(contract)` applied to policy.json AND to the contract inside policy.onnx alike,
    so that their agreement holds and only the check after it can object."""
    import onnx

    dst.mkdir()
    for name in ("policy.onnx", "policy.json", "model.xml"):
        (dst / name).write_bytes((src / name).read_bytes())
    c = json.loads((dst / "policy.json").read_text())
    edit(c)
    text = json.dumps(c, indent=2, sort_keys=True) + "\n"
    (dst / "policy.json").write_text(text)
    graph = onnx.load(str(dst / "policy.onnx"))
    next(p for p in graph.metadata_props if p.key == "trot").value = text
    onnx.save(graph, str(dst / "policy.onnx"))
    return dst
