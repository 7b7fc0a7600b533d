"""Claims of docs/language.md that only examples tested, now tried by seeded generators against
oracles written out here (exact Python integers, never hpvm_py's own helpers), on python and cpu:

- `for v in range(start, stop, step)` has Python's semantics (language.md, "Variables, loops,
  returns"): the trip count is fixed before the first iteration, assigning `v`, `stop` or `step`
  in the body changes nothing, `v` keeps its last value after the loop (its old value when the
  loop runs no iteration), and a zero step runs none. Bounds come from memory, at the extremes of
  each type, where a trip count computed as `(stop - start) / step` in the type would wrap.
- A scalar launch or push argument converts as a node constant does ("Host code"): an int that
  fits the integer parameter is passed exactly, anything else (beyond the range, a float) is a
  LaunchError; an int or float for a float parameter is rounded once, beyond the range to inf,
  an int beyond every float is a LaunchError; an i1 takes True/False/0/1.
- An integer expression on a node input ("Expressions on inputs") is evaluated exactly, `//` and
  `%` flooring with a zero divisor giving 0, and a value outside the input's type fails the launch
  with an ExecutionError; parameters of every integer type, values at their extremes.
- `malloc` scratch is zeroed ("Instances, edges and binds") for every group and every launch,
  also when a relaunch or a stream item reuses the packed launch with another size.
- A size argument larger than its buffer is refused before anything runs ("Memory"), and so is a
  negative one; sizes up to the buffer's run, the leaf seeing floor(size / itemsize) elements.
- `and`, `or` and conditional expressions are lazy: a guarded access with an index loaded from
  memory never reads out of bounds (no ExecutionError on the checked kernel), in `if`, `while`,
  conditional expressions and values.
"""
from __future__ import annotations

import ast
import math
import random
from fractions import Fraction
from types import ModuleType

import numpy as np
import pytest

import hpvm_py as hpvm
from conftest import TARGETS
from differential.data import load
from hpvm_py.errors import ExecutionError, HPVMError, LaunchError

HOST_TARGETS = [t for t in ("python", "cpu") if t in TARGETS]
INTS: dict[str, tuple[int, bool]] = {"i8": (8, True), "i16": (16, True), "i32": (32, True),
                                     "i64": (64, True), "u8": (8, False), "u16": (16, False),
                                     "u32": (32, False), "u64": (64, False)}


def int_range(t: str) -> tuple[int, int]:
    bits, signed = INTS[t]
    return (-2 ** (bits - 1), 2 ** (bits - 1) - 1) if signed else (0, 2 ** bits - 1)


def wrap(x: int, t: str) -> int:
    """Two's complement wrap of an exact integer into type t."""
    bits, signed = INTS[t]
    x %= 2 ** bits
    return x - 2 ** bits if signed and x >= 2 ** (bits - 1) else x


def numpy_int(t: str) -> np.dtype:
    return np.dtype(("int" if INTS[t][1] else "uint") + str(INTS[t][0]))


# -- range loops ---------------------------------------------------------------------------------

RANGE_SOURCE = '''
import hpvm_py as hpvm
from hpvm_py import In, Out, Ptr, i64, {T}


@hpvm.leaf
def loop(p: In[Ptr[{T}]], p_bytes: i64, out: Out[Ptr[i64]], out_bytes: i64):
    i = hpvm.instance_id(0)
    start = p[i * 4]
    stop = p[i * 4 + 1]
    step = p[i * 4 + 2]
    cut = p[i * 4 + 3]
    v = {T}({init})
    count = 0
    acc = 0
    for v in range({args}):
{body}
    out[i * 3] = count
    out[i * 3 + 1] = i64(v)
    out[i * 3 + 2] = acc


@hpvm.graph
def root(p: In[Ptr[{T}]], p_bytes: i64, out: Out[Ptr[i64]], out_bytes: i64, n: i64):
    hpvm.node(loop, grid=n, p=p, p_bytes=p_bytes, out=out, out_bytes=out_bytes)
'''
# statements a body may hold besides the counter; BREAK / CONTINUE are data-dependent exits
RANGE_STATEMENTS = ["v = v + 5", "stop = stop + 1", "step = 0", "start = v", "BREAK", "CONTINUE"]
RANGE_FORMS = ["start, stop, step", "start, stop", "stop"]


