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
    from trot.tasks.terms.terrain import Terrain

    return env.task.body.term(Terrain).level


@pytest.mark.parametrize("task", rec.TASKS)
def test_task_matches_its_record(task):
    threads = torch.get_num_threads()
    try:
        now = rec.record(task, _levels if "rough" in task else None)
    finally:
        torch.set_num_threads(threads)
    saved = np.load(rec.path(task))
    # terms whose weight was 0 are no longer declared (go1-flat's feet air time, swing
    # height, joint speed and hip deviation; g1-flat's feet air time and swing height):
    # every value they recorded is 0, so the totals hold without them
    dropped = sorted(set(saved.files) - set(now))
    assert all(k.startswith("term/") and not saved[k].any() for k in dropped), dropped
    assert sorted(now) == sorted(set(saved.files) - set(dropped))
    if task != "go2-flat":  # the record covers resets after falls (go2's stand 800 steps)
        assert saved["terminated"].any()
    for k in now:
        if k == "reward" or k.startswith("term/"):
            np.testing.assert_allclose(now[k], saved[k], rtol=1e-6, atol=1e-7, err_msg=k)
        else:
            assert np.array_equal(now[k], saved[k]), f"{task}: {k} differs from its record"
