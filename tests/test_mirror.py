"""The left-right mirror (tasks/mirror.py) is equivariant, not only an involution: the
observation of a mirrored state equals the mirrored observation of the state, through the
task's own observation code. Any wrong mirror that is its own inverse (front swapped with
rear, a sign left out) passes the involution test; it fails this one.

The state is mirrored here independently of trot's rules: the reflection y -> -y of the
world (free joint position (x, -y, z), orientation (w, -x, y, -z), linear velocity
(x, -y, z), angular velocity (-x, y, -z)) and each joint onto its twin by name. go2.xml is
mirror-symmetric (go1.xml is not: its trunk's centre of mass is at y = +1.87 mm), so the
contact forces of the touch sensors mirror too.
"""

from __future__ import annotations

import dataclasses

import mujoco
import pytest
import torch

from trot.tasks import make_env
from trot.tasks.go2 import GO2, GO2_FLAT
from trot.tasks.velocity import Locomotion
from trot.tasks.registry import get_task

FREE_Q, FREE_V = (1.0, -1.0, 1.0, 1.0, -1.0, 1.0, -1.0), (1.0, -1.0, 1.0, -1.0, 1.0, -1.0)


def _env(task: str = "go2-flat", n: int = 6):
    cfg = dataclasses.replace(get_task(task).config, randomize=False, push=False,
                              obs_noise=False)
    return make_env(task, num_envs=n, seed=2, config=cfg)


def _mirror_state(model: mujoco.MjModel, qpos: torch.Tensor, qvel: torch.Tensor,
                  pairs) -> tuple[torch.Tensor, torch.Tensor]:
    q, v = qpos.clone(), qvel.clone()
    q[:, :7], v[:, :6] = qpos[:, :7] * torch.tensor(FREE_Q), qvel[:, :6] * torch.tensor(FREE_V)
    for a, b, sign in pairs:
        for x, y in ((a, b), (b, a)):
            jx, jy = (model.joint(n) for n in (x, y))
            q[:, jy.qposadr[0]] = sign * qpos[:, jx.qposadr[0]]
            v[:, jy.dofadr[0]] = sign * qvel[:, jx.dofadr[0]]
    return q, v


def _walked(env, steps: int = 30):
    """A varied state: random actions from the standing start, commands of every sign."""
    env.reset()
    gen = torch.Generator().manual_seed(5)
    for _ in range(steps):
        env.step(torch.rand(env.num_envs, env.action_dim, generator=gen) * 2 - 1)
    env.task.command.copy_(torch.rand(env.num_envs, 3, generator=gen) * 2 - 1)


def _check(env, pairs) -> tuple[float, float]:
    """max |obs(mirror(state)) - mirror(obs(state))| of the policy and the critic obs."""
    maps = env.mirrors()
    sim, everyone = env.sim, torch.ones(env.num_envs, dtype=torch.bool)
    q, v = sim.qpos.clone(), sim.qvel.clone()
    sim.reset(everyone, q, v)  # forward kinematics and contacts of this exact state
    obs = env.observe()
    mq, mv = _mirror_state(sim.model, q, v, pairs)
    sim.reset(everyone, mq, mv)
    env.task.command.copy_(env.task.command * torch.tensor([1.0, -1.0, -1.0]))
    env.last_action.copy_(maps.action(env.last_action))
    mirrored = env.observe()
    return ((mirrored.policy - maps.policy(obs.policy)).abs().max().item(),
            (mirrored.critic - maps.critic(obs.critic)).abs().max().item())


def test_observation_of_the_mirrored_state_is_the_mirrored_observation():
    env = _env()
    _walked(env)
    assert env.sim.sensordata.abs().max() > 1.0  # contact forces and velocities, not a pose
    policy, critic = _check(env, GO2.mirror)
    assert policy < 1e-6  # kinematic sensors, joints, command, last action: exact
    # the critic's foot touch forces (up to 300 N, scaled 0.02) come from MuJoCo's contact
    # solver, which meets the mirrored problem to about 0.06 N
    assert critic < 2e-3


def test_mirror_is_an_involution_on_both_observations_and_the_action():
    env = _env(n=2)
    _walked(env, steps=5)
    maps, obs = env.mirrors(), env.observe()
    for m, x in ((maps.policy, obs.policy), (maps.critic, obs.critic),
                 (maps.action, env.last_action)):
        torch.testing.assert_close(m(m(x)), x, rtol=0, atol=0)
        assert not torch.allclose(m(x), x)


