"""The left-right mirror of a task, for symmetry augmentation (agents/ppo.py): as maps on
the policy observation, the critic observation and the action.

A task declares its mirror as data (`Task.mirror` -> `Mirror`: joint pairs with signs,
and the command's signs); each observation term is mirrored by its kind's rule
(trot/core/observation_kinds.py: sensors by their MuJoCo type and object, qpos/qvel slices by
their joints, the command and last action as declared) or by its own `ObsTerm.mirror`.
A map is `x -> x[..., perm] * signs`, exact only where the term's offset and scale are
mirror-symmetric, which `observation_map` checks.
"""

from __future__ import annotations

from dataclasses import dataclass

import mujoco
import torch
from torch import Tensor

from trot.core.observation_kinds import KINDS, MirrorContext
from trot.tasks.observation import ObsLayout


@dataclass(frozen=True)
class Mirror:
    """A task's left-right mirror, as data."""

    joints: tuple[tuple[str, str, float], ...]
    """(joint, its mirror joint, sign) pairs; a joint of the symmetry plane pairs with itself"""
    command: tuple[float, ...] = ()
    """signs of the command's entries (e.g. forward, lateral speed, yaw rate: 1, -1, -1)"""


@dataclass(frozen=True)
class MirrorMap:
    perm: Tensor  # [D] long
    signs: Tensor  # [D]

    def __call__(self, x: Tensor) -> Tensor:
        """[..., D] -> the mirror image [..., D]."""
        return x.index_select(-1, self.perm) * self.signs

    def tiled(self, k: int) -> "MirrorMap":
        """The map on k frames side by side [..., k * D] (an observation history)."""
        d = self.perm.numel()
        offsets = torch.arange(k, device=self.perm.device).repeat_interleave(d) * d
        return MirrorMap(self.perm.repeat(k) + offsets, self.signs.repeat(k))

    def to(self, device: torch.device) -> "MirrorMap":
        return MirrorMap(self.perm.to(device), self.signs.to(device))


@dataclass(frozen=True)
class Mirrors:
    policy: MirrorMap
    critic: MirrorMap
    action: MirrorMap

    def to(self, device: torch.device) -> "Mirrors":
        return Mirrors(self.policy.to(device), self.critic.to(device), self.action.to(device))


def context(mirror: Mirror, model: mujoco.MjModel) -> MirrorContext:
    joint: dict[int, tuple[int, float]] = {}
    for a, b, sign in mirror.joints:
        ids = [mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_JOINT, x) for x in (a, b)]
        if min(ids) < 0:
            raise ValueError(f"mirror pair ({a}, {b}) names a joint the model lacks")
        joint[ids[0]], joint[ids[1]] = (ids[1], float(sign)), (ids[0], float(sign))
    signs = list(mirror.command)
    return MirrorContext(model, joint, (list(range(len(signs))), signs))


def observation_map(layout: ObsLayout, ctx: MirrorContext, device: torch.device) -> MirrorMap:
    perm: list[int] = []
    signs: list[float] = []
    for slot in layout.slots:
        t = slot.term
        rule = KINDS[t.kind].mirror
        if t.mirror:
            p, s = list(range(slot.size)), list(t.mirror)
        elif rule is None:
            raise ValueError(f"observation term {t.name!r} ({t.kind}) has no mirror rule; "
                             "give it ObsTerm(mirror=signs)")
        else:
            p, s = rule(t, slot.size, ctx)
        if len(p) != slot.size or len(s) != slot.size:
            raise ValueError(f"observation term {t.name!r}: its mirror has {len(s)} signs, "
                             f"the term has {slot.size} values")
        offset = list(t.offset) or [0.0] * slot.size
        bad = [i for i in range(slot.size) if abs(offset[i] - s[i] * offset[p[i]]) > 1e-6]
        if bad:
            raise ValueError(f"observation term {t.name!r}: its offset is not mirror-"
                             f"symmetric at {bad} (offset[i] must be sign[i] * "
                             "offset[mirror(i)]), so the mirror is not a map on it")
        perm += [slot.start + i for i in p]
        signs += s
    return _map(perm, signs, device)


def _map(perm: list[int], signs: list[float], device: torch.device) -> MirrorMap:
    return MirrorMap(torch.tensor(perm, dtype=torch.long, device=device),
                     torch.tensor(signs, dtype=torch.float32, device=device))


def action_map(ctx: MirrorContext, device: torch.device) -> MirrorMap:
    return _map(*ctx.action, device)
