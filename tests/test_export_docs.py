"""The shell commands of docs/export.md run as printed, from the repository root (the
page's commands use the committed tests/data/go1_walker export)."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DOC = REPO / "docs" / "export.md"


def test_export_md_shell_commands_run_as_printed():
    blocks = re.findall(r"```bash\n(.*?)```", DOC.read_text(), flags=re.DOTALL)
    lines = [ln for b in blocks for ln in b.splitlines() if ln.strip()]
    assert any(ln.startswith("trot sim2sim") for ln in lines)
    for line in lines:
        argv = shlex.split(line)
        assert argv[0] == "trot", line
        p = subprocess.run([sys.executable, "-m", "trot", *argv[1:]], cwd=REPO,
                           capture_output=True, text=True, timeout=300, check=False)
        assert p.returncode == 0, f"{line}\n{p.stdout[-1500:]}\n{p.stderr[-3000:]}"
        if "--json" in argv:
            out = json.loads(p.stdout.strip().splitlines()[-1])
            assert out["episodes"] >= 1 and out["terminated_rate"] == 0.0, out  # it walks
