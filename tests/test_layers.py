"""The layers import one way: no module of ncdc imports, at any depth, one that imports it.

Every `import` and `from ... import` in the package is read from the source, function-level
ones included (a lazy import is still a dependency), and the module graph must have no
cycle. The layers, top-down, are in docs/architecture.md; a test here pins the few edges
that define them.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "ncdc"


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path, modules: set[str]) -> set[str]:
    """The ncdc modules `path` imports (a `from ncdc.x import y` counts y when y is a
    module, else ncdc.x), type-checking-only imports left out: they never run."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    skip: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skip |= {id(n) for child in node.body for n in ast.walk(child)}
    package = (
        _module_name(path) if path.name == "__init__.py" else _module_name(path).rsplit(".", 1)[0]
    )
    found: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.startswith("ncdc")}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(
                    package.split(".")[: len(package.split(".")) - node.level + 1]
                    + ([base] if base else [])
                )
            if not base.startswith("ncdc"):
                continue
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                found.add(sub if sub in modules else base)
    return {m for m in found if m in modules}


def import_graph() -> dict[str, set[str]]:
    paths = sorted(PACKAGE.rglob("*.py"))
    modules = {_module_name(p) for p in paths}
    graph = {}
    for path in paths:
        name = _module_name(path)
        # a package's own __init__ is not a dependency of its submodules' code
        graph[name] = {
            m for m in _imports(path, modules) if m != name and not name.startswith(m + ".")
        }
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str]:
    """One cycle of module names (first repeated at the end), or []."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str]:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return stack[stack.index(nxt) :] + [nxt]
            if nxt not in state:
                found = visit(nxt)
                if found:
                    return found
        stack.pop()
        state[node] = 2
        return []

    for node in sorted(graph):
        if node not in state:
            found = visit(node)
            if found:
                return found
    return []


def test_the_package_has_no_import_cycle() -> None:
    graph = import_graph()
    assert len(graph) > 30  # every module was read
    assert find_cycle(graph) == []


def test_the_cycle_finder_finds_a_planted_cycle() -> None:
    graph = import_graph()
    graph["ncdc.language.spec"] = graph["ncdc.language.spec"] | {
        "ncdc.cli.main"
    }  # the lowest layer reaching the top
    cycle = find_cycle(graph)
    assert cycle and cycle[0] == cycle[-1] and "ncdc.cli.main" in cycle


def test_lazy_imports_count() -> None:
    # ncdc.backends.compile imports the compile cache inside a function: still an edge
    assert "ncdc.backends.cache" in import_graph()["ncdc.backends.compile"]


def test_the_layers_point_down() -> None:
    graph = import_graph()

    def reaches(a: str, b: str) -> bool:
        seen, todo = set(), [a]
        while todo:
            m = todo.pop()
            if m == b:
                return True
            if m not in seen:
                seen.add(m)
                todo += graph.get(m, ())
        return False

    # the model knows no family and no backend; families know no renderer or backend
    for low, high in [
        ("ncdc.model.cost", "ncdc.families"),
        ("ncdc.model.graph", "ncdc.families"),
        ("ncdc.model.launch", "ncdc.model.cost"),
        ("ncdc.families", "ncdc.render"),
        ("ncdc.families", "ncdc.backends.compile"),
        ("ncdc.render", "ncdc.backends.compile"),
        ("ncdc.plan.choose", "ncdc.measure.tune"),
        ("ncdc.backends.compile", "ncdc.measure.tune"),
        ("ncdc.language.spec", "ncdc.hardware.machine"),
    ]:
        assert not reaches(low, high), f"{low} reaches {high}"
