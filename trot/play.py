"""`trot play RUN_DIR`: render the run's deterministic policy offscreen to an mp4 or a GIF.

One env of the run's task plays (the training env code, observation noise off, as `trot
eval`); after every control step its qpos/qvel are copied into a plain MjData of the same
model, which `mujoco.Renderer` draws. Locomotion tasks (those with commands) get a camera
tracking the robot's root body, a checkered floor to see it move against, and an overlay
of the command next to the measured base velocity; other tasks the MJCF's first camera,
else a free camera fitted to the model at the first frame (`fit_camera`). A run of
`trot rsl-rl` or `trot rl-games` plays its library's actor (trot/cli_run.py, `acting_env`).

Headless machines: the OpenGL backend is chosen when rendering starts, never at import (an
environment variable set at import would reach every child process, and MuJoCo's own import
fails in a child whose MUJOCO_GL names a library that is not installed). MUJOCO_GL wins if
set; otherwise GLFW with a display, else OSMesa where libOSMesa is installed (software
rendering: `apt-get install libosmesa6`), else EGL (`libegl1`, GPU or Mesa). Writing mp4
needs `imageio-ffmpeg` (the `video` extra, which ships an ffmpeg binary); GIFs are written
with Pillow.
"""

from __future__ import annotations

import ctypes.util
import importlib
import math
import os
import sys
from dataclasses import dataclass
from pathlib import Path

import mujoco
import numpy as np
import torch
from PIL import Image, ImageDraw, ImageFont

from trot.cli_args import parse_positional
from trot.cli_run import acting_env
from trot.core.files import atomic_write
from trot.tasks.env import Env


@dataclass(frozen=True)
class PlayArgs:
    video: str | None = None
    """write an mp4 here (default, when no --gif: RUN_DIR/play.mp4)"""
    gif: str | None = None
    """write an animated GIF here"""
    episodes: int = 1
    """episodes to play, one after another"""
    seconds: float = 0.0
    """stop after this much simulated time (0: play the episodes out)"""
    width: int = 640
    """frame width in pixels"""
    height: int = 480
    """frame height in pixels"""
    fps: float = 25.0
    """frames per second of the output; the video plays in real time"""
    camera: str | None = None
    """a camera named in the MJCF (default: tracking for locomotion, else the model's first,
    else a free camera fitted to the model at the first frame)"""
    overlay: bool = True
    """draw time, return and (locomotion) command against measured velocity"""
    seed: int = 12345
    """seed for start states and commands"""
    sim: str | None = None
    """physics backend: cpu or mjx (default: the run's own; cpu plays an mjx run without
    JAX)"""
    course: bool = False
    """on the task's fixed terrain course (rough-terrain tasks; its tiles in turn, one per
    episode)"""
    skip: int = 0
    """play this many episodes unrendered first (e.g. to reach a course's third tile)"""


NO_GL_HINT = ("headless Linux needs OSMesa (apt-get install libosmesa6) or EGL (apt-get "
              "install libegl1, then MUJOCO_GL=egl)")


def gl_backend() -> str:
    """The OpenGL backend rendering will use: MUJOCO_GL if set, else GLFW with a display,
    else OSMesa if libOSMesa is installed, else EGL."""
    chosen = os.environ.get("MUJOCO_GL", "").strip().lower()
    if chosen:
        return chosen
    if os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY"):
        return "glfw"
    if ctypes.util.find_library("OSMesa"):
        return "osmesa"
    return "egl"


def _context_class(backend: str) -> type:
    """MuJoCo's GLContext class for a backend, imported now. mujoco.osmesa and mujoco.egl
    set PYOPENGL_PLATFORM for PyOpenGL's first import; that is restored afterwards, so
    child processes inherit the environment the user gave."""
    if backend not in ("osmesa", "egl", "glfw"):
        raise RuntimeError(f"MUJOCO_GL={backend!r} is not an offscreen backend trot can "
                           "use; accepted: osmesa, egl, glfw")
    saved = os.environ.get("PYOPENGL_PLATFORM")
    try:
        return importlib.import_module(f"mujoco.{backend}").GLContext
    finally:
        if saved is None:
            os.environ.pop("PYOPENGL_PLATFORM", None)
        else:
            os.environ["PYOPENGL_PLATFORM"] = saved


