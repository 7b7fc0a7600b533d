"""Symbolic graph parameters: what an internal node may do with its inputs while its body is
traced (bind them, and combine integer parameters into instance counts); everything else is
computation and is rejected."""
from __future__ import annotations

import operator
from typing import Any

import numpy as np

from ..errors import VerificationError
from ..ir import dfg as D
from ..ir import kernel as K
from ..support.loc import Loc
from ..types import ScalarType
from .callsite import caller_loc


def _structure_error(what: str, loc: Loc | None = None) -> VerificationError:
    return VerificationError(f"{what}: an internal node only builds structure (create nodes, edges "
                             "and binds); move computation into a leaf",
                             loc or caller_loc(), rule="internal-nodes-only-structure")


class Symbolic:
    """Behaviour shared by graph-parameter symbols and node outputs while a graph body is traced:
    everything but structure is rejected."""

    builder: Any  # the GraphBuilder tracing the graph

    def _what(self) -> str:
        raise NotImplementedError

    def __bool__(self) -> bool:
        raise _structure_error(f"branching on {self._what()}")

    def __index__(self) -> int:
        raise _structure_error(f"{self._what()} has no value while the graph is built; using it "
                               "as a Python number")

    __int__ = __index__

    def __float__(self) -> float:
        raise _structure_error(f"using {self._what()} as a Python number")

    def __getitem__(self, key: Any) -> Any:
        raise _structure_error(f"indexing {self._what()}")

    def __setitem__(self, key: Any, value: Any) -> None:
        raise _structure_error(f"storing through {self._what()}")

    def __iter__(self) -> Any:
        raise _structure_error(f"iterating over {self._what()}")

    def __len__(self) -> int:
        raise _structure_error(f"len() of {self._what()}")

    def _compare(self, other: Any) -> Any:
        raise _structure_error(f"comparing {self._what()}")

    __lt__ = __le__ = __gt__ = __ge__ = __eq__ = __ne__ = _compare
    __hash__ = object.__hash__

    def _dim(self) -> D.DimExpr:
        raise _structure_error(f"arithmetic on {self._what()}")

    def as_count(self, what: str) -> D.DimExpr:
        """The symbol as (part of) an instance count; `what` names the count in errors."""
        return self._dim()

    def _arith(op: str, reflected: bool = False):  # type: ignore[misc]
        def method(self: "Symbolic", other: Any) -> "DimSym":
            lhs = self._dim()
            rhs = as_dim(other, self.builder, f"the other operand of {op}")
            expr = D.DimBin(op, rhs, lhs) if reflected else D.DimBin(op, lhs, rhs)
            return DimSym(self.builder, expr)
        return method

    __add__, __radd__ = _arith("+"), _arith("+", True)
    __sub__, __rsub__ = _arith("-"), _arith("-", True)
    __mul__, __rmul__ = _arith("*"), _arith("*", True)
    __floordiv__, __rfloordiv__ = _arith("//"), _arith("//", True)
    __mod__, __rmod__ = _arith("%"), _arith("%", True)

    def _other(self, *args: Any) -> Any:
        raise _structure_error(f"this operation on {self._what()}")

    __truediv__ = __rtruediv__ = __pow__ = __rpow__ = __neg__ = __and__ = __or__ = _other
    __xor__ = __lshift__ = __rshift__ = __invert__ = __abs__ = _other
    # the rest of Python's numeric protocol: left undefined, each would raise a TypeError that
    # reaches the user as "the body raised TypeError" with no rule
    __pos__ = __rand__ = __ror__ = __rxor__ = __rlshift__ = __rrshift__ = _other
    __matmul__ = __rmatmul__ = __divmod__ = __rdivmod__ = __round__ = __trunc__ = _other
    __floor__ = __ceil__ = _other

    def __format__(self, spec: str) -> str:
        if spec:  # f"{n:d}" formats a value; f"{n}" only shows the symbol
            raise _structure_error(f"formatting {self._what()}")
        return repr(self)

    # NumPy's ufuncs (np.sqrt, hpvm.math.*, np.int64(2) * n) hand their operands here: the
    # integer arithmetic that instance counts allow, with a NumPy integer as its Python value,
    # and anything else refused as computation
    _UFUNC_OPERATORS = {np.add: operator.add, np.subtract: operator.sub, np.multiply: operator.mul,
                        np.floor_divide: operator.floordiv, np.remainder: operator.mod}

    def __array_ufunc__(self, ufunc: Any, method: str, *inputs: Any, **kwargs: Any) -> Any:
        op = self._UFUNC_OPERATORS.get(ufunc)
        if op is None or method != "__call__" or kwargs or len(inputs) != 2 or \
                any(isinstance(x, np.ndarray) for x in inputs):
            raise _structure_error(f"NumPy's {getattr(ufunc, '__name__', ufunc)} on {self._what()}")
        # a NumPy scalar as its Python number (never handed back to NumPy, which would call this
        # again): an int joins the expression, a float is refused as a count by as_dim
        a, b = (x.item() if isinstance(x, np.generic) else x for x in inputs)
        return op(a, b)

    def refuse_host_use(self, what: str) -> VerificationError:
        """The error for `what` (a host-side cast such as hpvm.f32(n)) applied to the symbol: the
        types module, below the front end, asks any value it cannot convert for one."""
        return _structure_error(f"{what} of {self._what()}")


