"""Out buffers a leaf may leave in part unwritten, adversarially (docs/language.md, "Out buffers").

Generated leaves store to one or two Out buffers under guards (on ids, scalars, data), in loops
left by `break`/`continue`/`return`, in `while` loops, through a helper, a pointer offset and a
`hpvm.view`, with 1-D to 3-D grids inside a replicated parent: no launch that the coverage proof
lets skip the copy-in leaves an element unwritten (HPVM_POISON_OUT on the python target: a
sentinel that survives is an element a device would have left as garbage), and the compiled
targets agree with python on buffers pre-filled with a sentinel. Minimised reproducers of the
poison switch: it spared neither an Out buffer that the launch also reads through an In parameter
(the In reads came out NaN, where every device reads the data), nor the relaunches of a cpu graph
(a replay skipped it), and it filled bf16 buffers with 0xABAB (a finite -1.2e-12), not NaN.
"""
from __future__ import annotations

import random
import warnings

import numpy as np
import pytest

import hpvm_py as hpvm
from conftest import TARGETS
from differential.data import load
from hpvm_py import In, Out, Ptr, bf16, f32, i64
from hpvm_py.errors import ExecutionError, HPVMWarning
from hpvm_py.rt import executor

HOST_TARGETS = [t for t in ("python", "cpu") if t in TARGETS]
COMPILED = [t for t in TARGETS if t != "python"]
SENTINEL = -7


# -- generated leaves -------------------------------------------------------------------------

def _expr(rng: random.Random, names: list[str], depth: int = 0) -> str:
    """An integer: mostly sums and products of ids, loop counters, locals and scalars; sometimes
    a narrowing cast, a clamp, a negation, a division or a remainder."""
    roll = rng.random()
    if depth > 2 or roll < 0.4:
        return rng.choice(names + [str(rng.randint(-3, 4))])
    if roll < 0.85:
        op = rng.choice(["+", "+", "-", "*", "*"])
        return f"({_expr(rng, names, depth + 1)} {op} {_expr(rng, names, depth + 1)})"
    inner = _expr(rng, names, depth + 1)
    return rng.choice([f"i64(i32({inner}))", f"i64(u32({inner}))", f"i64(i8({inner}))",
                       f"min({inner}, n)", f"max({inner}, 0)", f"(-{inner})", f"({inner} // 2)",
                       f"({inner} % 3)"])


def _condition(rng: random.Random, names: list[str]) -> str:
    op = rng.choice(["<", "<=", ">", ">=", "==", "!="])
    lhs = rng.choice([_expr(rng, names, 2), f"{rng.randint(-3, 3)} * {rng.choice(names)}",
                      f"{rng.choice(names)} * {rng.randint(-3, 3)} + {rng.randint(-4, 4)}"])
    cond = f"{lhs} {op} {_expr(rng, names, 2)}"
    roll = rng.random()
    if roll < 0.2:
        cond += f" and {rng.choice(names)} {rng.choice(['<', '>=', '!='])} {rng.choice(['n', 'm', 's'])}"
    elif roll < 0.3:
        cond += f" or {rng.choice(names)} {rng.choice(['<', '>=', '=='])} {rng.choice(['n', '1'])}"
    return f"not ({cond})" if rng.random() < 0.15 else cond


def _store_index(rng: random.Random, names: list[str]) -> str:
    """Mostly an index that covers a buffer for some sizes."""
    if rng.random() < 0.25:
        return _expr(rng, names)
    loops = [x for x in names if x.startswith("q")]
    return rng.choice(["i", "j * NI0 + i", "i * NI1 + j", "i * n + j", "(NI0 - 1 - i)", "i - 1",
                       "i + 1", "p * NI0 + i", "i * NP + p", "(k * NI1 + j) * NI0 + i", "i + s",
                       "2 * i", "2 * i + 1", "n - 1 - i", "i * 3 + m"] +
                      [f"{q} + {rng.choice(['0', 'i', 'i * 2', 'i * n', 'j * n'])}" for q in loops])


