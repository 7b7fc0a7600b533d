"""Small known defects, fixed (the leftovers of earlier hunts).

What was wrong:
- `hpvm.types.bf16_from_bits(70000)` raised NumPy's OverflowError, where a NumPy int64 of the
  same value wrapped; a float (1.5, a value where bits were meant) was read as its integer part.
- a bad HPVM_CPU_NONTEMPORAL was refused only by a kernel with a store that qualifies for
  non-temporal stores (a write-only output): any other cpu launch ran under it.
- a malloc of a negative size read differently on each target (python: "a negative size (-8)",
  cpu: "a size is negative, or the sizes ... add up to more than 2**63 - 1 bytes", gpu: "malloc()
  of -8 bytes: a size cannot be negative", without the leaf's name); python's was at column 1.
- the nvptx target listed a launch's chunks (launches of at most 65535 blocks in y and z) at
  once: 2**46 of them for 2**62 parent instances, a MemoryError before the launch.
- docs/security.md did not say that textual IR can make an error's snippet show a line of any
  file the process can read (its `file` lines name any path); documented, with why there is no
  rule that restricts it.
- HPVM_CPU_LEVEL set after a graph's first launch changed nothing for that graph (it keeps the
  kernels it was compiled with), which docs/settings.md did not say; documented there.
"""
from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import hpvm_py as hpvm
from conftest import ROOT, TARGETS, child_pythonpath
from hpvm_py import In, InOut, Out, Ptr, f32, i64
from hpvm_py.backends import jit, registry
from hpvm_py.backends.nvptx import toolchain
from hpvm_py.errors import ExecutionError, LaunchError
from hpvm_py.types import bf16_from_bits


# -- bf16_from_bits: integers, of which the low 16 bits count --------------------------------------


def _reference(bits: int) -> float:
    return float((np.array([bits & 0xFFFF], np.uint32) << np.uint32(16)).view(np.float32)[0])


def test_bf16_from_bits_takes_the_low_16_bits_of_any_integer(rng: np.random.Generator) -> None:
    """Python ints of any size and sign, NumPy integers and integer arrays: the low 16 bits, as
    hpvm.u16 keeps them (70000 raised NumPy's OverflowError; np.int64(70000) wrapped)."""
    low = rng.integers(0, 1 << 16, 64)
    high = rng.integers(-(1 << 20), 1 << 20, 64)
    ints = [int(lo) + (int(hi) << 16) for lo, hi in zip(low, high)] + [70000, -1, (1 << 70) + 0x3fc0]
    for value in ints:
        for given in (value, np.int64(value) if -(1 << 63) <= value < 1 << 63 else value):
            got = float(bf16_from_bits(given))
            want = _reference(value)
            assert got == want or (np.isnan(got) and np.isnan(want)), (value, got, want)
    array = np.array(ints[:-1], np.int64)
    np.testing.assert_array_equal(bf16_from_bits(array), [_reference(v) for v in ints[:-1]])
    np.testing.assert_array_equal(bf16_from_bits(ints), [_reference(v) for v in ints])
    assert float(bf16_from_bits(0x3fc0)) == 1.5 == float(bf16_from_bits(np.uint16(0x3fc0)))


@pytest.mark.parametrize("value", [1.5, float("nan"), np.float32(2.0), np.array([1.0]), "1", None])
def test_bf16_from_bits_refuses_what_is_no_bit_pattern(value: object) -> None:
    with pytest.raises(TypeError, match="bf16_from_bits"):
        bf16_from_bits(value)


# -- HPVM_CPU_NONTEMPORAL: a bad value is refused at every cpu launch ------------------------------


@hpvm.leaf
def bump(a: InOut[Ptr[f32]], a_bytes: i64):
    i = hpvm.instance_id(0)
    a[i] = a[i] + 1.0  # an InOut buffer: no store qualifies for non-temporal stores


@hpvm.graph
def bump_graph(a: InOut[Ptr[f32]], a_bytes: i64, n: i64):
    hpvm.node(bump, grid=n, a=a, a_bytes=a_bytes)


