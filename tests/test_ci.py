"""`.ci/readme.py`: the newcomer leg of CI reads the README's Quick-start commands and judges
the test run's log, and the full leg runs again only what the newcomer leg skipped. The
bugs: a command missed or a comment run; a failed run or an unexpected skip passing as
green; a skipped test that the full leg never runs."""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("ci_readme", ROOT / ".ci" / "readme.py")
ci = importlib.util.module_from_spec(spec)
spec.loader.exec_module(ci)

LOG = """collected 5 items
SKIPPED [2] tests/test_play.py:70: no OpenGL backend loads (RuntimeError: ...)
SKIPPED [1] tests/test_trainer.py:165: needs a CUDA GPU
{tail}
"""


def test_the_quick_start_commands_are_the_readmes_code_lines():
    text = ("# t\n## Quick start\nintro\n```bash\n# a comment\npip install a && b\n```\n"
            "more\n```bash\npython -m pytest\n```\n## Next\n```bash\nnot this\n```\n")
    assert ci.commands(text) == ["pip install a && b", "python -m pytest"]
    real = ci.commands(ci.README.read_text())
    assert any(c.startswith("pip install") for c in real) and "python -m pytest" in real


def test_a_log_passes_only_with_no_failure_and_allowed_skips():
    ok = LOG.format(tail="=== 2 passed, 3 skipped in 1.50s ===")
    allow = ["^no OpenGL backend loads", "^needs a CUDA GPU"]
    assert ci.check(ok, allow) == []
    assert ci.check(ok, allow[:1]) == [
        "unexpected skip (1x, tests/test_trainer.py:165): needs a CUDA GPU"]
    assert ci.check(LOG.format(tail="=== 1 failed, 2 passed, 3 skipped in 1.5s ==="),
                    allow) == ["1 failed"]
    assert ci.check(LOG.format(tail="2 passed, 1 error in 9.01s (0:00:09)"), allow) == [
        "1 error"]
    assert ci.check(LOG.format(tail="=== 3 skipped in 0.2s ==="), allow) == ["no test passed"]
    assert ci.check("ModuleNotFoundError: No module named 'pytest'", allow) == [
        "no pytest closing line in the log"]


def test_the_full_leg_reruns_exactly_the_skipped_tests(tmp_path):
    """pytest's own JUnit report of a real run: the skipped tests' node ids, parametrized
    ones whole, and none of those that passed or failed."""
    import subprocess
    import sys

    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_x.py").write_text(
        "import pytest\n"
        "def test_ok():\n    pass\n"
        "@pytest.mark.parametrize('k', [1, 2])\n"
        "def test_some(k):\n    if k == 2:\n        pytest.skip('no GL')\n"
        "def test_gone():\n    pytest.skip('no mjx')\n")
    (tmp_path / "tests" / "test_y.py").write_text(  # skipped whole at collection
        "import pytest\npytest.importorskip('no_such_module_for_ci')\n"
        "def test_never():\n    pass\n")
    junit = tmp_path / "junit.xml"
    subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                    f"--junitxml={junit}", "tests"], cwd=tmp_path, capture_output=True,
                   check=False, timeout=120)
    assert sorted(ci.skipped(junit.read_text(), tmp_path)) == [
        "tests/test_x.py::test_gone", "tests/test_x.py::test_some[2]", "tests/test_y.py"]
