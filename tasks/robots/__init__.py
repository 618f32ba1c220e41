"""Robots: the shipped descriptions (go1.py, go2.py, g1.py: `LeggedRobot` facts only, no
task settings), and robot models from outside the task files: a path to an MJCF file, one
of trot's shipped assets (tasks/assets/NAME.xml), or a MuJoCo Menagerie model by its folder
name.

MuJoCo Menagerie (github.com/google-deepmind/mujoco_menagerie) keeps one folder per robot,
named `<maker>_<model>` (e.g. `unitree_go1`, `anybotics_anymal_c`), holding the bare robot as
`<model>.xml` (e.g. `unitree_go1/go1.xml`) and, for most robots, a `scene.xml` that includes
it with a floor and lights. `load_robot("unitree_go1")` reads `$MENAGERIE_ROOT/unitree_go1/
scene.xml` if present, else the robot file; `load_robot("unitree_go1/go1.xml")` names the file;
a model folder's own path works too.
"""

from __future__ import annotations

import os
from pathlib import Path

import mujoco

ASSETS = Path(__file__).parent.parent / "assets"
MENAGERIE_ENV = "MENAGERIE_ROOT"


class RobotNotFoundError(FileNotFoundError):
    """No MJCF file where the name points; the message lists every place looked at."""


def _not_found(name: str, looked: list[Path], hint: str = "") -> RobotNotFoundError:
    where = "\n".join(f"  {p}" for p in looked) or "  (nowhere)"
    return RobotNotFoundError(f"robot {name!r} not found; looked for:\n{where}"
                              + (f"\n{hint}" if hint else ""))


def menagerie_candidates(root: Path, name: str, scene: bool = True) -> list[Path]:
    """Files that may hold Menagerie model `name` under `root`, in order of preference."""
    if name.endswith(".xml"):  # "unitree_go1/go1.xml": the file itself
        return [root / name]
    folder = root / name
    parts = name.split("_")
    # "unitree_go1" -> go1.xml, unitree_go1.xml; "boston_dynamics_spot" -> spot.xml, ...
    stems = ["_".join(parts[i:]) for i in range(len(parts) - 1, -1, -1)]
    robot_files = [folder / f"{s}.xml" for s in stems]
    return ([folder / "scene.xml"] if scene else []) + robot_files


def resolve_robot(path_or_name: str | os.PathLike, scene: bool = True) -> Path:
    """The MJCF file that `load_robot` would read. Raises RobotNotFoundError."""
    raw = str(path_or_name)
    p = Path(raw).expanduser()
    if p.is_file():
        return p
    if p.is_dir():  # a model folder, e.g. .../mujoco_menagerie/unitree_go1
        candidates = menagerie_candidates(p.parent, p.name, scene)
        for c in candidates:
            if c.is_file():
                return c
        raise _not_found(raw, candidates, "that is a folder without a model file")
    looked = [p]
    if p.is_absolute() or raw.startswith((".", "~")):  # clearly a file path: nothing else
        raise _not_found(raw, looked)
    if not raw.endswith(".xml") and "/" not in raw:
        shipped = ASSETS / f"{raw}.xml"
        looked.append(shipped)
        if shipped.is_file():
            return shipped
    root = os.environ.get(MENAGERIE_ENV)
    if not root:
        raise _not_found(raw, looked, f"{MENAGERIE_ENV} is not set: to load a MuJoCo Menagerie "
                         f"model by name, set {MENAGERIE_ENV} to the root of a "
                         "mujoco_menagerie checkout (the folder holding unitree_go1/, ...)")
    root_path = Path(root).expanduser()
    if not root_path.is_dir():
        raise _not_found(raw, looked, f"{MENAGERIE_ENV}={root} is not a directory")
    candidates = menagerie_candidates(root_path, raw, scene)
    for c in candidates:
        if c.is_file():
            return c
    raise _not_found(raw, looked + candidates, f"(Menagerie models are folders under "
                     f"{MENAGERIE_ENV}={root}, e.g. unitree_go1/)")


def load_robot(path_or_name: str | os.PathLike, scene: bool = True) -> mujoco.MjSpec:
    """An editable MjSpec of a robot: an MJCF path, a shipped asset name ("go1"), or a
    Menagerie folder name ("unitree_go1", resolved under $MENAGERIE_ROOT; scene=False skips
    scene.xml for the bare robot). Includes and mesh folders resolve relative to the file.
    """
    path = resolve_robot(path_or_name, scene)
    try:
        return mujoco.MjSpec.from_file(str(path))
    except ValueError as e:  # MuJoCo's parse/compile errors
        raise ValueError(f"{path}: not a loadable MJCF model: {e}") from e