def open_renderer(model: mujoco.MjModel, height: int, width: int) -> mujoco.Renderer:
    """mujoco.Renderer on the backend `gl_backend()` names, or a RuntimeError that says
    what to install. mujoco's own choice (made at its import) is swapped for ours only
    while the renderer creates its context."""
    from mujoco.rendering.classic import gl_context

    backend = gl_backend()
    old = gl_context.GLContext
    try:
        gl_context.GLContext = _context_class(backend)
        return mujoco.Renderer(model, height, width)
    except Exception as e:  # noqa: BLE001 (PyOpenGL raises AttributeError, OSError, ...)
        raise RuntimeError(f"offscreen rendering failed (OpenGL backend {backend}): "
                           f"{type(e).__name__}: {str(e).rstrip('.')}. {NO_GL_HINT}") from e
    finally:
        gl_context.GLContext = old


def probe_gl() -> None:
    """Render one small frame (the check the rendering tests and CI run); raises the
    RuntimeError of `open_renderer` where no backend loads."""
    model = mujoco.MjModel.from_xml_string(
        "<mujoco><worldbody><light pos='0 0 2'/><geom size='0.1'/></worldbody></mujoco>")
    r = open_renderer(model, 16, 16)
    try:
        r.update_scene(mujoco.MjData(model))
        r.render()
    finally:
        r.close()


def render_model(env: Env) -> mujoco.MjModel:
    """The task's model for drawing: a sky where the MJCF has none (not black), a checker
    texture on a plain floor for locomotion (a tracking camera over a uniform floor shows no
    motion), and a smaller shadow map."""
    spec = env.task.build()
    floor = next((g for g in spec.geoms if g.type == mujoco.mjtGeom.mjGEOM_PLANE
                  and not g.material), None)
    if env.task.command is not None and floor is not None:
        spec.add_texture(name="trot_checker", type=mujoco.mjtTexture.mjTEXTURE_2D,
                         builtin=mujoco.mjtBuiltin.mjBUILTIN_CHECKER, width=512, height=512,
                         rgb1=[0.5, 0.55, 0.6], rgb2=[0.38, 0.42, 0.48])
        mat = spec.add_material(name="trot_checker", texrepeat=[2, 2], texuniform=True)
        mat.textures[mujoco.mjtTextureRole.mjTEXROLE_RGB] = "trot_checker"
        floor.material = "trot_checker"
    if not any(t.type == mujoco.mjtTexture.mjTEXTURE_SKYBOX for t in spec.textures):
        spec.add_texture(name="trot_sky", type=mujoco.mjtTexture.mjTEXTURE_SKYBOX,
                         builtin=mujoco.mjtBuiltin.mjBUILTIN_GRADIENT, width=64, height=384,
                         rgb1=[0.72, 0.8, 0.9], rgb2=[0.95, 0.96, 0.98])
    model = spec.compile()
    # Software GL (OSMesa) spends most of a frame on the 4096^2 default shadow map.
    model.vis.quality.shadowsize = min(int(model.vis.quality.shadowsize), 1024)
    return model


