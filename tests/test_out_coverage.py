"""Out buffers written in part: the same answer on every target (docs/language.md, "Out buffers").

The coverage analysis (passes/coverage.py) decides per launch whether a leaf writes every element
of an Out buffer; where it cannot prove it, the device targets copy the buffer in as for InOut and
the leaf's first such launch warns. Checked here: the analysis on hand-written leaves, whole
launches on every target (Parboil's stencil with swapped buffers among them), the debug switch
that poisons what may stay unwritten, `hpvmc check`, and, adversarially, generated leaves whose
every launch that the analysis calls covering must indeed write every element.
"""
from __future__ import annotations

import os
import random
import re
import subprocess
import sys
import warnings
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

import hpvm_py as hpvm
from hpvm_py.errors import ExecutionError, HPVMWarning
from hpvm_py.passes.coverage import OutCoverage
from hpvm_py.rt import executor
from conftest import TARGETS
from hpvm_py.types import PtrType
from differential.data import load
from programs import out_coverage as P

PROGRAM = Path(P.__file__)


def uncovered(leaf: object, extents: list[tuple[int, ...]], **values: int) -> dict:
    """The analysis alone: buffers given by element count (f32/i64 elements of 4/8 bytes)."""
    func = leaf.ir  # type: ignore[attr-defined]
    modes = tuple("buffer" if isinstance(p.type, PtrType) else "uniform" for p in func.params)
    args = [SimpleNamespace(nbytes=values.get(p.name, 0) * p.type.elem.nbytes)
            if isinstance(p.type, PtrType) else values.get(p.name, 0) for p in func.params]
    found = OutCoverage(func, modes).uncovered(args, extents)
    return {func.params[i].name: reason for i, reason in found.items()}


@pytest.mark.parametrize("leaf, extents, values", [
    (P.copy_1d, [(37,)], dict(c=37)),
    (P.copy_1d, [(5,)], dict(c=0)),  # nothing to copy in
    (P.guarded_tail, [(64,)], dict(c=60, n=60)),
    (P.row_major, [(6, 7)], dict(c=42, ny=7)),
    (P.reversed_2d, [(6, 7)], dict(c=42, nx=6)),
    (P.chunked, [(9,)], dict(c=36, chunk=4)),
    (P.copy_1d, [(4,), (3,)], dict(c=4)),  # every parent instance writes the same elements
    (P.by_operation, [(9,)], dict(c=9, op=0)),
    (P.by_operation, [(9,)], dict(c=9, op=1)),  # the elif's branch: op != 0 holds for all
    (P.by_operation, [(9,)], dict(c=9, op=7)),  # the else branch
    (P.pairs, [(5,)], dict(c=10)),  # two stores of stride 2 together
    (P.two_elements, [(1,)], dict(c=2)),
    (P.thirds, [(4,)], dict(c=12, n=3)),
    (P.halves, [(6,)], dict(c=6, n=0)),  # the else branch alone
    (P.first_apart, [(6,)], dict(c=6, skip=0)),  # i != 0: [1, 6), and the else branch's c[0]
    (P.first_apart, [(6,)], dict(c=6, skip=5)),
    (P.first_apart, [(6,)], dict(c=6, skip=9)),  # i != 9 holds for every instance
])
def test_proven_whole(leaf, extents, values) -> None:
    assert uncovered(leaf, extents, **values) == {}


@pytest.mark.parametrize("leaf, extents, values, why", [
    (P.copy_1d, [(36,)], dict(c=37), "elements [0, 36) of its 37"),
    (P.copy_1d, [(0,)], dict(c=3), "none of its 3"),
    (P.guarded_tail, [(64,)], dict(c=60, n=59), "[0, 59) of its 60"),
    (P.row_major, [(6, 7)], dict(c=42, ny=8), "gaps"),
    (P.interior, [(10,)], dict(c=10, n=10), "[1, 9) of its 10"),
    (P.strided, [(10,)], dict(c=20), "gaps"),
    (P.chunked, [(9,)], dict(c=36, chunk=3), "[0, 27) of its 36"),
    (P.early_return, [(8,)], dict(c=8), "earlier return"),
    (P.left_by_break, [(8,)], dict(c=8, chunk=1), "left early"),
    (P.from_data, [(8,)], dict(c=8), "not an integer sum"),
    (P.wrapping, [(300,)], dict(c=256), "not an integer sum"),
    (P.pairs, [(5,)], dict(c=11), "element 10 of its 11"),
    (P.two_elements, [(1,)], dict(c=3), "element 2 of its 3"),
    (P.thirds, [(4,)], dict(c=12, n=2), "element 2 of its 12"),
    (P.halves, [(6,)], dict(c=9, n=3), "element 3 of its 9"),  # [0, 3) and [6, 9)
    (P.first_apart, [(6,)], dict(c=6, skip=2), "not an integer sum"),  # a hole in the middle
])
def test_unproven(leaf, extents, values, why) -> None:
    found = uncovered(leaf, extents, **values)
    assert list(found) == ["c"] and why in found["c"].why
    assert found["c"].loc.file == str(PROGRAM)


