"""The stage folders import one way: every module imports only from its own floor or the
floors below it, and no module reaches one that imports it.

Every `import` and `from ... import` in the package is read from the source, function-level
and type-only (`if TYPE_CHECKING:`) ones included: a lazy import is still a dependency, and
a type-only one is knowledge of the other module. The floors, top-down, are in
docs/architecture.md.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "ncdc"

# The floors, lowest first: a module may import its own floor's modules and any below.
FLOORS: list[tuple[str, tuple[str, ...]]] = [
    ("ground", ("ncdc.version", "ncdc.errors", "ncdc.files", "ncdc.bounded", "ncdc.system",
                "ncdc.output", "ncdc.units", "ncdc.paths", "ncdc.schema", "ncdc.templates")),
    ("language", ("ncdc.language",)),
    ("hardware", ("ncdc.hardware",)),
    ("model", ("ncdc.model",)),
    ("families", ("ncdc.families",)),
    ("plan", ("ncdc.plan",)),
    ("render", ("ncdc.render",)),
    ("backends", ("ncdc.backends",)),
    ("verify", ("ncdc.verify",)),
    ("measure", ("ncdc.measure",)),
    ("api", ("ncdc", "ncdc.api", "ncdc.torch", "ncdc.export", "ncdc.grad")),
    ("faces", ("ncdc.cli", "ncdc.draw", "ncdc.__main__")),
]  # fmt: skip


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path, modules: set[str]) -> set[str]:
    """The ncdc modules `path` imports (a `from ncdc.x import y` counts y when y is a
    module, else ncdc.x), type-only imports included."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = (
        _module_name(path) if path.name == "__init__.py" else _module_name(path).rsplit(".", 1)[0]
    )
    found: set[str] = set()
    for node in ast.walk(tree):
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
        # a package's own __init__ is not a dependency of its submodules' code; the root's
        # is (it is the API: `from ncdc import x` below the api floor reaches up to it)
        graph[name] = {
            m for m in _imports(path, modules)
            if m != name and (m == "ncdc" or not name.startswith(m + "."))
        }  # fmt: skip
    return graph


def floor_of(module: str) -> int:
    """The floor a module stands on: the one whose prefix names it most closely."""
    best, length = -1, -1
    for i, (_, prefixes) in enumerate(FLOORS):
        for p in prefixes:
            if (module == p or module.startswith(p + ".")) and len(p) > length:
                best, length = i, len(p)
    if best < 0:
        raise AssertionError(f"{module} stands on no floor: add it to FLOORS and the docs")
    return best


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


def upward_edges(graph: dict[str, set[str]]) -> list[str]:
    return sorted(
        f"{a} ({FLOORS[floor_of(a)][0]}) imports {b} ({FLOORS[floor_of(b)][0]})"
        for a, targets in graph.items()
        for b in targets
        if floor_of(b) > floor_of(a)
    )


def test_every_module_stands_on_a_floor() -> None:
    graph = import_graph()
    assert len(graph) > 60  # every module was read
    for module in graph:
        floor_of(module)


def test_the_package_has_no_import_cycle_even_type_only() -> None:
    assert find_cycle(import_graph()) == []


def test_every_import_points_down_or_across_a_floor() -> None:
    assert upward_edges(import_graph()) == []


def test_the_cycle_finder_finds_a_planted_cycle() -> None:
    graph = import_graph()
    graph["ncdc.language.diagram"] = graph["ncdc.language.diagram"] | {"ncdc.cli.main"}
    cycle = find_cycle(graph)
    assert cycle and cycle[0] == cycle[-1] and "ncdc.cli.main" in cycle


def test_an_upward_import_is_found() -> None:
    graph = import_graph()
    graph["ncdc.model.cost"] = graph["ncdc.model.cost"] | {"ncdc.families"}
    assert upward_edges(graph) == ["ncdc.model.cost (model) imports ncdc.families (families)"]


def test_lazy_and_type_only_imports_count() -> None:
    graph = import_graph()
    # ncdc.backends.compile imports the compile cache inside a function: still an edge
    assert "ncdc.backends.cache" in graph["ncdc.backends.compile"]
    # ncdc.families.base names the model's plans under TYPE_CHECKING: still an edge
    assert "ncdc.model.values" in graph["ncdc.families.base"]