def range_body(statements: list[str]) -> str:
    lines = []
    for s in statements:
        if s == "BREAK":
            lines += ["        if count >= cut:", "            break"]
        elif s == "CONTINUE":
            lines += ["        if (v & 3) == 1:", "            continue"]
        else:
            lines.append("        " + s)
    return "\n".join(lines)


def range_oracle(form: str, statements: list[str], t: str, init: int, row: tuple[int, ...]) -> tuple[int, int, int]:
    """What Python computes: range() of exact integers, arithmetic wrapped to each variable's type
    (count and acc are i64, v and the bounds are t)."""
    start, stop, step, cut = row
    env = {"start": start, "stop": stop, "step": step, "v": init, "count": 0, "acc": 0}
    bounds = [env[name.strip()] for name in form.split(",")]
    for value in ([] if len(bounds) == 3 and bounds[2] == 0 else range(*bounds)):
        env["v"] = value
        for s in statements:
            if s == "BREAK":
                if env["count"] >= cut:
                    return env["count"], env["v"], env["acc"]
            elif s == "CONTINUE":
                if (env["v"] & 3) == 1:
                    break
            elif s == "count += 1":
                env["count"] = wrap(env["count"] + 1, "i64")
            elif s == "acc = acc * 31 + v":
                env["acc"] = wrap(env["acc"] * 31 + env["v"], "i64")
            else:
                name, expression = s.split(" = ")
                env[name] = wrap(eval(expression, {}, dict(env)), t)
    return env["count"], env["v"], env["acc"]


