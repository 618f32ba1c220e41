"""benchmarks/foot_reach.py: the grid search's reach against random joint targets posed
directly in MuJoCo (every actuated joint, not just the chain the script finds)."""

from __future__ import annotations

import dataclasses
import importlib.util
import sys
from pathlib import Path

import mujoco
import numpy as np
import pytest

from trot.tasks.registry import get_task

_path = Path(__file__).parents[1] / "benchmarks" / "foot_reach.py"
_spec = importlib.util.spec_from_file_location("foot_reach", _path)
bench = sys.modules.setdefault("foot_reach", importlib.util.module_from_spec(_spec))
_spec.loader.exec_module(bench)


def _random_lifts(task_name: str, scale: float, samples: int) -> np.ndarray:
    """[samples, F] each foot's lift for random targets of every actuated joint within
    home +- scale and its range, the base at home, read from geom_xpos."""
    entry = get_task(task_name)
    task = entry.task_cls(dataclasses.replace(entry.config, action_scale=scale))
    m = task.model()
    d = mujoco.MjData(m)
    home = m.key_qpos[m.key(task.home_keyframe).id].copy()
    adr = [int(m.jnt_qposadr[m.actuator_trnid[i, 0]]) for i in range(m.nu)]
    ranges = m.jnt_range[m.actuator_trnid[:, 0]]  # [nu, 2]
    lo = np.maximum(home[adr] - scale, ranges[:, 0])
    hi = np.minimum(home[adr] + scale, ranges[:, 1])
    feet = [m.geom(f).id for f in task.robot.feet]
    rng = np.random.default_rng(0)

    def heights(values):
        d.qpos[:] = home
        d.qpos[adr] = values
        mujoco.mj_kinematics(m, d)
        return d.geom_xpos[feet, 2].copy()

    rest = heights(home[adr])
    return np.stack([heights(rng.uniform(lo, hi)) - rest for _ in range(samples)])


@pytest.mark.parametrize("scale", [0.25, 0.5])
def test_no_random_target_lifts_a_foot_above_the_reach_found(scale):
    """Catches a chain that misses a joint of the leg (random poses moving it would lift the
    foot higher), a search box that ignores the task's action_scale (the reach would not
    change with it), and offsets stored at the wrong qpos address (a free joint's 7 qpos
    against its 6 dofs)."""
    reach = bench.foot_reach("go1-flat", {"action_scale": scale}, points=5)
    lifts = _random_lifts("go1-flat", scale, 3000)  # [S, F]
    for f, r in enumerate(reach):
        assert lifts[:, f].max() <= r.lift + 0.005, (r.foot, lifts[:, f].max(), r.lift)
        assert lifts[:, f].max() >= 0.8 * r.lift  # the random poses come near it
        assert len(r.joints) == 3 and all(abs(o) <= scale + 1e-9 for o in r.offsets)
    assert np.allclose([r.lift for r in reach], reach[0].lift, atol=1e-6)  # four alike legs


def test_the_reach_grows_with_the_action_scale_and_the_joint_filter_narrows_it():
    """Catches `changes` dropped (the registered scale searched) and `only` ignored."""
    low, high = (bench.foot_reach("go1-flat", {"action_scale": s})[0] for s in (0.25, 0.5))
    assert 0 < low.lift < high.lift
    sagittal = bench.foot_reach("go1-flat", {"action_scale": 0.5}, only=("thigh", "calf"))[0]
    assert sagittal.joints == ("FR_thigh", "FR_calf") and sagittal.lift <= high.lift
    with pytest.raises(ValueError, match="matches"):
        bench.foot_reach("go1-flat", only=("elbow",))


def test_the_command_line_prints_the_reach_of_its_overrides():
    """The journal's command form (`--only`, then the task's `--env.*` after `--`) through
    the script's own main: catches flags parsed but not passed on."""
    import re
    import subprocess
    out = subprocess.run([sys.executable, str(_path), "--only", "thigh", "calf", "--points",
                          "3", "--", "go1-flat", "--env.action-scale", "0.25"],
                         capture_output=True, text=True, check=True).stdout
    want = bench.foot_reach("go1-flat", {"action_scale": 0.25}, 3, ("thigh", "calf"))
    got = [float(x) for x in re.findall(r"reach ([\d.]+) cm", out)]
    assert "action_scale 0.25" in out and len(got) == 4
    assert np.allclose(got, [round(100 * r.lift, 1) for r in want])
