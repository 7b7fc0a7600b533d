"""Leaf atomics, barrier() and malloc(), hunted (every target; results against NumPy).

What was wrong:
- on the gpu target run by Triton's interpreter, `atomic_xchg` on an f32 or f64 buffer failed
  the launch ("Unsupported data type": the interpreter exchanges integers only).
- the cpu target's error for a malloc it could not allocate (a negative size, or too much) named
  the leaf by its IR name (`grow_2`), not by its def's.
- on the gpu target, malloc scratch the device could not allocate (or mallocs adding up to more
  than 2**63 - 1 bytes) raised torch's allocation error as an internal error at the launch
  line, not an ExecutionError at the malloc's line.
- the nvptx launcher took a malloc of a negative size as 0 bytes and ran the launch (the other
  targets fail it at the malloc).
- the textual IR's type check let `atomic.xor<f32>` (and/or/xor on a float buffer) through: the
  python target failed with NumPy's message, the cpu target with an internal LLVM parsing error.
"""
from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import hpvm_py as hpvm
from hpvm_py.backends.nvptx import device, toolchain
from hpvm_py.rt.compiler import compile_graph

SOURCE = '''
import hpvm_py as hpvm
from hpvm_py import In, InOut, Out, Ptr, i64, f32, f64


@hpvm.leaf
def swap_{t}(a: In[Ptr[{t}]], a_bytes: i64, k: In[Ptr[i64]], k_bytes: i64, h: InOut[Ptr[{t}]],
             h_bytes: i64, old: Out[Ptr[{t}]], old_bytes: i64):
    i = hpvm.instance_id(0)
    old[i] = hpvm.atomic_xchg(h, k[i], a[i])


@hpvm.graph
def swaps_{t}(a: In[Ptr[{t}]], a_bytes: i64, k: In[Ptr[i64]], k_bytes: i64, h: InOut[Ptr[{t}]],
              h_bytes: i64, old: Out[Ptr[{t}]], old_bytes: i64, n: i64):
    hpvm.node(swap_{t}, grid=n, a=a, a_bytes=a_bytes, k=k, k_bytes=k_bytes, h=h, h_bytes=h_bytes,
              old=old, old_bytes=old_bytes)
'''


def _load(source: str, folder: Path, name: str) -> Any:
    path = folder / f"{name}.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def _bits(values: np.ndarray) -> list[bytes]:
    return sorted(v.tobytes() for v in values)


@pytest.mark.parametrize("t", ["f32", "f64"])
def test_float_exchange_hands_every_value_on_once(target: str, t: str, tmp_path: Path,
                                                  rng: np.random.Generator) -> None:
    """Instances exchanging into a few elements: per element, the old values returned and the
    final value are the initial value and the values exchanged in, each once (bit for bit: -0.0,
    NaN and infinities included), in whatever order the instances ran."""
    module = _load(SOURCE.format(t=t), tmp_path, f"atomics_swap_{t}")
    dtype = np.float32 if t == "f32" else np.float64
    special = np.array([0.0, -0.0, np.inf, -np.inf, np.nan], dtype)
    n, bins = int(rng.integers(50, 300)), int(rng.integers(1, 5))
    a = np.where(rng.random(n) < 0.2, rng.choice(special, n), rng.normal(size=n) * 1e3).astype(dtype)
    k = rng.integers(0, bins, n).astype(np.int64)
    h = rng.normal(size=bins).astype(dtype)
    start, old = h.copy(), np.zeros(n, dtype)
    with hpvm.runtime(target=target):
        hpvm.wait(hpvm.launch(getattr(module, f"swaps_{t}"), a, k, h, old, n))
    for b in range(bins):
        mine = k == b
        assert _bits(np.append(old[mine], h[b])) == _bits(np.append(a[mine], start[b])), (target, b)


