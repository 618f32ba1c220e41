"""Rough terrain: the generator (tasks/terrain.py), the height lookup against MuJoCo's own
ray cast (trot/core/heightfield.py), the height scan of go1-rough, spawning and the curriculum
rule (tasks/rough.py)."""

from __future__ import annotations

import dataclasses

import mujoco
import numpy as np
import pytest
import torch

from trot.tasks.terms.terrain import Terrain, TerrainCurriculum
from trot.core import heightfield as hf
from trot.tasks import make_env
from trot.tasks import terrain as tr
from trot.tasks.registry import get_task

SMALL = tr.TerrainConfig(tile_size=3.0, rows=3, cols=7, border=1.0, platform=1.0,
                         proportions=(1, 1, 1, 1, 1, 1, 1))  # every type, one column each


def _model(t: tr.Terrain) -> mujoco.MjModel:
    spec = mujoco.MjSpec()
    tr.add_terrain(spec, t, "terrain")
    return spec.compile()


def _ray_heights(model: mujoco.MjModel, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """The surface under each point by MuJoCo's ray cast onto each heightfield geom
    (mj_rayHfield, straight down from above; the robot's own geoms are not in the way),
    the highest hit where several are."""
    data = mujoco.MjData(model)
    mujoco.mj_forward(model, data)
    top, down = 10.0, np.array([0.0, 0.0, -1.0])
    hfields = [g for g in range(model.ngeom)
               if model.geom_type[g] == mujoco.mjtGeom.mjGEOM_HFIELD]
    out = np.full(len(x), -np.inf)
    for g in hfields:
        d = np.array([mujoco.mj_rayHfield(model, data, g, np.array([a, b, top]), down)
                      for a, b in zip(x, y)])
        out = np.where(d >= 0, np.maximum(out, top - d), out)
    return out


def test_same_seed_same_terrain_bit_for_bit():
    a, b = tr.generate(SMALL), tr.generate(SMALL)
    assert a.heights.tobytes() == b.heights.tobytes()
    assert tr.hfield_file(a.heights)[0] == tr.hfield_file(b.heights)[0]
    other = tr.generate(dataclasses.replace(SMALL, seed=1))
    assert not np.array_equal(a.heights, other.heights)  # rough and obstacles redraw


def test_sub_terrains_have_their_shapes():
    """Column by column: stairs are flat treads of step_width with risers of the step
    height; slopes have the configured gradient; the border and every platform are flat
    at the tile's level; difficulty grows with the row."""
    c = SMALL
    t = tr.generate(c)
    n, b = int(round(c.tile_size / c.resolution)), int(round(c.border / c.resolution))
    assert c.column_types() == tuple(tr.SUBTERRAINS)
    assert not t.heights[:b].any() and not t.heights[:, :b].any()  # the border
    assert not t.heights[-b:].any() and not t.heights[:, -b:].any()

    def tile(row: int, col: int) -> np.ndarray:
        return t.heights[b + col * n:b + (col + 1) * n + 1, b + row * n:b + (row + 1) * n + 1]

    centre = tile(2, 4)[n // 2 - 5:n // 2 + 6, n // 2 - 5:n // 2 + 6]
    assert np.ptp(centre) == 0  # the platform
    for col, sign in ((4, -1), (5, 1)):  # stairs up (a pit), stairs down (a pyramid)
        line = tile(2, col)[n // 2, :n // 2]  # from the edge to the centre
        levels = np.unique(np.round(line / c.step_height[1], 6))
        assert np.allclose(levels, np.round(levels)) and sign * line[-1] > 0
        treads = np.diff(np.flatnonzero(np.diff(line)))  # points between risers
        assert np.all(treads == round(c.step_width / c.resolution))
    for col, sign in ((2, -1), (3, 1)):
        grad = np.diff(tile(2, col)[n // 2, :n // 4]) / c.resolution
        assert np.allclose(grad, sign * c.slope[1], atol=1e-5)
    assert np.ptp(tile(0, 1)) < np.ptp(tile(2, 1))  # rough: harder rows are rougher


def test_lookup_is_the_surface_mujoco_collides_with():
    """At 3000 random points over every sub-terrain, the lookup equals mj_ray down onto
    the heightfield (numpy float64 and torch float32, the latter also with the integer
    triangle index of very large maps). A bilinear patch, the other
    diagonal or a flipped row order would miss by centimetres: checked below too."""
    t = tr.generate(SMALL)
    model = _model(t)
    rng = np.random.default_rng(0)
    sx, sy = t.size
    x = t.origin[0] + rng.uniform(0, sx, 3000)
    y = t.origin[1] + rng.uniform(0, sy, 3000)
    ray = _ray_heights(model, x, y)
    maps, plane = hf.height_maps(model)
    assert np.abs(hf.surface_height(np, maps, plane, x, y) - ray).max() < 1e-9
    tmaps = hf.height_maps(model, lambda a: torch.tensor(a, dtype=torch.float32))[0]
    f32 = lambda a: torch.tensor(a, dtype=torch.float32)  # noqa: E731
    got = hf.surface_height(torch, tmaps, plane, f32(x), f32(y)).double().numpy()
    assert np.abs(got - ray).max() < 1e-4

    with pytest.MonkeyPatch.context() as mp:  # the integer index of maps past 2^24 rows
        mp.setattr(hf, "FLOAT32_EXACT", 0)
        got = hf.surface_height(torch, tmaps, plane, f32(x), f32(y)).double().numpy()
    assert np.abs(got - ray).max() < 1e-4

    m = maps[0]
    gx, gy = (x - m.x0) / m.dx, (y - m.y0) / m.dy
    j, i = np.minimum(gx.astype(int), m.heights.shape[1] - 2), \
        np.minimum(gy.astype(int), m.heights.shape[0] - 2)
    fx, fy, h = gx - j, gy - i, m.heights
    bilinear = (h[i, j] * (1 - fx) * (1 - fy) + h[i, j + 1] * fx * (1 - fy)
                + h[i + 1, j] * (1 - fx) * fy + h[i + 1, j + 1] * fx * fy)
    assert np.abs(bilinear - ray).max() > 1e-3
    flipped = hf.height_map(m.heights[::-1], m.x0, m.y0, m.dx, m.dy)
    assert np.abs(hf.surface_height(np, (flipped,), plane, x, y) - ray).max() > 1e-2


def test_lookup_over_two_maps_skips_only_the_map_the_points_miss():
    """go1-rough's layout: the course touches the terrain's +x edge. Batches of points on
    one map only (the other skipped by its bounding box, numpy and torch on the CPU) and
    straddling the seam agree with mj_ray. A skip test that compares the wrong end of
    the points' range, or misses the map's last cell, drops a map the points are on."""
    a = tr.generate(SMALL)
    b = tr.generate(dataclasses.replace(SMALL, rows=2, cols=3, seed=5))
    b = dataclasses.replace(b, origin=(a.origin[0] + a.size[0], a.origin[1]))
    spec = mujoco.MjSpec()
    tr.add_terrain(spec, a, "terrain")
    tr.add_terrain(spec, b, "course")
    model = spec.compile()
    maps, plane = hf.height_maps(model)
    tmaps = hf.height_maps(model, lambda v: torch.tensor(v, dtype=torch.float32))[0]
    rng = np.random.default_rng(2)
    seam = a.origin[0] + a.size[0]
    last_cell = (seam - 0.9 * SMALL.resolution, seam)  # map a's last column of cells
    for lo, hi in ((a.origin[0], seam), (seam, seam + b.size[0]), (seam - 1, seam + 1),
                   last_cell):
        x = np.r_[rng.uniform(lo, hi, 400), hi]  # and the far edge exactly
        y = b.origin[1] + rng.uniform(0, b.size[1], 401)
        ray = _ray_heights(model, x, y)
        assert np.abs(hf.surface_height(np, maps, plane, x, y) - ray).max() < 1e-9
        got = hf.surface_height(torch, tmaps, plane, torch.tensor(x, dtype=torch.float32),
                                torch.tensor(y, dtype=torch.float32))
        assert np.abs(got.double().numpy() - ray).max() < 1e-4


def test_model_heights_are_the_generated_heights():
    """The normalized file and the geom's z give back the generator's heights."""
    t = tr.generate(SMALL)
    maps, _ = hf.height_maps(_model(t))
    assert np.abs(maps[0].heights - t.heights).max() < 1e-6
    assert (maps[0].x0, maps[0].y0) == pytest.approx(t.origin)


def test_scan_of_a_mirrored_world_is_the_mirrored_scan():
    """The scan mirror (heightfield.mirror_permutation): the world reflected y -> -y
    (terrain flipped, base at (x, -y) with yaw -> -yaw) scans the mirrored points. The
    terrain is f(x) + g(y), whose cells are planes: MuJoCo's triangle split is not itself
    mirror-symmetric, and on such cells it does not matter."""
    rng = np.random.default_rng(1)
    f, g = np.cumsum(rng.normal(0, 0.02, 200)), np.cumsum(rng.normal(0, 0.02, 201))
    m = hf.height_map(f[None, :] + g[:, None], -5.0, -5.0, 0.05, 0.05)  # [201, 200]
    maps = (m,)
    flipped = hf.height_map(m.heights[::-1], m.x0, -5.0, m.dx, m.dy)  # y in [-5, 5]
    grid = (1.6, 1.0, 0.1)
    offsets = hf.scan_offsets(grid)
    pos = np.c_[rng.uniform(-4, 4, (8, 2)), rng.uniform(0.2, 0.5, 8)]
    yaw = rng.uniform(-np.pi, np.pi, 8)
    quat = np.c_[np.cos(yaw / 2), 0 * yaw, 0 * yaw, np.sin(yaw / 2)]
    scan = hf.scan(np, maps, None, pos, quat, offsets)
    mpos, mquat = pos * [1, -1, 1], quat * [1, -1, 1, -1]
    mirrored = hf.scan(np, (flipped,), None, mpos, mquat, offsets)
    perm = hf.mirror_permutation(grid)
    assert np.abs(mirrored - scan[:, perm]).max() < 1e-9
    assert np.abs(mirrored - scan).max() > 1e-2  # the permutation matters


def _rough_env(n: int = 16, **changes):
    cfg = dataclasses.replace(get_task("go1-rough").config, **dict(
        tile_size=3.0, terrain_rows=3, terrain_cols=7, terrain_border=1.5, randomize=False,
        push=False, obs_noise=False) | changes)
    return make_env("go1-rough", num_envs=n, seed=3, config=cfg)


def test_height_scan_matches_mj_ray_from_the_robot():
    """go1-rough's critic scan, through the env's observation code, against mj_ray at
    points placed with MuJoCo's own body frame (heading from the base's xmat)."""
    env = _rough_env()
    env.reset()
    for _ in range(10):
        env.step(torch.rand(env.num_envs, env.action_dim) * 2 - 1)
    slot = next(s for s in env.critic_layout.slots if s.term.name == "height_scan")
    obs = env.observe().critic[:, slot.start:slot.start + slot.size]
    raw = obs / slot.term.scale + torch.tensor(slot.term.offset)
    model, data = env.sim.model, mujoco.MjData(env.sim.model)
    offsets = hf.scan_offsets(env.task.config.scan_grid)
    for i in range(env.num_envs):
        data.qpos[:] = env.sim.qpos[i].double().numpy()
        mujoco.mj_kinematics(model, data)
        trunk = data.body("trunk")
        yaw = np.arctan2(trunk.xmat[3], trunk.xmat[0])
        c, s = np.cos(yaw), np.sin(yaw)
        px = trunk.xpos[0] + c * offsets[:, 0] - s * offsets[:, 1]
        py = trunk.xpos[1] + s * offsets[:, 0] + c * offsets[:, 1]
        want = np.clip(trunk.xpos[2] - _ray_heights(model, px, py), *slot.term.clip)
        assert np.abs(raw[i].double().numpy() - want).max() < 1e-4, i


def test_scan_after_partial_resets_is_the_scan_of_the_reset_state():
    """The env's second observation of a step (after resetting the envs that ended) only
    recomputes the scan rows whose base moved (observation_kinds._ChangedRows). Against a
    full scan of the state after each step: stale rows for the reset envs, or rows written
    to the wrong envs, would differ by the robot's drop to its spawn height or more."""
    env = _rough_env(n=16)
    env.reset()
    slot = next(s for s in env.critic_layout.slots if s.term.name == "height_scan")
    maps, plane = hf.height_maps(env.sim.model, torch.tensor)
    offsets = torch.tensor(hf.scan_offsets(env.task.config.scan_grid), dtype=torch.float32)
    partial = 0
    for step in range(80):
        out = env.step(torch.rand(env.num_envs, env.action_dim) * 2 - 1)
        ended = int((out.terminated | out.truncated).sum())
        partial += 0 < ended < env.num_envs // 2
        q = env.sim.qpos
        want = hf.scan(torch, maps, plane, q[:, :3], q[:, 3:7], offsets)
        want = (want.clamp(*slot.term.clip) - torch.tensor(slot.term.offset)) * \
            torch.tensor(slot.term.scale)
        got = out.obs.critic[:, slot.start:slot.start + slot.size]
        assert (got - want).abs().max() < 1e-5, step
    assert partial >= 3  # the partial path ran


def test_gait_terms_measure_heights_above_the_terrain():
    """go1-rough's clocked terms read the feet and base heights above the ground under
    them, checked with mj_ray, not world z: on the top row's raised platforms a robot
    standing as at home has feet near 0 above home and its base near its home height."""
    env = _rough_env(n=14, curriculum=False, start_row=2)
    env.reset()
    for _ in range(5):
        env.step(torch.zeros(env.num_envs, env.action_dim))
    task, model = env.task, env.sim.model
    feet = task.body.feet_pos().double().numpy()  # [N, F, 3]
    ground = _ray_heights(model, feet[..., 0].ravel(), feet[..., 1].ravel())
    want = feet[..., 2] - ground.reshape(feet.shape[:2]) - task.body.foot_home_z.numpy()
    assert np.abs(task.body.feet_height().double().numpy() - want).max() < 1e-4
    assert np.abs(want).max() < 0.02  # standing: every foot near its home height
    base = env.sim.qpos[:, :3].double().numpy()
    want = base[:, 2] - _ray_heights(model, base[:, 0], base[:, 1])
    assert np.abs(task.body.base_height().double().numpy() - want).max() < 1e-4
    assert (env.sim.qpos[:, 2] - task.body.base_height()).abs().max() > 0.1  # raised


def test_policy_scan_adds_the_episode_offset_that_the_critic_scan_lacks():
    """A perceived scan (scan_offset) is the critic's exact scan plus one offset per env
    and episode, drawn in U(-x, x) while training; evaluation (noise off) sees none. Catches
    the perceived and exact scans sharing one pool block, or the offset not applied."""
    env = _rough_env(n=32, scan_policy=True, scan_noise=0.0, scan_offset=0.1, obs_noise=True)
    env.reset()
    env.step(torch.zeros(env.num_envs, env.action_dim))

    def scans():
        obs = env.observe()
        return [layout_obs[:, s.start:s.start + s.size] / s.term.scale
                for layout, layout_obs in ((env.policy_layout, obs.policy[:, -env.frame_dim:]),
                                           (env.critic_layout, obs.critic))
                for s in layout.slots if s.term.name == "height_scan"]
    policy, critic = scans()
    diff = policy - critic  # [N, P]; clipping: the robots stand well inside [-0.5, 1.5]
    assert torch.allclose(diff, diff[:, :1].expand_as(diff), atol=1e-5)
    assert torch.allclose(diff[:, 0], env.task.scan_bias, atol=1e-5)
    assert diff[:, 0].abs().max() <= 0.1 and diff[:, 0].std() > 0.02
    env.noise = False
    policy, critic = scans()
    assert torch.equal(policy, critic)


def test_feet_do_not_sink_into_the_heightfield_under_random_actions():
    """On an all-flat terrain, random actions keep the Go1's feet on the surface about as
    well as on a plane. Catches a soft terrain contact: a foot that sinks past a cell's
    inradius meets a prism's side face and keeps sinking (37% of foot samples > 2 cm
    below standing height with the floor's default solref; 0.8% with terrain.py's)."""
    torch.manual_seed(0)
    env = _rough_env(n=64, terrain_proportions=(1, 0, 0, 0, 0, 0, 0))
    env.reset()
    below = []
    for _ in range(150):
        env.step((torch.randn(env.num_envs, env.action_dim) * 0.6).clamp(-1, 1))
        below.append(env.task.body.feet_height() < -0.02)
    assert torch.stack(below).float().mean() < 0.05


def test_spawns_start_above_the_steepest_tiles_without_penetration():
    env = _rough_env(n=14, curriculum=False, start_row=2)
    top = env.task.body.term(Terrain).rows - 1
    env.reset()
    model, data = env.sim.model, mujoco.MjData(env.sim.model)
    centres = env.task.body.term(Terrain).centers[top, env.task.body.term(Terrain).col, :2]
    assert (env.sim.qpos[:, :2] - centres).abs().max() <= env.task.config.spawn_spread + 1e-6
    for i in range(env.num_envs):
        data.qpos[:] = env.sim.qpos[i].double().numpy()
        mujoco.mj_forward(model, data)
        depth = [data.contact[k].dist for k in range(data.ncon)]
        assert min(depth, default=0.0) > -1e-4, (i, min(depth))
    assert (env.task.body.term(Terrain).level == top).all()


def test_curriculum_moves_rows_by_legged_gyms_rule():
    """Walked (from the tile centre) > half a tile: up; < half the commanded distance:
    down (not below 0); past the top row: a random row; masked-out envs stay. The
    commanded distance of an episode that ended early counts its current command over the
    time left (env 6: 1 m asked so far, 1 m/s for the 19 s left)."""
    env = _rough_env(n=7)
    env.reset()
    task, rows = env.task, env.task.body.term(Terrain).rows
    task.body.term(Terrain).level.copy_(torch.tensor([1, 1, 0, rows - 1, 1, 1, 1]))
    walked = torch.tensor([2.0, 0.4, 0.4, 2.0, 1.0, 2.0, 1.0])  # half a tile: 1.5 m
    task.body.term(TerrainCurriculum).cmd_dist.copy_(torch.tensor([3.0, 1.0, 1.0, 3.0, 1.5, 3.0, 1.0]))
    env.episode_step.fill_(env.max_episode_steps)  # the curriculum reads the env's clock
    env.episode_step[6] = round(1.0 / env.control_dt)
    assert task.body.term(TerrainCurriculum).elapsed[6] == pytest.approx(1.0)
    task.command.zero_()
    task.command[6, 0] = 1.0
    q = env.sim.qpos.clone()
    q[:, :2] = task.body.term(Terrain).tile_centre()
    q[:, 0] += walked
    everyone = torch.ones(7, dtype=torch.bool)
    env.sim.reset(everyone, q, env.sim.qvel.clone())
    mask = torch.tensor([True, True, True, True, True, False, True])
    task.episode_end(env.sim, mask)
    assert task.body.term(Terrain).level[[0, 1, 2, 4, 5, 6]].tolist() == [2, 0, 0, 1, 1, 0]
    levels = {int(task.body.term(Terrain).level[3])}
    for _ in range(20):
        task.body.term(Terrain).level[3] = rows - 1
        task.episode_end(env.sim, mask)
        levels.add(int(task.body.term(Terrain).level[3]))
    assert levels <= set(range(rows)) and len(levels) > 1  # spread over the rows


def test_levels_start_from_the_env_seed_and_leaving_the_map_truncates():
    """Initial levels come from the env's generator (seeds differ, ranks too); an env
    that walks off the map ends its episode as a truncation, not a fall."""
    a, b = _rough_env(n=64), _rough_env(n=64)
    c = make_env("go1-rough", num_envs=64, seed=4, config=a.task.config)
    for env in (a, b, c):
        env.reset()
    assert torch.equal(a.task.body.term(Terrain).level, b.task.body.term(Terrain).level)
    assert not torch.equal(a.task.body.term(Terrain).level, c.task.body.term(Terrain).level)
    assert a.task.body.term(Terrain).level.max() <= a.task.config.init_level
    q = a.sim.qpos.clone()
    q[0, 0] = a.task.body.term(Terrain).bounds[2] + 0.01  # beyond the map's +x edge
    a.sim.reset(torch.ones(64, dtype=torch.bool), q, a.sim.qvel.clone())
    res = a.step(torch.zeros(64, a.action_dim))
    assert bool(res.truncated[0]) and not bool(res.terminated[0])


def test_terrain_level_is_logged_and_checkpointed():
    env = _rough_env(n=8)
    env.reset()
    for _ in range(5):
        env.step(torch.zeros(env.num_envs, env.action_dim))
    level = env.task.iteration_metrics()["terrain_level"]
    assert float(level) == pytest.approx(env.task.body.term(Terrain).level.float().mean().item())
    state = env.state_dict()
    twin = _rough_env(n=8)
    twin.load_state_dict(state)
    for cls in (Terrain, TerrainCurriculum):
        mine, theirs = env.task.body.term(cls), twin.task.body.term(cls)
        for name in ("level", "col", "next_col", "reached") if cls is Terrain else (
                "cmd_dist", "elapsed"):
            assert torch.equal(getattr(theirs, name), getattr(mine, name)), name
    assert not twin.task.body.term(Terrain).fresh  # no second first-reset draw


def test_the_curriculum_clock_is_the_env_clock_from_a_staggered_start():
    """The task's episode time, which sizes the commanded distance of an episode that ended
    early, is the env's clock x dt at every step: from a staggered start, through time
    limits and resets. Catches a staggered first episode whose clock starts at 0 (judged as
    if it had a whole episode to walk, so it was demoted for distance it had no time for)."""
    env = _rough_env(n=16, episode_seconds=0.2)  # 10 steps: everyone resets in the loop
    env.reset(stagger=True)
    assert bool((env.episode_step > 0).any())
    resets = 0
    for _ in range(15):
        clock = env.task.body.term(TerrainCurriculum).elapsed
        assert torch.allclose(clock, env.episode_step * env.control_dt, atol=1e-5)
        resets += int(env.step(torch.zeros(env.num_envs, env.action_dim)).truncated.sum())
    assert resets >= env.num_envs


def test_a_fall_past_the_tile_edge_is_not_a_crossing():
    """On the course, reaching the tile's edge counts only standing: a robot whose base is
    past the edge on the step it falls has not crossed. Catches the edge test run on the
    fall's step (a robot tumbling forward off a step counted as crossing it)."""
    env = _rough_env(n=2, terrain="course")
    env.record_eval_metrics = True
    env.reset()
    task = env.task
    q, v = env.sim.qpos.clone(), env.sim.qvel.clone()
    q[:, :2] = task.body.term(Terrain).tile_centre()
    q[:, 0] += 0.6 * task.config.tile_size  # past the edge (half a tile)
    q[:, 2] += 0.3
    q[0, 3:7] = torch.tensor([0.0, 1.0, 0.0, 0.0])  # env 0 upside down: it has fallen
    env.sim.reset(torch.ones(2, dtype=torch.bool), q, v)
    res = env.step(torch.zeros(2, env.action_dim))
    assert res.terminated.tolist() == [True, False]
    crossed = torch.stack(list(env.eval_outcomes.values())).nan_to_num(0.0).sum(0)  # [2]
    assert crossed.tolist() == [0.0, 1.0]
