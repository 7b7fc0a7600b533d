"""The front end reads in one direction: its modules import each other without a cycle (imports
inside functions included, so a cycle cannot hide behind a lazy import), and no module is long."""
from __future__ import annotations

import ast
from pathlib import Path

FRONTEND = Path(__file__).resolve().parent.parent / "hpvm_py" / "frontend"
MAX_LINES = 600


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(FRONTEND).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(["frontend"] + parts)


def _imports(path: Path, name: str, known: set[str]) -> set[str]:
    """The frontend modules that the module `name` (at path) imports, anywhere in its body."""
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if not isinstance(node, ast.ImportFrom) or node.level == 0:
            continue  # absolute imports of hpvm_py are not used inside the package
        base = package.split(".")
        base = base[:len(base) - (node.level - 1)]
        if len(base) == 0 or base[0] != "frontend":
            continue  # an import from outside the front end (..ir, ..types)
        target = ".".join(base + ([node.module] if node.module else []))
        for alias in node.names:
            sub = f"{target}.{alias.name}"
            found.add(sub if sub in known else target)
    found &= known
    found.discard(name)
    return found


def _graph() -> dict[str, set[str]]:
    paths = {_module_name(p): p for p in FRONTEND.rglob("*.py")}
    known = set(paths)
    return {name: _imports(path, name, known) for name, path in paths.items()}


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            if nxt not in state:
                found = visit(nxt)
                if found:
                    return found
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state:
            found = visit(node)
            if found:
                return found
    return None


def test_the_import_graph_is_read_correctly():
    graph = _graph()
    # known edges, so that the acyclicity test below cannot pass on an empty graph
    assert "frontend.lower" in graph["frontend.decorators"]
    assert "frontend.graph" in graph["frontend.decorators"]
    assert "frontend.defs" in graph["frontend.graph"]
    assert "frontend.lower.exprs" in graph["frontend.lower.calls"]
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]


def test_frontend_imports_form_no_cycle():
    cycle = _cycle(_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def test_frontend_modules_are_short():
    long = {str(p.relative_to(FRONTEND)): n for p in FRONTEND.rglob("*.py")
            if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert not long, f"modules over {MAX_LINES} lines: {long}"
