"""Pointer offsets and shapes, lowered to ordinary flat accesses.

`row = data + k` (a pointer plus an integer, in elements, as in C), `t = hpvm.view(p, (rows,
cols))` and `tile = hpvm.malloc(nbytes, f32, shape=(16, 16))` make *views*: a base pointer (a
pointer parameter or a malloc scratch array, fixed when the leaf is compiled), an offset and a
shape held in integer locals of the leaf. An access through a view, `row[j]`, `t[i, j]` or
`t[i][j]`, becomes `data[offset + i * cols + j]`: every backend and the bounds proof see ordinary
indexed accesses of the base pointer.
"""
from __future__ import annotations

import ast
from dataclasses import dataclass

from ... import types as T
from ...ir import kernel as K
from ...support.loc import Loc
from ...types import PtrType
from .exprs import ExprLowering
from .values import Handle, Value, Weak, intrinsic_kind, wrap

RULE = "pointer-views"
Extent = int | K.Expr  # a constant extent, or an i64 expression (a local, read at each access)


@dataclass
class PtrRef:
    """A pointer as an access sees it: base[offset + flat index], with its shape (None: flat)."""

    base: K.Var
    offset: K.Expr | None
    shape: tuple[Extent, ...] | None


@dataclass
class View:
    """A pointer variable of the leaf: its base, the local holding its offset, its shape."""

    base: K.Var
    offset: str | None
    shape: tuple[Extent, ...] | None


