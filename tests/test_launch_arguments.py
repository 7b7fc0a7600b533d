"""Arguments of launch and push: by position or by name, with the pointers' sizes left out
(filled from the buffers), and a located LaunchError for every call that does not fit."""
from __future__ import annotations

import numpy as np
import pytest

import hpvm_py as hpvm
from hpvm_py.errors import LaunchError
from hpvm_py.rt.args import complete_arguments
from programs import out_coverage as P
from programs import stream_graphs as S

ROOT = P.copy_graph.module().root_func  # (a, a_bytes, c, c_bytes, n)


FORMS = [  # which parameters go by position (in order) and which by name
    (("a", "a_bytes", "c", "c_bytes", "n"), ()),
    (("a", "c", "n"), ()),
    ((), ("a", "c", "n")),
    (("a",), ("c", "n", "c_bytes")),
    (("a", "a_bytes", "c"), ("n",)),
]


@pytest.mark.parametrize("positional, named", FORMS)
def test_every_form_runs_the_same_launch(target: str, rng, positional, named) -> None:
    n = 33
    a = rng.random(n, dtype=np.float32)
    c = np.zeros(n, np.float32)
    values = dict(a=a, a_bytes=a.nbytes, c=c, c_bytes=c.nbytes, n=n)
    with hpvm.runtime(target):
        hpvm.wait(hpvm.launch(P.copy_graph, *(values[k] for k in positional),
                              **{k: values[k] for k in named}))
    np.testing.assert_array_equal(c, a)


def test_sizes_come_from_the_buffers(rng) -> None:
    a, c = np.zeros(5, np.float32), np.zeros(7, np.float32)
    full = complete_arguments(ROOT, (a, c, 5), {})
    assert full == (a, a.nbytes, c, c.nbytes, 5)
    given = (a, 8, c, 12, 5)
    assert complete_arguments(ROOT, given, {}) is given  # the full form is passed on as it is
    assert complete_arguments(ROOT, (a,), dict(c=c, n=5, a_bytes=4))[1] == 4


@pytest.mark.parametrize("args, kwargs, message", [
    ((1, 2, 3, 4, 5, 6), {}, "got 6"),
    ((), dict(a=0, c=0, n=1, m=2), "no parameter 'm'"),
    ((0, 0, 1), dict(a=0), "given twice"),
    ((0,), {}, "missing c, c_bytes, n"),
])
def test_calls_that_do_not_fit_are_located(args, kwargs, message) -> None:
    with hpvm.runtime("python"):
        with pytest.raises(LaunchError, match=message) as info:
            hpvm.launch(P.copy_graph, *args, **kwargs)
    assert info.value.loc is not None and info.value.loc.file == __file__
    assert "(a, a_bytes, c, c_bytes, n)" in str(info.value) or "parameter" in str(info.value)


def test_push_takes_names_and_leaves_out_sizes(target: str, rng) -> None:
    n = 8
    with hpvm.runtime(target):
        h = hpvm.launch(S.two_stages, stream=True)
        items = []
        for k in range(3):
            x = rng.random(n, dtype=np.float32)
            y = np.zeros(n, np.float32)
            items.append((x, y, np.float32(k + 1)))
            if k == 0:
                hpvm.push(h, x, y, np.float32(k + 1), n, timeout=60)
            else:
                hpvm.push(h, x=x, y=y, k=np.float32(k + 1), n=n, timeout=60)
        for x, y, factor in items:
            (total,) = hpvm.pop(h, timeout=60)
            np.testing.assert_allclose(y, x * factor + 1, rtol=1e-6)
            assert np.isclose(total, float(np.sum(x * factor + 1)), rtol=1e-5)
        hpvm.wait(h, timeout=60)


@pytest.mark.parametrize("layout", ["coo", "csr"])
def test_a_sparse_tensor_is_refused_at_the_launch_line(target: str, layout: str) -> None:
    """A sparse tensor has no nbytes, data pointer or contiguity: it was an internal error where
    the launch left its size out, or read its kind."""
    import torch

    dense = torch.zeros(4, 4)
    sparse = dense.to_sparse() if layout == "coo" else dense.to_sparse_csr()
    c = np.zeros(16, np.float32)
    with hpvm.runtime(target):
        for args in ((sparse, c, 16), (sparse, 64, c, 64, 16)):
            with pytest.raises(LaunchError, match=f"argument 'a' of copy_graph is a torch.sparse_{layout} "
                               "tensor: .* pass tensor.to_dense") as info:
                hpvm.launch(P.copy_graph, *args)
            assert info.value.loc is not None and info.value.loc.file == __file__
        with pytest.raises(hpvm.errors.MemoryTrackingError, match="to_dense"):
            hpvm.track_memory(sparse)


def test_a_meta_tensor_is_refused_as_no_memory(target: str) -> None:
    """A meta tensor has a shape but no memory: it was refused as a tensor on a GPU the graph
    does not run on, with advice to place a node on 'gpu:0'; tracking it failed at the first copy."""
    import torch

    meta = torch.zeros(16, device="meta")
    c = np.zeros(16, np.float32)
    with hpvm.runtime(target):
        hpvm.wait(hpvm.launch(P.copy_graph, torch.zeros(16), c, 16))  # (a CPU tensor's kind checked)
        with pytest.raises(LaunchError, match="argument 'a' of copy_graph is a meta tensor, which has "
                           r"a shape but no memory: pass a CPU or CUDA tensor \[rule: buffer-device") as info:
            hpvm.launch(P.copy_graph, meta, c, 16)
        assert info.value.loc is not None and info.value.loc.file == __file__
        with pytest.raises(hpvm.errors.MemoryTrackingError, match="meta tensor"):
            hpvm.track_memory(meta)


def test_an_ndarray_subclass_is_indexed_as_a_flat_array(target: str) -> None:
    """np.matrix's m[0] is a whole row: the python target's view of a matrix wrote each value
    into every element of the row, where the compiled targets write element i."""
    a = np.matrix(np.arange(6, dtype=np.float32).reshape(2, 3))
    c = np.matrix(np.zeros((2, 3), np.float32))
    with hpvm.runtime(target):
        hpvm.wait(hpvm.launch(P.copy_graph, a, c, 6))
    np.testing.assert_array_equal(np.asarray(c).reshape(-1), np.arange(6, dtype=np.float32))
