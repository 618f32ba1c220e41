"""How high each foot can rise with the joint targets a task's policy can send.

The policy's action is clipped to [-1, 1] (the export contract's action_clip) and becomes
the joint target home + action_scale * action (tasks/velocity.py `action_affine`). With the
base held at its home pose, this script searches the targets of the actuated joints on each
foot's own chain (the foot's body up to the base), each within home +- action_scale and its
joint range, for the highest foot: a grid of `--points` values per joint, corners included.
A joint that reached its target exactly would put the foot there; under load it lags, and a
tilting base or a straightening stance leg add height, so this is the reach of the leg alone.

    python benchmarks/foot_reach.py -- g1-flat
    python benchmarks/foot_reach.py -- g1-flat --env.action-scale 0.5
    python benchmarks/foot_reach.py --only pitch knee -- g1-flat

The flags before `--` are this benchmark's; after it come `trot train`'s own (default
`g1-flat`): the task and its settings (`--env.FIELD V`). `--only` keeps the joints whose names contain one of its words (the sagittal joints above:
g1-flat's deviation term holds its hip roll and yaw near home, so a gait does not lift the
foot with them).

It prints each foot's reach beside the gait clock's swing target (ClockSettings.swing_height)
where the task has one: a target out of reach can only be chased by the base's motion.
"""

from __future__ import annotations

import dataclasses
import itertools

import mujoco
import numpy as np

from trot.agents.train_config import TrainConfig
from trot.benchmark import main
from trot.tasks.registry import get_task


@dataclasses.dataclass(frozen=True)
class Settings:
    only: tuple[str, ...] = ()
    """move only the chain's joints whose names contain one of these words"""
    points: int = 5
    """grid values per joint (>= 2)"""


@dataclasses.dataclass(frozen=True)
class Reach:
    foot: str
    lift: float
    """m: the foot geom's centre above its home height, at best"""
    joints: tuple[str, ...]
    """the actuated joints on the foot's chain, base to foot"""
    offsets: tuple[float, ...]
    """rad (or m) from home of each of `joints` at the best pose"""


def chain_joints(m: mujoco.MjModel, body: int) -> list[int]:
    """Actuated hinge or slide joints of `body` and its ancestors, base end first."""
    actuated = {int(m.actuator_trnid[i, 0]) for i in range(m.nu)
                if m.actuator_trntype[i] == mujoco.mjtTrn.mjTRN_JOINT}
    found = []
    while body > 0:
        found += [j for j in range(m.body_jntadr[body], m.body_jntadr[body] + m.body_jntnum[body])
                  if j in actuated]
        body = m.body_parentid[body]
    return found[::-1]


def foot_reach(task_name: str, changes: dict | None = None, points: int = 5,
               only: tuple[str, ...] = (), config=None) -> list[Reach]:
    """Each foot's highest lift over the reachable joint targets (the module's docstring),
    moving only the chain's joints whose names contain one of `only` (all where empty);
    the task's settings are `config` (default: its registered ones) with `changes`."""
    entry = get_task(task_name)
    task = entry.task_cls(dataclasses.replace(config or entry.config, **(changes or {})))
    m = task.model()
    scale, offset = task.action_affine(m)  # per actuator
    box = {int(m.actuator_trnid[i, 0]): (offset[i] - scale[i], offset[i] + scale[i])
           for i in range(m.nu)}
    d = mujoco.MjData(m)
    home = m.key_qpos[mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_KEY, task.home_keyframe)].copy()
    out = []
    for foot in task.robot.feet:
        geom = mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_GEOM, foot)
        joints = [j for j in chain_joints(m, int(m.geom_bodyid[geom]))
                  if not only or any(o in m.joint(j).name for o in only)]
        if not joints:
            raise ValueError(f"no actuated joint on {foot}'s chain matches {list(only)}")
        adr = [int(m.jnt_qposadr[j]) for j in joints]
        grids = []
        for j in joints:
            lo, hi = box[j]
            if m.jnt_limited[j]:  # a target beyond the range is a pose the joint cannot take
                lo, hi = max(lo, m.jnt_range[j, 0]), min(hi, m.jnt_range[j, 1])
            grids.append(np.linspace(lo, hi, points))

        def height(values) -> float:
            d.qpos[:] = home
            d.qpos[adr] = values
            mujoco.mj_kinematics(m, d)
            return float(d.geom_xpos[geom, 2])

        rest = height(home[adr])
        best = max(itertools.product(*grids), key=height)
        out.append(Reach(foot, height(best) - rest,
                         tuple(mujoco.mj_id2name(m, mujoco.mjtObj.mjOBJ_JOINT, j) for j in joints),
                         tuple(float(v) for v in np.asarray(best) - home[adr])))
    return out


def run(s: Settings, cfg: TrainConfig) -> None:
    if s.points < 2:
        raise SystemExit(f"--points must be >= 2 (the grid's two ends), got {s.points}")
    config = cfg.env or get_task(cfg.task).config
    target = getattr(config, "swing_height", None)
    print(f"{cfg.task}: action_scale {config.action_scale}, actions clipped to [-1, 1]"
          + (f"; the clock's swing target {100 * target:.1f} cm" if target else ""))
    for r in foot_reach(cfg.task, None, s.points, s.only, config):
        pose = ", ".join(f"{j} {o:+.2f}" for j, o in zip(r.joints, r.offsets))
        print(f"  {r.foot}: reach {100 * r.lift:.1f} cm, base fixed ({pose})")


if __name__ == "__main__":
    main(Settings, run, ("g1-flat",))