def _body(rng: random.Random, names: list[str], outs: list[str], indent: str, depth: int,
          in_loop: bool = False) -> list[str]:
    lines: list[str] = []
    if rng.random() < 0.3:
        t = f"t{depth}_{rng.randint(0, 99)}"
        lines.append(f"{indent}{t} = {_expr(rng, names)}")
        if rng.random() < 0.15:
            lines.append(f"{indent}{t} += 1")  # assigned twice: never substituted
        names = names + [t]
    if rng.random() < 0.12:
        exits = ["return", "break", "continue"] if in_loop else ["return"]
        lines += [f"{indent}if a[(i + j) % 4] < 0:", f"{indent}    {rng.choice(exits)}"]
    roll = rng.random()
    if depth < 2 and roll < 0.25:
        lines.append(f"{indent}if {_condition(rng, names)}:")
        lines += _body(rng, names, outs, indent + "    ", depth + 1, in_loop)
        if rng.random() < 0.4:
            if rng.random() < 0.3:
                lines.append(f"{indent}elif {_condition(rng, names)}:")
                lines += _body(rng, names, outs, indent + "    ", depth + 1, in_loop)
            lines.append(f"{indent}else:")
            lines += _body(rng, names, outs, indent + "    ", depth + 1, in_loop)
    elif depth < 2 and roll < 0.5:
        var = f"q{depth}_{rng.randint(0, 999)}"
        start = rng.choice(["0", "0", "1", f"{rng.choice(names)} * 2", "i", "n"])
        stop = rng.choice(["n", "m", "3", f"{start} + 2", f"{start} + n", "0"])
        step = rng.choice(["", "", ", 2", ", 3"])
        lines.append(f"{indent}for {var} in range({start}, {stop}{step}):")
        lines += _body(rng, names + [var], outs, indent + "    ", depth + 1, True)
    elif depth < 2 and roll < 0.55:
        lines += [f"{indent}w = 0", f"{indent}while w < 2:",
                  f"{indent}    {rng.choice(outs)}[{_store_index(rng, names)}] = 1",
                  f"{indent}    w += 1"]
    else:
        out, how, index = rng.choice(outs), rng.random(), _store_index(rng, names)
        if how < 0.1:
            lines.append(f"{indent}put({out}, {index}, 1)")
        elif how < 0.2:
            ptr = f"pp{rng.randint(0, 10 ** 6)}"
            lines += [f"{indent}{ptr} = {out} + {rng.choice(['i', '1', 'n', 'i * m'])}",
                      f"{indent}{ptr}[{index}] = 1"]
        elif how < 0.3:
            view = f"vv{rng.randint(0, 10 ** 6)}"
            lines += [f"{indent}{view} = hpvm.view({out}, (NI0, NI1))", f"{indent}{view}[i, j] = 1"]
        else:
            lines.append(f"{indent}{out}[{index}] = 1")
    return lines


SIGNATURE = ("a: In[Ptr[i64]], a_bytes: i64, c: Out[Ptr[i64]], c_bytes: i64, d: Out[Ptr[i64]], "
             "d_bytes: i64, n: i64, m: i64, s: i32")
BINDS = "a=a, a_bytes=a_bytes, c=c, c_bytes=c_bytes, d=d, d_bytes=d_bytes, n=n, m=m, s=s"


