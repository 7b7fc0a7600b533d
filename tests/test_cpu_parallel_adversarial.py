"""The cpu target's work splitting, hunted: results must not depend on how a launch is cut up.

A launch on `cpu` runs serially or in partitions over the native pool (kernel.py: `_partition`),
updates private copies of atomically updated buffers and merges them (privatise.py), and may store
non-temporally over whole cache lines (nontemporal.py). Each of those depends on the thread
count, the instance count and the buffers' addresses, so generated launches here vary all three:
HPVM_NUM_THREADS from 1 to 9 (more threads than this machine's cores), instance counts at chunk,
thread, vector and cache-line boundaries, buffers that are NumPy views at element offsets (not
16/32/64-byte aligned), non-temporal stores forced on and off, relaunches with other sizes, and
every atomic op on integer and float types. Each result is compared bit for bit with NumPy.

The bugs found (each has a regression test below):

- privatised float `atomic_add`/`atomic_sub` lost the sign of zero: private copies started at
  +0.0 and the merge skipped elements that still held +0.0, so an element holding -0.0 to which
  the instances added +0.0 stayed -0.0 (IEEE, and every unprivatised launch, give +0.0; no order
  of the additions gives -0.0). Whether a launch privatises depends on its size, so the result
  did too. Copies now start at -0.0, the additive identity, compared by its bits.
- privatisation ignored buffers that share memory: an instance that updated `h` atomically and
  read the same memory through another argument (legal on the host: docs/language.md, rule
  `buffer-overlap`) did not see its own update when the launch was privatised (from 4 instances
  on for two i64 bins), and did see it below that size. Overlapping buffers are not privatised.

Each thread count runs in a subprocess of its own (the pool is made once per process, and a crash
or hang must fail the test, not the run).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import hpvm_py as hpvm
from conftest import TARGETS
from hpvm_py import types as T
from differential.data import load

pytestmark = pytest.mark.skipif("cpu" not in TARGETS, reason="the cpu target cannot run here")

TIMEOUT = 150  # seconds for one subprocess: a hang is a failure
# instance counts around the boundaries the launch path cares about: vectors and cache lines (16,
# 64), the serial thresholds (kernel.py: SERIAL_INSTANCES_WITH_LOOPS, SERIAL_INSTANCES), primes
BOUNDARY_SIZES = [0, 1, 2, 3, 7, 8, 9, 15, 16, 17, 63, 64, 65, 97, 127, 129, 2047, 2049, 4099,
                  32767, 32768, 32769, 65537, 100003]
ATOMIC_OPS = ["add", "sub", "min", "max", "and", "or", "xor"]
INT_TYPES = ["i8", "i16", "i32", "i64", "u8", "u16", "u32", "u64"]

SOURCE = '''
from __future__ import annotations
import hpvm_py as hpvm
from hpvm_py import In, InOut, Out, Ptr, f32, f64, i8, i16, i32, i64, u8, u16, u32, u64

@hpvm.leaf
def mix(a: In[Ptr[f32]], a_bytes: i64, o8: Out[Ptr[i8]], o8_bytes: i64, o32: Out[Ptr[f32]],
        o32_bytes: i64, o64: Out[Ptr[f64]], o64_bytes: i64, c: i64):
    i = hpvm.instance_id(0)
    o32[i] = a[i] + 1.0
    o64[i + c] = f64(a[i]) * 2.0
    o8[i] = i8(i)

@hpvm.graph
def mix_root(a: In[Ptr[f32]], a_bytes: i64, o8: Out[Ptr[i8]], o8_bytes: i64, o32: Out[Ptr[f32]],
             o32_bytes: i64, o64: Out[Ptr[f64]], o64_bytes: i64, c: i64, n: i64):
    hpvm.node(mix, grid=n, a=a, a_bytes=a_bytes, o8=o8, o8_bytes=o8_bytes, o32=o32,
              o32_bytes=o32_bytes, o64=o64, o64_bytes=o64_bytes, c=c)

@hpvm.leaf
def loopy(a: In[Ptr[i32]], a_bytes: i64, o: Out[Ptr[i32]], o_bytes: i64, m: i64):
    i = hpvm.instance_id(0)
    if i >= m:
        return
    v = a[i]
    if v % 7 == 0:
        return
    acc = 0
    for k in range(v % 50):
        acc += k * v
        if acc > 10000:
            break
    o[i] = acc

@hpvm.graph
def loopy_root(a: In[Ptr[i32]], a_bytes: i64, o: Out[Ptr[i32]], o_bytes: i64, m: i64, n: i64):
    hpvm.node(loopy, grid=n, a=a, a_bytes=a_bytes, o=o, o_bytes=o_bytes, m=m)

@hpvm.leaf
def tree(a: In[Ptr[i64]], a_bytes: i64, o: Out[Ptr[i64]], o_bytes: i64, L: i64, P2: i64):
    s = hpvm.malloc(P2 * 8, i64)
    me = hpvm.get_node()
    lid = hpvm.get_node_instance_id_x(me)
    blk = hpvm.get_node_instance_id_x(hpvm.get_parent_node(me))
    s[lid] = a[blk * L + lid]
    hpvm.barrier()
    stride = P2 // 2
    while stride > 0:
        if lid < stride and lid + stride < L:
            s[lid] += s[lid + stride]
        hpvm.barrier()
        stride //= 2
    if lid == 0:
        o[blk] = s[0]

@hpvm.graph
def tree_mid(a: In[Ptr[i64]], a_bytes: i64, o: Out[Ptr[i64]], o_bytes: i64, L: i64, P2: i64):
    hpvm.node(tree, grid=L, a=a, a_bytes=a_bytes, o=o, o_bytes=o_bytes, L=L, P2=P2)

@hpvm.graph
def tree_root(a: In[Ptr[i64]], a_bytes: i64, o: Out[Ptr[i64]], o_bytes: i64, L: i64, P2: i64,
              B: i64):
    hpvm.node(tree_mid, grid=B, a=a, a_bytes=a_bytes, o=o, o_bytes=o_bytes, L=L, P2=P2)

@hpvm.leaf
def aliased(h: InOut[Ptr[i64]], h_bytes: i64, r: In[Ptr[i64]], r_bytes: i64, o: Out[Ptr[i64]],
            o_bytes: i64):
    i = hpvm.instance_id(0)
    hpvm.atomic_add(h, i % 2, 1)
    o[i] = r[i % 2]

@hpvm.graph
def aliased_root(h: InOut[Ptr[i64]], h_bytes: i64, r: In[Ptr[i64]], r_bytes: i64,
                 o: Out[Ptr[i64]], o_bytes: i64, n: i64):
    hpvm.node(aliased, grid=n, h=h, h_bytes=h_bytes, r=r, r_bytes=r_bytes, o=o, o_bytes=o_bytes)
'''

ATOMIC_TEMPLATE = '''
@hpvm.leaf
def h_{op}_{t}(a: In[Ptr[{t}]], a_bytes: i64, k: In[Ptr[i32]], k_bytes: i64, h: InOut[Ptr[{t}]],
              h_bytes: i64):
    i = hpvm.instance_id(0)
    hpvm.atomic_{op}(h, k[i], a[i])

@hpvm.graph
def h_{op}_{t}_root(a: In[Ptr[{t}]], a_bytes: i64, k: In[Ptr[i32]], k_bytes: i64,
                    h: InOut[Ptr[{t}]], h_bytes: i64, n: i64):
    hpvm.node(h_{op}_{t}, grid=n, a=a, a_bytes=a_bytes, k=k, k_bytes=k_bytes, h=h, h_bytes=h_bytes)
'''

_ATOMIC_PAIRS = [(op, t) for op in ATOMIC_OPS for t in INT_TYPES] + \
    [(op, t) for op in ("add", "sub", "min", "max") for t in ("f32", "f64")]


def program_source() -> str:
    return SOURCE + "".join(ATOMIC_TEMPLATE.format(op=op, t=t) for op, t in _ATOMIC_PAIRS)


def _module() -> Any:
    return load(program_source(), f"cpu_parallel_{os.getpid()}")


def _view(n: int, dtype: Any, offset: int, fill: Any) -> np.ndarray:
    """n elements at `offset` elements into a larger array: an address not aligned to a vector
    or a cache line unless offset happens to make it one."""
    return np.full(n + offset + 3, fill, dtype)[offset:offset + n]


def _launch(root: Any, **kwargs: Any) -> None:
    hpvm.wait(hpvm.launch(root, **kwargs), timeout=60)


# -- the checks one subprocess runs (each returns what differed) ----------------------------------


def check_mix(m: Any, n: int, offset: int, c: int, rng: np.random.Generator) -> list[str]:
    a = _view(n, np.float32, offset, 0)
    a[:] = rng.standard_normal(n).astype(np.float32)
    o8 = _view(n, np.int8, (offset * 5) % 7, 3)
    o32 = _view(n, np.float32, offset + 1, 3)
    o64 = _view(n + c, np.float64, (offset * 3) % 8, 3)
    _launch(m.mix_root, a=a, a_bytes=a.nbytes, o8=o8, o8_bytes=o8.nbytes, o32=o32,
            o32_bytes=o32.nbytes, o64=o64, o64_bytes=o64.nbytes, c=c, n=n)
    want64 = np.full(n + c, 3, np.float64)
    want64[c:] = a.astype(np.float64) * 2
    wrong = []
    if o32.tobytes() != (a + np.float32(1)).tobytes():
        wrong.append("o32")
    if o64.tobytes() != want64.tobytes():
        wrong.append("o64")
    if o8.tobytes() != np.arange(n).astype(np.int8).tobytes():
        wrong.append("o8")
    return [f"mix n={n} offset={offset} c={c}: {w}" for w in wrong]


def _loopy_reference(a: np.ndarray, m: int) -> np.ndarray:
    want = np.full(len(a), -3, np.int32)
    for i, v in enumerate(a[:m].tolist()):
        if v % 7 == 0:
            continue
        acc = 0
        for k in range(v % 50):
            acc += k * v
            if acc > 10000:
                break
        want[i] = acc
    return want


def check_loopy(m: Any, n: int, offset: int, rng: np.random.Generator) -> list[str]:
    a = _view(n, np.int32, offset, 0)
    a[:] = rng.integers(-1000, 1000, n)
    limit = int(rng.integers(0, n + 2))
    o = _view(n, np.int32, offset + 2, -3)
    _launch(m.loopy_root, a=a, a_bytes=a.nbytes, o=o, o_bytes=o.nbytes, m=limit, n=n)
    if o.tobytes() != _loopy_reference(a, limit).tobytes():
        return [f"loopy n={n} offset={offset} m={limit}"]
    return []


def check_tree(m: Any, L: int, B: int, rng: np.random.Generator) -> list[str]:
    a = rng.integers(-10**6, 10**6, L * B).astype(np.int64)
    o = np.full(B, -5, np.int64)
    P2 = 1 << max(0, (L - 1).bit_length())
    _launch(m.tree_root, a=a, a_bytes=a.nbytes, o=o, o_bytes=o.nbytes, L=L, P2=P2, B=B)
    if o.tobytes() != a.reshape(B, L).sum(axis=1).tobytes():
        return [f"tree L={L} B={B}"]
    return []


_UFUNCS = {"add": np.add, "sub": np.subtract, "and": np.bitwise_and, "or": np.bitwise_or,
           "xor": np.bitwise_xor}


def _atomic_reference(op: str, h: np.ndarray, k: np.ndarray, a: np.ndarray) -> np.ndarray:
    want = h.copy()
    if op in _UFUNCS:
        with np.errstate(over="ignore"):
            _UFUNCS[op].at(want, k, a)
    else:  # float min/max are fmin/fmax (NaN ignored, -0 < +0): no NaN or zero is generated
        (np.fmin if op == "min" else np.fmax).at(want, k, a)
    return want


def check_atomic(m: Any, op: str, t: str, n: int, bins: int, offset: int,
                 rng: np.random.Generator) -> list[str]:
    dtype = np.dtype(T.SCALAR_TYPES[t].numpy_dtype)
    a = _view(n, dtype, offset, 0)
    h = _view(bins, dtype, offset + 1, 0)
    if dtype.kind == "f":  # quarters: every order of the sums gives the same bits
        a[:] = np.round(rng.uniform(-100, 100, n) * 4) / 4
        h[:] = np.round(rng.uniform(-100, 100, bins) * 4) / 4
        if op in ("add", "sub") and rng.random() < 0.5:  # signed zeros (fmin's -0 < +0 is not
            a[:] = np.where(rng.random(n) < 0.5, 0.0, -0.0)  # NumPy's: sums only)
            h[:] = -0.0
    else:
        info = np.iinfo(dtype)
        a[:] = rng.integers(info.min, info.max, n, dtype=dtype, endpoint=True)
        h[:] = rng.integers(info.min, info.max, bins, dtype=dtype, endpoint=True)
    k = rng.integers(0, bins, n).astype(np.int32)
    want = _atomic_reference(op, h, k, a)
    _launch(getattr(m, f"h_{op}_{t}_root"), a=a, a_bytes=a.nbytes, k=k, k_bytes=k.nbytes, h=h,
            h_bytes=h.nbytes, n=n)
    if h.tobytes() != want.tobytes():
        return [f"atomic_{op} {t} n={n} bins={bins} offset={offset}: {h[:4]} != {want[:4]}"]
    return []


def run_generated(seed: int, examples: int) -> list[str]:
    """What one process (one thread count, set by the parent) finds wrong in `examples` launches
    of each kind, relaunching the same kernels with other sizes."""
    warnings.simplefilter("ignore")  # partial Out buffers warn: expected here
    m = _module()
    rng = np.random.default_rng(seed)
    found: list[str] = []
    with hpvm.runtime("cpu"):
        for _ in range(examples):
            n = int(rng.choice(BOUNDARY_SIZES))
            offset = int(rng.integers(0, 17))
            found += check_mix(m, n, offset, int(rng.integers(0, 9)), rng)
            found += check_loopy(m, min(n, 40000), offset, rng)
            L = int(rng.choice([1, 2, 3, 16, 17, 63, 129]))
            found += check_tree(m, L, int(rng.choice([0, 1, 2, 5, 9, 64, 257])), rng)
            # three of any kind, and a float sum: the only privatised float atomics
            pairs = [_ATOMIC_PAIRS[int(rng.integers(len(_ATOMIC_PAIRS)))] for _ in range(3)]
            pairs.append((str(rng.choice(["add", "sub"])), str(rng.choice(["f32", "f64"]))))
            for op, t in pairs:
                found += check_atomic(m, op, t, n, int(rng.choice([1, 2, 3, 7, 64])), offset, rng)
    return found


def _child(seed: int, examples: int, threads: int, nontemporal: str) -> list[str]:
    env = dict(os.environ, HPVM_NUM_THREADS=str(threads), HPVM_CPU_NONTEMPORAL=nontemporal)
    tests = Path(__file__).resolve().parent
    env["PYTHONPATH"] = os.pathsep.join([str(tests.parent), str(tests),
                                         env.get("PYTHONPATH", "")])
    code = ("import json, test_cpu_parallel_adversarial as t; "
            f"print(json.dumps(t.run_generated({seed}, {examples})))")
    try:
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                              timeout=TIMEOUT, env=env, cwd=tests)
    except subprocess.TimeoutExpired:
        return [f"threads={threads} nontemporal={nontemporal}: no answer in {TIMEOUT} s (a hang)"]
    if done.returncode != 0:
        return [f"threads={threads} nontemporal={nontemporal}: exit {done.returncode}\n"
                f"{done.stderr[-3000:]}"]
    return [f"threads={threads} nontemporal={nontemporal} seed={seed}: {line}"
            for line in json.loads(done.stdout.strip().splitlines()[-1])]


@pytest.mark.parametrize("threads,nontemporal", [(1, "off"), (2, "on"), (3, "auto"), (9, "on")])
def test_generated_launches_do_not_depend_on_the_split(threads: int, nontemporal: str) -> None:
    found = _child(seed=1000 + threads, examples=6, threads=threads, nontemporal=nontemporal)
    assert not found, "\n".join(found)


# -- the bugs found, each alone ----------------------------------------------------------------


@pytest.mark.parametrize("t", ["f32", "f64"])
@pytest.mark.parametrize("op,value", [("add", 0.0), ("sub", -0.0)])
@pytest.mark.parametrize("n", [1, 100, 5000, 70000])
def test_privatised_float_sums_keep_ieee_signed_zeros(t: str, op: str, value: float,
                                                      n: int) -> None:
    """-0.0 + +0.0 is +0.0 (and -0.0 - -0.0 too) whether or not a launch privatises its
    buffer; an element no instance touches keeps its -0.0, one that only gets -0.0 added too."""
    m = _module()
    dtype = np.float32 if t == "f32" else np.float64
    a = np.full(n, value, dtype)
    k = (np.arange(n) % 2).astype(np.int32)  # bins 0 and 1 get the updates, bin 2 none
    h = np.full(3, -0.0, dtype)
    with hpvm.runtime("cpu"):
        _launch(getattr(m, f"h_{op}_{t}_root"), a=a, a_bytes=a.nbytes, k=k, k_bytes=k.nbytes,
                h=h, h_bytes=h.nbytes, n=n)
    updated = [0.0, 0.0 if n > 1 else -0.0, -0.0]
    assert np.signbit(h).tolist() == np.signbit(np.array(updated)).tolist(), h
    same = np.full(n, -0.0 if op == "add" else 0.0, dtype)  # adds -0.0: every element stays -0.0
    h = np.full(3, -0.0, dtype)
    with hpvm.runtime("cpu"):
        _launch(getattr(m, f"h_{op}_{t}_root"), a=same, a_bytes=same.nbytes, k=k,
                k_bytes=k.nbytes, h=h, h_bytes=h.nbytes, n=n)
    assert np.signbit(h).all(), h


@pytest.mark.parametrize("target, n", [("cpu", n) for n in (1, 4, 63, 3000, 40000)] +
                         [(t, n) for t in TARGETS if t in ("gpu", "nvptx") for n in (4, 300)])
def test_privatised_atomics_seen_through_an_overlapping_argument(target: str, n: int) -> None:
    """An instance reads its own atomic update through another argument on the same memory (the
    gpu target's private counts hid it as the cpu target's privatised copies did)."""
    m = _module()
    h = np.zeros(2, np.int64)
    o = np.zeros(n, np.int64)
    with hpvm.runtime(target):
        _launch(m.aliased_root, h=h, h_bytes=h.nbytes, r=h, r_bytes=h.nbytes, o=o,
                o_bytes=o.nbytes, n=n)
    assert h.tolist() == [(n + 1) // 2, n // 2]
    assert o.min() >= 1 and o.max() <= (n + 1) // 2, (o.min(), o.max())
    if target != "cpu":
        return  # (host views of one array, copied apart to a device, are refused: buffer-overlap)
    # overlapping, not identical: the buffer read is a longer array that starts with h
    whole = np.zeros(5, np.int64)
    with hpvm.runtime(target):
        _launch(m.aliased_root, h=whole[:2], h_bytes=16, r=whole, r_bytes=whole.nbytes, o=o,
                o_bytes=o.nbytes, n=n)
    assert whole.tolist() == [(n + 1) // 2, n // 2, 0, 0, 0]
    assert o.min() >= 1, o.min()
