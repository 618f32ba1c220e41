"""The README's Quick-start commands, read from the README itself so CI cannot drift from it.

    python .ci/readme.py commands     # each command line of the section's bash blocks
    python .ci/readme.py check LOG --allow REGEX...
    python .ci/readme.py skipped JUNIT  # the node ids a run's JUnit XML reports skipped
    python .ci/readme.py total LOG...   # one closing line, summed over the logs

`check` reads a log of those commands' output and fails (exit 1, saying why) unless pytest's
closing line shows no failure or error and every skip reason (pytest's -ra summary) matches
one of the allowed patterns.
"""

from __future__ import annotations

import re
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"
SECTION = "## Quick start"


def commands(text: str) -> list[str]:
    """Every non-comment line of the ```bash blocks between SECTION and the next heading."""
    body = text.split(SECTION, 1)[1]
    body = re.split(r"^## ", body, maxsplit=1, flags=re.M)[0]
    blocks = re.findall(r"```bash\n(.*?)```", body, flags=re.S)
    lines = [ln.strip() for b in blocks for ln in b.splitlines()]
    return [ln for ln in lines if ln and not ln.startswith("#")]


def counts(log: str) -> dict[str, int] | None:
    """pytest's closing line as {"passed": n, "skipped": n, ...}; None without one."""
    summary = re.findall(r"^(?:=+ )?(\d+ (?:passed|failed|skipped|errors?)\b.*) in [\d.]+s"
                         r"(?: \([^)]*\))?(?: =+)?$", log, flags=re.M)
    return {k: int(n) for n, k in re.findall(r"(\d+) (\w+)", summary[-1])} if summary else None


def check(log: str, allowed: list[str]) -> list[str]:
    """The problems in a pytest log: no closing line, failures, errors, unexpected skips."""
    seen = counts(log)
    if seen is None:
        return ["no pytest closing line in the log"]
    problems = [f"{seen[k]} {k}" for k in ("failed", "error", "errors") if seen.get(k)]
    if not seen.get("passed"):
        problems.append("no test passed")
    for n, where, reason in re.findall(r"^SKIPPED \[(\d+)\] ([^:]+:\d+): (.*)$", log, re.M):
        if not any(re.search(p, reason) for p in allowed):
            problems.append(f"unexpected skip ({n}x, {where}): {reason}")
    return problems


def skipped(junit: str, root: Path = README.parent) -> list[str]:
    """The pytest node ids (tests/test_x.py::test_y[param]) that a JUnit XML report lists
    as skipped: what the full leg runs again with every extra, GL and the browser."""
    ids = []
    for case in ET.fromstring(junit).iter("testcase"):
        if case.find("skipped") is None:
            continue
        if not case.get("classname"):  # a module skipped whole at collection: its name
            ids.append(str(Path(*case.get("name", "").split(".")).with_suffix(".py")))
            continue
        parts = case.get("classname", "").split(".")
        # the longest prefix that is a file (tests/test_x.py); the rest: classes, if any
        cut = next(k for k in range(len(parts), 0, -1)
                   if (root / Path(*parts[:k])).with_suffix(".py").is_file())
        ids.append("::".join([str(Path(*parts[:cut]).with_suffix(".py")), *parts[cut:],
                              case.get("name", "")]))
    return ids


def main(argv: list[str]) -> int:
    if argv[:1] == ["commands"]:
        print("\n".join(commands(README.read_text())))
        return 0
    if len(argv) >= 2 and argv[0] == "check":
        allowed = argv[3:] if argv[2:3] == ["--allow"] else []
        log = Path(argv[1]).read_text(errors="replace")
        problems = check(log, allowed)
        for p in problems:
            print(f"ci: {p}", file=sys.stderr)
        return 1 if problems else 0
    if len(argv) == 2 and argv[0] == "skipped":
        print("\n".join(skipped(Path(argv[1]).read_text())))
        return 0
    if argv[:1] == ["total"]:  # one closing line over several logs
        runs = [counts(Path(p).read_text(errors="replace")) or {} for p in argv[1:]]
        total = {k: sum(r.get(k, 0) for r in runs) for k in ("passed", "failed", "skipped")}
        print(f"ci: {total['passed']} passed, {total['failed']} failed, "
              f"{total['skipped']} skipped")
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
