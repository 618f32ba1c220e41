"""Tasks composed from terms (tasks/velocity.py, tasks/terms/): no task class tree, state
the checkpoint cannot miss, rewards that only read, resume bit for bit on every locomotion
task, and build-time checks that name the problem."""

from __future__ import annotations

import ast
import copy
import dataclasses
from pathlib import Path

import pytest
import torch

import trot
from trot.sim import make_sim
from trot.tasks import locomotion as loco
from trot.tasks.env import Env
from trot.tasks.go1 import GO1, GO1_FLAT
from trot.tasks.registry import compile_model, get_task
from trot.tasks.terms.body import Body
from trot.tasks.terms.clock import GaitClock
from trot.tasks.terms.rewards import PreviousAction
from trot.tasks.terms.state import Term
from trot.tasks.velocity import Reward

ROOT = Path(__file__).resolve().parents[1]
LOCOMOTION = ("go1-flat", "go1-flat-airtime", "go2-flat", "g1-flat", "go1-rough")


def _classes() -> dict[str, list[str]]:
    """Every class defined in tasks/ and trot/: its name -> its bases' names."""
    out: dict[str, list[str]] = {}
    for path in [*(ROOT / "tasks").rglob("*.py"), *(ROOT / "trot").rglob("*.py")]:
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ClassDef):
                names = []
                for b in node.bases:
                    b = b.value if isinstance(b, ast.Subscript) else b  # Task[Config]
                    names.append(b.attr if isinstance(b, ast.Attribute) else
                                 getattr(b, "id", ""))
                out[node.name] = names
    return out


def test_no_task_class_has_another_task_class_among_its_bases():
    """The bug: a variant written as a subclass of a task (the LeggedVelocity tree, the
    Go1Rough diamond). Task classes are Task and everything derived from it."""
    classes = _classes()
    tasks, grew = {"Task"}, True
    while grew:
        new = {c for c, bases in classes.items() if set(bases) & tasks} - tasks
        tasks |= new
        grew = bool(new)
    assert {"Locomotion", "Cartpole"} <= tasks  # the walk finds the task classes
    tree = {c: sorted(set(classes[c]) & (tasks - {"Task"})) for c in tasks - {"Task"}}
    assert not {c: b for c, b in tree.items() if b}, tree


def _env(decl, n: int = 2, **changes) -> Env:
    task = decl(decl.defaults(**changes))
    return Env("test", task, make_sim("cpu", compile_model(task), n, task.config.substeps,
                                      "cpu"), 0)


class Forgetful(Term):
    """Holds a tensor its own state_dict leaves out."""

    def __init__(self, body: Body):
        self.count = torch.zeros(body.n, device=body.device)

    def state_dict(self):
        return {}


class Hoarder(Term):
    """Keeps its tensors in a list, where no checkpoint sees them."""

    def __init__(self, body: Body):
        self.history = [torch.zeros(body.n)]


@pytest.mark.parametrize("term, message", [
    (Forgetful, r"term 'Forgetful' .* holds \['count'\] but its state_dict leaves them out"),
    (Hoarder, r"term 'Hoarder' .* keeps tensors in containers \['history'\]"),
])
def test_a_term_whose_state_the_checkpoint_would_miss_is_refused(term, message):
    """The bug: a term with memory that a resumed run silently starts from zero."""
    decl = dataclasses.replace(GO1_FLAT, memory=GO1_FLAT.memory + (term,))
    with pytest.raises(ValueError, match=message):
        _env(decl)


@pytest.mark.parametrize("task", LOCOMOTION)
def test_reward_read_twice_is_the_steps_own(task):
    """Memory advances in post_step only: reward() evaluated again after a step gives that
    step's reward exactly. The bug: a reward that advances state (feet air time, the
    previous action, the curriculum's clocks), so a second read differs."""
    env = trot.make_env(task, num_envs=6, seed=1)
    env.reset()
    gen = torch.Generator().manual_seed(0)
    checked = 0
    for _ in range(30):
        res = env.step(2 * torch.rand(6, env.action_dim, generator=gen) - 1)
        again, _ = env.task.reward(env.sim, env.last_action)
        kept = ~(res.terminated | res.truncated)  # ended envs were reset since
        assert torch.equal(again[kept], res.reward[kept])
        checked += int(kept.sum())
    assert checked > 100


