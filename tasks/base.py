"""The task contract: a task builds its MJCF, places its robots, maps actions to controls and
scores states. Everything is torch on the sim's device and works on every backend.

The env loop (tasks/env.py) owns clocks (a task may keep their record, `Episode`, for its
own terms to read), resets, the NaN guard and observation assembly, so a task file holds
only what is specific to the task.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import MISSING, dataclass, fields
from typing import Generic, TypeVar

import mujoco
import torch
from torch import Tensor

from trot.sim.base import BatchedSim
from trot.tasks.mirror import Mirror
from trot.tasks.observation import ObsTerm


def _numbers(v: object) -> tuple[float, ...] | None:
    vals = v if isinstance(v, (tuple, list)) else (v,)  # a list written in Python: as a tuple
    ok = all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in vals)
    return tuple(float(x) for x in vals) if ok else None


def checked_output(hook: str, t: object, shape: tuple[int, ...], dtype: torch.dtype,
                   device: torch.device) -> Tensor:
    """A task hook's tensor `t`, or a ValueError naming the hook and what it must return.
    Shapes, dtypes and devices are host metadata: checking them costs no sync."""
    if not (isinstance(t, Tensor) and tuple(t.shape) == shape and t.dtype == dtype
            and t.device == device):
        got = (f"{t.dtype} of shape {tuple(t.shape)} on {t.device}" if isinstance(t, Tensor)
               else type(t).__name__)
        raise ValueError(f"{hook} must return a {dtype} tensor of shape {shape} on {device}, "
                         f"got {got}")
    return t


# The checks every task config gets from its field names and shapes, one row each:
# (which fields, the check, what is accepted). A task adds its own by overriding validate.
FIELD_RULES = (
    (lambda name, v: name.endswith("_seconds"), lambda v: all(x > 0 for x in v),
     "> 0 (a duration in seconds)"),
    (lambda name, v: name in ("substeps", "obs_history"),
     lambda v: v[0] >= 1 and v[0] == int(v[0]), "an integer >= 1"),
    (lambda name, v: name.endswith(("_fraction", "_prob", "_probability")),
     lambda v: all(0.0 <= x <= 1.0 for x in v), "in [0, 1] (a probability)"),
    (lambda name, v: isinstance(v, (tuple, list)) and len(v) == 2, lambda v: v[0] <= v[1],
     "a range (low, high) with low <= high"),
)


@dataclass(frozen=True)
class TaskConfig:
    """Fields every task has; a task's config subclasses this with its own fields.

    `validate` checks every field by its name and shape (FIELD_RULES): `*_seconds` are
    durations (> 0), `*_fraction` / `*_prob` are probabilities in [0, 1], two-number tuples
    are ranges (low <= high), `substeps` is an integer >= 1."""

    episode_seconds: float = 10.0
    """time limit; reaching it truncates the episode (bootstrapped), it never terminates"""
    substeps: int = 2
    """physics steps per control step (control dt = substeps * MJCF timestep)"""
    obs_noise: bool = True
    """add each observation term's training noise (never in eval or export)"""
    obs_history: int = 1
    """the policy sees its last K observation frames, oldest first (1: the current frame);
    a new episode's history is K copies of its first frame; the critic sees one frame"""

    def validate(self) -> None:
        """Raise ValueError naming the first bad field (as `env.NAME`) and what is accepted."""
        for f in fields(self):
            v = getattr(self, f.name)
            nums = _numbers(v)
            if not nums:  # not numbers (None) or an empty tuple
                continue
            for applies, ok, accepted in FIELD_RULES:
                if applies(f.name, v) and not ok(nums):
                    raise ValueError(f"env.{f.name} must be {accepted}, got {v!r}")

    @classmethod
    def from_dict(cls, d: dict) -> "TaskConfig":
        """Rebuild from JSON (lists back to tuples); unknown fields are an error."""
        return from_fields(cls, d)


T = TypeVar("T")


def from_fields(cls: type[T], d: dict) -> T:
    """A config dataclass from its JSON fields (lists back to tuples). Unknown or missing
    fields are a ValueError naming them and what is accepted, not a TypeError."""
    if not isinstance(d, dict):
        raise ValueError(f"{cls.__name__} must be a JSON object, got {type(d).__name__}")
    names = {f.name for f in fields(cls)}
    unknown = sorted(set(d) - names)
    if unknown:
        raise ValueError(f"unknown {cls.__name__} fields {unknown}; accepted: "
                         f"{', '.join(sorted(names))}")
    required = {f.name for f in fields(cls)
                if f.default is MISSING and f.default_factory is MISSING}
    if required - set(d):
        raise ValueError(f"{cls.__name__} lacks the fields {sorted(required - set(d))}")
    return cls(**{k: _tuples(v) for k, v in d.items()})