@pytest.mark.parametrize("target", HOST_TARGETS)
@pytest.mark.parametrize("seed", range(6))
def test_range_loops_have_pythons_semantics_at_the_extremes(target: str, seed: int) -> None:
    rng = random.Random(seed)
    t = rng.choice(list(INTS))
    lo, hi = int_range(t)
    extremes = [lo, lo + 1, lo // 2, -7, -1, 0, 1, 2, 3, hi // 2, hi - 1, hi]
    steps = [0, 1, -1, 2, -2, 3, -3, hi // 2, lo // 2, hi, lo, lo + 1, hi // 4 + 7]
    for _ in range(3):
        form = rng.choice(RANGE_FORMS)
        extra = rng.sample(RANGE_STATEMENTS, rng.randint(1, 4)) + ["acc = acc * 31 + v"]
        rng.shuffle(extra)
        # counted and bounded first, so that neither `continue` nor a huge trip count can run away
        statements = ["count += 1", "BREAK"] + extra
        init = rng.choice([0, 7, -3])
        module = load(RANGE_SOURCE.format(T=t, init=init, args=form, body=range_body(statements)))
        rows = []
        for _ in range(48):
            start = wrap(rng.choice(extremes + [rng.randint(-20, 20)]), t)
            stop = wrap(rng.choice(extremes + [rng.randint(-20, 20), start + rng.randint(-5, 5)]), t)
            step = wrap(rng.choice(steps + [rng.randint(-4, 4)]), t)
            rows.append((start, stop, step, rng.randint(1, 12)))
        p = np.array(rows, numpy_int(t)).ravel()
        out = np.zeros(len(rows) * 3, np.int64)
        with hpvm.runtime(target):
            hpvm.wait(hpvm.launch(module.root, p, p.nbytes, out, out.nbytes, len(rows)))
        for k, row in enumerate(rows):
            count, v, acc = range_oracle(form, statements, t, wrap(init, t), row)
            want = (count, wrap(v, "i64"), acc)
            assert tuple(int(x) for x in out[k * 3:k * 3 + 3]) == want, \
                f"{target} {t} range({form}) body {statements} on {row}"


# -- scalar launch and push arguments ---------------------------------------------------------------

PUT_SOURCE = '''
import hpvm_py as hpvm
from hpvm_py import Out, Ptr, i64, {T}


@hpvm.leaf
def put(out: Out[Ptr[{T}]], out_bytes: i64, k: {T}):
    out[0] = k


@hpvm.graph
def root(out: Out[Ptr[{T}]], out_bytes: i64, k: {T}):
    hpvm.node(put, out=out, out_bytes=out_bytes, k=k)


@hpvm.graph
def stream_root(out: Out[Ptr[{T}]], out_bytes: i64, k: {T}):
    hpvm.node(put, out=hpvm.streaming(out), out_bytes=hpvm.streaming(out_bytes), k=hpvm.streaming(k))
'''
FLOAT_FORMATS = {"f16": (11, -14, 15), "bf16": (8, -126, 127), "f32": (24, -126, 127), "f64": (53, -1022, 1023)}


def round_once(x: Fraction, t: str) -> float:
    """The value of float type t nearest to x, ties to even; beyond the range an infinity."""
    if x == 0:
        return 0.0
    digits, emin, emax = FLOAT_FORMATS[t]
    m = abs(x)
    e = math.floor(math.log2(m.numerator)) - math.floor(math.log2(m.denominator))
    while Fraction(2) ** e > m:
        e -= 1
    while Fraction(2) ** (e + 1) <= m:
        e += 1
    quantum = Fraction(2) ** (max(e, emin) - digits + 1)
    q, r = divmod(m, quantum)
    if r > quantum / 2 or (r == quantum / 2 and q % 2 == 1):
        q += 1
    value = q * quantum
    largest = (2 - Fraction(2) ** (1 - digits)) * Fraction(2) ** emax
    result = math.inf if value > largest else float(value)
    return -result if x < 0 else result


def pass_scalar(module: ModuleType, target: str, dtype: np.dtype, value: object, streamed: bool) -> tuple[HPVMError | None, np.ndarray]:
    out = np.zeros(1, dtype)
    try:
        with hpvm.runtime(target):
            if streamed:
                h = hpvm.launch(module.stream_root, stream=True)
                hpvm.push(h, out, out.nbytes, value)
                hpvm.pop(h)
                hpvm.wait(h)
            else:
                hpvm.wait(hpvm.launch(module.root, out, out.nbytes, value))
    except LaunchError as error:
        return error, out
    return None, out


def int_candidates(t: str, rng: random.Random) -> list[object]:
    lo, hi = int_range(t)
    plain: list[int] = [lo, hi, lo - 1, hi + 1, 0, -1, 2 ** 63, 2 ** 64, -2 ** 63 - 1, 2 ** 64 - 1,
                        rng.randint(lo, hi), rng.randint(-2 ** 70, 2 ** 70)]
    typed: list[object] = []
    for v in plain:  # the same values as NumPy scalars of every type that holds them
        for dt in (np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64):
            if np.iinfo(dt).min <= v <= np.iinfo(dt).max:
                typed.append(dt(v))
    return plain + typed + [1.0, np.float32(2.0), np.float64(-0.0)]


@pytest.mark.parametrize("target", HOST_TARGETS)
@pytest.mark.parametrize("t", list(INTS))
def test_integer_arguments_pass_exactly_or_are_refused(target: str, t: str) -> None:
    rng = random.Random(hash(t) & 0xFFFF)
    module = load(PUT_SOURCE.format(T=t))
    lo, hi = int_range(t)
    for value in int_candidates(t, rng):
        fits = not isinstance(value, (float, np.floating)) and lo <= int(value) <= hi
        for streamed in (False, True):
            error, out = pass_scalar(module, target, numpy_int(t), value, streamed)
            assert (error is None) == fits, f"{target} {t} {value!r} streamed={streamed}: {error}"
            if fits:
                assert int(out[0]) == int(value), f"{target} {t} {value!r} streamed={streamed}"


@pytest.mark.parametrize("target", HOST_TARGETS)
@pytest.mark.parametrize("t", ["f16", "bf16", "f32", "f64"])
def test_float_arguments_round_once_or_are_refused(target: str, t: str) -> None:
    module = load(PUT_SOURCE.format(T=t))
    values: list[object] = [0, 1, 3, 2 ** 11 + 1, 2 ** 24 + 1, 2 ** 53 + 1, 2 ** 128, 2 ** 1023 * 3 // 2,
                            2 ** 1024, -2 ** 1024, 10 ** 400, 1e300, -1e300, 0.1, -0.0, math.nan, math.inf,
                            np.float64(1e39), np.float32(0.1), np.int64(2 ** 62 + 1), np.uint64(2 ** 64 - 1),
                            65520, 65519.99, -(2 ** 24 + 3)]
    dtype = np.dtype(np.uint16) if t == "bf16" else np.dtype({"f16": "float16", "f32": "float32", "f64": "float64"}[t])
    for value in values:
        refused = isinstance(value, (int, np.integer)) and abs(int(value)) >= 2 ** 1024
        exact = Fraction(int(value)) if isinstance(value, (int, np.integer)) else None
        if refused:
            want = math.nan
        elif exact is None and (math.isnan(float(value)) or math.isinf(float(value)) or float(value) == 0.0):
            want = float(value)
        else:
            want = round_once(exact if exact is not None else Fraction(float(value)), t)
        for streamed in (False, True):
            error, out = pass_scalar(module, target, dtype, value, streamed)
            assert (error is not None) == refused, f"{target} {t} {value!r} streamed={streamed}: {error}"
            if refused:
                continue
            got = float((out.astype(np.uint32) << 16).view(np.float32)[0]) if t == "bf16" else float(out[0])
            if math.isnan(want):
                assert math.isnan(got), f"{target} {t} {value!r}"
            else:
                assert got == want and math.copysign(1, got) == math.copysign(1, want), \
                    f"{target} {t} {value!r} streamed={streamed}: {got} != {want}"


@pytest.mark.parametrize("target", HOST_TARGETS)
def test_i1_arguments_take_truth_values_only(target: str) -> None:
    module = load(PUT_SOURCE.format(T="i1"))
    for value in [True, False, 0, 1, 2, -1, np.bool_(True), np.int8(1), np.uint64(0), 1.0, 0.0]:
        fits = not isinstance(value, (float, np.floating)) and int(value) in (0, 1)
        for streamed in (False, True):
            error, out = pass_scalar(module, target, np.dtype(bool), value, streamed)
            assert (error is None) == fits, f"{target} {value!r} streamed={streamed}: {error}"
            if fits:
                assert bool(out[0]) == bool(value)


# -- integer expressions on node inputs -------------------------------------------------------------

EXPRESSION_SOURCE = '''
import hpvm_py as hpvm
from hpvm_py import Out, Ptr, i64, {imports}


@hpvm.leaf
def put(out: Out[Ptr[i64]], out_bytes: i64, k: {T}):
    out[hpvm.instance_id(0)] = i64(k)


@hpvm.graph
def root(out: Out[Ptr[i64]], out_bytes: i64, a: {A}, b: {B}, c: {C}):
    hpvm.node(put, grid=2, out=out, out_bytes=out_bytes, k={expression})
'''
LITERALS = [1, 2, 3, -1, 7, 2 ** 31, 2 ** 62, 2 ** 63 - 1]  # no 0: a literal divisor is Python's own


def expression(rng: random.Random, depth: int) -> str:
    if depth == 0 or rng.random() < 0.25:
        return rng.choice(["a", "b", "c", "a", "b", "c", str(rng.choice(LITERALS))])
    return f"({expression(rng, depth - 1)} {rng.choice(['+', '-', '*', '//', '%'])} {expression(rng, depth - 1)})"


def evaluate(node: ast.expr, env: dict[str, int]) -> int:
    """Exact integers; // and % floor, a zero divisor gives 0 (docs/language.md)."""
    if isinstance(node, ast.BinOp):
        left, right = evaluate(node.left, env), evaluate(node.right, env)
        if isinstance(node.op, ast.Add):
            return left + right
        if isinstance(node.op, ast.Sub):
            return left - right
        if isinstance(node.op, ast.Mult):
            return left * right
        if right == 0:
            return 0
        return left // right if isinstance(node.op, ast.FloorDiv) else left % right
    if isinstance(node, ast.UnaryOp):
        return -evaluate(node.operand, env)
    if isinstance(node, ast.Constant):
        return int(node.value)
    assert isinstance(node, ast.Name)
    return env[node.id]


@pytest.mark.parametrize("target", HOST_TARGETS)
@pytest.mark.parametrize("seed", range(3))
def test_input_expressions_are_exact_or_fail_the_launch(target: str, seed: int) -> None:
    rng = random.Random(seed)
    programs = failures = 0
    while programs < 12:
        t, *parameters = (rng.choice(list(INTS)) for _ in range(4))
        text = expression(rng, rng.randint(1, 3))
        tree = ast.parse(text, mode="eval").body
        if not isinstance(tree, ast.BinOp) or not any(name in text for name in "abc"):
            continue  # a bare parameter is a bind, literals alone are Python's
        try:
            module = load(EXPRESSION_SOURCE.format(
                T=t, A=parameters[0], B=parameters[1], C=parameters[2], expression=text,
                imports=", ".join(sorted({t, *parameters} - {"i64"})) or "i32"))
            with hpvm.runtime(target):
                hpvm.compile(module.root)
        except HPVMError as error:
            assert "ZeroDivisionError" in str(error), str(error)  # `(7 % (3 - 3))` folds in Python
            continue
        programs += 1
        for _ in range(12):
            env = {}
            for name, p in zip("abc", parameters):
                lo, hi = int_range(p)
                env[name] = rng.choice([lo, hi, 0, 1, -1 if lo < 0 else 2, rng.randint(lo, hi), rng.randint(max(lo, -5), 5)])
            want = evaluate(tree, env)
            lo, hi = int_range(t)
            out = np.full(2, -99, np.int64)
            try:
                with hpvm.runtime(target):
                    hpvm.wait(hpvm.launch(module.root, out, out.nbytes, env["a"], env["b"], env["c"]))
            except ExecutionError as error:
                assert not lo <= want <= hi, f"{target} k={text}: {t} from {parameters} {env}: {error}"
                assert "node-inputs" in str(error)
                failures += 1
                continue
            assert lo <= want <= hi, f"{target} k={text}: {want} accepted for {t} ({parameters} {env})"
            assert out.tolist() == [wrap(want, "i64")] * 2, f"{target} k={text} ({parameters} {env})"
    assert failures > 0  # the generator reaches values outside the input's type


# -- zeroed malloc scratch --------------------------------------------------------------------------

SCRATCH_SOURCE = '''
import hpvm_py as hpvm
from hpvm_py import Out, Ptr, i64, {T}


@hpvm.leaf
def fill(out: Out[Ptr[i64]], out_bytes: i64, m: i64, k: i64):
    s = hpvm.malloc(m * {size}, {T})
    block = hpvm.get_node_instance_id_x(hpvm.get_parent_node(hpvm.get_node()))
    lane = hpvm.instance_id(0)
    w = hpvm.num_instances(0)
    seen = 0
    j = lane
    while j < m:
        seen += i64(s[j] != 0)
        j += w
    hpvm.barrier()
    j = lane
    while j < m:
        s[j] = {T}(k + j + 1)
        j += w
    out[block * w + lane] = seen


@hpvm.graph
def blocks(out: Out[Ptr[i64]], out_bytes: i64, m: i64, k: i64, w: i64):
    hpvm.node(fill, grid=w, out=out, out_bytes=out_bytes, m=m, k=k)


@hpvm.graph
def root(out: Out[Ptr[i64]], out_bytes: i64, m: i64, k: i64, w: i64, nb: i64):
    hpvm.node(blocks, grid=nb, out=out, out_bytes=out_bytes, m=m, k=k, w=w)


@hpvm.graph
def stream_root(out: Out[Ptr[i64]], out_bytes: i64, m: i64, k: i64, w: i64, nb: i64):
    hpvm.node(blocks, grid=nb, out=hpvm.streaming(out), out_bytes=hpvm.streaming(out_bytes),
              m=hpvm.streaming(m), k=hpvm.streaming(k), w=w)
'''


@pytest.mark.parametrize("target", HOST_TARGETS)
@pytest.mark.parametrize("t, size", [("i64", 8), ("f32", 4), ("u8", 1), ("i16", 2)])
def test_scratch_is_zeroed_for_every_group_launch_and_item(target: str, t: str, size: int) -> None:
    rng = random.Random(size)
    module = load(SCRATCH_SOURCE.format(T=t, size=size))
    for _ in range(10):  # relaunches with other sizes and grids, each group reading before writing
        m, w, nb = rng.choice([1, 3, 16, 17, 64, rng.randint(1, 200)]), rng.choice([1, 2, 4, 8]), rng.choice([1, 2, 3])
        out = np.full(w * nb, -1, np.int64)
        with hpvm.runtime(target):
            hpvm.wait(hpvm.launch(module.root, out, out.nbytes, m, rng.randint(0, 5), w, nb))
        assert not out.any(), f"{target} {t}: scratch of {m} held data in {out.tolist()}"
    w, nb = rng.choice([1, 2, 4]), rng.choice([1, 2])
    outs = []
    with hpvm.runtime(target):
        h = hpvm.launch(module.stream_root, stream=True, depth=3)
        for _ in range(10):
            outs.append(np.full(w * nb, -1, np.int64))
            hpvm.push(h, outs[-1], outs[-1].nbytes, rng.choice([1, 8, 64, rng.randint(1, 100)]), rng.randint(0, 5), w, nb)
        hpvm.wait(h)
    assert not any(o.any() for o in outs), [o.tolist() for o in outs]


# -- size arguments -------------------------------------------------------------------------------

SIZE_SOURCE = '''
import hpvm_py as hpvm
from hpvm_py import InOut, Out, Ptr, i64, {T}


@hpvm.leaf
def first(x: Out[Ptr[i64]], x_bytes: i64):
    x[0] = 42


@hpvm.leaf
def second(y: InOut[Ptr[{T}]], y_bytes: i64):
    i = hpvm.instance_id(0)
    if (i + 1) * {size} <= y_bytes:
        y[i] = y[i] + 1


@hpvm.graph
def root(x: Out[Ptr[i64]], x_bytes: i64, y: InOut[Ptr[{T}]], y_bytes: i64, n: i64):
    hpvm.node(first, x=x, x_bytes=x_bytes)
    hpvm.node(second, grid=n, y=y, y_bytes=y_bytes)
'''


@pytest.mark.parametrize("target", HOST_TARGETS)
@pytest.mark.parametrize("t, size, dtype", [("i64", 8, np.int64), ("f32", 4, np.float32), ("u8", 1, np.uint8)])
def test_size_arguments_beyond_the_buffer_are_refused_before_anything_runs(target: str, t: str, size: int,
                                                                          dtype: type) -> None:
    rng = random.Random(size)
    module = load(SIZE_SOURCE.format(T=t, size=size))
    for _ in range(20):
        base = np.zeros(rng.randint(2, 40), dtype)
        y = rng.choice([base, base[rng.randint(0, len(base) - 1):], base[:len(base) // 2 * 2].reshape(-1, 2)])
        y_bytes = rng.choice([y.nbytes, y.nbytes - 1, y.nbytes + 1, y.nbytes + size, 0, -1, -size, 2 ** 62])
        x = np.zeros(1, np.int64)
        before = y.copy()
        error = None
        try:
            with hpvm.runtime(target):
                hpvm.wait(hpvm.launch(module.root, x, x.nbytes, y, y_bytes, y.size + 2))
        except HPVMError as e:
            error = e
        if y_bytes > y.nbytes or y_bytes < 0:
            assert isinstance(error, LaunchError), f"{target} {t}: size {y_bytes} of {y.nbytes} bytes: {error}"
            assert x[0] == 0 and np.array_equal(y, before), "a refused launch ran a node"
        else:
            assert error is None, f"{target} {t}: size {y_bytes} of {y.nbytes} bytes: {error}"
            want = before.ravel().copy()
            want[:y_bytes // size] += 1
            assert x[0] == 42 and np.array_equal(y.ravel(), want)


# -- lazy and / or / conditional expressions ----------------------------------------------------------

LAZY_SOURCE = '''
import hpvm_py as hpvm
from hpvm_py import In, Out, Ptr, i64, i32


@hpvm.leaf
def pick(a: In[Ptr[i32]], a_bytes: i64, idx: In[Ptr[i64]], idx_bytes: i64, out: Out[Ptr[i64]],
         out_bytes: i64, n: i64, t: i64):
    i = hpvm.instance_id(0)
    j = idx[i]
    r = 0
    {body}
    out[i] = r


@hpvm.graph
def root(a: In[Ptr[i32]], a_bytes: i64, idx: In[Ptr[i64]], idx_bytes: i64, out: Out[Ptr[i64]],
         out_bytes: i64, n: i64, t: i64, m: i64):
    hpvm.node(pick, grid=m, a=a, a_bytes=a_bytes, idx=idx, idx_bytes=idx_bytes, out=out,
              out_bytes=out_bytes, n=n, t=t)
'''
GUARDS = ["j >= 0 and j < n", "0 <= j < n", "not (j < 0 or j >= n)", "j < n and j >= 0",
          "j >= 0 and j < n and j != 3"]
LAZY_FORMS = ["if {g} and a[j] > t:\n        r = 1",
              "r = i64(a[j]) if {g} else -1",
              "r = 1 if (not ({g})) or a[j] > t else 0",
              "if ({g}) and (a[j] > t or a[j] < -t):\n        r = 2",
              "r = i64({g} and a[j] > t)",
              "k = 0\n    while k < 3 and ({g}) and a[j] > t + k:\n        k += 1\n    r = k",
              "r = max(-1, i64(a[j]) if {g} else -2) + (1 if ({g}) and a[j] == t else 0)"]


@pytest.mark.parametrize("target", HOST_TARGETS)
@pytest.mark.parametrize("form", range(len(LAZY_FORMS)))
def test_guarded_accesses_with_loaded_indices_never_read_out_of_bounds(target: str, form: int) -> None:
    rng = random.Random(form)
    for guard in rng.sample(GUARDS, 2):
        body = LAZY_FORMS[form].format(g=guard)
        module = load(LAZY_SOURCE.format(body=body))
        for _ in range(4):
            n = rng.randint(0, 12)
            a = np.array([rng.randint(-5, 5) for _ in range(n)], np.int32)
            m = rng.randint(1, 40)
            idx = np.array([rng.choice([-2 ** 63, -1, 0, n - 1, n, n + 1, 2 ** 62, rng.randint(-3, n + 3)])
                            for _ in range(m)], np.int64)
            out = np.zeros(m, np.int64)
            t = rng.randint(-3, 3)
            with hpvm.runtime(target):
                hpvm.wait(hpvm.launch(module.root, a, a.nbytes, idx, idx.nbytes, out, out.nbytes, n, t, m))
            want = []
            for j in idx.tolist():  # the body as Python runs it, lazily
                env: dict[str, object] = {"a": a.tolist(), "n": n, "t": t, "j": j, "r": 0, "i64": int}
                exec(body.replace("\n    ", "\n"), {}, env)
                want.append(int(env["r"]))
            assert out.tolist() == want, f"{target}: {body}"


# -- integer expressions of per-parent values ---------------------------------------------------------

PER_PARENT_SOURCE = '''
import hpvm_py as hpvm
from hpvm_py import In, Out, Ptr, i64, {imports}


@hpvm.leaf
def put(out: Out[Ptr[i64]], out_bytes: i64, k: {T}):
    out[hpvm.get_node_instance_id_x(hpvm.get_parent_node(hpvm.get_node()))] = i64(k)


@hpvm.graph
def inner(out: Out[Ptr[i64]], out_bytes: i64, a: i64, b: {B}, c: {C}):
    hpvm.node(put, out=out, out_bytes=out_bytes, k={expression})


@hpvm.leaf
def source(values: In[Ptr[i64]], values_bytes: i64) -> i64:
    return values[hpvm.instance_id(0)]


@hpvm.graph
def root(values: In[Ptr[i64]], values_bytes: i64, out: Out[Ptr[i64]], out_bytes: i64, n: i64, b: {B},
         c: {C}):
    # a comes over a one-to-one edge from a replicated sibling: one value per instance of inner
    a = hpvm.node(source, grid=n, values=values, values_bytes=values_bytes)
    hpvm.node(inner, grid=n, out=out, out_bytes=out_bytes, a=a.out[0], b=b, c=c)
'''


@pytest.mark.parametrize("target", HOST_TARGETS)
@pytest.mark.parametrize("seed", range(3))
def test_input_expressions_of_per_parent_values_are_exact_or_fail_the_launch(target: str, seed: int) -> None:
    """The same rule as for uniform values: rt/plan.py evaluates a per-parent expression over
    arrays, which wrapped in int64 (`a * 2**62` with a == 4 gave 0 where a uniform 4 failed)."""
    rng = random.Random(100 + seed)
    programs = failures = 0
    while programs < 6:
        t, b, c = (rng.choice(list(INTS)) for _ in range(3))
        text = expression(rng, rng.randint(1, 3))
        tree = ast.parse(text, mode="eval").body
        if not isinstance(tree, ast.BinOp) or "a" not in text:
            continue  # only an expression of the per-parent value takes that path
        try:
            module = load(PER_PARENT_SOURCE.format(T=t, B=b, C=c, expression=text,
                                                   imports=", ".join(sorted({t, b, c} - {"i64"})) or "i32"))
            with hpvm.runtime(target):
                hpvm.compile(module.root)
        except HPVMError as error:
            assert "ZeroDivisionError" in str(error), str(error)
            continue
        programs += 1
        lo, hi = int_range(t)
        for _ in range(10):
            n = rng.randint(1, 4)
            values = np.array([rng.choice([-2 ** 63, 2 ** 63 - 1, 0, 1, -1, 4, rng.randint(-2 ** 63, 2 ** 63 - 1),
                                           rng.randint(-5, 5)]) for _ in range(n)], np.int64)
            env = {name: rng.choice([lo_, hi_, 0, 1, 2, rng.randint(lo_, hi_)])
                   for name, (lo_, hi_) in (("b", int_range(b)), ("c", int_range(c)))}
            want = [evaluate(tree, {**env, "a": int(v)}) for v in values]
            out = np.full(n, -99, np.int64)
            try:
                with hpvm.runtime(target):
                    hpvm.wait(hpvm.launch(module.root, values, values.nbytes, out, out.nbytes, n, env["b"], env["c"]))
            except ExecutionError as error:
                assert not all(lo <= w <= hi for w in want), f"{target} k={text}: {t} {values} {env}: {error}"
                assert "node-inputs" in str(error)
                failures += 1
                continue
            assert all(lo <= w <= hi for w in want), f"{target} k={text}: {want} accepted for {t} ({values} {env})"
            assert out.tolist() == [wrap(w, "i64") for w in want], f"{target} k={text} ({values} {env})"
    assert failures > 0