def _stencil(target: str, nx: int, ny: int, nz: int, iters: int) -> tuple[np.ndarray, dict]:
    rng = np.random.default_rng()
    a = rng.random(nx * ny * nz, dtype=np.float32)
    b = rng.random(nx * ny * nz, dtype=np.float32)
    with hpvm.runtime(target):
        hpvm.track_memory(a)
        hpvm.track_memory(b)
        hpvm.stats(reset=True)
        x, y = a, b
        expected_x, expected_y = a.copy(), b.copy()
        for _ in range(iters):
            hpvm.wait(hpvm.launch(P.stencil_graph, np.float32(0.5), np.float32(0.1), x, x.nbytes,
                                  y, y.nbytes, nx, ny, nz))
            _reference_step(expected_x, expected_y, (nx, ny, nz))
            x, y = y, x
            expected_x, expected_y = expected_y, expected_x
        hpvm.request_memory(x)
        counts = hpvm.stats()
    np.testing.assert_allclose(x, expected_x, rtol=1e-5, atol=1e-6)
    return x, counts


def _reference_step(src: np.ndarray, dst: np.ndarray, shape: tuple[int, int, int]) -> None:
    nx, ny, nz = shape
    s = src.reshape(nz, ny, nx)
    d = dst.reshape(nz, ny, nx)
    c = s[1:-1, 1:-1, 1:-1]
    d[1:-1, 1:-1, 1:-1] = (s[1:-1, 1:-1, 2:] + s[1:-1, 1:-1, :-2] + s[1:-1, 2:, 1:-1] +
                           s[1:-1, :-2, 1:-1] + s[2:, 1:-1, 1:-1] + s[:-2, 1:-1, 1:-1]) \
        * np.float32(0.1) - c * np.float32(0.5)


