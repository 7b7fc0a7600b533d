"""Declarations of LLVM intrinsics and C library functions used by generated code."""
from __future__ import annotations

from llvmlite import ir


def suffix(t: ir.Type) -> str:
    """The overload suffix LLVM uses for a type: f32, f64, i32, ..."""
    if isinstance(t, ir.FloatType):
        return "f32"
    if isinstance(t, ir.DoubleType):
        return "f64"
    if isinstance(t, ir.HalfType):
        return "f16"
    if isinstance(t, ir.IntType):
        return f"i{t.width}"
    raise TypeError(f"no intrinsic suffix for {t}")


def declare(module: ir.Module, name: str, ret: ir.Type, args: list[ir.Type],
            pure: bool = False) -> ir.Function:
    """The function `name` of the module, declared on first use.

    `pure` marks a C math function as touching no memory: we never read errno, and without the
    mark LLVM would have to assume the call writes memory, which stops loop vectorisation.
    """
    existing = module.globals.get(name)
    if isinstance(existing, ir.Function):
        return existing
    fn = ir.Function(module, ir.FunctionType(ret, args), name=name)
    if pure:
        fn.attributes.add("nounwind")
        fn.attributes.add("readnone")  # LLVM reads this old spelling as memory(none)
    return fn


def overloaded(module: ir.Module, base: str, ret: ir.Type, args: list[ir.Type],
               overload: list[ir.Type] | None = None) -> ir.Function:
    """An overloaded intrinsic such as llvm.sqrt.f32 (suffixes from `overload`, default ret)."""
    types = overload if overload is not None else [ret]
    name = base + "".join("." + suffix(t) for t in types)
    return declare(module, name, ret, args)