class Sym(Symbolic):
    """A parameter of the graph being traced."""

    def __init__(self, builder: Any, index: int, param: K.Param):
        self.builder = builder
        self.index = index
        self.param = param
        self._dim_expr: D.DimExpr | None = None

    def _what(self) -> str:
        return f"graph parameter {self.param.name!r}"

    def _dim(self) -> D.DimExpr:
        if self._dim_expr is None:
            t = self.param.type
            if not (isinstance(t, ScalarType) and t.is_int and not t.is_bool):
                raise _structure_error(f"arithmetic on {self._what()} of type {t} (instance counts are "
                                       "integer parameters)")
            self._dim_expr = D.DimParam(self.param.name)
        return self._dim_expr

    def __repr__(self) -> str:
        return f"<graph parameter {self.param.name}: {self.param.type}>"


class DimSym(Symbolic):
    """An instance-count expression of graph parameters."""

    def __init__(self, builder: Any, expr: D.DimExpr):
        self.builder = builder
        self.expr = expr

    def _what(self) -> str:
        return f"the expression {D.dim_text(self.expr)}"

    def _dim(self) -> D.DimExpr:
        return self.expr

    def __repr__(self) -> str:
        return f"<instance count {D.dim_text(self.expr)}>"


def as_dim(value: Any, builder: Any, what: str) -> D.DimExpr:
    """An instance count as a DimExpr; `what` names it in errors."""
    if type(value) is int:
        return D.DimConst(value)
    if isinstance(value, np.integer):  # a NumPy integer (N = np.int64(8)) counts by its value
        value = value.item()
    if isinstance(value, (bool, np.bool_)):
        raise VerificationError(f"{what} must be an integer, not a bool", caller_loc(),
                                rule="instance-counts")
    if isinstance(value, int):
        return D.DimConst(value)
    if isinstance(value, Symbolic):
        if value.builder is not builder:
            raise VerificationError(f"{what} uses a parameter of another graph", caller_loc(),
                                    rule="edge-siblings")
        if isinstance(value, Sym) and not (isinstance(value.param.type, ScalarType) and
                                           value.param.type.is_int and not value.param.type.is_bool):
            raise VerificationError(f"{what} is graph parameter {value.param.name!r} of type "
                                    f"{value.param.type}; instance counts are integer parameters",
                                    caller_loc(), rule="instance-counts")
        return value.as_count(what)
    raise VerificationError(f"{what} must be an int or an expression of integer graph parameters "
                            f"(+ - * // %), not {type(value).__name__}", caller_loc(),
                            rule="instance-counts")