@pytest.mark.skipif(not registry.available("cpu"), reason="needs the cpu target")
@pytest.mark.parametrize("value", ["bogus", "ON", " off"])
def test_a_bad_store_setting_is_refused_when_no_store_qualifies(
        value: str, rng: np.random.Generator, monkeypatch: pytest.MonkeyPatch) -> None:
    """The value was checked only where a store qualified (a write-only output): a kernel with
    none ran under any value. It is read at every launch now, as HPVM_CPU_LEVEL is at compile."""
    n = 256
    a = rng.standard_normal(n).astype(np.float32)
    want = a + np.float32(1.0)
    monkeypatch.setenv("HPVM_CPU_NONTEMPORAL", value)
    with hpvm.runtime("cpu"):
        with pytest.raises(LaunchError, match=f"HPVM_CPU_NONTEMPORAL={value!r}: expected auto, "
                                              "on or off") as caught:
            hpvm.wait(hpvm.launch(bump_graph, a, a.nbytes, n))
        assert caught.value.loc is not None and caught.value.loc.file == __file__
        monkeypatch.setenv("HPVM_CPU_NONTEMPORAL", "off")
        hpvm.wait(hpvm.launch(bump_graph, a, a.nbytes, n))
        hpvm.request_memory(a)
    np.testing.assert_array_equal(a, want)


# -- a malloc of a negative size: one message on every target -------------------------------------


@hpvm.leaf
def two_mallocs(a: InOut[Ptr[f32]], a_bytes: i64, k: i64):
    s = hpvm.malloc(64, hpvm.f32)
    t = hpvm.malloc(k, hpvm.f32)
    i = hpvm.instance_id(0)
    a[i] = a[i] + s[0] + t[0]


@hpvm.graph
def two_mallocs_graph(a: InOut[Ptr[f32]], a_bytes: i64, n: i64, k: i64):
    hpvm.node(two_mallocs, grid=n, a=a, a_bytes=a_bytes, k=k)


MALLOC_LINE = two_mallocs.pyfunc.__code__.co_firstlineno + 3  # (the decorator, the def, s, t)


def _malloc_message(target: str, k: int) -> str:
    a = np.zeros(8, np.float32)
    with hpvm.runtime(target):
        with pytest.raises(ExecutionError) as caught:
            hpvm.wait(hpvm.launch(two_mallocs_graph, a, a.nbytes, 8, k))
    return str(caught.value)


@pytest.mark.parametrize("kind", ["random", "-1", "smallest"])
def test_a_negative_malloc_reads_the_same_on_every_target(kind: str, rng: np.random.Generator) -> None:
    """python said "a negative size (-8)", cpu "a size is negative, or the sizes of this leaf's
    mallocs add up to more than 2**63 - 1 bytes", gpu "malloc() of -8 bytes: a size cannot be
    negative" without the leaf's name: one helper (backends/base.py's negative_malloc) now
    words it for all of them, at the malloc's line and column."""
    k = {"random": -int(rng.integers(1, 1 << 62)), "-1": -1, "smallest": -(1 << 63)}[kind]
    want = (f"{__file__}:{MALLOC_LINE}:5: error: two_mallocs: could not allocate the malloc "
            f"scratch: a negative size ({k})")
    for target in [t for t in TARGETS if t != "nvptx"]:
        assert _malloc_message(target, k).splitlines()[0] == want, target


# -- nvptx: the launches of a grid of 2**62 parent instances, made as they are issued -------------

CHUNKS_CHILD = r'''
import resource, sys
sys.path.insert(0, sys.argv[1])
import hpvm_py as hpvm
from programs import geometry_leaves as G

(_, _, kernel), = hpvm.compile(G.CASES["h2"], target="nvptx").leaf_kernels()
with open("/proc/self/statm") as f:
    used = int(f.read().split()[0]) * resource.getpagesize()
resource.setrlimit(resource.RLIMIT_AS, (used + (512 << 20), resource.RLIM_INFINITY))
parents = int(sys.argv[2])
_, counted, leaves, block, chunks = kernel._shape([(1,), (1, parents)])
assert counted == parents and leaves == 1, (counted, leaves)
first = []
for chunk in chunks:
    first.append(chunk)
    if len(first) == 3:
        break
print(repr((block, first)))
'''


@pytest.mark.skipif(toolchain.ptxas_path() is None, reason="ptxas is not installed")
def test_nvptx_chunks_of_2_62_parents_are_not_listed_at_once(rng: np.random.Generator) -> None:
    """The flat mapping's launches (at most 65535 blocks in y and z each) were built as one list:
    about 2**46 entries for 2**62 parent instances, a MemoryError (an internal error) before the
    launch. Under a memory limit of 512 MiB past what the child uses, they come one at a time:
    the first three are those of the old list, each covering 65535 blocks of (z, parent) pairs."""
    parents = (1 << 62) - int(rng.integers(0, 1 << 20))
    child = subprocess.run([sys.executable, "-c", CHUNKS_CHILD, str(Path(__file__).parent),
                            str(parents)], capture_output=True, text=True, timeout=300,
                           env=dict(os.environ, PYTHONPATH=child_pythonpath(ROOT)))
    assert child.returncode == 0, child.stderr[-2000:]
    block, first = ast.literal_eval(child.stdout)
    bz = block[2]
    assert first == [((1, 1, 65535), 0, 0), ((1, 1, 65535), 0, 65535 * bz),
                     ((1, 1, 65535), 0, 2 * 65535 * bz)]


