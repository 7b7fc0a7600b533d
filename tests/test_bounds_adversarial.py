"""Adversarial tests of the launch-time bounds proof and the launches that reuse it (hunt 2).

A seeded generator of leaves whose indices the proof must reason about: affine sums of instance
ids (1-D to 3-D grids, a parent's id) and scalar parameters with large and negative coefficients,
i32/u32/i8 wrap-around, shifts, floor `//` and `%` with negative operands, min/max/abs and
conditional expressions, loops with negative or oversized steps left by break/continue/return,
indices loaded from data, pointer offsets and 2-D views, guards and clamps with right and
one-off limits, size arguments smaller than their buffers. Each program is launched several
times in one runtime with the same buffers: new scalars, and (nested programs) a new value of
the count a sibling node computes for the leaf's grid, which makes the relaunch a replay. The
python target, which checks every access itself, is the oracle: where it raises, cpu must raise
an ExecutionError too; elsewhere the buffers must agree; every buffer sits between canaries; and
a launch whose proof held must be one python runs in bounds.
"""
from __future__ import annotations

import random

import numpy as np
import pytest

import hpvm_py as hpvm
from hpvm_py.errors import ExecutionError, FrontendError
from hpvm_py.passes import bounds as bounds_module
from conftest import TARGETS
from differential.data import load
from differential.guard import Guarded
from programs import bounds_replay_grid as grid_prog

NA, NO = 40, 40  # elements of the read buffer `a` and the written buffer `o`
BIG = [2**31, 2**31 - 1, 2**32, 2**32 + 3, -(2**31), 1 << 40, -(1 << 62), (1 << 63) - 1]
PROGRAMS = 40
COMPARED = [t for t in ("cpu",) if t in TARGETS]


