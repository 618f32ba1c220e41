"""The layers (docs/architecture.md, "Layers"): trot/core <- sim <- tasks <- agents <- export <-
the app (the rest of trot/), read from every import statement of the source, those inside
functions included. The bugs: a library module that imports the CLI, the viewer, an adapter
or the launcher (the library then needs the app, and an app import cycle follows), a
module imported back by what it imports (a cycle that only import order keeps working),
and an import inside a function that defers nothing (it hides such a cycle)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# folder -> its layer, lowest first; the app is every other module of trot/
LAYERS = {"trot/core": 0, "sim": 1, "tasks": 2, "agents": 3, "export": 4}
PACKAGE = {"trot": "trot", "sim": "trot.sim", "tasks": "trot.tasks", "agents": "trot.agents",
           "export": "trot.export"}
APP = 5


def _modules() -> dict[str, Path]:
    out = {}
    for folder, package in PACKAGE.items():
        for p in (ROOT / folder).rglob("*.py"):
            parts = [x for x in p.relative_to(ROOT / folder).with_suffix("").parts
                     if x != "__init__"]
            out[".".join([package, *parts])] = p
    return out


def _layer(path: Path) -> int:
    rel = path.relative_to(ROOT).as_posix()
    return next((k for f, k in LAYERS.items() if rel.startswith(f + "/")), APP)


def _imports(name: str, path: Path, modules: dict[str, Path]) -> list[tuple[str, int]]:
    """(imported module of trot, line) for every import in the file."""
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level:
            base = node.module or ""
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base
                       for a in node.names]
        else:
            continue
        for t in targets:
            while t and t not in modules:
                t = t.rpartition(".")[0]
            if t and t not in (name, "trot"):  # `trot` itself: its __version__
                out.append((t, node.lineno))
    return out


def test_the_library_never_imports_the_app_and_nothing_imports_upwards():
    modules = _modules()
    wrong = [f"{path.relative_to(ROOT)}:{line} imports {t}"
             for name, path in modules.items() for t, line in _imports(name, path, modules)
             if _layer(modules[t]) > _layer(path)]
    assert not wrong, "\n".join(wrong)


def test_no_import_cycles():
    modules = _modules()
    edges = {n: {t for t, _ in _imports(n, p, modules)} for n, p in modules.items()}
    index, low, stack, on, cycles = {}, {}, [], set(), []

    def visit(v: str) -> None:  # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                cycles.append(sorted(comp))

    for v in modules:
        if v not in index:
            visit(v)
    assert not cycles, cycles


def test_an_import_inside_a_function_says_what_it_defers():
    """An import of trot's own inside a function stays only to defer an optional extra or
    a start-up cost, with a comment on its line saying which."""
    modules = _modules()
    silent = []
    for name, path in modules.items():
        lines = path.read_text().splitlines()
        for fn in ast.walk(ast.parse("\n".join(lines))):
            if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for node in ast.walk(fn):
                if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(
                        "trot") and "#" not in lines[node.lineno - 1]:
                    silent.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert not silent, silent
