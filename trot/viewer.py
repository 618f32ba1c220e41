"""`trot view RUN_DIR | TASK`: a live viewer in the browser, served from a headless machine.

One env steps in MuJoCo C (trot/view_sim.py: a run's checkpoint, its export through the
torch-free runner with --onnx, or a task under zero or random actions) at real time or at
--speed; a viser server (the `viewer` extra) draws it (trot/view_scene.py) and holds the
controls: a slider per command axis within the task's ranges, push, reset, pause, single
step, speed and, for rough-terrain tasks, the training terrain or the course. The page
shows the command against the measured velocity, each reward term as a bar, the foot
contacts and the episode's time and return; the camera follows the robot (the scene
shifts under it, so the user's own orbit is kept).

The simulation loop runs in the calling thread; the page's callbacks (viser's threads)
only queue work for it, so the env is touched by one thread."""

from __future__ import annotations

import html
import queue
import socket
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from trot.cli_args import parse_positional
from trot.view_scene import SceneView, root_body
from trot.view_sim import Driver, OnnxDriver, Readout, run_driver, task_driver


@dataclass(frozen=True)
class ViewArgs:
    onnx: bool = False
    """drive with the exported policy (policy.onnx, policy.json, model.xml in RUN_DIR, or
    RUN_DIR is an export folder) through the torch-free runner: what the robot runs"""
    speed: float = 1.0
    """simulated seconds per wall-clock second (0: as fast as it can); the page changes it"""
    host: str = "0.0.0.0"
    """address to serve on (0.0.0.0: every interface; 127.0.0.1: this machine only)"""
    port: int = 8080
    """port to serve on (the next free one if taken)"""
    actions: str = "zero"
    """TASK with no run: zero or random actions"""
    course: bool = False
    """start on the task's fixed terrain course (rough-terrain tasks); the page switches"""
    seconds: float = 0.0
    """stop after this much simulated time (0: run until Ctrl-C)"""
    fps: float = 30.0
    """scene updates per wall-clock second"""
    seed: int = 12345
    """seed for start states, random actions and pushes"""
    shadows: bool = True
    """cast shadows (off: faster drawing in a browser without a GPU)"""


AXIS_LABELS = {"lin_vel_x": "forward m/s", "lin_vel_y": "sideways m/s",
               "yaw_rate": "yaw rate rad/s"}
CAMERA_OFFSET = np.array([-3.0, -4.0, 2.0])
"""where the camera starts, seen from the robot (kept at the origin: SceneView.follow), per
metre of its root's height"""


def make_driver(source: str, a: ViewArgs, course: bool) -> Driver:
    """The driver for RUN_DIR (a run, or with --onnx a run or export folder) or TASK."""
    if Path(source).is_dir():
        return OnnxDriver(Path(source), a.seed, course) if a.onnx else \
            run_driver(Path(source), a.seed, course)
    if a.onnx:
        raise ValueError(f"--onnx needs a run or export directory, got {source!r}, which "
                         "is not a directory")
    try:
        return task_driver(source, a.actions, a.seed, course)
    except ValueError as e:
        if not str(e).startswith("unknown task"):
            raise
        raise ValueError(f"{source!r} is neither a directory (a run, or an export with "
                         f"--onnx) nor a registered task: {e}") from None