NEGATIVE = '''
import hpvm_py as hpvm
from hpvm_py import InOut, Ptr, i64


@hpvm.leaf
def grow(a: InOut[Ptr[i64]], a_bytes: i64, n: i64):
    i = hpvm.instance_id(0)
    s = hpvm.malloc(n * 8 - 64, hpvm.i64)
    a[i] = s[0] + 1


@hpvm.graph
def grows(a: InOut[Ptr[i64]], a_bytes: i64, n: i64):
    hpvm.node(grow, grid=n, a=a, a_bytes=a_bytes, n=n)
'''


def test_a_negative_malloc_names_the_leaf_as_its_def_does(target: str, tmp_path: Path) -> None:
    """Loaded twice, the leaf's IR name gets a suffix (grow_2); the error of a malloc of a
    negative size (a launch error on every target) names the def, at the malloc's line."""
    _load(NEGATIVE, tmp_path, "atomics_grow_first")
    module = _load(NEGATIVE, tmp_path, "atomics_grow_second")
    a = np.zeros(4, np.int64)
    with hpvm.runtime(target=target):
        with pytest.raises(hpvm.errors.ExecutionError) as caught:
            hpvm.wait(hpvm.launch(module.grows, a, 4))
    error = caught.value
    assert error.loc is not None and error.loc.line == 9, (target, error.loc)
    assert not re.search(r"\bgrow_\d", str(error)), (target, str(error))


HUGE = '''
import hpvm_py as hpvm
from hpvm_py import InOut, Ptr, i64


@hpvm.leaf
def vast(a: InOut[Ptr[i64]], a_bytes: i64, n: i64):
    i = hpvm.instance_id(0)
    s = hpvm.malloc(n * 2**59, hpvm.i64)
    t = hpvm.malloc(n * 2**59 * {second}, hpvm.i64)
    s[a[i]] = i
    t[a[i]] = i
    a[i] = s[a[(i + 1) % n]] + t[a[i]]


@hpvm.graph
def vasts(a: InOut[Ptr[i64]], a_bytes: i64, n: i64):
    hpvm.node(vast, grid=n, a=a, a_bytes=a_bytes, n=n)
'''


@pytest.mark.parametrize("second", [0, 1])
def test_scratch_that_cannot_be_allocated_fails_at_its_malloc(target: str, second: int,
                                                               tmp_path: Path) -> None:
    """4 EiB of scratch (no machine has it), alone or with a second malloc that takes the sizes
    past 2**63 - 1 bytes: an ExecutionError at a malloc's line on every target (the gpu target
    raised torch's allocation error as an internal error at the launch). On a GPU, nvptx's
    scratch is shared memory: 4 EiB alone is its LaunchError of the block's limit, at the malloc."""
    module = _load(HUGE.format(second=second), tmp_path, f"atomics_vast_{second}")
    a = np.zeros(8, np.int64)
    with hpvm.runtime(target=target):
        with pytest.raises((hpvm.errors.ExecutionError, hpvm.errors.LaunchError)) as caught:
            hpvm.wait(hpvm.launch(module.vasts, a, 8))
    error = caught.value
    assert isinstance(error, hpvm.errors.ExecutionError) or \
        (target, second, error.rule) == ("nvptx", 0, "nvptx-shared-memory"), (target, error)
    assert error.loc is not None and error.loc.line in (9, 10), (target, error)


SHRINK = '''
import hpvm_py as hpvm
from hpvm_py import InOut, Ptr, i64


@hpvm.leaf
def shrink(a: InOut[Ptr[i64]], a_bytes: i64, n: i64):
    i = hpvm.instance_id(0)
    s = hpvm.malloc({size}, hpvm.i64)
    a[i] = 1


@hpvm.graph
def shrinks(a: InOut[Ptr[i64]], a_bytes: i64, n: i64):
    hpvm.node(shrink, grid=n, a=a, a_bytes=a_bytes, n=n)
'''


