"""The differential runner's `neighbours` category: stencil-like leaves for the gpu target's row
masks and quads (hpvm_py/backends/triton/rowguard.py, quads.py).

A 1-, 2- or 3-D leaf under a grid of blocks computes its coordinates (x sometimes one to three
past its lane's, as Parboil's) and its element's index `at` (in i64, or wrapped to i32) in
straight-line code, then ends in a guard on its coordinates and the launch's sizes. Inside, it loads `a` at constant offsets from `at` along x (up to three either
way), y (`cols`) and z (`plane`), sometimes at an index loaded from data or in a conditional
expression, combines them into `out[at]`, and sometimes reads `a` again after that store. The
guard keeps every access of the leaf in bounds, so every target must agree bit for bit; its
margins, the blocks' widths (multiples of four or not) and the launch's sizes vary, so that the
gpu target's row masks and quads are proven for some launches and not others.
"""
from __future__ import annotations

from differential.choices import Choices
from differential.generator import TYPES, Program, _Builder, _Scope, grid_of_blocks


def neighbours_program(c: Choices) -> Program:
    a_t, s_t, out_t = (c.pick(TYPES) for _ in range(3))
    dims = c.pick([1, 2, 2, 3])
    block = [c.pick([4, 8, 16, 2, 6, 12]), c.pick([1, 2, 4]), c.pick([1, 2])][:dims]
    coords, axes, extents = ["x", "y", "z"][:dims], "xyz"[:dims], ["cols", "rows", "depth"][:dims]
    scope = _Scope(variables={"s": s_t}, fixed={"x", "y", "z", "at", "plane"})
    body = _Builder(c, scope)
    body.emit(1, "parent = hpvm.get_parent_node(hpvm.get_node())")
    # Parboil's `+ 1` past the blocks' lanes (or more) along x: quads then load from one before
    shift = c.pick([0, 0, 1, 2, 3])
    for d, (coord, size, axis) in enumerate(zip(coords, block, axes)):
        past = f" + {shift}" if d == 0 and shift else ""
        body.emit(1, f"{coord} = hpvm.get_node_instance_id_{axis}(parent) * {size} + hpvm.instance_id({d}){past}")
    body.emit(1, "plane = rows * cols")
    element = {1: "x", 2: "y * cols + x", 3: "(z * rows + y) * cols + x"}[dims]
    wrapped = c.pick([False, False, True])
    body.emit(1, f"at = hpvm.i32({element})" if wrapped else f"at = {element}")
    # offsets: along x, and one row or plane either way
    xs = sorted({c.integer(-3, 3) for _ in range(c.integer(1, 4))})
    steps = [(dx, "") for dx in xs]
    if dims >= 2:
        steps += [(0, f" {sign} cols") for sign in "+-" if c.flag()]
    if dims == 3:
        steps += [(0, f" {sign} plane") for sign in "+-" if c.flag()]
    # margins that keep every access in bounds, some of them wider: row masks are proven or not
    lo = [max(0, -min(xs)) + c.pick([0, 0, 1, 2])]
    hi = [max(0, max(xs)) + c.pick([0, 0, 1, 2])]
    for axis, sign_lo, sign_hi in (("cols", " - cols", " + cols"), ("plane", " - plane", " + plane"))[:dims - 1]:
        lo.append(int(any(s == sign_lo for _, s in steps)) + c.pick([0, 0, 1]))
        hi.append(int(any(s == sign_hi for _, s in steps)) + c.pick([0, 0, 1]))
    terms = []
    for coord, extent, low, high in zip(coords, extents, lo, hi):
        terms += c.pick([[f"{low} <= {coord}", f"{coord} < {extent} - {high}"],
                         [f"{coord} >= {low}", f"{extent} - {high} > {coord}"],
                         [f"{low} <= {coord} < {extent} - {high}"]])
    order = sorted(range(len(terms)), key=lambda _: c.integer(0, 99))
    body.emit(1, f"if {' and '.join(terms[k] for k in order)}:")

    def access(dx: int, along: str) -> str:
        return f"a[at{along}{f' + {dx}' if dx > 0 else f' - {-dx}' if dx < 0 else ''}]"

    loaded = []
    for dx, along in steps:
        name = scope.fresh("n")
        body.emit(2, f"{name} = {access(dx, along)}")
        loaded.append(name)
    scope.variables.update({name: a_t for name in loaded})
    if c.flag():  # an index from data, in the element's row by a floor modulo
        body.emit(2, f"g = hpvm.i64({c.pick(loaded)}) % cols")
        body.emit(2, "nd = a[hpvm.i64(at) - x + g]")
        scope.variables["nd"] = a_t
    if c.flag():  # loads in a conditional expression run under its condition only
        body.emit(2, f"ns = {access(c.pick(xs), '')} if {body.cond(1)} else {access(c.pick(xs), '')}")
        scope.variables["ns"] = a_t
    # every value loaded reaches the store (a load nothing reads would be dropped by Triton)
    folded = f"hpvm.{out_t}({loaded[0]})"
    for name in loaded[1:] + [v for v in ("nd", "ns") if v in scope.variables]:
        folded = f"hpvm.{out_t}({folded} {c.pick(['+', '-', '*'])} hpvm.{out_t}({name}))"
    body.emit(2, f"out[at] = hpvm.{out_t}({folded} {c.pick(['+', '-'])} {body.expr(out_t, 2)})")
    if c.flag():  # read again after the store
        body.emit(2, f"out[at] = hpvm.{out_t}(out[at] + hpvm.{out_t}({access(c.pick(xs), '')}))")
    params = (f"a: In[Ptr[{a_t}]], a_bytes: i64, out: InOut[Ptr[{out_t}]], out_bytes: i64, s: {s_t}, "
              "depth: i64, rows: i64, cols: i64")
    passed = "a=a, a_bytes=a_bytes, out=out, out_bytes=out_bytes, s=s, depth=depth, rows=rows, cols=cols"

    lines = grid_of_blocks(params, "", body.lines, passed, "", block, extents)
    return Program("\n".join(lines), (a_t, a_t, s_t), out_t, True, False,
                   f"{dims}-D blocks of {'x'.join(map(str, block))}, offsets {steps}", tuple(block))