# A wrong mirror that is its own inverse: front legs swapped with rear ones.
FRONT_REAR_PAIRS = tuple((f"{a}_{j}_joint", f"{b}_{j}_joint", -1.0 if j == "hip" else 1.0)
                         for a, b in (("FL", "RL"), ("FR", "RR")) for j in ("hip", "thigh", "calf"))
FRONT_REAR = dataclasses.replace(GO2_FLAT, robot=dataclasses.replace(GO2, mirror=FRONT_REAR_PAIRS))


class FrontRear(Locomotion):
    """The same swap declared by the task (Task.mirror), past the description's check."""

    def mirror(self):
        return dataclasses.replace(super().mirror(), joints=FRONT_REAR_PAIRS)


class LateralKept(Locomotion):
    """A wrong mirror that is its own inverse: the lateral speed command keeps its sign."""

    def mirror(self):
        return dataclasses.replace(super().mirror(), command=(1.0, 1.0, -1.0))


def _registered(name: str, make) -> str:
    from trot.tasks.registry import _REGISTRY, register

    if name not in _REGISTRY:
        register(name, make, get_task("go2-flat").config, "a wrong mirror, for tests/test_mirror")
    return name


def test_a_wrong_command_mirror_is_caught():
    env = _env(_registered("go2-lateralkept", lambda cfg: LateralKept(GO2_FLAT, cfg)))
    _walked(env)
    assert _check(env, GO2.mirror)[0] > 0.1


def test_a_wrong_sensor_rule_is_caught(monkeypatch):
    """The gyro mirrored as a polar vector (y flips) instead of an axial one (x, z flip)."""
    import trot.core.observation_kinds as kinds

    rule = kinds._sensor_signs
    gyro = int(mujoco.mjtSensor.mjSENS_GYRO)
    monkeypatch.setattr(kinds, "_sensor_signs", lambda ctx, i, sign: kinds._POLAR
                        if int(ctx.model.sensor_type[i]) == gyro else rule(ctx, i, sign))
    env = _env()
    _walked(env)
    assert _check(env, GO2.mirror)[0] > 0.1


def test_front_rear_swap_is_refused_by_the_geometry_and_the_home_pose():
    """In the robot's description the build refuses it (the anchors are 40 cm from mirror
    images, tasks/legged_robot.py); declared by a task, the maps do: front thighs stand at
    0.8 rad, rear ones at 1.0, so no map on joint_pos swaps them."""
    with pytest.raises(ValueError, match=r"mirror pair \(FL_hip_joint, RL_hip_joint\): the "
                                         "anchors are not mirror images"):
        _env(_registered("go2-frontrear", FRONT_REAR))
    env = _env(_registered("go2-frontrear-task", lambda cfg: FrontRear(GO2_FLAT, cfg)))
    with pytest.raises(ValueError, match="'joint_pos': its offset is not mirror-symmetric"):
        env.mirrors()


def _trained(symmetry: str, iterations: int = 12):
    """go2-flat trained briefly (64 envs, 8-step rollouts, small nets)."""
    from trot.agents.config import tuned
    from trot.agents.trainer import Trainer
    from trot.agents.train_config import TrainConfig

    agent = dataclasses.replace(tuned(get_task("go2-flat").agent), symmetry=symmetry,
                                rollout_steps=8, actor_hidden=(64, 64),
                                critic_hidden=(64, 64))
    env = make_env("go2-flat", num_envs=64, seed=0)
    tr = Trainer(TrainConfig(task="go2-flat", num_envs=64, seed=0, agent=agent), env)
    env.reset(stagger=True)
    for _ in range(iterations):
        tr.iterate()
    return tr, env.mirrors()


def _asymmetry(tr, maps) -> float:
    """mean |pi(mirror(s)) - mirror(pi(s))| / mean |pi(s)| over the last rollout's obs."""
    obs = tr.collector.storage.obs.flatten(0, 1)
    with torch.no_grad():
        a, am = tr.ac.actor(obs), tr.ac.actor(maps.policy(obs))
    return ((am - maps.action(a)).abs().mean() / a.abs().mean()).item()


