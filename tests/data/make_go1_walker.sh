#!/usr/bin/env bash
# Makes tests/data/go1_walker: the walking go1-flat policy of tests/test_export_go1.py and
# docs/export.md (policy.onnx, policy.json, model.xml; the checkpoint stays in the run).
# Run from the repository root: about 30 minutes on 2 CPU cores (24 M env steps; at 14 M
# the policy still mostly stands). These are the commands that made the committed files.
# Regenerate whenever go1-flat's model or the contract changes
# (test_committed_walker_is_what_the_exporter_writes_today says so).
set -euo pipefail
run=${1:-runs/go1-walker}
trot train go1-flat --max-env-steps 14000000 --seed 0 --run-dir "$run"
trot train --resume "$run" --max-env-steps 24000000
trot export "$run" --out tests/data/go1_walker
trot sim2sim tests/data/go1_walker --episodes 4 --json  # it walks: terminated_rate 0