def test_stencil_same_on_every_target(target: str) -> None:
    """Parboil's stencil with Anext declared Out: the boundary keeps its values everywhere, the
    device targets copy both buffers in once, and the leaf warns once."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _, counts = _stencil(target, 6, 5, 4, iters=4)
    mine = [w for w in caught if issubclass(w.category, HPVMWarning)]
    assert len(mine) == 1, [str(w.message) for w in caught]
    text = str(mine[0].message)
    assert re.search(r"leaf 'stencil(_\d+)?' .* parameter 'Anext' .*InOut\[Ptr\[f32\]\]", text), text
    assert mine[0].filename == str(PROGRAM)
    if target in ("gpu", "nvptx"):
        assert counts["h2d_copies"] == 2 and counts["d2h_copies"] == 1


def test_whole_writes_copy_nothing_in(target: str) -> None:
    """vadd's pattern: the Out buffer is proven written whole, so it is not copied in, and no
    warning is given."""
    n = 1000
    a = np.random.default_rng().random(n, dtype=np.float32)
    c = np.full(n, -1.0, np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("error", HPVMWarning)
        with hpvm.runtime(target):
            hpvm.stats(reset=True)
            hpvm.wait(hpvm.launch(P.copy_graph, a, a.nbytes, c, c.nbytes, n))
            counts = hpvm.stats()
    np.testing.assert_array_equal(c, a)
    if target in ("gpu", "nvptx"):
        assert counts["h2d_copies"] == 1 and counts["d2h_copies"] == 1


@pytest.mark.parametrize("host_target", [t for t in ("python", "cpu") if t in TARGETS])
def test_poison_shows_what_a_strict_device_would_read(host_target: str, monkeypatch) -> None:
    monkeypatch.setattr(executor, "POISON_OUT", True)
    n = 12
    a = np.arange(n, dtype=np.float32)
    c = np.zeros(n, np.float32)
    whole = np.zeros(n, np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", HPVMWarning)
        with hpvm.runtime(host_target):
            hpvm.wait(hpvm.launch(P.interior_graph, a, a.nbytes, c, c.nbytes, n))
            hpvm.wait(hpvm.launch(P.copy_graph, a, a.nbytes, whole, whole.nbytes, n))
    assert np.isnan(c[0]) and np.isnan(c[-1])
    np.testing.assert_array_equal(c[1:-1], a[:-2] + a[2:])
    np.testing.assert_array_equal(whole, a)  # proven whole: never poisoned


def test_check_reports() -> None:
    done = subprocess.run([sys.executable, "-m", "hpvm_py.cli", "check", str(PROGRAM)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    err = done.stderr
    line = _line_of("        return")
    assert f"{PROGRAM}:{line}:" in err and "warning: leaf 'early_return'" in err
    assert "note: leaf 'interior' writes its Out parameter 'c' under a condition" in err
    assert "'copy_1d'" not in err and "'row_major'" not in err


def _line_of(text: str) -> int:
    return PROGRAM.read_text().splitlines().index(text) + 1


# -- adversarial: generated leaves never fool the analysis ---------------------------------------

SENTINEL = -7
EXAMPLES = int(os.environ.get("HPVM_COVERAGE_EXAMPLES", "300"))  # generated leaves per run


def _index(rng: random.Random, names: list[str], depth: int = 0) -> str:
    """An integer index: mostly sums and products of ids, loop counters and scalars, sometimes a
    wrapping cast, a division or a value loaded from memory."""
    roll = rng.random()
    if depth > 2 or roll < 0.35:
        return rng.choice(names + [str(rng.randint(-2, 3))])
    if roll < 0.8:
        op = rng.choice(["+", "+", "-", "*"])
        return f"({_index(rng, names, depth + 1)} {op} {_index(rng, names, depth + 1)})"
    return rng.choice([f"i64(i8({_index(rng, names, depth + 1)}))",
                       f"i64(u8({_index(rng, names, depth + 1)}))",
                       f"({_index(rng, names, depth + 1)} // 2)",
                       f"({_index(rng, names, depth + 1)} % 5)",
                       "a[i % 4]"])


def _condition(rng: random.Random, names: list[str]) -> str:
    op = rng.choice(["<", "<=", ">", ">=", "==", "!="])
    cond = f"{_index(rng, names, 2)} {op} {_index(rng, names, 2)}"
    if rng.random() < 0.3:
        cond = f"{cond} and {rng.choice(names)} < {rng.choice(['n', 'm', '3'])}"
    return f"not ({cond})" if rng.random() < 0.15 else cond


def _body(rng: random.Random, names: list[str], indent: str, depth: int, in_loop: bool = False
          ) -> list[str]:
    lines: list[str] = []
    if rng.random() < 0.3:
        lines.append(f"{indent}t{depth} = {_index(rng, names)}")
        names = names + [f"t{depth}"]
        if rng.random() < 0.2:
            lines.append(f"{indent}t{depth} = t{depth} + 1")  # assigned twice: not substituted
    if rng.random() < 0.15:
        lines.append(f"{indent}if a[i % 4] < 0:")
        lines.append(f"{indent}    {rng.choice(['return', 'break', 'continue'] if in_loop else ['return'])}")
    roll = rng.random()
    if depth < 2 and roll < 0.3:
        lines.append(f"{indent}if {_condition(rng, names)}:")
        lines += _body(rng, names, indent + "    ", depth + 1, in_loop)
        if rng.random() < 0.3:
            lines.append(f"{indent}else:")
            lines += _body(rng, names, indent + "    ", depth + 1, in_loop)
    elif depth < 2 and roll < 0.6:
        var = f"k{depth}"
        start = rng.choice(["0", "0", "1", f"{rng.choice(names)} * 2", "i"])
        stop = rng.choice(["n", "m", "3", f"{start} + 2", f"{start} + n"])
        step = rng.choice(["", "", ", 2"])
        lines.append(f"{indent}for {var} in range({start}, {stop}{step}):")
        lines += _body(rng, names + [var], indent + "    ", depth + 1, True)
    else:
        lines.append(f"{indent}c[{_store_index(rng, names)}] = 1")
    return lines


def _store_index(rng: random.Random, names: list[str]) -> str:
    """Mostly an index that covers a buffer for some sizes (row-major ids, chunks)."""
    if rng.random() < 0.3:
        return _index(rng, names)
    loops = [n for n in names if n.startswith("k")]
    return rng.choice(["i", "j * hpvm.num_instances(0) + i", "i * hpvm.num_instances(1) + j",
                       "i * n + j", "(hpvm.num_instances(0) - 1 - i)", "i - 1", "i + 1"] +
                      [f"{k} + {rng.choice(['0', 'i', 'i * 2', 'i * n', 'j * n'])}" for k in loops])


def _interleaved(rng: random.Random, k: int) -> list[str]:
    """Stores that cover a buffer only together: some of the k elements of each instance's group
    (`c[k * i + r]`), each sometimes under a condition, sometimes with a stray store."""
    flat = rng.choice(["i", "j * hpvm.num_instances(0) + i", "i * n + j"])
    lines = []
    for r in rng.sample(range(k), rng.randint(1, k)) + ([k] if rng.random() < 0.1 else []):
        store = f"c[{k} * ({flat}) + {r}] = 1"
        if rng.random() < 0.25:
            lines += [f"    if {_condition(rng, ['i', 'j', 'n', 'm'])}:", f"        {store}"]
        else:
            lines.append(f"    {store}")
    return lines


def _group(seed: int) -> int:
    """How many elements each instance of the seed's leaf writes (1: not interleaved)."""
    rng = random.Random(seed)
    return rng.choice([2, 2, 3, 4]) if rng.random() < 0.3 else 1