def test_symmetry_augmentation_makes_the_policy_equivariant_and_the_normalizer_symmetric():
    """Trained with its mirror images, the policy's asymmetry is under half of plain
    training's (0.37 vs 1.41 after 12 iterations), and the observation normalizer's mean is
    exactly mirror-symmetric. The bugs: mirrored observations with unmirrored actions
    (1.43: no better than plain), or the normalizer fed the samples without their images
    (its mean 0.17 off the mirror)."""
    plain, maps = _trained("none")
    sym, _ = _trained("augment")
    assert _asymmetry(sym, maps) < 0.5 * _asymmetry(plain, maps)
    for tr, symmetric in ((sym, True), (plain, False)):
        norm = tr.ac.actor.normalizer
        off = (norm.mean[maps.policy.perm] * maps.policy.signs.double() - norm.mean).abs()
        assert (off.max().item() < 1e-12) == symmetric
        var_off = (norm.var[maps.policy.perm] - norm.var).abs().max().item()
        assert (var_off < 1e-12) == symmetric


def test_symmetry_needs_a_task_mirror():
    from trot.agents.config import PPOConfig
    from trot.agents.trainer import Trainer
    from trot.agents.train_config import TrainConfig

    env = make_env("cartpole-balance", num_envs=8)
    with pytest.raises(ValueError, match="declares no left-right mirror"):
        Trainer(TrainConfig(task="cartpole-balance", num_envs=8,
                            agent=PPOConfig(symmetry="augment")), env)


def test_mirrored_state_and_action_step_to_the_mirrored_state():
    """Dynamics: on the symmetric go2.xml, stepping the mirrored state with the mirrored
    action reaches the mirror of the stepped state. The bug: an action mirror that is not
    the joints' (actuators in another order than the policy joints, a sign lost), which the
    observation tests alone would not see if the last-action term had the same slip."""
    env = _env(n=4)
    _walked(env)
    maps, sim = env.mirrors(), env.sim
    everyone = torch.ones(env.num_envs, dtype=torch.bool)
    q, v = sim.qpos.clone(), sim.qvel.clone()
    action = torch.rand(env.num_envs, env.action_dim, generator=torch.Generator().manual_seed(9))
    action = action * 2 - 1
    trajectories = []
    for qq, vv, a in ((q, v, action), (*_mirror_state(sim.model, q, v, GO2.mirror),
                                       maps.action(action))):
        sim.reset(everyone, qq, vv)
        for _ in range(5):  # 0.1 s of physics under a held position target
            sim.step(env.task.action_to_ctrl(a))
        trajectories.append((sim.qpos.clone(), sim.qvel.clone()))
    (q1, v1), (q2, v2) = trajectories
    mq, mv = _mirror_state(sim.model, q1, v1, GO2.mirror)
    assert (q1 - q).abs().max() > 0.01  # it moved
    # MuJoCo's contact solver meets the mirrored problem to 2.3e-4 rad / 5.7e-3 rad/s after
    # 20 substeps; an unmirrored action misses by 1.1 rad / 8.4 rad/s, a lost sign by 0.8
    torch.testing.assert_close(q2, mq, rtol=0, atol=1e-3)
    torch.testing.assert_close(v2, mv, rtol=0, atol=2e-2)


def test_kl_of_the_augmented_batch_measures_policy_change_only():
    """One epoch of one minibatch: the KL is taken before the first step, so it is 0 for
    every row, mirrored ones included. The bug: the mirrored rows' reference mean taken as
    the mirrored mean, which differs from the policy's mean at the mirrored observation
    while the policy is not symmetric (a fresh one is not): the KL then reads asymmetry as
    change and the adaptive rate falls."""
    from trot.agents.config import tuned
    from trot.agents.trainer import Trainer
    from trot.agents.train_config import TrainConfig

    agent = dataclasses.replace(tuned(get_task("go2-flat").agent), symmetry="augment",
                                rollout_steps=4, epochs=1, minibatches=1,
                                init_log_std=-2.0,  # a small std makes mean gaps count
                                # float32: bf16's rounding alone puts the KL at ~5e-8
                                update_dtype="float32")
    env = make_env("go2-flat", num_envs=32, seed=0)
    tr = Trainer(TrainConfig(task="go2-flat", num_envs=32, seed=0, agent=agent), env)
    env.reset()
    for _ in range(3):  # the policy moves off its near-zero init, asymmetrically
        m = tr.iterate()
        assert m["kl"] == 0.0
    assert _asymmetry(tr, env.mirrors()) > 0.1