def make_camera(model: mujoco.MjModel, locomotion: bool, name: str | None,
                data: mujoco.MjData | None = None,
                aspect: float = 4 / 3) -> mujoco.MjvCamera | str | int:
    """The camera a frame is drawn from: the named one, a tracking camera (locomotion),
    the MJCF's first, else `fit_camera` on the state in `data` (default: qpos0)."""
    if name is not None:
        return name  # an MJCF camera; update_scene raises if there is no such name
    if locomotion:  # follow the robot's root (the first body with a free joint)
        root = next((int(model.jnt_bodyid[j]) for j in range(model.njnt)
                     if model.jnt_type[j] == mujoco.mjtJoint.mjJNT_FREE), 1)
        cam = mujoco.MjvCamera()
        cam.type = mujoco.mjtCamera.mjCAMERA_TRACKING
        cam.trackbodyid = root
        # 1.6 m for a Go1 (root 0.29 m up), further back for a taller robot (G1: 2.7 m)
        height = float(model.qpos0[model.jnt_qposadr[list(model.jnt_bodyid).index(root)] + 2])
        cam.distance = max(1.6, 3.5 * height)
        cam.elevation, cam.azimuth = -20.0, 135.0
        cam.lookat[:] = 0.0
        return cam
    if model.ncam > 0:
        return 0
    if data is None:
        data = mujoco.MjData(model)
        mujoco.mj_forward(model, data)
    return fit_camera(model, data, aspect)


def _swing(model: mujoco.MjModel) -> tuple[np.ndarray, np.ndarray]:
    """Per body: the first hinge or ball joint on its chain from the world (-1: none, it
    is welded to the world) and a bound on how far its frame gets from that joint's anchor
    (link offsets, plus twice each joint's offset); inf past a slide or free joint."""
    pivot, reach = np.full(model.nbody, -1), np.zeros(model.nbody)
    moving = (int(mujoco.mjtJoint.mjJNT_SLIDE), int(mujoco.mjtJoint.mjJNT_FREE))
    for b in range(1, model.nbody):  # parents come before their children
        p, js = model.body_parentid[b], range(model.body_jntadr[b],
                                              model.body_jntadr[b] + model.body_jntnum[b])
        off = max((float(np.linalg.norm(model.jnt_pos[j])) for j in js), default=0.0)
        if reach[p] == math.inf or any(model.jnt_type[j] in moving for j in js):
            reach[b] = math.inf
        elif pivot[p] < 0:  # welded to the world so far: it turns about its own joint
            pivot[b], reach[b] = (js[0] if js else -1), off
        else:
            pivot[b] = pivot[p]
            reach[b] = reach[p] + float(np.linalg.norm(model.body_pos[b])) + 2 * off
    return pivot, reach


def fit_camera(model: mujoco.MjModel, data: mujoco.MjData, aspect: float) -> mujoco.MjvCamera:
    """A free camera (MuJoCo's viewer's angles) on the bounding sphere of the visible geoms:
    each where it is in `data`, or, on a chain that turns about a hinge or ball joint,
    anywhere it can swing to. MuJoCo's default (`model.stat`, at qpos0) misses what a
    reset moves: a reacher's target, an arm or a pendulum turned away from qpos0."""
    (pivot, reach), shown = _swing(model), mujoco.MjvOption().geomgroup
    flat = (int(mujoco.mjtGeom.mjGEOM_PLANE), int(mujoco.mjtGeom.mjGEOM_HFIELD))  # unbounded
    centres, radii = [], []
    for g in range(model.ngeom):
        if int(model.geom_type[g]) in flat or not shown[min(int(model.geom_group[g]), 5)]:
            continue
        b, r = model.geom_bodyid[g], float(model.geom_rbound[g])
        if pivot[b] >= 0 and reach[b] < math.inf:
            centres.append(data.xanchor[pivot[b]])
            radii.append(reach[b] + float(np.linalg.norm(model.geom_pos[g])) + r)
        else:
            centres.append(data.geom_xpos[g])
            radii.append(r)
    cam = mujoco.MjvCamera()
    mujoco.mjv_defaultFreeCamera(model, cam)  # the viewer's angles; `stat` if no geoms
    if centres:
        c, r = np.array(centres), np.array(radii)[:, None]
        centre = 0.5 * ((c - r).min(0) + (c + r).max(0))
        radius = float((np.linalg.norm(c - centre, axis=1) + r[:, 0]).max())
        half = math.radians(model.vis.global_.fovy) / 2  # vertical; the narrower side
        half = min(half, math.atan(math.tan(half) * aspect))  # bounds the sphere
        cam.lookat[:] = centre
        cam.distance = 1.05 * radius / math.sin(half)  # it just touches the frame's edge
    return cam