@pytest.mark.skipif(toolchain.ptxas_path() is None, reason="ptxas is not installed")
@pytest.mark.parametrize("size", ["n * 8 - 64", "-8"])
def test_nvptx_refuses_a_negative_malloc(size: str, tmp_path: Path,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """The nvptx launcher sizes the block's shared memory on the host: a negative size (from
    the launch's scalars, or a constant) fails the launch at the malloc, as on the other targets
    (it was taken as 0 bytes, and the launch ran)."""
    module = _load(SHRINK.format(size=size), tmp_path, f"atomics_shrink_{len(size)}")
    monkeypatch.setattr(device, "limits", lambda ordinal: {  # an H100's, without a GPU here
        "threads": 1024, "block_x": 1024, "block_y": 1024, "block_z": 64, "shared": 227 * 1024})
    [(_, _, kernel)] = compile_graph(module.shrinks, "nvptx").leaf_kernels()
    if size != "-8":
        assert kernel._shared([None, 32, 100], [(100,)], 0) == 736  # 92 i64s, 16-byte aligned
    with pytest.raises(hpvm.errors.ExecutionError, match="negative size") as caught:
        kernel._shared([None, 32, 4], [(4,)], 0)
    assert caught.value.loc is not None and caught.value.loc.line == 9


def test_nvptx_sums_scratch_sizes_before_the_block_limit(tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """Two mallocs adding up past 2**63 - 1 bytes: the ExecutionError at the second malloc that
    every target gives, not the shared memory limit's LaunchError (found on an H200)."""
    module = _load(HUGE.format(second=1), tmp_path, "atomics_vast_nvptx")
    monkeypatch.setattr(device, "limits", lambda ordinal: {  # an H100's, without a GPU here
        "threads": 1024, "block_x": 1024, "block_y": 1024, "block_z": 64, "shared": 227 * 1024})
    [(_, _, kernel)] = compile_graph(module.vasts, "nvptx").leaf_kernels()
    with pytest.raises(hpvm.errors.ExecutionError, match="add up to more than") as caught:
        kernel._shared([None, 64, 8], [(8,)], 0)
    assert caught.value.loc is not None and caught.value.loc.line == 10


BITWISE_TEXT = """; hpvm-py textual IR
version 1
module @bits

graph @bits(%h: inout ptr<{t}>, %h_bytes: i64, %n: i64) -> () {{
  node %flip = @flip [%n]
  bind_in %h -> %flip.0
  bind_in %h_bytes -> %flip.1
  bind_in %n -> %flip.2
}}

leaf @flip(%h: inout ptr<{t}>, %h_bytes: i64, %n: i64) -> () target(any) {{
  local %i: i64
  %i = instance_id.x(0)
  do atomic.{op}<{t}>(%h, 0:i64, {one})
}}
"""


@pytest.mark.parametrize("op", ["and", "or", "xor"])
@pytest.mark.parametrize("t", ["f16", "f32", "f64"])
def test_text_bitwise_atomics_on_floats_are_type_errors(op: str, t: str) -> None:
    """The front end refuses `atomic_xor` on floats; a hand-written .hpvm with one passed the
    type check, and then failed with NumPy's message (python) or an internal LLVM parsing error
    (cpu). It is a kernel-types error at its line."""
    with pytest.raises(hpvm.errors.VerificationError, match="kernel-types") as caught:
        hpvm.from_text(BITWISE_TEXT.format(t=t, op=op, one=f"1.0:{t}"))
    assert caught.value.loc is not None and caught.value.loc.line == 15


@pytest.mark.parametrize("op", ["and", "or", "xor"])
def test_text_bitwise_atomics_on_integers_run(target: str, op: str) -> None:
    h = np.full(4, 6, np.int32)
    with hpvm.runtime(target=target):
        hpvm.wait(hpvm.launch(hpvm.from_text(BITWISE_TEXT.format(t="i32", op=op, one="1:i32")), h, 5))
    ufunc = {"and": np.bitwise_and, "or": np.bitwise_or, "xor": np.bitwise_xor}[op]
    assert h[0] == ufunc.reduce(np.array([6] + [1] * 5, np.int32)), (target, op, h)