def readout_html(r: Readout) -> str:
    """The page's live readout; every number sits in an element with a `trot-...` id."""
    def num(key: str, v: float, digits: int = 2) -> str:
        return f'<span id="trot-{html.escape(key)}">{v:+.{digits}f}</span>'

    head = (f'<div>t <span id="trot-time">{r.time:.2f}</span> s &nbsp; return '
            f'{num("return", r.episode_return)} &nbsp; episodes '
            f'<span id="trot-episodes">{r.episodes}</span></div>')
    rows = [head]
    if r.command:
        rows.append("<table><tr><th></th><th>command</th><th>measured</th></tr>")
        for k, v in r.command.items():
            meas = num(f"meas-{k}", r.measured[k]) if k in r.measured else "-"
            rows.append(f"<tr><td>{html.escape(AXIS_LABELS.get(k, k))}</td>"
                        f"<td>{num(f'cmd-{k}', v)}</td><td>{meas}</td></tr>")
        rows.append("</table>")
    if r.contacts:
        feet = " ".join(f'<span id="trot-contact-{html.escape(k)}">'
                        f'{"&#9679;" if on else "&#9675;"} {html.escape(k)}</span>'
                        for k, on in r.contacts.items())
        rows.append(f"<div>contacts: {feet}</div>")
    if r.terms:
        top = max(1e-9, max(abs(v) for v in r.terms.values()))
        rows.append("<div>reward terms (this step)</div>")
        for k, v in r.terms.items():
            color = "#3a9a4a" if v >= 0 else "#c0453a"
            width = round(100 * abs(v) / top)
            rows.append(
                f'<div style="display:flex;align-items:center;gap:4px">'
                f'<span style="width:40%;overflow:hidden">{html.escape(k)}</span>'
                f'<span style="width:40%;background:#eee;height:8px"><span style="display:'
                f'block;height:8px;width:{width}%;background:{color}"></span></span>'
                f'{num(f"term-{k}", v, 4)}</div>')
    return '<div id="trot-readout" style="font-family:monospace;font-size:12px">' + \
        "".join(rows) + "</div>"


