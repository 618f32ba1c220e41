"""Terminations: failures that end an episode with no bootstrap, `Body -> [N] bool`."""

from __future__ import annotations

from torch import Tensor

from trot.tasks.terms.body import Body


def fell(body: Body) -> Tensor:
    """A terminate_contacts body (the trunk, the pelvis) touches the ground."""
    forces = body.sim.sensordata[:, body.s_fall]
    return (forces > body.config.contact_threshold).any(-1)


def tilted(body: Body) -> Tensor:
    """Projected gravity's z in the base frame exceeds max_gravity_z (-1 is level; -0.5 a
    60 degree tilt)."""
    return body.gravity()[:, 2] > body.config.max_gravity_z


def base_too_low(body: Body) -> Tensor:
    """The base is lower than min_base_height above the ground (0: never)."""
    return body.base_height() < body.config.min_base_height
