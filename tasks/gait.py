"""Gait metrics for evaluation: how the feet step, from their contacts and world positions.

`GaitTracker.update` is called once per control step with each foot's contact and position
and returns per-step values that are NaN where they are undefined (agents/evaluate.py
averages each over its defined steps, then over episodes). Metrics count only while the
commanded planar speed is above `min_speed`:

- duty/<foot>: 1 while the foot is on the ground, else 0; its mean is the duty factor.
- flight: 1 while no foot is on the ground.
- swing_height: at a touchdown, the swing's peak height of the foot above its height on
  the last step of the stance before (m); the mean is the clearance per swing.
- stance_slip: at a lift-off, the foot's horizontal travel from its touchdown to the last
  step of the stance (m).
- phase_offset: at a touchdown of foot 1, the time since foot 0's last touchdown over foot
  0's last cycle (touchdown to touchdown): 0.5 for a walk or trot that alternates them.

Events (touchdowns, lift-offs, cycles) are measured only from transitions seen during the
episode, so the first partial stance or swing of each foot does not count.

The contact is debounced: a change of a foot's contact counts once the new state has held
for `settle_steps` control steps (default 2), and then as of its first step (its time,
and the heights and places on either side of it). A one-step blip, such as a sole's
corner sphere bouncing off the floor, is neither a swing nor a stance: counted raw, a
trained G1's 1-step blips were 16% of its swings (0.4 cm each), and they cut its
stances short.
"""

from __future__ import annotations

import torch
from torch import Tensor


class GaitTracker:
    """Per-env, per-foot event state [N, F]; `reset(mask)` at episode starts."""

    def __init__(self, n: int, feet: tuple[str, ...], dt: float, device: torch.device,
                 min_speed: float = 0.2, settle_steps: int = 2):
        self.feet, self.dt, self.min_speed = feet, dt, min_speed
        self.settle_steps = settle_steps
        f32 = dict(device=device, dtype=torch.float32)
        nf = len(feet)
        self.time = torch.zeros(n, **f32)
        self.contact = torch.zeros(n, nf, dtype=torch.bool, device=device)
        self.seen = torch.zeros(n, nf, dtype=torch.bool, device=device)  # a transition seen
        self.fresh = torch.ones(n, dtype=torch.bool, device=device)  # no step seen yet
        self.liftoff_z = torch.zeros(n, nf, **f32)
        self.last_z = torch.zeros(n, nf, **f32)  # last step's height: where a swing starts
        self.last_xy = torch.zeros(n, nf, 2, **f32)  # ... and place: where a stance ends
        self.peak_z = torch.zeros(n, nf, **f32)
        self.stance_xy = torch.zeros(n, nf, 2, **f32)
        # a contact change in waiting: its steps so far, and its first step's time, the
        # height and place before it, the place at it, and the highest point since
        self.pending = torch.zeros(n, nf, dtype=torch.int64, device=device)
        self.cand_time = torch.zeros(n, nf, **f32)
        self.cand_z = torch.zeros(n, nf, **f32)
        self.cand_prev_xy = torch.zeros(n, nf, 2, **f32)
        self.cand_xy = torch.zeros(n, nf, 2, **f32)
        self.cand_peak = torch.zeros(n, nf, **f32)
        nan = torch.full((n, nf), torch.nan, **f32)
        self.touchdown, self.prev_touchdown = nan.clone(), nan.clone()  # s, NaN: none yet

    def reset(self, mask: Tensor) -> None:
        m = mask[:, None]
        self.time.masked_fill_(mask, 0.0)
        self.fresh |= mask
        self.seen.masked_fill_(m, False)
        self.pending.masked_fill_(m, 0)
        self.touchdown.masked_fill_(m, torch.nan)
        self.prev_touchdown.masked_fill_(m, torch.nan)

    def update(self, contact: Tensor, pos: Tensor, speed_cmd: Tensor) -> dict[str, Tensor]:
        """contact [N, F] bool, pos [N, F, 3] world (m), speed_cmd [N] commanded planar speed
        (m/s) -> {metric: [N]} (NaN where undefined)."""
        self.time += self.dt
        z, xy = pos[..., 2], pos[..., :2]
        raw = contact
        differs = raw != self.contact  # [N, F]
        begins = differs & (self.pending == 0)  # a change starts now: note where and when
        self.cand_time = torch.where(begins, self.time[:, None], self.cand_time)
        self.cand_z = torch.where(begins, self.last_z, self.cand_z)
        self.cand_prev_xy = torch.where(begins[..., None], self.last_xy, self.cand_prev_xy)
        self.cand_xy = torch.where(begins[..., None], xy, self.cand_xy)
        self.cand_peak = torch.where(begins, z, torch.maximum(self.cand_peak, z))
        known = ~self.fresh[:, None]  # an episode's first step only sets the contacts
        # (a change against the last episode's contacts is no change: it starts no count)
        self.pending = torch.where(differs & known, self.pending + 1, 0)
        settled = self.pending >= self.settle_steps
        down = settled & raw & known  # touchdowns [N, F], as of cand_time
        up = settled & ~raw & known  # lift-offs
        contact = torch.where(settled | ~known, raw, self.contact)  # the debounced state
        moving = speed_cmd > self.min_speed  # [N]
        nan = torch.full_like(self.time, torch.nan)

        def mean_at(events: Tensor, values: Tensor) -> Tensor:  # [N, F] -> [N], NaN if none
            k = events.sum(-1)
            v = torch.where(events, values, 0.0).sum(-1) / k
            return torch.where(moving & (k > 0), v, nan)

        swing = (self.peak_z - self.liftoff_z)  # of the swing that ends at a touchdown
        slip = (self.cand_prev_xy - self.stance_xy).norm(dim=-1)  # of the stance ending
        out = {"gait/swing_height": mean_at(down & self.seen, swing),
               "gait/stance_slip": mean_at(up & self.seen, slip)}
        cycle = self.touchdown[:, 0] - self.prev_touchdown[:, 0]  # foot 0's last
        offset = (self.cand_time[:, 1] - self.touchdown[:, 0]) / cycle
        out["gait/phase_offset"] = torch.where(moving & down[:, 1] & (cycle > 0), offset, nan)
        # state: a lift-off starts a swing at this height, a touchdown a stance here
        self.liftoff_z = torch.where(up, self.cand_z, self.liftoff_z)
        self.last_z, self.last_xy = z.clone(), xy.clone()
        self.peak_z = torch.where(up, self.cand_peak, torch.maximum(self.peak_z, z))
        self.stance_xy = torch.where(down[..., None], self.cand_xy, self.stance_xy)
        self.prev_touchdown = torch.where(down, self.touchdown, self.prev_touchdown)
        self.touchdown = torch.where(down, self.cand_time, self.touchdown)
        self.seen |= down | up
        self.pending = torch.where(settled, 0, self.pending)
        self.contact = contact
        self.fresh.zero_()
        for i, foot in enumerate(self.feet):
            out[f"gait/duty/{foot}"] = torch.where(moving, contact[:, i].float(), nan)
        out["gait/flight"] = torch.where(moving, (~contact).all(-1).float(), nan)
        return out