def _font(size: int) -> ImageFont.ImageFont:
    try:
        return ImageFont.load_default(size=size)  # Pillow >= 10.1 with FreeType
    except TypeError:
        return ImageFont.load_default()


def overlay_lines(env: Env, t: float, episode: int, ret: float) -> list[str]:
    lines = [f"{env.name}  ep {episode + 1}  t {t:4.1f} s  return {ret:7.2f}"]
    cmd = env.task.command
    if cmd is not None:
        names = list(getattr(env.task, "command_ranges", dict)()) or \
            [f"c{i}" for i in range(cmd.shape[1])]
        short = {"lin_vel_x": "vx", "lin_vel_y": "vy", "yaw_rate": "wz"}
        lines.append("cmd  " + "  ".join(f"{short.get(k, k)} {float(v):+.2f}"
                                         for k, v in zip(names, cmd[0])))
        try:  # base-frame velocity and yaw rate, where the robot has these sensors
            vel, gyro = env.sim.sensor("base_linvel")[0], env.sim.sensor("gyro")[0]
            lines.append(f"meas vx {float(vel[0]):+.2f}  vy {float(vel[1]):+.2f}  "
                         f"wz {float(gyro[2]):+.2f}")
        except KeyError:
            pass
    return lines


def draw_text(frame: np.ndarray, lines: list[str]) -> np.ndarray:
    img = Image.fromarray(frame)
    draw = ImageDraw.Draw(img, "RGBA")
    size = max(10, frame.shape[0] // 24)
    font = _font(size)
    box = (0, 0, max(draw.textlength(s, font=font) for s in lines) + 8,
           len(lines) * (size + 3) + 6)
    draw.rectangle(box, fill=(0, 0, 0, 140))  # a dark band keeps text legible on any scene
    for i, s in enumerate(lines):
        draw.text((4, 3 + i * (size + 3)), s, fill=(255, 255, 255, 255), font=font)
    return np.asarray(img)


@torch.no_grad()
def render_run(run_dir: Path, a: PlayArgs = PlayArgs()) -> tuple[list[np.ndarray], float,
                                                                  list[float]]:
    """Frames [H, W, 3] uint8, their frame rate, and the returns of the episodes that
    finished."""
    if a.episodes <= 0 or a.width <= 0 or a.height <= 0 or a.fps <= 0 or a.seconds < 0 \
            or a.skip < 0:
        raise ValueError("episodes, width, height and fps must be > 0, seconds and skip "
                         ">= 0")
    env, act = acting_env(Path(run_dir), a.seed, a.sim, a.course)
    model = render_model(env)
    data = mujoco.MjData(model)
    camera = None  # made at the first frame, from the state it shows
    stride = max(1, round(1.0 / (env.control_dt * a.fps)))  # keep real time
    fps = 1.0 / (env.control_dt * stride)
    limit = math.inf if a.seconds == 0 else round(a.seconds / env.control_dt)
    g = model.vis.global_
    g.offwidth, g.offheight = max(g.offwidth, a.width), max(g.offheight, a.height)
    renderer = open_renderer(model, a.height, a.width)
    frames: list[np.ndarray] = []
    returns: list[float] = []
    ret, step, t = 0.0, 0, 0.0

    def snap() -> None:
        nonlocal camera
        data.qpos[:] = env.sim.qpos[0].double().cpu().numpy()
        data.qvel[:] = env.sim.qvel[0].double().cpu().numpy()
        mujoco.mj_forward(model, data)
        if camera is None:
            camera = make_camera(model, env.task.command is not None, a.camera, data,
                                 a.width / a.height)
        renderer.update_scene(data, camera)
        px = renderer.render()
        frames.append(draw_text(px, overlay_lines(env, t, len(returns), ret))
                      if a.overlay else px.copy())

    try:
        obs = env.reset()
        for _ in range(a.skip):  # whole episodes, unrendered
            done = False
            while not done:
                res = env.step(act(obs.policy))
                done = res.terminated | res.truncated
                act.ended(done)
                obs, done = res.obs, bool(done[0])
        snap()
        while len(returns) < a.episodes and step < limit:
            res = env.step(act(obs.policy))
            act.ended(res.terminated | res.truncated)
            obs, step = res.obs, step + 1
            ret += float(res.reward[0])
            t += env.control_dt
            if bool(res.terminated[0] | res.truncated[0]):  # the env has reset itself
                returns.append(ret)
                ret, t = 0.0, 0.0
            if step % stride == 0 and len(returns) < a.episodes:
                snap()
    finally:
        renderer.close()
    return frames, fps, returns


def _even(frame: np.ndarray) -> np.ndarray:
    h, w = frame.shape[:2]  # yuv420p needs even sizes
    return np.ascontiguousarray(frame[: h - h % 2, : w - w % 2])


def write_mp4(path: Path, frames: list[np.ndarray], fps: float) -> None:
    try:
        import imageio_ffmpeg
    except ImportError:
        raise RuntimeError("writing mp4 needs imageio-ffmpeg: pip install 'trot[video]'"
                           ) from None
    h, w = _even(frames[0]).shape[:2]

    def write(tmp: Path) -> None:  # ffmpeg picks the container from the .mp4 suffix
        writer = imageio_ffmpeg.write_frames(str(tmp), (w, h), fps=fps, codec="libx264",
                                             macro_block_size=1, quality=7)
        writer.send(None)  # start ffmpeg
        try:
            for f in frames:
                writer.send(_even(f))
        finally:
            writer.close()

    atomic_write(path, write, suffix=".tmp.mp4")  # never half a file under the final name


def write_gif(path: Path, frames: list[np.ndarray], fps: float, colors: int = 256) -> None:
    imgs = [Image.fromarray(f) for f in frames]
    # One palette for all frames (no colour flicker, a smaller file), taken from frames
    # spread over the clip so that colours appearing late are in it too.
    sample = np.concatenate(frames[:: max(1, len(frames) // 8)][:8], axis=0)
    palette = Image.fromarray(sample).quantize(colors=colors, method=Image.Quantize.MEDIANCUT)
    q = [im.quantize(palette=palette, dither=Image.Dither.NONE) for im in imgs]
    atomic_write(path, lambda tmp: q[0].save(tmp, format="GIF", save_all=True,
                                             append_images=q[1:], loop=0,
                                             duration=round(1000.0 / fps), optimize=False))


def play(run_dir: Path, a: PlayArgs) -> dict[str, object]:
    video = Path(a.video) if a.video else (None if a.gif else Path(run_dir) / "play.mp4")
    frames, fps, returns = render_run(Path(run_dir), a)
    written = {}
    for path, write in ((video, write_mp4), (Path(a.gif) if a.gif else None, write_gif)):
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            write(path, frames, fps)
            written[str(path)] = path.stat().st_size
    return {"frames": len(frames), "fps": fps, "returns": returns, "files": written}


def main(args: list[str]) -> int:

    run_dir, a = parse_positional(PlayArgs, args, "trot play RUN_DIR")
    try:
        out = play(Path(run_dir), a)
    except RuntimeError as e:  # no GL backend or no ffmpeg: the message says what to install
        print(f"trot: error: {e}", file=sys.stderr)
        return 2
    for i, r in enumerate(out["returns"]):
        print(f"episode {i + 1}: return {r:.2f}")
    print(f"{out['frames']} frames at {out['fps']:.1f} fps")
    for path, size in out["files"].items():
        print(f"wrote {path} ({size / 1024:.0f} KiB)")
    return 0
