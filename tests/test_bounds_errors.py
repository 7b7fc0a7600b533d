"""Out-of-bounds accesses read the same on every target: the python target's checks and the
compiled targets' checked variants name the rule (memory-in-bounds), the access's own line and
column, the variable (a malloc'd buffer by its name), "atomic" for atomics, and say when a buffer
holds no element at all."""
from __future__ import annotations

import numpy as np
import pytest

import hpvm_py as hpvm
from hpvm_py import In, InOut, Out, Ptr, f32, i64
from hpvm_py.errors import ExecutionError

from conftest import TARGETS
from errcheck import check_error, marked_line, program_path
from programs import bounds_errors as B

N = 6


def _root(leaf):
    @hpvm.graph
    def bounds_root(a: In[Ptr[f32]], a_bytes: i64, c: InOut[Ptr[f32]], c_bytes: i64, n: i64):
        hpvm.node(leaf, a=a, a_bytes=a_bytes, c=c, c_bytes=c_bytes, n=n, grid=n)

    return bounds_root


_ROOTS = {}


def _error(leaf, target: str, c_bytes: int | None = None) -> ExecutionError:
    root = _ROOTS.setdefault(leaf.name, _root(leaf))
    a = np.arange(N, dtype=np.float32)
    c = np.zeros(N, np.float32)
    with pytest.raises(ExecutionError) as info:
        with hpvm.runtime(target):
            hpvm.wait(hpvm.launch(root, a, a.nbytes, c, c.nbytes if c_bytes is None else c_bytes, N))
    return info.value


VALID = f"the valid indices are 0 to {N - 1} ({N} elements)"
CASES = [  # (leaf, tag of its line, text of the access, what the error says)
    (B.load_past_end, "load", "a[i + 1]", f"out-of-bounds load from a[{N}]: {VALID}"),
    (B.store_past_end, "store", "c[i + 2]", f"out-of-bounds store to c[{N}]: {VALID}"),
    (B.store_before_start, "negative", "c[1 - i]", f"out-of-bounds store to c[-1]: {VALID}"),
    (B.scratch_past_end, "scratch", "scratch[i + 1]", f"out-of-bounds load from scratch[{N}]: {VALID}"),
    (B.atomic_past_end, "atomic", "hpvm.atomic_add", f"out-of-bounds atomic on c[{N}]: {VALID}"),
    (B.atomic_result_past_end, "atomic-result", "hpvm.atomic_max", f"out-of-bounds atomic on c[{N}]: "),
]


@pytest.mark.parametrize("leaf,tag,access,message", CASES, ids=[c[1] for c in CASES])
def test_out_of_bounds_is_located_at_the_access(target, leaf, tag, access, message):
    exc = _error(leaf, target)
    check_error(exc, ExecutionError, program_path(B), tag, "memory-in-bounds")
    assert message in exc.message, exc.message
    assert exc.message.startswith(f"{leaf.name}: ")
    line = exc.loc.source_line()
    assert exc.loc.col == line.index(access), (exc.loc, line)  # the access's own column


def test_an_empty_buffer_says_so(target):
    exc = _error(B.store_past_end, target, c_bytes=3)  # fewer bytes than one f32
    check_error(exc, ExecutionError, program_path(B), "store", "memory-in-bounds")
    assert "c holds no element (its size in bytes is less than one f32)" in exc.message, exc.message
    assert "-1" not in exc.message


@pytest.mark.skipif(len(TARGETS) < 2, reason="one target only: nothing to compare")
@pytest.mark.parametrize("leaf,tag", [(c[0], c[1]) for c in CASES], ids=[c[1] for c in CASES])
def test_every_target_words_the_error_alike(leaf, tag):
    errors = {t: _error(leaf, t) for t in TARGETS}
    texts = {t: (e.message, e.loc.line, e.loc.col, e.rule) for t, e in errors.items()}
    assert len(set(texts.values())) == 1, texts
    assert texts[TARGETS[0]][1] == marked_line(program_path(B), tag)


# -- a size argument fed per instance ------------------------------------------------------------


@hpvm.leaf
def _four_bytes(n: i64) -> i64:
    return n * 0 + 4  # one f32: smaller than the buffer, and fed per instance


@hpvm.leaf
def _fill_all(y: Out[Ptr[f32]], y_bytes: i64):
    i = hpvm.instance_id(0)
    y[i] = f32(i) + 0.5


@hpvm.graph
def _size_by_edge(y: Out[Ptr[f32]], y_bytes: i64, n: i64):
    sizes = hpvm.node(_four_bytes, grid=n, n=n)
    hpvm.node(_fill_all, grid=n, y=y, y_bytes=sizes.out[0])


@pytest.mark.parametrize("target", TARGETS)
def test_a_size_fed_per_instance_bounds_nothing_but_the_buffer(target: str) -> None:
    """Only a size that is one value for every instance bounds the accesses; one fed by a
    one-to-one edge does not, on any target (the python target crashed on it)."""
    y = np.zeros(6, np.float32)
    with hpvm.runtime(target):
        hpvm.wait(hpvm.launch(_size_by_edge, y, 24, 6))
    np.testing.assert_array_equal(y, np.arange(6, dtype=np.float32) + 0.5)
