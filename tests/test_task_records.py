"""The locomotion tasks against their records from before tasks became compositions of
terms (tests/data/task_records.py): observations, terminations, truncations, commands,
randomized parameters and curriculum levels bit for bit over 800 control steps; rewards
and each reward term to 1e-6 (torch's vectorized exp rounds by instruction set: an Intel
Xeon differs from an AMD machine by 3e-8; a changed term is off by far more)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest
import torch

_spec = importlib.util.spec_from_file_location(
    "task_records", Path(__file__).parent / "data" / "task_records.py")
rec = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(rec)


def _levels(env) -> torch.Tensor:
    return env.task.state_dict()["terrain_level"]


@pytest.mark.parametrize("task", rec.TASKS)
def test_task_matches_its_record(task):
    threads = torch.get_num_threads()
    try:
        now = rec.record(task, _levels if "rough" in task else None)
    finally:
        torch.set_num_threads(threads)
    saved = np.load(rec.path(task))
    assert sorted(now) == sorted(saved.files)
    if task != "go2-flat":  # the record covers resets after falls (go2's stand 800 steps)
        assert saved["terminated"].any()
    for k in saved.files:
        if k == "reward" or k.startswith("term/"):
            np.testing.assert_allclose(now[k], saved[k], rtol=1e-6, atol=1e-7, err_msg=k)
        else:
            assert np.array_equal(now[k], saved[k]), f"{task}: {k} differs from its record"