class Gen:
    def __init__(self, rng: random.Random, dims: int, nested: bool):
        self.r = rng
        self.lines: list[str] = []
        self.n = 0
        self.dims = dims
        self.nested = nested
        self.atoms = ["x", "p", "q", "i64(w)", "i64(z)"] + (["y"] if dims > 1 else []) + \
            (["zz"] if dims > 2 else []) + (["px"] if nested else [])
        self.locals: list[str] = []
        self.atomics = rng.random() < 0.4

    def fresh(self, pre: str) -> str:
        self.n += 1
        return f"{pre}{self.n}"

    def const(self) -> str:
        r = self.r.random()
        if r < 0.6:
            return str(self.r.randint(-5, 45))
        if r < 0.8:
            return str(self.r.choice([NA, NA - 1, NA + 1, 8, 16, 3, 7]))
        return str(self.r.choice(BIG))

    def atom(self) -> str:
        pool = self.atoms + self.locals
        return self.r.choice(pool) if self.r.random() < 0.75 else self.const()

    def expr(self, d: int = 0) -> str:
        if d > 2 or self.r.random() < 0.3:
            return self.atom()
        k = self.r.randrange(15)
        a, b = self.expr(d + 1), self.expr(d + 1)
        if k == 0:
            return f"({a} + {b})"
        if k == 1:
            return f"({a} - {b})"
        if k == 2:
            return f"({a} * {self.const() if self.r.random() < .7 else b})"
        if k == 3:
            return f"({a} // {self.r.choice([self.const(), b, 'p', '-3', '4'])})"
        if k == 4:
            return f"({a} % {self.r.choice([self.const(), b, 'p', 'q', '-3', '8'])})"
        if k == 5:
            return f"({a} << {self.r.choice(['1', '3', '31', '62', '64', 'p', b])})"
        if k == 6:
            return f"({a} >> {self.r.choice(['1', '3', '31', '63', '65', 'p', b])})"
        if k == 7:
            return f"({a} & {self.r.choice(['7', '31', '-1', str(NA), b])})"
        if k == 8:
            return f"min({a}, {b})"
        if k == 9:
            return f"max({a}, {b})"
        if k == 10:
            return f"abs({a})"
        if k == 11:
            return f"({a} if {self.cond(d + 1)} else {b})"
        if k == 12:
            t = self.r.choice(["i32", "u32", "i8", "u8", "i16"])
            return f"i64(hpvm.{t}({a}))"
        if k == 13:
            return f"(hpvm.i32({a}) * hpvm.i32({b}))"
        return f"(-{a})"

    def cond(self, d: int = 0) -> str:
        a = self.expr(d + 1)
        op = self.r.choice(["<", "<=", ">", ">=", "==", "!="])
        b = self.r.choice([self.const(), self.expr(d + 1), "p", "a_bytes // 8", str(NA)])
        c = f"{a} {op} {b}"
        r = self.r.random()
        if r < 0.15:
            c = f"({c}) and ({self.cond(d + 2)})"
        elif r < 0.25:
            c = f"not ({c})"
        elif r < 0.35:
            c = f"({a}) % {self.r.choice(['2', '4'])} == {self.r.choice(['0', '1'])}"
        return c

    def emit(self, ind: int, s: str) -> None:
        self.lines.append("    " * ind + s)

    def index(self, limit: str) -> tuple[list[str], str]:
        """An index expression maybe guarded/clamped with right or wrong limits."""
        e = self.expr()
        lim = self.r.choice([limit, limit, f"{limit} + 1", f"{limit} - 1", "p", "q"])
        k = self.r.randrange(7)
        if k == 0:
            return [], e
        if k == 1:
            return [], f"min(max({e}, 0), {lim} - 1)"
        if k == 2:
            return [], f"({e}) % {lim}"
        if k == 3:
            return [], f"max(0, min({e}, {lim} - 1))"
        if k == 4:
            return [f"if 0 <= {e} < {lim}:"], e
        if k == 5:
            return [f"if {e} < {lim} and {e} >= {self.r.choice(['0', '-1', '1'])}:"], e
        return [f"if {e} >= 0:", f"if {lim} > {e}:"], e

    def access(self, ind: int) -> None:
        which = self.r.randrange(5)
        lim = self.r.choice(["a_bytes // 8", str(NA), "o_bytes // 8"]) if which < 2 else \
            self.r.choice(["o_bytes // 8", str(NO)])
        guards, e = self.index(lim)
        t = self.fresh("t")
        self.emit(ind, f"{t} = {e}")
        e = t
        for g in guards:
            self.emit(ind, g)
            ind += 1
        if which < 2:
            self.emit(ind, f"acc += a[{e}]")
        elif which < 4:
            if self.atomics:
                self.emit(ind, f"hpvm.atomic_add(o, {e}, 1)")
            else:
                self.emit(ind, f"o[{e}] = 3")
        elif self.atomics:
            self.emit(ind, f"hpvm.atomic_add(o, {e}, 1)")
        else:
            self.emit(ind, f"o[{e}] = 4 - 1")

    def stmt(self, ind: int, depth: int, in_loop: bool) -> None:
        k = self.r.randrange(12)
        if k <= 3:
            self.access(ind)
        elif k == 4:
            v = self.fresh("v")
            self.emit(ind, f"{v} = {self.expr()}")
            self.locals.append(v)
        elif k == 5 and depth < 2:
            j = self.fresh("j")
            s, e = self.expr(1), self.expr(1)
            st = self.r.choice(["1", "2", "-1", "-3", "7", "100", "p", "-p", "q"])
            c = self.fresh("c")
            self.emit(ind, f"{c} = 0")
            self.emit(ind, f"for {j} in range({s}, {e}, {st}):")
            self.emit(ind + 1, f"{c} += 1")
            self.emit(ind + 1, f"if {c} > 30:")
            self.emit(ind + 2, "break")
            self.locals.append(j)
            for _ in range(self.r.randint(1, 2)):
                self.stmt(ind + 1, depth + 1, True)
            if self.r.random() < 0.4:
                self.emit(ind + 1, f"if {self.cond()}:")
                self.emit(ind + 2, self.r.choice(["break", "continue", "return"]))
            self.access(ind)  # after the loop: j keeps its last value
        elif k == 6 and depth < 2:
            j = self.fresh("j")
            self.emit(ind, f"{j} = {self.expr(1)}")
            self.locals.append(j)
            lim = self.r.choice(["a_bytes // 8", str(NA), "p", self.expr(1)])
            c = self.fresh("c")
            self.emit(ind, f"{c} = 0")
            self.emit(ind, f"while {j} < {lim} and {c} < 30:")
            self.emit(ind + 1, f"{c} += 1")
            if self.r.random() < 0.5:
                self.emit(ind + 1, f"if {self.cond()}:")
                self.emit(ind + 2, "break")
            self.stmt(ind + 1, depth + 1, True)
            self.emit(ind + 1, f"{j} += {self.r.choice(['1', '2', '3', 'q', '-1'])}")
            self.access(ind)
        elif k == 7 and depth < 2:
            self.emit(ind, f"if {self.cond()}:")
            self.stmt(ind + 1, depth + 1, in_loop)
            if self.r.random() < 0.3:
                self.emit(ind + 1, self.r.choice(["return", "break" if in_loop else "return"]))
            self.emit(ind, "else:")
            self.stmt(ind + 1, depth + 1, in_loop)
        elif k == 8:  # a pointer offset
            v = self.fresh("row")
            self.emit(ind, f"{v} = a + ({self.expr(1)})")
            guards, e = self.index(self.r.choice(["8", "a_bytes // 8", str(NA)]))
            for g in guards:
                self.emit(ind, g)
                ind += 1
            self.emit(ind, f"acc += {v}[{e}]")
        elif k == 9:  # a 2-D view
            v = self.fresh("m")
            rows, cols = self.r.choice([("5", "8"), ("8", "5"), ("p", "8"), ("4", "q"), ("6", "7")])
            self.emit(ind, f"{v} = hpvm.view({'a' if self.atomics else 'o'}, ({rows}, {cols}))")
            i1, i2 = self.expr(1), self.expr(1)
            k2 = self.r.randrange(3)
            if k2 == 0:
                self.emit(ind, f"if 0 <= {i1} < {rows} and 0 <= {i2} < {cols}:")
                ind += 1
            elif k2 == 1:
                i1, i2 = f"min(max({i1}, 0), {rows} - 1)", f"min(max({i2}, 0), {cols} - 1)"
            self.emit(ind, f"acc += {v}[{i1}, {i2}]" if self.atomics else f"{v}[{i1}, {i2}] = 3")
        elif k == 10:  # an index from data
            t = self.fresh("d")
            self.emit(ind, f"{t} = a[x % 8]")
            self.locals.append(t)
            self.access(ind)
        else:
            v = self.fresh("v")
            self.emit(ind, f"{v} = {self.r.choice(['x', 'p', 'q'])}")
            self.locals.append(v)
            limit = self.r.choice([str(NA), 'p', 'a_bytes // 8', '0'])
            self.emit(ind, f"if {v} {self.r.choice(['<', '<=', '>='])} {limit}:")
            self.emit(ind + 1, f"{v} = {self.expr(1)}")
            self.access(ind)

    def source(self, nstmts: int) -> str:
        body_ids = ["    me = hpvm.get_node()", "    x = hpvm.get_node_instance_id_x(me)",
                    "    nx = hpvm.get_num_node_instances_x(me)"]
        flat = "x"
        if self.dims > 1:
            body_ids += ["    y = hpvm.get_node_instance_id_y(me)",
                         "    ny = hpvm.get_num_node_instances_y(me)"]
            flat = "x + nx * y"
        if self.dims > 2:
            body_ids += ["    zz = hpvm.get_node_instance_id_z(me)",
                         "    nz = hpvm.get_num_node_instances_z(me)"]
            flat = "x + nx * (y + ny * zz)"
        nprod = {1: "nx", 2: "nx * ny", 3: "nx * ny * nz"}[self.dims]
        if self.nested:
            body_ids += ["    par = hpvm.get_parent_node(me)", "    px = hpvm.get_node_instance_id_x(par)"]
            flat = f"({flat}) + {nprod} * px"
        body_ids.append("    acc = 0")
        body_ids.append(f"    r[{flat}] = 0")
        for _ in range(nstmts):
            self.stmt(1, 0, False)
        self.emit(1, f"r[{flat}] = acc")
        grid = {1: "gx", 2: "(gx, gy)", 3: "(gx, gy, gz)"}[self.dims]
        params = ("a: In[Ptr[i64]], a_bytes: i64, o: InOut[Ptr[i64]], o_bytes: i64, "
                  "r: InOut[Ptr[i64]], r_bytes: i64, p: i64, q: i64, w: i32, z: u32")
        passed = ("a=a, a_bytes=a_bytes, o=o, o_bytes=o_bytes, r=r, r_bytes=r_bytes, p=p, q=q, w=w, z=z")
        src = ["import hpvm_py as hpvm", "from hpvm_py import In, Out, InOut, Ptr, i64, i32, u32", "",
               "@hpvm.leaf", f"def kern({params}):", *body_ids, *self.lines, ""]
        if self.nested:  # the leaf's x extent computed by a sibling of its parent (the first
            # element of s: a relaunch with new contents is a replay)
            src += ["@hpvm.leaf", "def count(s: In[Ptr[i64]], s_bytes: i64) -> i64:", "    return s[0]", "",
                    "@hpvm.graph", f"def mid({params}, gx: i64, gy: i64, gz: i64):",
                    f"    hpvm.node(kern, grid={grid}, {passed})", "",
                    "@hpvm.graph", f"def root({params}, s: In[Ptr[i64]], s_bytes: i64, gy: i64, gz: i64, "
                    "G: i64):",
                    "    c = hpvm.node(count, s=s, s_bytes=s_bytes)",
                    f"    hpvm.node(mid, grid=G, {passed}, gx=hpvm.all_to_all(c.out[0]), gy=gy, gz=gz)", ""]
        else:
            src += ["@hpvm.graph", f"def root({params}, gx: i64, gy: i64, gz: i64, G: i64):",
                    f"    hpvm.node(kern, grid={grid}, {passed})", ""]
        return "\n".join(src)