@pytest.mark.parametrize("task", LOCOMOTION)
def test_resume_is_bitwise_on_every_locomotion_task(task):
    """An env loaded from another's state_dict continues exactly as the other does: the
    union of the terms' state is the whole task state. The bug: a term's buffer (a
    timer, a level, a ring slot) left out, so the resumed run drifts."""
    a = trot.make_env(task, num_envs=4, seed=2)
    a.reset()
    gen = torch.Generator().manual_seed(3)
    actions = [2 * torch.rand(4, a.action_dim, generator=gen) - 1 for _ in range(60)]
    for act in actions[:30]:
        a.step(act)
    b = trot.make_env(task, num_envs=4, seed=99)  # another seed: everything must come back
    b.reset()
    b.load_state_dict(copy.deepcopy(a.state_dict()))
    for act in actions[30:]:
        ra, rb = a.step(act), b.step(act)
        assert torch.equal(ra.obs.policy, rb.obs.policy) and torch.equal(ra.reward, rb.reward)
        assert torch.equal(ra.obs.critic, rb.obs.critic)
        assert torch.equal(ra.terminated, rb.terminated)


def test_declaration_mistakes_are_named():
    """The mistakes a declaration can make, each refused where it is written or bound."""
    twice = GO1_FLAT.rewards + (Reward("lin_vel", loco.TRACKING[0].fn, 2.0),)
    with pytest.raises(ValueError, match=r"reward terms \['lin_vel'\] are declared twice"):
        dataclasses.replace(GO1_FLAT, rewards=twice)
    with pytest.raises(ValueError, match=r"terms \['GaitClock'\] are declared twice"):
        dataclasses.replace(GO1_FLAT, memory=GO1_FLAT.memory + GO1_FLAT.memory[-1:])
    cfg = dataclasses.replace(get_task("go1-flat").config, weights=(("lin_vell", 2.0),))
    with pytest.raises(ValueError, match=r"env.weights names reward terms \['lin_vell'\] "
                                         r"that this task lacks; its terms: lin_vel, "):
        GO1_FLAT(cfg)


def test_terms_that_read_what_the_task_lacks_fail_at_bind_naming_it():
    """A reward that reads a sensor the robot's model lacks, or a memory term the
    declaration does not list: the task's bind evaluates every reward once, so the error
    names the term before any step."""
    def lidar(s):
        return s.body.sim.sensordata[:, s.body.block(["lidar"])].sum(-1)

    decl = dataclasses.replace(GO1_FLAT, rewards=GO1_FLAT.rewards + (
        Reward("lidar", lidar, 1.0),))
    with pytest.raises(ValueError, match=r"reward term 'lidar': a term reads sensors "
                                         r"\['lidar'\], which the robot's model lacks"):
        _env(decl)
    air = loco.flat(GO1)  # feet air time without its memory term
    decl = dataclasses.replace(air, memory=loco.MEMORY)
    with pytest.raises(ValueError, match=r"reward term 'feet_air_time': a term reads "
                                         r"FeetAirTime, which this task does not declare"):
        _env(decl)


def test_the_episode_record_has_one_owner_that_a_checkpoint_restores():
    """The env's step and last action are the task's episode record (`Body.episode`),
    which terms read rather than copy: the previous action is the record's before the
    step, the curriculum's time its step x dt. The gait clock is a quantity of its own: 0
    at a staggered start, where the env's clock is not. A checkpoint restores the record
    through the env. The bugs: copies that drift apart (a float sum of dt, a staggered
    start one copy missed), and a term's copy dropped from the checkpoint with nothing else
    restoring it."""
    cfg = dataclasses.replace(get_task("go1-rough").config, episode_seconds=0.2)
    env = trot.make_env("go1-rough", num_envs=6, seed=1, config=cfg)
    env.reset(stagger=True)
    task = env.task
    assert env.episode is task.episode is task.body.episode
    assert not {"PreviousAction.last", "TerrainCurriculum.elapsed"} & set(task.state_dict())
    assert bool((env.episode_step > 0).any()) and not task.body.term(GaitClock).steps.any()
    gen = torch.Generator().manual_seed(4)
    actions = [2 * torch.rand(6, env.action_dim, generator=gen) - 1 for _ in range(20)]
    ended = torch.zeros(6, dtype=torch.bool)
    for act in actions[:12]:
        before = env.last_action.clone()
        res = env.step(act)
        assert torch.equal(task.body.term(PreviousAction).prev, before)
        done = res.terminated | res.truncated
        assert torch.equal(env.last_action, torch.where(done[:, None], 0.0, act))
        ended |= done
    assert ended.all()  # every env crossed a reset (0.2 s episodes)
    twin = trot.make_env("go1-rough", num_envs=6, seed=9, config=cfg)
    twin.reset(stagger=True)
    twin.load_state_dict(copy.deepcopy(env.state_dict()))
    assert twin.episode is twin.task.episode
    assert torch.equal(twin.last_action, env.last_action)
    assert torch.equal(twin.episode_step, env.episode_step)
    for act in actions[12:]:  # the twin goes on as the env
        ra, rb = env.step(act), twin.step(act)
        assert torch.equal(ra.obs.policy, rb.obs.policy) and torch.equal(ra.reward, rb.reward)