# ---------------------------------------------------------------- what the model may read


def _outside_families() -> list[Path]:
    return [
        p for p in sorted(PACKAGE.rglob("*.py"))
        if "families" not in p.relative_to(PACKAGE).parts and p.name != "launch.py"
    ]  # fmt: skip


def _family_names() -> set[str]:
    from ncdc.families import FAMILIES

    return set(FAMILIES)


def template_parameter_reads(tree: ast.AST) -> list[str]:
    """Reads of a candidate's template parameter by name: `c.param("bm")`,
    `dict(c.params)["bm"]` or `dict(c.params).get("bm")`."""
    found = []

    def is_params_dict(node: ast.AST) -> bool:
        return (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id == "dict"
            and len(node.args) == 1
            and isinstance(node.args[0], ast.Attribute)
            and node.args[0].attr == "params"
        )

    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            literal = [a.value for a in node.args if isinstance(a, ast.Constant)]
            if node.func.attr == "param" and literal:
                found.append(f"param({literal[0]!r})")
            if node.func.attr == "get" and is_params_dict(node.func.value) and literal:
                found.append(f"params.get({literal[0]!r})")
        if isinstance(node, ast.Subscript) and is_params_dict(node.value):
            found.append("params[...]")
    return found


def family_name_switches(tree: ast.AST, names: set[str]) -> list[str]:
    """Comparisons of a `.name` with a family's registry name."""
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Compare) or not isinstance(node.left, ast.Attribute):
            continue
        if node.left.attr != "name":
            continue
        for right in node.comparators:
            values = right.elts if isinstance(right, (ast.Tuple, ast.List, ast.Set)) else [right]
            found += [v.value for v in values if isinstance(v, ast.Constant) and v.value in names]
    return found


def test_no_template_parameter_is_read_outside_the_families() -> None:
    reads = {
        str(p.relative_to(PACKAGE)): template_parameter_reads(ast.parse(p.read_text()))
        for p in _outside_families()
    }
    assert {p: r for p, r in reads.items() if r} == {}


def test_no_family_name_switch_outside_the_families() -> None:
    names = _family_names()
    found = {
        str(p.relative_to(PACKAGE)): family_name_switches(ast.parse(p.read_text()), names)
        for p in _outside_families()
    }
    assert {p: f for p, f in found.items() if f} == {}


@pytest.mark.parametrize(
    "source, reads",
    [
        ('x = c.param("bm")', ["param('bm')"]),
        ('x = dict(c.params).get("pingpong", 0)', ["params.get('pingpong')"]),
        ('x = dict(kp.candidate.params)["s_x"]', ["params[...]"]),
        ("x = c.raster_group", []),
    ],
)
def test_the_parameter_read_finder_finds_planted_reads(source: str, reads: list[str]) -> None:
    assert template_parameter_reads(ast.parse(source)) == reads


def test_the_family_switch_finder_finds_a_planted_switch() -> None:
    tree = ast.parse('if family.name == "gemm" or kp.family.name in ("attention", "x"): pass')
    assert family_name_switches(tree, {"gemm", "attention"}) == ["gemm", "attention"]


# ------------------------------------------------------------------- tests mirror the package


def test_every_module_has_a_test_named_after_it_or_its_folder() -> None:
    """tests/<folder>/test_<module>.py for ncdc/<folder>/<module>.py, or a test of the folder
    itself (tests/<folder>/test_<folder>.py, or any test in tests/<folder>/ for a package
    __init__)."""
    tests = PACKAGE.parent / "tests"
    missing = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE)
        if "templates" in rel.parts or rel.name == "__main__.py":
            continue
        folder = tests.joinpath(*rel.parts[:-1])
        if rel.name == "__init__.py":
            ok = folder.is_dir() and any(folder.glob("test_*.py"))
            ok = (
                ok
                or (tests / f"test_{rel.parts[-2] if len(rel.parts) > 1 else 'ncdc'}.py").exists()
            )
        else:
            stem = rel.stem
            ok = (folder / f"test_{stem}.py").exists() or any(folder.glob(f"test_{stem}_*.py"))
            ok = ok or (folder.parent / f"test_{folder.name}.py").exists()
            ok = ok or (folder / f"test_{folder.name}.py").exists()
        if not ok:
            missing.append(str(rel))
    assert missing == []