def launches(rng: random.Random, dims: int, nested: bool) -> list[dict]:
    """Launch settings: a few scalar sets, each launched with several computed counts (the first
    element of `s`) where the program is nested, so that the later ones are replays."""
    out = []
    for _ in range(3):
        base = dict(gy=rng.choice([1, 2, 3]) if dims > 1 else 1, gz=rng.choice([1, 2]) if dims > 2 else 1,
                    G=rng.choice([1, 2, 3]) if nested else 1,
                    p=rng.choice([0, 1, 3, 8, 39, 40, 41, -1, -8, 2**31, -(2**31), 2**32 + 1, 1 << 62]),
                    q=rng.choice([0, 1, 5, 39, 40, -3, 7, 2**33]),
                    w=rng.choice([0, 1, -1, 7, 40, 2**31 - 1, -(2**31)]),
                    z=rng.choice([0, 1, 40, 2**32 - 1, 2**31]),
                    shrink_a=rng.choice([0, 0, 1, 3, 8]), shrink_o=rng.choice([0, 0, 1, 5]))
        for gx in rng.sample([0, 1, 2, 3, 5, 7], 3 if nested else 1):
            out.append(dict(base, gx=gx))
    return out


class Buffers:
    """One program's buffers, kept for all its launches (the same objects: replays)."""

    def __init__(self, seed: int):
        values = np.random.default_rng(seed)
        self.a0 = values.integers(-5, 50, NA).astype(np.int64)
        self.a0[:3] = [2**40, -1, NA]
        self.o0 = values.integers(0, 100, NO).astype(np.int64)
        self.a, self.o = Guarded(self.a0), Guarded(self.o0)
        self.r, self.s = Guarded(np.zeros(7 * 3 * 2 * 3, np.int64)), Guarded(np.zeros(1, np.int64))

    def launch(self, root, nested: bool, cfg: dict) -> tuple[str | None, np.ndarray, np.ndarray]:
        self.a.view[:], self.o.view[:], self.r.view[:] = self.a0, self.o0, -77
        self.s.view[0] = cfg["gx"]
        head = (self.a.view, self.a.view.nbytes - 8 * cfg["shrink_a"], self.o.view,
                self.o.view.nbytes - 8 * cfg["shrink_o"], self.r.view, self.r.view.nbytes,
                cfg["p"], cfg["q"], cfg["w"], cfg["z"])
        grid = (self.s.view, self.s.view.nbytes) if nested else (cfg["gx"],)
        error = None
        try:
            hpvm.wait(hpvm.launch(root, *head, *grid, cfg["gy"], cfg["gz"], cfg["G"]))
        except ExecutionError as e:
            error = str(e).splitlines()[0]
        assert self.a.intact() and self.o.intact() and self.r.intact() and self.s.intact()
        return error, self.o.view.copy(), self.r.view.copy()


