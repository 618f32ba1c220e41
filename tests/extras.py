"""The optional extras the suite needs, by import name: one table, so that a test whose extra
is missing skips with a reason that names the extra, and `.ci/run`'s newcomer leg can tell an
expected skip (an extra the README's install leaves out) from a broken install."""

from __future__ import annotations

import pytest

EXTRA_OF = {  # import name -> pyproject extra that brings it
    "jax": "mjx",
    "mujoco.mjx": "mjx",
    "gymnasium": "gym",
    "rl_games": "rlgames",
    "rsl_rl": "rslrl",
    "onnx": "export",
    "onnxruntime": "export",
    "onnxscript": "export",
    "imageio_ffmpeg": "video",
    "PIL": "video",
    "viser": "viewer",
    "selenium": "test",
}


def skip_reason(module: str) -> str:
    """The reason a test skips where `module` is missing; `.ci/run` matches its wording."""
    extra = EXTRA_OF[module]
    return f"needs the '{extra}' extra ({module} is missing): pip install -e \".[{extra}]\""


def need(module: str):
    """`module`, imported, or a skip naming the extra that brings it."""
    return pytest.importorskip(module, reason=skip_reason(module))


def or_skip_for_extra(build):
    """build(), or a skip naming the extra when it fails because a module the extras bring
    is missing (a task whose model ships with an extra, e.g. gym-ant's with gymnasium)."""
    try:
        return build()
    except ModuleNotFoundError as e:
        if e.name in EXTRA_OF:
            pytest.skip(skip_reason(e.name))
        raise