def _program(seed: int) -> tuple[str, int]:
    """A leaf `gen` under `root` (within a replicated `mid` for some seeds), and its grid's rank."""
    rng = random.Random(seed)
    dims = rng.choice([1, 2, 2, 3])
    parent = rng.random() < 0.35
    outs = ["c"] if rng.random() < 0.6 else ["c", "d"]
    lines = _body(rng, ["i", "j", "k", "n", "m", "s"] + (["p"] if parent else []), outs, "    ", 0)
    head = ["    i = hpvm.instance_id(0)",
            "    j = hpvm.instance_id(1)" if dims >= 2 else "    j = 0",
            "    k = hpvm.instance_id(2)" if dims >= 3 else "    k = 0",
            "    NI0 = hpvm.num_instances(0)",
            "    NI1 = hpvm.num_instances(1)" if dims >= 2 else "    NI1 = 1"]
    head += ["    par = hpvm.get_parent_node(hpvm.get_node())",
             "    p = hpvm.get_node_instance_id_x(par)",
             "    NP = hpvm.get_num_node_instances_x(par)"] if parent else ["    p = 0", "    NP = 1"]
    grid = {1: "gx", 2: "(gx, gy)", 3: "(gx, gy, gz)"}[dims]
    if parent:
        graphs = f'''@hpvm.graph
def mid({SIGNATURE}, gx: i64, gy: i64, gz: i64):
    hpvm.node(gen, grid={grid}, {BINDS})


@hpvm.graph
def root({SIGNATURE}, gx: i64, gy: i64, gz: i64, px: i64):
    hpvm.node(mid, grid=px, {BINDS}, gx=gx, gy=gy, gz=gz)
'''
    else:
        graphs = f'''@hpvm.graph
def root({SIGNATURE}, gx: i64, gy: i64, gz: i64, px: i64):
    hpvm.node(gen, grid={grid}, {BINDS})
'''
    body = "\n".join(head + lines)
    return f'''import hpvm_py as hpvm
from hpvm_py import In, Out, Ptr, i8, i32, i64, u32


@hpvm.func
def put(x: Ptr[i64], at: i64, v: i64):
    x[at] = v


@hpvm.leaf
def gen({SIGNATURE}):
{body}


{graphs}''', dims


def _launches(seed: int, dims: int, count: int) -> list[tuple]:
    """Launch values: grids that do not divide the sizes, sizes of the grid, of n * m, off by one."""
    rng = random.Random(seed * 7 + 1)
    found = []
    for _ in range(count):
        gx, gy, gz, px = rng.randint(0, 5), rng.randint(1, 4), rng.randint(1, 3), rng.randint(1, 3)
        n, m, s = rng.randint(0, 6), rng.randint(0, 6), rng.randint(-2, 3)
        total = gx * (gy if dims >= 2 else 1) * (gz if dims >= 3 else 1)
        sizes = [max(0, rng.choice([total, gx, n * m, n, total * px, 2 * total, total + 1,
                                    total - 1, rng.randint(0, 20)])) for _ in range(2)]
        a = np.array([rng.randint(-3, 3) for _ in range(4)], np.int64)
        found.append((a, sizes, (n, m, np.int32(s), gx, gy, gz, px)))
    return found


def _run(module, a: np.ndarray, sizes: list[int], scalars: tuple) -> tuple[np.ndarray, ...] | None:
    c, d = (np.full(size, SENTINEL, np.int64) for size in sizes)
    try:
        hpvm.wait(hpvm.launch(module.root, a, a.nbytes, c, c.nbytes, d, d.nbytes, *scalars))
    except ExecutionError:
        return None  # an index out of bounds: the launch fails whatever is copied
    return c, d


def test_generated_proofs_leave_nothing_unwritten(monkeypatch) -> None:
    """A launch that skips the copy-in (no poison) and leaves a sentinel: a wrong proof."""
    monkeypatch.setattr(executor, "POISON_OUT", True)
    launched = 0
    with hpvm.runtime("python"), warnings.catch_warnings():
        warnings.simplefilter("ignore", HPVMWarning)
        for seed in range(250):
            source, dims = _program(seed)
            module = load(source)
            for a, sizes, scalars in _launches(seed, dims, 3):
                result = _run(module, a, sizes, scalars)
                if result is None:
                    continue
                launched += 1
                for buf in result:
                    assert not np.any(buf == SENTINEL), (seed, sizes, scalars, source)
    assert launched > 250


@pytest.mark.parametrize("target", COMPILED)
def test_generated_targets_agree(target: str) -> None:
    """The compiled targets keep what python keeps where a launch writes in part."""
    compared = 0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", HPVMWarning)
        for seed in range(1000, 1012):
            source, dims = _program(seed)
            module = load(source)
            launches = _launches(seed, dims, 2)
            with hpvm.runtime("python"):
                expected = [_run(module, *launch) for launch in launches]
            with hpvm.runtime(target):
                got = [_run(module, *launch) for launch in launches]
            for want, have in zip(expected, got):
                assert (want is None) == (have is None), (seed, source)
                if want is not None:
                    compared += 1
                    for w, h in zip(want, have):
                        np.testing.assert_array_equal(h, w, err_msg=f"seed {seed}\n{source}")
    assert compared > 8


