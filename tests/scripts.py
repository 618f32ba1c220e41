"""The repository's scripts (benchmarks/, .ci/) as modules for the tests: loaded from their
files under their own names, once, with no sys.path edit."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[1]


def script(name: str, folder: str = "benchmarks") -> ModuleType:
    """ROOT/FOLDER/NAME.py as the module NAME (the one already loaded, if a test did)."""
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, ROOT / folder / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # before exec: its dataclasses look their module up
    spec.loader.exec_module(module)
    return module
