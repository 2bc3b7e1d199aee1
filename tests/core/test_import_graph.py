"""agl-core's import graph: no cycle, and names are resolved at the edges only.

Every ``import`` of an agl module counts, at the top of a module or inside a function, except
those under ``if TYPE_CHECKING:`` (which never run). An edge module (the trainer, the runner,
the CLI, the conformance suites) may own a plugin manager; everything below them takes
objects, so none of it may import :mod:`agl.plugins`.
"""

from __future__ import annotations

import ast
from pathlib import Path

import agl

SOURCE = Path(agl.__file__).parent

EDGES = {"agl._train._trainer", "agl._train._runner_pool", "agl._run._runner", "agl.plugins"}
"""Modules that own or build a plugin manager (with the packages below)."""
EDGE_PACKAGES = ("agl.cli", "agl.testing", "agl._plugins")
MANAGER = {"agl.plugins", "agl._plugins._manager", "agl._plugins._registry"}
"""The plugin manager's modules: the public one and its implementation."""


def modules() -> dict[str, Path]:
    found = {}
    for path in SOURCE.rglob("*.py"):
        parts = ["agl", *path.relative_to(SOURCE).with_suffix("").parts]
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def imports(name: str, path: Path, known: set[str], *, typing: bool = False) -> set[str]:
    """The agl modules ``name`` imports (an import of a name from a module: that module);
    with ``typing``, those under ``if TYPE_CHECKING:`` too."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    skipped = (
        set()
        if typing
        else {
            id(node)
            for branch in ast.walk(tree)
            if isinstance(branch, ast.If) and "TYPE_CHECKING" in ast.unparse(branch.test)
            for statement in branch.body
            for node in ast.walk(statement)
        }
    )
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parts, *([node.module] if node.module else [])])
            targets = [
                f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base
                for alias in node.names
            ]
        for target in targets:
            module = target
            while module and module not in known:
                module = module.rpartition(".")[0]
            if module and module != name:
                found.add(module)
    return found


def graph(*, typing: bool = False) -> dict[str, set[str]]:
    """Who imports whom. With ``typing``, type-only imports count too, except a package's
    (its ``__init__``'s are the names it re-exports for type checkers, loaded lazily)."""
    found = modules()
    return {
        name: imports(name, path, set(found), typing=typing and path.name != "__init__.py")
        for name, path in found.items()
    }


def cycle(edges: dict[str, set[str]]) -> list[str] | None:
    """One import cycle, as the modules along it, or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for target in sorted(edges[node]):
            if state.get(target) == 1:
                return [*path[path.index(target) :], target]
            if target not in state:
                found = visit(target)
                if found:
                    return found
        path.pop()
        state[node] = 2
        return None

    for node in sorted(edges):
        if node not in state:
            found = visit(node)
            if found:
                return found
    return None


def test_the_graph_is_read_right() -> None:
    edges = graph()
    assert "agl.plugins" in edges["agl._run._runner"]
    assert (
        "agl._train._step_loop" in edges["agl._train._algorithm"]
    )  # a function-local import counts too
    typed = graph(typing=True)
    assert "agl._train._context" not in edges["agl._train._step_loop"]  # under TYPE_CHECKING
    assert "agl._train._context" in typed["agl._train._step_loop"]  # ... counted with typing
    assert cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert cycle({"a": {"b"}, "b": set()}) is None


def test_agl_core_has_no_import_cycle() -> None:
    found = cycle(graph())
    assert found is None, "import cycle: " + " -> ".join(found or [])


def test_agl_core_has_no_cycle_even_through_type_only_imports() -> None:
    """A type needed across layers is a Protocol in the lower module, not an import of the
    upper one under TYPE_CHECKING: the layers read in one direction."""
    found = cycle(graph(typing=True))
    assert found is None, "import cycle through type-only imports: " + " -> ".join(found or [])


def test_only_the_edges_import_the_plugin_manager() -> None:
    below = sorted(
        name
        for name, targets in graph().items()
        if MANAGER & targets and name not in EDGES and not name.startswith(EDGE_PACKAGES)
    )
    assert below == [], f"these modules look names up in plugins; take objects instead: {below}"