# -- the poison switch -----------------------------------------------------------------------

@hpvm.leaf
def plus_one_head(a: In[Ptr[f32]], a_bytes: i64, c: Out[Ptr[f32]], c_bytes: i64, n: i64):
    i = hpvm.instance_id(0)
    if i < n:  # c's tail stays unwritten: copied in (and poisoned on the host)
        c[i] = a[i] + 1.0


@hpvm.graph
def head_graph(a: In[Ptr[f32]], a_bytes: i64, c: Out[Ptr[f32]], c_bytes: i64, n: i64, gx: i64):
    hpvm.node(plus_one_head, grid=gx, a=a, a_bytes=a_bytes, c=c, c_bytes=c_bytes, n=n)


@hpvm.leaf
def bf16_head(c: Out[Ptr[bf16]], c_bytes: i64, n: i64):
    i = hpvm.instance_id(0)
    if i < n:
        c[i] = bf16(1.0)


@hpvm.graph
def bf16_graph(c: Out[Ptr[bf16]], c_bytes: i64, n: i64, gx: i64):
    hpvm.node(bf16_head, grid=gx, c=c, c_bytes=c_bytes, n=n)


@pytest.mark.parametrize("host_target", HOST_TARGETS)
@pytest.mark.parametrize("shift", [None, 2])
def test_poison_spares_what_the_launch_reads(host_target: str, shift: int | None,
                                             monkeypatch) -> None:
    """`a` and `c` are one array (or c a view into a): a device copies it in for the In read,
    so the leaf reads the data; poisoning c on the host made every element NaN."""
    monkeypatch.setattr(executor, "POISON_OUT", True)
    x = np.arange(8, dtype=np.float32)
    c = x if shift is None else x[shift:]
    shift = shift or 0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", HPVMWarning)
        with hpvm.runtime(host_target):
            hpvm.wait(hpvm.launch(head_graph, x, x.nbytes, c, c.nbytes, 4, 6))
    expected = np.arange(8, dtype=np.float32)
    expected[shift:shift + 4] = np.arange(4, dtype=np.float32) + 1
    np.testing.assert_array_equal(x, expected)


@pytest.mark.parametrize("host_target", HOST_TARGETS)
def test_poison_on_every_relaunch(host_target: str, monkeypatch) -> None:
    """The same (untracked) buffers launched again: the cpu target replays the launch, and the
    replay skipped the poisoning (the tail kept what the host wrote there in between)."""
    monkeypatch.setattr(executor, "POISON_OUT", True)
    a = np.arange(6, dtype=np.float32)
    c = np.zeros(6, np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", HPVMWarning)
        with hpvm.runtime(host_target):
            for _ in range(3):
                hpvm.wait(hpvm.launch(head_graph, a, a.nbytes, c, c.nbytes, 4, 6))
                np.testing.assert_array_equal(c[:4], a[:4] + 1)
                assert np.isnan(c[4:]).all(), c
                c[4:] = 7.0  # the user's buffer again: what a launch that skips the poison keeps


@pytest.mark.parametrize("host_target", HOST_TARGETS)
def test_poison_makes_bf16_nan(host_target: str, monkeypatch) -> None:
    """bf16 buffers are uint16 arrays: 0xAB bytes made them a plausible -1.2e-12."""
    monkeypatch.setattr(executor, "POISON_OUT", True)
    c = np.zeros(5, np.uint16)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", HPVMWarning)
        with hpvm.runtime(host_target):
            hpvm.wait(hpvm.launch(bf16_graph, c, c.nbytes, 2, 5))
    assert list(c[:2]) == [0x3F80] * 2  # 1.0
    as_f32 = (c[2:].astype(np.uint32) << 16).view(np.float32)
    assert np.isnan(as_f32).all(), [hex(v) for v in c]