class Viewer:
    """The server, its page and the simulation loop (`run`)."""

    def __init__(self, source: str, a: ViewArgs):
        import viser  # the `viewer` extra, imported only here

        if a.speed < 0 or a.fps <= 0 or a.seconds < 0:
            raise ValueError("--speed and --seconds must be >= 0, --fps > 0")
        self.source, self.args = source, a
        self.driver = make_driver(source, a, a.course)
        self.server = viser.ViserServer(host=a.host, port=a.port, verbose=False)
        self.ops: queue.SimpleQueue = queue.SimpleQueue()  # work from the page's callbacks
        self.paused, self.speed = False, a.speed
        self.stop = threading.Event()
        self._anchor: tuple[float, float] | None = None  # (wall s, sim s) of real time
        self.sim_seconds = 0.0  # simulated since the start, over episodes
        self.server.scene.configure_default_lights(True, cast_shadow=a.shadows)
        self.scene = SceneView(self.server, self.driver.model, self.driver.draw())
        self._controls()
        # the robot's root is kept at (0, 0, its start height); the camera sits further
        # from a taller robot
        self.height = max(0.3, float(self._root()[2]))
        self.server.initial_camera.look_at = (0.0, 0.0, 0.6 * self.height)
        self.server.initial_camera.position = CAMERA_OFFSET * self.height

    @property
    def address(self) -> str:
        host = self.args.host
        shown = socket.gethostname() if host in ("0.0.0.0", "::") else host
        return f"http://{shown}:{self.server.get_port()}"

    # ------------------------------------------------------------------ the page
    def _controls(self) -> None:
        gui, d = self.server.gui, self.driver
        self.sliders = {}
        with gui.add_folder("Command"):
            start = {"lin_vel_x": getattr(d.task.config, "course_speed", 0.0)} \
                if getattr(d.task.config, "terrain", None) == "course" else {}
            for k, (lo, hi) in d.command_ranges().items():
                x = float(np.clip(start.get(k, 0.0), lo, hi))
                self.sliders[k] = gui.add_slider(AXIS_LABELS.get(k, k), min=lo,
                                                 max=max(hi, lo + 1e-3), step=0.05,
                                                 initial_value=x, disabled=hi <= lo)
                self.sliders[k].on_update(lambda _: self.ops.put(self._command))
        if self.sliders:
            self._command()
        with gui.add_folder("Simulation"):
            self.pause_box = gui.add_checkbox("pause", initial_value=False)
            self.pause_box.on_update(lambda _: self.ops.put(self._pause))
            gui.add_button("step").on_click(lambda _: self.ops.put(self._single_step))
            gui.add_button("reset").on_click(lambda _: self.ops.put(self.driver.reset))
            gui.add_button("push", disabled=not d.can_push()).on_click(
                lambda _: self.ops.put(self.driver.push))
            self.speed_slider = gui.add_slider("speed (0: max)", min=0.0, max=4.0, step=0.25,
                                               initial_value=min(self.speed, 4.0))
            self.speed_slider.on_update(lambda _: self.ops.put(self._set_speed))
            self.follow_box = gui.add_checkbox("camera follows", initial_value=True)
            if hasattr(d.task.config, "terrain"):
                self.terrain = gui.add_dropdown("terrain", ("train", "course"),
                                                initial_value=d.task.config.terrain)
                self.terrain.on_update(lambda _: self.ops.put(self._switch_terrain))
        self.readout = gui.add_html(readout_html(d.readout))

    def _command(self) -> None:
        self.driver.set_command([s.value for s in self.sliders.values()])

    def _pause(self) -> None:
        self.paused, self._anchor = bool(self.pause_box.value), None

    def _single_step(self) -> None:
        self.pause_box.value, self.paused = True, True
        self._step()

    def _set_speed(self) -> None:
        self.speed, self._anchor = float(self.speed_slider.value), None

    def _switch_terrain(self) -> None:
        """Rebuild the env on the chosen ground; the command and the page stay."""
        self.driver = make_driver(self.source, self.args, self.terrain.value == "course")
        if self.sliders:
            self._command()
        self.scene.remove()
        self.scene = SceneView(self.server, self.driver.model, self.driver.draw())

    def _root(self) -> np.ndarray:
        d = self.driver
        return np.asarray(d.data.xpos[root_body(d.model)], dtype=float).copy()

    # ------------------------------------------------------------------ the loop
    def _step(self) -> None:
        self.driver.step()
        self.sim_seconds += self.driver.control_dt

    def _due(self, now: float) -> int:
        """Control steps to take now: those real time (x speed) asks for, at most 10 a
        turn (a slow machine falls behind rather than freezing the page); with speed 0
        as many as fit before the next frame."""
        if self.paused:
            return 0
        if self.speed == 0:
            return 1_000_000
        if self._anchor is None:
            self._anchor = (now, self.sim_seconds)
        wall0, sim0 = self._anchor
        want = sim0 + self.speed * (now - wall0) - self.sim_seconds
        n = int(want / self.driver.control_dt)
        if n > 10:
            self._anchor = None  # behind: restart real time from here
        return min(n, 10)

    def _draw(self, now: float, last_text: float) -> float:
        self.scene.update(self.driver.draw())
        self.scene.follow(self._root() if self.follow_box.value else None,
                          (0.0, 0.0, self.height))
        if now - last_text >= 0.2:
            self.readout.content = readout_html(self.driver.readout)
            return now
        return last_text

    def run(self) -> None:
        """Step and draw until `stop` is set or --seconds of simulated time have passed."""
        frame, last_frame, last_text = 1.0 / self.args.fps, 0.0, 0.0
        limit = (self.args.seconds or float("inf")) - 1e-9  # 10 x 0.02 is 0.19999...
        while not self.stop.is_set() and self.sim_seconds < limit:
            while not self.ops.empty():
                self.ops.get()()
            now = time.perf_counter()
            due = self._due(now)
            while due > 0 and self.sim_seconds < limit and \
                    time.perf_counter() - now < frame:
                self._step()
                due -= 1
            now = time.perf_counter()
            if now - last_frame >= frame:
                last_text, last_frame = self._draw(now, last_text), now
            if due == 0 or self.paused:
                time.sleep(min(frame, 0.005))

    def close(self) -> None:
        self.stop.set()
        self.server.stop()


def main(args: list[str]) -> int:

    source, a = parse_positional(ViewArgs, args, "trot view RUN_DIR|TASK")
    try:
        viewer = Viewer(source, a)
    except ImportError as e:
        print(f"trot: error: trot view needs the 'viewer' extra ({e.name} is missing): "
              "pip install -e \".[viewer]\"", file=sys.stderr)
        return 2
    until = f"stops after {a.seconds:g} s simulated" if a.seconds else "Ctrl-C stops"
    print(f"trot view: {viewer.driver.name} at {viewer.address} ({until})", flush=True)
    try:
        viewer.run()
    except KeyboardInterrupt:
        pass
    finally:
        viewer.close()
    r = viewer.driver.readout
    print(f"simulated {viewer.sim_seconds:.2f} s: {r.episodes} episodes ended, the current "
          f"one at t {r.time:.2f} s with return {r.episode_return:.2f}")
    return 0
