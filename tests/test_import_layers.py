"""The package's imports point down its layers (docs/architecture.md draws them): a module imports
only modules of its own layer or of the layers below, its own layer's without a cycle, and every
import sits at the top of its module, where it is seen (none inside a function or under
TYPE_CHECKING: an import hidden there dodges a cycle instead of removing it). No module is long."""
from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "hpvm_py"
MAX_LINES = 600

# bottom first: (layer, the module prefixes it holds); a module belongs to its longest prefix
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    ("support", ("hpvm_py.types", "hpvm_py.errors", "hpvm_py.support")),
    ("ir", ("hpvm_py.ir",)),
    ("frontend", ("hpvm_py.frontend", "hpvm_py.math")),
    ("passes", ("hpvm_py.passes",)),
    ("device", ("hpvm_py.device",)),
    ("backends", ("hpvm_py.backends",)),
    ("runtime", ("hpvm_py.rt",)),
    ("distributed", ("hpvm_py.distributed", "hpvm_py.symmetric", "hpvm_py.comm")),
    ("api", ("hpvm_py", "hpvm_py.api")),
    ("cli", ("hpvm_py.cli", "hpvm_py.cli_run")),
]

def _layer(module: str) -> int:
    best = None
    for index, (_, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            inside = module == prefix or module.startswith(prefix + ".")
            if inside and (best is None or len(prefix) > best[1]):
                best = (index, len(prefix))
    assert best is not None, f"{module} is in no layer: add it to LAYERS (and docs/architecture.md)"
    return best[0]


def _modules() -> dict[str, Path]:
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def _hidden_nodes(tree: ast.Module) -> set[int]:
    """The ids of the nodes inside a function body or an `if TYPE_CHECKING:` block."""
    hidden: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)) or (
                isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)):
            hidden |= {id(n) for n in ast.walk(node) if n is not node}
    return hidden


def _imports(name: str, path: Path, known: dict[str, Path]) -> list[tuple[str, bool]]:
    """(imported module, hidden) for every import of hpvm_py in the module `name`."""
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    tree = ast.parse(path.read_text())
    hidden = _hidden_nodes(tree)
    found = []
    for node in ast.walk(tree):
        targets: list[str] = []
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[:len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            elif (node.module or "").split(".")[0] == "hpvm_py":
                target = node.module or ""
            else:
                continue
            targets = [f"{target}.{a.name}" if f"{target}.{a.name}" in known else target for a in node.names]
        elif isinstance(node, ast.Import):
            targets = [a.name for a in node.names if a.name.split(".")[0] == "hpvm_py"]
        for target in targets:
            while target not in known and "." in target:
                target = target.rsplit(".", 1)[0]
            if target in known and target != name:
                found.append((target, id(node) in hidden))
    return found


def _graph() -> dict[str, list[tuple[str, bool]]]:
    known = _modules()
    return {name: _imports(name, path, known) for name, path in known.items()}


def _cycles(graph: dict[str, set[str]]) -> set[tuple[str, ...]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: set[tuple[str, ...]] = set()

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.add(tuple(sorted(component)))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_the_import_graph_is_read_correctly():
    graph = _graph()
    edges = {name: {t for t, _ in out} for name, out in graph.items()}
    # known edges, so that the tests below cannot pass on an empty graph
    assert "hpvm_py.frontend.lower" in edges["hpvm_py.frontend.decorators"]
    assert "hpvm_py.support.stats" in edges["hpvm_py.rt.executor"]
    assert "hpvm_py.device.devices" in edges["hpvm_py.rt.tracker"]
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == {("a", "b", "c")}
    assert ("hpvm_py.api.host", False) in graph["hpvm_py"]


def test_every_import_points_down_the_layers():
    upward = sorted(f"{name} -> {target} ({LAYERS[_layer(name)][0]} imports {LAYERS[_layer(target)][0]})"
                    for name, out in _graph().items() for target, _ in out if _layer(target) > _layer(name))
    assert not upward, "imports up the layers:\n" + "\n".join(upward)


def test_imports_sit_at_the_top_of_their_module():
    hidden = sorted(f"{name} -> {target}" for name, out in _graph().items() for target, h in out if h)
    assert not hidden, f"imports hidden in a function or under TYPE_CHECKING (move them up): {hidden}"


def test_modules_import_each_other_without_a_cycle():
    cycles = sorted(_cycles({name: {t for t, _ in out} for name, out in _graph().items()}))
    assert not cycles, f"import cycles: {cycles}"


def test_modules_are_short():
    long = {str(p.relative_to(PACKAGE)): n for p in PACKAGE.rglob("*.py")
            if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert not long, f"modules over {MAX_LINES} lines: {long}"
