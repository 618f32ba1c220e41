#!/usr/bin/env bash
# Policies with memory on the Go1 (issue 21): an MLP, a GRU and a history-4 MLP, each
# trained 30 minutes on the clock-free Go1 (go1-flat-airtime: go1-flat until 2026-12-02,
# when these rows were measured) by benchmarks/locomotion_cpu.py (curves in
# docs/data/go1_memory_VARIANT.csv, evaluated every 10 minutes over 128 episodes with
# randomization and pushes on), then exported, and the export driven through plain
# MuJoCo by `trot sim2sim` next to `trot eval` of the same run, 128 episodes each
# (SIM2SIM_EPISODES; the history-4 row of 2026-12-01 used 16; at 16 one fall
# moved the mean error by 20%): both JSON lines go to docs/data/go1_memory_VARIANT.json.
#
#     bash benchmarks/memory_go1.sh [VARIANT ...]      # default: mlp gru history4
#
# A variant whose run already has its 30 minutes is not trained again; one cut short
# continues from its checkpoint (locomotion_cpu.py --resume, bitwise).
set -euo pipefail
minutes=${MINUTES:-30}
variants=${*:-mlp gru history4}
# float32 updates, as the history-4 variant was measured (the task's default, pinned so
# that a change of default cannot split the variants)
for v in $variants; do
  case $v in
    mlp) flags=(--agent update_dtype=float32 --env obs_history=1) ;;  # it registers 4 frames
    gru) flags=(--agent rnn=gru update_dtype=float32 --env obs_history=1) ;;
    history4) flags=(--agent update_dtype=float32 --env obs_history=4) ;;
    *) echo "unknown variant $v (mlp, gru, history4)" >&2; exit 2 ;;
  esac
  run=runs/go1-memory/$v
  csv=docs/data/go1_memory_$v.csv
  resume=()
  [ -f "$run/checkpoint.pt" ] && resume=(--resume)
  python benchmarks/locomotion_cpu.py --task go1-flat-airtime --budget-min "$minutes" \
    --eval-every-min 10 --episodes 128 --run-dir "$run" --out "$csv" "${resume[@]}" \
    "${flags[@]}"
  {
    python -m trot eval "$run" --episodes 128 --json | tail -n 1
    python -m trot sim2sim "$run" --episodes "${SIM2SIM_EPISODES:-128}" --json | tail -n 1
  } > "docs/data/go1_memory_$v.json"
done