class ViewLowering(ExprLowering):
    """Views: their assignments, and accesses through them."""

    views: dict[str, View]

    # -- what a pointer expression is ------------------------------------------------------------

    def is_pointer_expr(self, node: ast.expr) -> bool:
        """node denotes a pointer (a view's assignment, not a value's)."""
        if isinstance(node, ast.Name):
            return node.id in self.views or self._ptr_var(node.id) is not None
        if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Sub)):
            return self.is_pointer_expr(node.left) or \
                (isinstance(node.op, ast.Add) and self.is_pointer_expr(node.right))
        if isinstance(node, ast.Call):
            obj = self.resolve_object(node.func)
            return obj is not None and intrinsic_kind(obj) == "view"
        if isinstance(node, ast.Subscript):
            ref = self.ptr_ref(node.value) if self.is_pointer_expr(node.value) else None
            return ref is not None and ref.shape is not None and len(_indices(node)) < len(ref.shape)
        return False

    def _ptr_var(self, name: str) -> K.Var | None:
        t = self.params[name].type if name in self.params else self.locals.get(name)
        if isinstance(t, PtrType):
            return K.Var(name=name, type=t, loc=self.src.loc(self.src.tree))
        return None

    def ptr_ref(self, node: ast.expr) -> PtrRef:
        """The pointer node denotes; a located error when it is not one."""
        loc = self.src.loc(node)
        if isinstance(node, ast.Name):
            view = self.views.get(node.id)
            if view is not None:
                offset = None if view.offset is None else K.Var(name=view.offset, type=T.i64, loc=loc)
                return PtrRef(view.base, offset, view.shape)
            var = self._ptr_var(node.id)
            if var is not None:
                return PtrRef(K.Var(name=var.name, type=var.type, loc=loc), None, None)
        elif isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Sub)):
            left_ptr = self.is_pointer_expr(node.left)
            if left_ptr and self.is_pointer_expr(node.right):
                raise self.error(node, "pointer arithmetic adds an integer to a pointer; two pointers "
                                 "cannot be added or subtracted", rule=RULE)
            ptr_node, int_node = (node.left, node.right) if left_ptr else (node.right, node.left)
            ref = self.ptr_ref(ptr_node)
            if ref.shape is not None and len(ref.shape) > 1:
                raise self.error(node, "a pointer with a shape of more than one dimension cannot be "
                                 "offset; offset the flat pointer, then give it a shape with "
                                 "hpvm.view(p + k, (rows, cols))", rule=RULE)
            delta = self._int64(int_node, "a pointer offset")
            if isinstance(node.op, ast.Sub):
                delta = K.BinOp(op="sub", lhs=K.Const(value=0, type=T.i64, loc=loc), rhs=delta,
                                type=T.i64, loc=loc)
            # an offset 1-D view is a flat pointer: its extent counted from the old start, so a
            # constant index checked against it would refuse `(t - 4)[19]` of a 16-element t
            return PtrRef(ref.base, _add(ref.offset, delta, loc), None)
        elif isinstance(node, ast.Call):
            obj = self.resolve_object(node.func)
            if obj is not None and intrinsic_kind(obj) == "view":
                return self._view_call(node)
        elif isinstance(node, ast.Subscript) and self.is_pointer_expr(node):
            ref = self.ptr_ref(node.value)
            assert ref.shape is not None
            indices = _indices(node)
            flat = self._flat(ref, indices, node, partial=True)
            return PtrRef(ref.base, _add(ref.offset, flat, loc), ref.shape[len(indices):])
        raise self.error(node, f"{ast.unparse(node)} is not a pointer: pointers are pointer "
                         "parameters, malloc() scratch, `p + k`, `hpvm.view(p, shape)` and the "
                         "variables assigned from those", rule=RULE)

    def _view_call(self, node: ast.Call) -> PtrRef:
        if node.keywords or len(node.args) != 2:
            raise self.error(node, "hpvm.view(ptr, shape) takes a pointer and a tuple of extents",
                             rule=RULE)
        ref = self.ptr_ref(node.args[0])
        if ref.shape is not None and len(ref.shape) > 1:
            raise self.error(node.args[0], "hpvm.view() takes a flat pointer (this one has a shape "
                             "already)", rule=RULE)
        return PtrRef(ref.base, ref.offset, self.shape_of(node.args[1]))

    def shape_of(self, node: ast.expr) -> tuple[Extent, ...]:
        """A shape: a tuple of 1 to 3 integer extents (an int alone is a 1-D shape)."""
        elts = node.elts if isinstance(node, ast.Tuple) else [node]
        if not 1 <= len(elts) <= 3:
            raise self.error(node, f"a shape has 1 to 3 extents, not {len(elts)}", rule=RULE)
        shape: list[Extent] = []
        for elt in elts:
            value = self.expr(elt)
            if isinstance(value, Weak) and value.kind == "int":
                if value.value <= 0:
                    raise self.error(elt, f"an extent of a shape is positive, not {value.value}",
                                     rule=RULE)
                self.materialize(value, T.i64, elt)  # an extent is an i64: a larger one is an error
                shape.append(int(value.value))
            else:
                shape.append(self._int64(elt, "an extent of a shape", value))
        return tuple(shape)

    # -- accesses ----------------------------------------------------------------------------

    def subscript(self, node: ast.Subscript) -> tuple[K.Var, K.Expr]:
        """The base pointer and flat index of the access `node` (a load, store or atomic)."""
        if not self.is_pointer_expr(node.value):
            base = self.expr(node.value)
            if not (isinstance(base, K.Var) and isinstance(base.type, PtrType)):
                raise self.error(node.value, "only pointers can be indexed")
        ref = self.ptr_ref(node.value)
        indices = _indices(node)
        if isinstance(node.slice, ast.Slice) or any(isinstance(i, ast.Slice) for i in indices):
            raise self.error(node.slice, "pointers take integer indices, not slices")
        rank = 1 if ref.shape is None else len(ref.shape)
        if len(indices) != rank:
            if ref.shape is None:
                raise self.error(node.slice, f"{ast.unparse(node.value)} is a flat pointer: it takes "
                                 "one integer index (compute row * width + col, or give it a shape: "
                                 "hpvm.view(p, (rows, cols)))", rule=RULE)
            raise self.error(node.slice, f"{ast.unparse(node.value)} has {rank} dimension(s) "
                             f"(shape {self._shape_text(ref.shape)}) but is indexed with "
                             f"{len(indices)}", rule=RULE)
        if ref.shape is None:
            index = self.index_expr(indices[0])
        else:
            index = self._flat(ref, indices, node, partial=False)
        return ref.base, _add(ref.offset, index, self.src.loc(node))

    def pointer_arg(self, node: ast.expr, what: str) -> tuple[K.Var, K.Expr | None]:
        """An atomic's pointer argument: its base and offset (a flat pointer only)."""
        ref = self.ptr_ref(node)
        if ref.shape is not None and len(ref.shape) > 1:
            raise self.error(node, f"{what} takes a flat pointer and one index; index the shaped "
                             "pointer down to one dimension first (`t[i]`)", rule=RULE)
        return ref.base, ref.offset

    @staticmethod
    def offset_index(offset: K.Expr | None, index: K.Expr, loc: Loc) -> K.Expr:
        return index if offset is None else _add(offset, index, loc)

    def index_expr(self, node: ast.expr) -> K.Expr:
        index = self.expr(node)
        if isinstance(index, Handle) or (isinstance(index, Weak) and index.kind == "float") or \
                (isinstance(index, K.Expr) and not (isinstance(index.type, T.ScalarType) and
                                                    index.type.is_int)):
            raise self.error(node, "an index must be an integer")
        if isinstance(index, Weak):
            return self.materialize(index, T.i64, node)
        if index.type.is_bool:
            return K.Cast(value=index, type=T.i64, loc=index.loc)
        return index

    def _flat(self, ref: PtrRef, indices: list[ast.expr], node: ast.Subscript, partial: bool) -> K.Expr:
        """The row-major flat index of `indices` (the leading ones, when partial) into ref's shape."""
        assert ref.shape is not None
        loc = self.src.loc(node)
        if len(indices) > len(ref.shape):
            raise self.error(node.slice, f"{ast.unparse(node.value)} has {len(ref.shape)} "
                             f"dimension(s) but is indexed with {len(indices)}", rule=RULE)
        flat: K.Expr | None = None
        for k, index_node in enumerate(indices):
            index = self.index_expr(index_node)
            extent = ref.shape[k]
            if isinstance(index, K.Const) and isinstance(extent, int) and \
                    not 0 <= index.value < extent:
                raise self.error(index_node, f"index {index.value} is out of range for dimension {k} "
                                 f"of {ast.unparse(node.value)} (extent {extent})",
                                 rule="memory-in-bounds")
            index = _i64(index, loc)
            stride = _product(ref.shape[k + 1:], loc)
            term = index if stride is None else _mul(index, stride, loc)
            flat = term if flat is None else _add(flat, term, loc)
        assert flat is not None
        return flat

    @staticmethod
    def _shape_text(shape: tuple[Extent, ...]) -> str:
        return "(" + ", ".join(str(e) if isinstance(e, int) else "?" for e in shape) + ")"

    def _int64(self, node: ast.expr, what: str, value: Value | None = None) -> K.Expr:
        value = self.expr(node) if value is None else value
        if isinstance(value, Handle) or (isinstance(value, Weak) and value.kind == "float") or \
                (isinstance(value, K.Expr) and not (isinstance(value.type, T.ScalarType) and
                                                    value.type.is_int)):
            raise self.error(node, f"{what} must be an integer", rule=RULE)
        return self.to_type(value, T.i64, node, explicit=True)

    def name(self, node: ast.Name, loc: Loc) -> Value:
        if node.id in self.views:
            raise self.error(node, f"{node.id!r} is a pointer: index it ({node.id}[i]), offset it "
                             f"({node.id} + k) or give it to an atomic; it is not a value (nor a "
                             "helper's argument)", rule=RULE)
        return super().name(node, loc)

    # -- assignments -------------------------------------------------------------------------

    def assign_view(self, target: ast.Name, value_node: ast.expr, loc: Loc) -> list[K.Stmt]:
        """`name = <pointer expression>`: name becomes (or stays) a view of one base pointer."""
        name = target.id
        if name in self.params:
            raise self.error(target, f"pointer parameter {name!r} cannot be reassigned; give the "
                             f"offset pointer a new name (`row = {name} + k`)", rule=RULE)
        if name in self.locals and name not in self.views:
            what = "scratch memory from malloc" if isinstance(self.locals[name], PtrType) else \
                f"a {self.locals[name]}"
            raise self.error(target, f"{name!r} holds {what} and cannot become a pointer", rule=RULE)
        if name in self.handles:
            raise self.error(target, f"{name!r} holds a node handle and cannot become a pointer",
                             rule=RULE)
        ref = self.ptr_ref(value_node)
        view = self.views.get(name)
        if view is None:
            offset = None
            if ref.offset is not None:
                offset = self.new_temp(T.i64)
            shape, out = self._hold_shape(ref.shape, loc)
            self.views[name] = View(ref.base, offset, shape)
            if offset is not None:
                out.append(K.Assign(target=offset, value=ref.offset, loc=loc))
            return out
        if view.base.name != ref.base.name:
            raise self.error(value_node, f"{name!r} points into {view.base.name!r}; a pointer "
                             f"variable keeps one base pointer, so it cannot point into "
                             f"{ref.base.name!r} too (use another name)", rule=RULE)
        if view.shape is not None or ref.shape is not None:
            raise self.error(target, f"{name!r} has a shape, so it is assigned once", rule=RULE)
        if view.offset is None:
            raise self.error(target, f"{name!r} was first assigned {view.base.name!r} itself; to move "
                             f"it later, start it as `{name} = {view.base.name} + 0`", rule=RULE)
        offset = ref.offset if ref.offset is not None else K.Const(value=0, type=T.i64, loc=loc)
        return [K.Assign(target=view.offset, value=offset, loc=loc)]

    def shape_scratch(self, name: str, ptr_type: PtrType, nbytes: K.Expr, shape_node: ast.expr,
                      loc: Loc) -> list[K.Stmt]:
        """`name = hpvm.malloc(nbytes, T, shape=...)`: name becomes a shaped view of itself."""
        shape = self.shape_of(shape_node)
        if isinstance(nbytes, K.Const) and all(isinstance(e, int) for e in shape):
            need = ptr_type.elem.nbytes
            for e in shape:
                need *= int(e)
            if need > nbytes.value:
                raise self.error(shape_node, f"shape {self._shape_text(shape)} of {ptr_type.elem} "
                                 f"needs {need} bytes, but malloc() allocates {nbytes.value}",
                                 rule=RULE)
        held, out = self._hold_shape(shape, loc)
        self.views[name] = View(K.Var(name=name, type=ptr_type, loc=loc), None, held)
        return out

    def _hold_shape(self, shape: tuple[Extent, ...] | None, loc: Loc
                    ) -> tuple[tuple[Extent, ...] | None, list[K.Stmt]]:
        """The shape with each computed extent held in a local (read when the view is made)."""
        if shape is None:
            return None, []
        out: list[K.Stmt] = []
        held: list[Extent] = []
        for extent in shape:
            if isinstance(extent, int):
                held.append(extent)
                continue
            name = self.new_temp(T.i64)
            out.append(K.Assign(target=name, value=extent, loc=loc))
            held.append(K.Var(name=name, type=T.i64, loc=loc))
        return tuple(held), out