# -- textual IR: a `file` line shows a line of any readable file in a snippet, as documented -------

SNIPPET_IR = '''version 1
module @root
file 0 "{path}"
graph @root(%a: inout ptr<f32>, %a_bytes: i64) -> () @0:1:0 {{
  node %n = @reach [4] @0:1:0
  bind_in %a -> %n.0 @0:1:0
  bind_in %a_bytes -> %n.1 @0:1:0
}}
leaf @reach(%a: inout ptr<f32>, %a_bytes: i64) -> () target(any) @0:1:0 {{
  store %a[100:i64] = 1.0:f32 @0:2:0
}}
'''


def test_a_file_line_of_textual_ir_shows_any_readable_file_and_the_trust_model_says_so(
        tmp_path: Path, rng: np.random.Generator) -> None:
    """An error's snippet reads the line a location names from the file its `file` line names,
    whatever that file is: IR from someone else can show a line of a file that is no source.
    docs/security.md's trust model said textual IR may only describe graphs and leaves."""
    token = f"TOKEN = {int(rng.integers(1 << 62)):x}"
    secret = tmp_path / "credentials"
    secret.write_text(f"[default]\n{token}\n")
    graph = hpvm.from_text(SNIPPET_IR.format(path=secret))
    a = np.zeros(4, np.float32)
    with hpvm.runtime("python"):
        with pytest.raises(ExecutionError, match="out-of-bounds") as caught:
            hpvm.wait(hpvm.launch(graph, a, a.nbytes))
    assert token in str(caught.value)
    trust = (ROOT / "docs" / "security.md").read_text()
    row = next(line for line in trust.splitlines() if line.startswith("| textual IR"))
    assert "one line of any regular file this process can read" in row
    assert "No simple rule tells a program's source from a secret" in trust


# -- HPVM_CPU_LEVEL is read when a graph is compiled, as documented --------------------------------


@hpvm.leaf
def double(a: In[Ptr[f32]], a_bytes: i64, c: Out[Ptr[f32]], c_bytes: i64):
    i = hpvm.instance_id(0)
    c[i] = a[i] * 2.0


@hpvm.graph
def double_first(a: In[Ptr[f32]], a_bytes: i64, c: Out[Ptr[f32]], c_bytes: i64, n: i64):
    hpvm.node(double, grid=n, a=a, a_bytes=a_bytes, c=c, c_bytes=c_bytes)


@hpvm.graph
def double_later(a: In[Ptr[f32]], a_bytes: i64, c: Out[Ptr[f32]], c_bytes: i64, n: i64):
    hpvm.node(double, grid=n, a=a, a_bytes=a_bytes, c=c, c_bytes=c_bytes)


@pytest.mark.skipif(not registry.available("cpu"), reason="needs the cpu target")
def test_a_cpu_level_set_after_a_graph_compiled_is_for_the_graphs_compiled_later(
        rng: np.random.Generator, monkeypatch: pytest.MonkeyPatch) -> None:
    """A graph keeps the kernels it was compiled with: HPVM_CPU_LEVEL set after its first launch
    changed nothing for it, which the docs did not say. They say now that the level is read when
    a graph is compiled; a graph compiled after the change gets the level's code."""
    levels = jit.runnable_levels()  # the baseline x86-64 at least, on any machine CI has
    level = str(rng.choice(levels))
    n = 512
    a = rng.standard_normal(n).astype(np.float32)
    monkeypatch.delenv("HPVM_CPU_LEVEL", raising=False)

    def run(graph: object) -> str:
        c = np.zeros(n, np.float32)
        hpvm.wait(hpvm.launch(graph, a, a.nbytes, c, c.nbytes, n))
        hpvm.request_memory(c)
        np.testing.assert_array_equal(c, a * np.float32(2.0))
        (_, _, kernel), = hpvm.compile(graph, target="cpu").leaf_kernels()
        return kernel.cpu[0]

    with hpvm.runtime("cpu"):
        host = run(double_first)
        monkeypatch.setenv("HPVM_CPU_LEVEL", level)
        assert run(double_first) == host
        assert run(double_later) == level
    row = next(line for line in (ROOT / "docs" / "settings.md").read_text().splitlines()
               if line.startswith("| `HPVM_CPU_LEVEL` |"))
    assert "read when a graph is compiled" in row and "a graph compiled before keeps its code" in row
