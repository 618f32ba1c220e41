#!/usr/bin/env bash
# Makes tests/data/go1_walker: the walking go1-flat policy of tests/test_export_go1.py and
# docs/export.md (policy.onnx, policy.json, model.xml; the checkpoint stays in the run).
# Run from the repository root: about 10 minutes on 2 CPU cores (10 M env steps of the
# trotting go1-flat, with its gait clock and 4-frame history; seed 0 of
# docs/journal/learning-go1.md, "Go1 walking in minutes" met its thresholds before that).
# These are the commands that made the committed files. Regenerate whenever go1-flat's model
# or the contract changes (test_committed_walker_is_what_the_exporter_writes_today says so).
set -euo pipefail
run=${1:-runs/go1-walker}
trot train go1-flat --max-env-steps 10000000 --seed 0 --run-dir "$run"
trot export "$run" --out tests/data/go1_walker
trot sim2sim tests/data/go1_walker --episodes 4 --json  # it walks: terminated_rate 0
