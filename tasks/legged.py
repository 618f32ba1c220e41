"""Removed on 2026-12-05: the legged task class tree (LeggedVelocity, LeggedClocked,
LeggedRough, config_for) became compositions of terms (tasks/velocity.py). Importing this
module says what to change; docs/tasks.md, "Migrating from LeggedVelocity", shows how."""

raise ImportError(
    "trot.tasks.legged (LeggedVelocity, config_for) was removed: locomotion tasks are "
    "compositions now. A robot's flat task is `flat(MY_ROBOT, **settings)` from "
    "trot.tasks.locomotion, registered with `register(name, task, task.defaults(), ...)`; "
    "a variant is `dataclasses.replace` of a declaration (trot.tasks.go1.GO1_FLAT, ...); "
    "LeggedRobot(config=...) settings move to the declaration's `changes`. See "
    "docs/tasks.md, 'Migrating from LeggedVelocity'.")