def _tuples(v: object) -> object:
    """JSON's lists back to the tuples a frozen config holds, nested ones too."""
    return tuple(_tuples(x) for x in v) if isinstance(v, list) else v


@dataclass(frozen=True)
class Episode:
    """Each env's place in its episode, beside the sim's state: what the env loop's time
    limit, the `last_action` observation and the checkpoint read, and a task's terms too
    (the terrain curriculum's time so far, the action-rate penalty's previous action).

    One record, one owner: the task where it keeps one (`Task.episode`: tasks/velocity.py
    starts and advances it in `on_reset` and `post_step`, which every runner of a task
    calls, `Env` and export/sim2sim.py's plain runner alike, so its terms read the same
    record under both), else the env. Only the owner calls `start` and `advance`; the env
    also sets staggered starts and restores checkpoints in place, in either case."""

    step: Tensor  # [N] int64 control steps since the episode began, counted at each step's end
    last_action: Tensor  # [N, A] the (clipped) action of the last step; 0 at an episode's start

    @classmethod
    def zeros(cls, n: int, action_dim: int, device: torch.device) -> "Episode":
        return cls(torch.zeros(n, dtype=torch.int64, device=device),
                   torch.zeros(n, action_dim, device=device))

    def start(self, mask: Tensor) -> None:
        """Envs where mask [N] is set begin an episode."""
        self.step.masked_fill_(mask, 0)
        self.last_action.masked_fill_(mask[:, None], 0.0)

    def advance(self, action: Tensor) -> None:
        """Every env took a step with action [N, A] (in place: readers hold these tensors)."""
        self.last_action.copy_(action)
        self.step.add_(1)


@dataclass
class Observation:
    """What the agent sees. Layouts (named slices) are static: `Env.policy_layout`."""

    policy: Tensor  # [N, P]
    critic: Tensor  # [N, C]; the same tensor as policy when the task has no privileged terms


@dataclass
class StepResult:
    obs: Observation  # after auto-reset: first observation of the new episode where one ended
    reward: Tensor  # [N] float32
    terminated: Tensor  # [N] bool: failure; the value of what follows is 0
    truncated: Tensor  # [N] bool: time limit; bootstrap from final_obs
    final_obs: Observation  # [N, ...] the observation of the state reached by this step,
    # before any reset. Equal to obs for envs that did not end.
    metrics: dict[str, Tensor]  # logging only: per-step scalars as 0-d tensors


C = TypeVar("C", bound=TaskConfig)


