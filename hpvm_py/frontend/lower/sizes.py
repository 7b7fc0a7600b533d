"""The value a malloc size has where the malloc runs, in terms of the leaf's inputs.

A size may name variables (`nb = k * 8; buf = hpvm.malloc(nb)`). The backends allocate a group's
scratch before its instances run, so the lowering replaces each variable by the value it holds at
the malloc: the expression of its last top-level assignment, or a select between the branches of
an `if` that assigns it. A variable assigned in a loop has no such expression. The result is then
checked for uniformity like any size: a variable assigned from an instance id, or under a
condition that differs between instances, makes the size differ too.
"""
from __future__ import annotations

from dataclasses import dataclass

from ...ir import kernel as K
from ...support.loc import UNKNOWN
from ...types import PtrType, Type

# a longer size expression is refused: `x = x * x` repeated would grow it exponentially
_MAX_NODES = 256


@dataclass(frozen=True)
class Unknown:
    """A variable whose value at the malloc has no expression; `why` says where it was assigned."""

    why: str


Symbolic = K.Expr | Unknown


@dataclass(frozen=True)
class _Scope:
    locals: dict[str, Type]  # start as zero
    params: dict[str, Type]  # start as the node's input (and may be reassigned)


def size_at(nbytes: K.Expr, before: K.Block, locals_: dict[str, Type],
            params: dict[str, Type]) -> tuple[K.Expr, str | None]:
    """nbytes with every variable replaced by its value after the top-level statements `before`
    (a parameter never assigned stays itself).

    Returns the substituted size and, when a variable's value is unknown, why (else None)."""
    scope = _Scope(locals_, params)
    env: dict[str, Symbolic] = {}
    _run(before, env, scope)
    result = _substitute(nbytes, env, scope)
    if isinstance(result, Unknown):
        return nbytes, result.why
    return result, None


def _run(block: K.Block, env: dict[str, Symbolic], scope: _Scope) -> None:
    for stmt in block:
        if isinstance(stmt, K.Assign) and not isinstance(stmt.value, K.Malloc):
            env[stmt.target] = _substitute(stmt.value, env, scope)
        elif isinstance(stmt, K.If):
            _run_if(stmt, env, scope)
        elif isinstance(stmt, (K.For, K.While)):
            for name in K.assignments([stmt]):
                env[name] = Unknown(f"{name!r} is assigned in the loop at line {stmt.loc.line}")


def _run_if(stmt: K.If, env: dict[str, Symbolic], scope: _Scope) -> None:
    cond = _substitute(stmt.cond, env, scope)
    branches = []
    for block in (stmt.then, stmt.orelse):
        branch = dict(env)
        _run(block, branch, scope)
        if not _always_returns(block):  # an instance that returned does not reach the malloc
            branches.append(branch)
    if len(branches) == 1:
        env.update(branches[0])
    elif len(branches) == 2:
        then, orelse = branches
        for name in set(then) | set(orelse):
            a, b = _value(name, then, scope), _value(name, orelse, scope)
            if a is b or a == b:
                env[name] = a
            elif isinstance(cond, Unknown):
                env[name] = cond
            elif isinstance(a, Unknown) or isinstance(b, Unknown):
                env[name] = a if isinstance(a, Unknown) else b
            else:
                env[name] = _bounded(K.Select(cond=cond, if_true=a, if_false=b, type=a.type,
                                              loc=stmt.loc), name)


def _always_returns(block: K.Block) -> bool:
    return any(isinstance(s, K.Return) for s in block) or any(
        isinstance(s, K.If) and _always_returns(s.then) and _always_returns(s.orelse) for s in block)


def _value(name: str, env: dict[str, Symbolic], scope: _Scope) -> Symbolic:
    """A variable's current value: a local never assigned holds its initial zero, a parameter
    never assigned its input."""
    if name in env:
        return env[name]
    if name in scope.locals:
        return K.zero(scope.locals[name], UNKNOWN)
    return K.Var(name=name, type=scope.params[name], loc=UNKNOWN)


def _substitute(e: K.Expr, env: dict[str, Symbolic], scope: _Scope) -> Symbolic:
    if isinstance(e, K.Var):
        if isinstance(e.type, PtrType):
            return e  # a pointer (loads through it make a size non-uniform anyway)
        return e if e.name not in env and e.name in scope.params else _value(e.name, env, scope)
    children = K.child_exprs(e)
    if not children:
        return e
    new = [_substitute(c, env, scope) for c in children]
    for c in new:
        if isinstance(c, Unknown):
            return c
    return _bounded(K.rebuild(e, new), "the size")


def _bounded(e: K.Expr, what: str) -> Symbolic:
    for count, _ in enumerate(K.walk_exprs(e)):
        if count >= _MAX_NODES:
            return Unknown(f"{what} is too long an expression once its variables are replaced")
    return e