def program(seed: int) -> tuple[str, int, bool]:
    rng = random.Random(seed)
    dims = rng.choice([1, 1, 2, 3])
    nested = rng.random() < 0.5
    return Gen(rng, dims, nested).source(rng.randint(1, 4)), dims, nested


@pytest.mark.skipif(not COMPARED, reason="the cpu target is not among HPVM_TEST_TARGETS")
@pytest.mark.parametrize("seed", range(PROGRAMS))
def test_generated_indices_are_proven_only_when_in_bounds(seed: int, monkeypatch) -> None:
    source, dims, nested = program(seed)
    module = load(source, f"bounds_adv_{seed}")
    try:
        hpvm.compile(module.root, "python")
    except FrontendError:
        return  # (a constant index outside a constant view extent, a literal beyond i64)
    cfgs = launches(random.Random(seed + 1000), dims, nested)
    results: dict[str, list] = {}
    proofs: list[bool] = []
    holds = bounds_module.BoundsProof.holds

    def recorded(self, *args, **kwargs):
        proven = holds(self, *args, **kwargs)
        if self.leaf.name.startswith("kern"):  # (not the count leaf's)
            proofs.append(proven)
        return proven

    for target in ["python", *COMPARED]:
        buffers = Buffers(seed)
        results[target] = []
        with hpvm.runtime(target):
            for cfg in cfgs:
                proofs.clear()
                with monkeypatch.context() as m:
                    m.setattr(bounds_module.BoundsProof, "holds", recorded)
                    got = buffers.launch(module.root, nested, cfg)
                results[target].append((got, any(proofs)))
    for i, cfg in enumerate(cfgs):
        (want, _), = [results["python"][i]]
        for target in COMPARED:
            got, proven = results[target][i]
            where = f"seed {seed}, launch {i} {cfg}, {target}"
            assert not (proven and want[0] is not None), f"{where}: proven, but python says {want[0]}"
            assert (got[0] is None) == (want[0] is None), f"{where}: {got[0]} where python: {want[0]}"
            if want[0] is None:
                assert np.array_equal(got[1], want[1]) and np.array_equal(got[2], want[2]), where