class Task(ABC, Generic[C]):
    """Subclass this, with a frozen config dataclass, and `register` it (tasks/registry.py).

    Lifecycle: `build()` -> the env compiles the spec and makes the sim -> `bind(sim)` once
    -> `reset` / `action_to_ctrl` / `reward` / `terminated` every step.
    """

    command_dim: int = 0
    home_keyframe: str | None = "home"
    """the keyframe of the standing pose: the export's default_joint_pos (qpos0 where the
    model has no such keyframe)"""
    data_fields: tuple[str, ...] = ()
    """MjData fields beyond qpos/qvel/sensordata that the task (or a kind='data' observation
    term) reads with `sim.data(name)`, e.g. ("xpos", "cfrc_ext"); the sim tracks only these"""
    episode: Episode | None = None
    """the task's own `Episode` record, where it keeps one (set in `bind`; its `on_reset`
    starts and its `post_step` advances it): the env reads it and leaves it to the task.
    None: the env keeps the record"""

    def __init__(self, config: C):
        self.config = config
        self.command: Tensor | None = None  # [N, command_dim] where the task has commands

    @abstractmethod
    def build(self) -> mujoco.MjSpec:
        """The model: bodies, actuators and the sensors the observation reads."""

    @abstractmethod
    def policy_terms(self) -> tuple[ObsTerm, ...]:
        """The policy's observation, in order. Only what a real robot can measure."""

    def critic_terms(self) -> tuple[ObsTerm, ...]:
        """The critic's observation; add privileged terms here. Default: the policy's."""
        return self.policy_terms()

    def bind(self, sim: BatchedSim) -> None:
        """Called once with the built sim: look up ids and allocate per-env state."""

    @abstractmethod
    def initial_state(self, sim: BatchedSim, gen: torch.Generator) -> tuple[Tensor, Tensor]:
        """Sample start states for all envs: qpos [N, nq], qvel [N, nv]."""

    def restart(self) -> None:
        """`Env.reset` calls this before resetting every env: drop anything drawn ahead
        (a `UniformBank`), so that draws after a reseed start from the new seed."""

    def staggered(self, sim: BatchedSim, elapsed: Tensor) -> None:
        """`Env.reset(stagger=True)` started each env's first episode elapsed [N] seconds into
        its clock (`Episode.step`, already set, in the task's record too): a task that keeps
        another clock that must start there sets it here."""

    def episode_end(self, sim: BatchedSim, mask: Tensor) -> None:
        """Envs where mask [N] is set are about to reset, in the state their episode ended
        in (before `initial_state`): e.g. a terrain curriculum moves them between rows."""

    def randomize(self, sim: BatchedSim, mask: Tensor, gen: torch.Generator) -> None:
        """Domain randomization: new per-env model parameters (`BatchedSim.set_params`) for
        envs where mask [N] is set. Runs after `initial_state` and before the sim resets
        those envs, so the reset's forward (the first observation's sensors and contact
        forces) already sees the new parameters."""

    def on_reset(self, sim: BatchedSim, mask: Tensor, gen: torch.Generator) -> None:
        """Reset task state (commands, timers, histories) of envs where mask [N] is set,
        from the state they were reset to."""

    def pre_step(self, sim: BatchedSim, gen: torch.Generator) -> None:
        """Before physics each step: resample commands on schedule, pushes, ..."""

    def post_step(self, sim: BatchedSim, action: Tensor) -> None:
        """After physics, before the step's observation, with the step's (clipped) action
        [N, A]: the one place where task state advances with the step (the heading
        controller's yaw-rate command, histories, feet air time), so that `final_obs` and,
        where nothing ended, `obs` see it alike, and `reward` only reads."""

    def action_affine(self, model: mujoco.MjModel) -> tuple[list[float], list[float]]:
        """Per-actuator (scale, offset): ctrl = offset + scale * action. The export writes
        exactly these numbers, so the robot maps actions as training did. Default: identity."""
        return [1.0] * model.nu, [0.0] * model.nu

    def bind_actions(self, sim: BatchedSim) -> None:
        scale, offset = self.action_affine(sim.model)
        nu = sim.model.nu
        if nu == 0:
            raise ValueError(f"{type(self).__name__}'s model has no actuators: a policy needs "
                             "at least one (<actuator> in the MJCF)")
        if len(scale) != nu or len(offset) != nu:
            raise ValueError(f"{type(self).__name__}.action_affine must return (scale, offset) "
                             f"with one number per actuator ({nu}), got {len(scale)} and "
                             f"{len(offset)}")
        self.action_scale = torch.tensor(scale, dtype=torch.float32, device=sim.device)
        self.action_offset = torch.tensor(offset, dtype=torch.float32, device=sim.device)
        self._identity_actions = all(s == 1.0 for s in scale) and not any(offset)

    def action_latency_steps(self) -> int:
        """Control steps between an action and the motors receiving it (action_to_ctrl's
        delay): the contract's action_latency_steps, which `trot sim2sim` emulates."""
        return 0

    def action_to_ctrl(self, action: Tensor) -> Tensor:
        """[N, A] in [-1, 1] -> ctrl [N, nu]. Override to add latency or filtering."""
        if self._identity_actions:
            return action
        return torch.addcmul(self.action_offset, self.action_scale, action)

    @abstractmethod
    def reward(self, sim: BatchedSim, action: Tensor) -> tuple[Tensor, dict[str, Tensor]]:
        """Total reward [N] and its named terms (each [N], weighted) for logging."""

    @abstractmethod
    def terminated(self, sim: BatchedSim) -> Tensor:
        """[N] bool: a failure that ends the episode with no bootstrap."""

    def truncated(self, sim: BatchedSim) -> Tensor | None:
        """[N] bool: episodes that end without failure besides the time limit (bootstrapped,
        e.g. leaving a finite terrain), or None where none do (the default: no work)."""
        return None

    def mirror(self) -> Mirror | None:
        """The task's left-right mirror (joint pairs, command signs) for symmetry
        augmentation, or None where it has none (tasks/mirror.py)."""
        return None

    def eval_metrics(self, sim: BatchedSim) -> dict[str, Tensor]:
        """Per-step [N] quantities that `trot eval` averages over each episode."""
        return {}

    def episode_outcomes(self, sim: BatchedSim) -> dict[str, Tensor]:
        """Per-env [N] results that `trot eval` and `trot sim2sim` read at each episode's
        last step (not averaged over it) and average over the episodes where they are not
        NaN: e.g. success on a terrain course, per sub-terrain."""
        return {}

    def iteration_metrics(self) -> dict[str, Tensor]:
        """0-d device tensors logged every training iteration (in its one host sync) as
        `task/NAME` and shown in the progress line: e.g. the mean terrain level."""
        return {}

    def summarize(self, means: dict[str, float]) -> dict[str, float]:
        """Headline numbers derived from an evaluation's means (`eval_metrics` averaged per
        episode, then over episodes, plus mean_length and terminated_rate)."""
        return {}

    def max_return(self) -> float | None:
        """The greatest achievable episode return, where there is one."""
        return None

    def state_dict(self) -> dict[str, Tensor]:
        return {} if self.command is None else {"command": self.command.clone()}

    def load_state_dict(self, state: dict[str, Tensor]) -> None:
        if self.command is not None:
            self.command.copy_(state["command"])