def _program(seed: int) -> str:
    rng = random.Random(seed)
    k = _group(seed)
    if k > 1:
        lines = _interleaved(rng, k)
    else:
        lines = _body(rng, ["i", "j", "n", "m"], "    ", 0)
    if not any("c[" in line for line in lines):
        lines.append(f"    c[{_store_index(rng, ['i', 'j', 'n', 'm'])}] = 1")
    body = "\n".join(lines)
    return f'''import hpvm_py as hpvm
from hpvm_py import In, Out, Ptr, i8, i64, u8


@hpvm.leaf
def gen(a: In[Ptr[i64]], a_bytes: i64, c: Out[Ptr[i64]], c_bytes: i64, n: i64, m: i64):
    i = hpvm.instance_id(0)
    j = hpvm.instance_id(1)
{body}


@hpvm.graph
def root(a: In[Ptr[i64]], a_bytes: i64, c: Out[Ptr[i64]], c_bytes: i64, n: i64, m: i64,
         gx: i64, gy: i64):
    hpvm.node(gen, grid=(gx, gy), a=a, a_bytes=a_bytes, c=c, c_bytes=c_bytes, n=n, m=m)
'''


def test_generated_leaves_never_fool_the_analysis(monkeypatch) -> None:
    """Every launch that skips the copy-in writes every element of the buffer. With the poison
    switch on, the python target fills a buffer it copies in with 0xAB bytes, so a sentinel left
    after a launch is an element that a device would have left as garbage."""
    monkeypatch.setattr(executor, "POISON_OUT", True)
    base = random.randrange(1 << 30)
    covered = launched = 0
    with hpvm.runtime("python"), warnings.catch_warnings():
        warnings.simplefilter("ignore", HPVMWarning)
        for seed in range(base, base + EXAMPLES):
            module = load(_program(seed))
            rng = random.Random(seed)
            for _ in range(3):
                gx, gy, n, m = (rng.randint(0, 6), rng.randint(1, 4), rng.randint(0, 6),
                                rng.randint(0, 6))
                size = rng.choice([gx * gy, gx, n * m, n, rng.randint(0, 30)]) * \
                    (_group(seed) if rng.random() < 0.8 else rng.randint(1, 4))
                a = np.array([rng.randint(-3, 3) for _ in range(4)], np.int64)
                c = np.full(size, SENTINEL, np.int64)
                try:
                    hpvm.wait(hpvm.launch(module.root, a, a.nbytes, c, c.nbytes, n, m, gx, gy))
                except ExecutionError:
                    continue  # an index out of bounds: the launch fails whatever is copied
                launched += 1
                assert not np.any(c == SENTINEL), f"seed {seed} {(gx, gy, n, m)}: left {c}"
                covered += "c" not in uncovered(module.gen, [(gx, gy)], c=size, n=n, m=m) and size > 0
    assert launched > EXAMPLES and covered > EXAMPLES // 20, (launched, covered)


def test_progressions_union_matches_a_brute_force_count() -> None:
    """passes/progressions.py: the first index no set holds, against the sets written out."""
    from hpvm_py.passes.progressions import Progression, TooIrregular, first_missing

    rng = random.Random()
    checked = 0
    for _ in range(5000):
        sets = [Progression.of(rng.randint(-5, 12), rng.randint(1, 6), rng.randint(0, 12))
                for _ in range(rng.randint(1, 4))]
        n = rng.randint(0, 30)
        held = {s.start + s.stride * m for s in sets for m in range(s.count)}
        expected = next((k for k in range(n) if k not in held), None)
        try:
            assert first_missing(sets, n) == expected, (sets, n)
        except TooIrregular:
            continue
        checked += 1
        if len(sets) == 1:
            assert sets[0].covers(n) == (expected is None), (sets, n)
    assert checked > 4000
