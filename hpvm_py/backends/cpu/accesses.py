"""Facts about the memory accesses of a leaf: checked-mode site numbers, privatisable buffers."""
from __future__ import annotations

from ...ir import kernel as K
from ...types import PtrType

Access = K.Load | K.Store | K.Atomic

# atomic op -> its merge class: ops that combine in any order; one class can share a private copy
MERGE_CLASSES = {"add": "add", "sub": "add", "min": "min", "max": "max", "and": "and",
                 "or": "or", "xor": "xor"}


def sites(body: K.Block) -> list[Access]:
    """Every load, store and atomic in IR order; a site's number is its position."""
    found: list[Access] = []
    seen: set[int] = set()
    for stmt in K.walk_stmts(body):
        candidates: list[K.Expr | K.Stmt] = [stmt] if isinstance(stmt, K.Store) else []
        for e in K.child_exprs(stmt):
            candidates.extend(K.walk_exprs(e))
        for node in candidates:
            if isinstance(node, (K.Load, K.Store, K.Atomic)) and id(node) not in seen:
                seen.add(id(node))
                found.append(node)
    return found


def privatisable(leaf: K.LeafFunc) -> dict[str, str]:
    """Buffers used only by atomics of one merge class whose old value is unused.

    Such a buffer can be replaced, per thread, by a private copy starting at the class's identity
    and merged into the real buffer after the launch: the updates need no atomicity then. Integer
    elements only (not i1), and f32/f64 for add: the order of float sums is unspecified anyway.
    """
    classes: dict[str, set[str]] = {}
    disqualified: set[str] = set()
    unused_results = {id(s.value) for s in K.walk_stmts(leaf.body)
                      if isinstance(s, K.ExprStmt) and isinstance(s.value, K.Atomic)}
    for stmt in K.walk_stmts(leaf.body):
        if isinstance(stmt, K.Store):
            disqualified.add(stmt.ptr.name)
        for e in K.child_exprs(stmt):
            for sub in K.walk_exprs(e):
                if isinstance(sub, K.Load):
                    disqualified.add(sub.ptr.name)
                elif isinstance(sub, K.Atomic):
                    name = sub.ptr.name
                    if id(sub) not in unused_results or sub.op not in MERGE_CLASSES or \
                            sub.rank is not None:  # a peer's buffer: no private copy of it here
                        disqualified.add(name)
                    else:
                        classes.setdefault(name, set()).add(MERGE_CLASSES[sub.op])
                elif isinstance(sub, K.Var) and isinstance(sub.type, PtrType) and \
                        not _is_access_pointer(sub, e):
                    disqualified.add(sub.name)
    params = {p.name: p for p in leaf.params if isinstance(p.type, PtrType)}
    result: dict[str, str] = {}
    for name, merge in classes.items():
        if name in disqualified or name not in params or len(merge) != 1:
            continue
        elem = params[name].type.elem
        (kind,) = merge
        if elem.is_bool or (elem.is_float and (kind != "add" or elem.bits < 32)):
            continue
        result[name] = kind
    return result


def _is_access_pointer(var: K.Var, root: K.Expr) -> bool:
    """Whether var appears in root only as the pointer operand of loads and atomics."""
    for sub in K.walk_exprs(root):
        if isinstance(sub, (K.Load, K.Atomic)) and sub.ptr is var:
            return True
    return False