def _indices(node: ast.Subscript) -> list[ast.expr]:
    return list(node.slice.elts) if isinstance(node.slice, ast.Tuple) else [node.slice]


def _i64(e: K.Expr, loc: Loc) -> K.Expr:
    return e if e.type == T.i64 else K.Cast(value=e, type=T.i64, loc=loc)


def _add(a: K.Expr | None, b: K.Expr, loc: Loc) -> K.Expr:
    if a is None:
        return b
    b = _i64(b, loc)
    if isinstance(b, K.Const) and b.value == 0:
        return _i64(a, loc)
    return K.BinOp(op="add", lhs=_i64(a, loc), rhs=b, type=T.i64, loc=loc)


def _mul(a: K.Expr, b: K.Expr, loc: Loc) -> K.Expr:
    return K.BinOp(op="mul", lhs=a, rhs=b, type=T.i64, loc=loc)


def _product(extents: tuple[Extent, ...], loc: Loc) -> K.Expr | None:
    """The product of extents as an i64 expression (None for the empty product, 1)."""
    constant = 1
    terms: list[K.Expr] = []
    for e in extents:
        if isinstance(e, int):
            constant *= e
        else:
            terms.append(_i64(e, loc))
    # constant extents multiply in i64 as computed ones do: the product wraps
    constant = wrap(constant, T.i64)
    result: K.Expr | None = None if constant == 1 else K.Const(value=constant, type=T.i64, loc=loc)
    for t in terms:
        result = t if result is None else _mul(result, t, loc)
    return result