# -- a leaf's grid sized by a value a sibling computes (a replay kept the first launch's grid) ----

@pytest.mark.parametrize("target", TARGETS)
def test_a_grid_sized_by_a_computed_count_is_not_replayed_with_the_old_grid(target: str) -> None:
    src = Guarded(np.zeros(1, np.int64))
    out = Guarded(np.zeros(8, np.int64))
    args = (src.view, src.view.nbytes, out.view, out.view.nbytes)
    with hpvm.runtime(target):
        src.view[0] = 4
        hpvm.wait(hpvm.launch(grid_prog.root, *args))
        assert out.view.tolist() == [1, 2, 3, 4, 0, 0, 0, 0]
        src.view[0] = 6  # same buffers and integers: a replay on cpu before the fix, over 4 instances
        hpvm.wait(hpvm.launch(grid_prog.root, *args))
        assert out.view.tolist() == [1, 2, 3, 4, 5, 6, 0, 0]
        src.view[0] = 100  # instances 8 to 99 store out of bounds: the launch must fail at the store
        with pytest.raises(ExecutionError, match="out-of-bounds store to out") as info:
            hpvm.wait(hpvm.launch(grid_prog.root, *args))
        assert info.value.loc.line == grid_prog.STORE_LINE
        src.view[0] = 3
        out.view[:] = 0
        hpvm.wait(hpvm.launch(grid_prog.root, *args))
        assert out.view.tolist() == [1, 2, 3, 0, 0, 0, 0, 0]
    assert src.intact() and out.intact()
