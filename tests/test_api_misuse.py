"""Host-API misuse: every mistake is an HPVMError subclass raised at the user's call (the line
marked `# ERR:tag` in this file), never an internal Python exception or a deep internal traceback."""
from __future__ import annotations

import os
import traceback

import numpy as np
import pytest

import hpvm_py as hpvm
from hpvm_py.errors import (ExecutionError, HPVMError, LaunchError, MemoryTrackingError,
                            StreamError)

from errcheck import check_error, marked_line, program_path
from programs import api_prog as P

HERE = os.path.abspath(__file__)
PACKAGE = os.path.dirname(os.path.abspath(hpvm.__file__))


def check_clean(info, cls, tag, path=HERE):
    """The error class and line, and a traceback that stops at the API boundary."""
    exc = info.value
    check_error(exc, cls, path, tag, None)
    inside = [f for f in traceback.extract_tb(info.tb) if f.filename.startswith(PACKAGE)]
    assert [(os.path.basename(f.filename), f.name) for f in inside] in ([], [("boundary.py", "wrapper")]), inside
    assert exc.__cause__ is None or isinstance(exc.__cause__, HPVMError), exc.__cause__
    assert exc.__context__ is None or exc.__suppress_context__ or isinstance(exc.__context__, HPVMError)


@pytest.fixture
def bufs():
    return np.arange(8, dtype=np.float32), np.zeros(8, dtype=np.float32)


@pytest.fixture
def rt():
    with hpvm.runtime("python"):
        yield


def _read_only(n):
    a = np.zeros(n, dtype=np.float32)
    a.flags.writeable = False
    return a


# (tag, error class, the misuse) -- each lambda's call sits on its marked line
A = np.arange(8, dtype=np.float32)
C = np.zeros(8, dtype=np.float32)
LE, ME, SE = LaunchError, MemoryTrackingError, StreamError
launch = hpvm.launch
IN_RUNTIME = [
    ("argc", LE, lambda: launch(P.vinc, A, A.nbytes, C, C.nbytes)),  # ERR:argc
    ("argc-many", LE, lambda: launch(P.vinc, A, 32, C, 32, 8, 9)),  # ERR:argc-many
    ("dtype", LE, lambda: launch(P.vinc, A.astype(np.float64), 64, C, 32, 8)),  # ERR:dtype
    ("int-dtype", LE, lambda: launch(P.vinc, A, 32, C.astype(np.int32), 32, 8)),  # ERR:int-dtype
    ("big-endian", LE, lambda: launch(P.vinc, A.astype(">f4"), 32, C, 32, 8)),  # ERR:big-endian
    ("object-dtype", LE, lambda: launch(P.vinc, np.array([1, None]), 16, C, 32, 8)),  # ERR:object-dtype
    ("noncontig", LE, lambda: launch(P.vinc, np.zeros(16, np.float32)[::2], 32, C, 32, 8)),  # ERR:noncontig
    ("fortran", LE, lambda: launch(P.vinc, np.asfortranarray(A.reshape(2, 4)), 32, C, 32, 8)),  # ERR:fortran
    ("size-too-big", LE, lambda: launch(P.vinc, A, A.nbytes + 4, C, C.nbytes, 8)),  # ERR:size-too-big
    ("negative-size", LE, lambda: launch(P.vinc, A, A.nbytes, C, -4, 8)),  # ERR:negative-size
    ("float-size", LE, lambda: launch(P.vinc, A, 32.0, C, C.nbytes, 8)),  # ERR:float-size
    ("huge-size", LE, lambda: launch(P.vinc, A, 2 ** 70, C, C.nbytes, 8)),  # ERR:huge-size
    ("i8-range", LE, lambda: launch(P.mixed, A, A.nbytes, 300, True, 1.0)),  # ERR:i8-range
    ("i8-range-neg", LE, lambda: launch(P.mixed, A, A.nbytes, -129, True, 1.0)),  # ERR:i8-range-neg
    ("float-for-i64", LE, lambda: launch(P.vinc, A, A.nbytes, C, C.nbytes, 8.0)),  # ERR:float-for-i64
    ("np-float-for-i64", LE, lambda: launch(P.vinc, A, 32, C, 32, np.float32(8))),  # ERR:np-float-for-i64
    ("bool-for-i64", LE, lambda: launch(P.vinc, A, A.nbytes, C, C.nbytes, True)),  # ERR:bool-for-i64
    ("str-for-f32", LE, lambda: launch(P.mixed, A, A.nbytes, 3, True, "1")),  # ERR:str-for-f32
    ("huge-int-for-f32", LE, lambda: launch(P.mixed, A, 32, 3, True, 10 ** 400)),  # ERR:huge-int-for-f32
    ("two-for-i1", LE, lambda: launch(P.mixed, A, A.nbytes, 3, 2, 1.0)),  # ERR:two-for-i1
    ("buffer-for-scalar", LE, lambda: launch(P.vinc, A, A.nbytes, C, C.nbytes, A)),  # ERR:buffer-for-scalar
    ("scalar-for-buffer", LE, lambda: launch(P.vinc, 5, A.nbytes, C, C.nbytes, 8)),  # ERR:scalar-for-buffer
    ("list-for-buffer", LE, lambda: launch(P.vinc, [1.0] * 8, 32, C, 32, 8)),  # ERR:list-for-buffer
    ("read-only-out", LE, lambda: launch(P.vinc, A, 32, _read_only(8), 32, 8)),  # ERR:read-only-out
    ("request-untracked", ME, lambda: hpvm.request_memory(np.zeros(3))),  # ERR:request-untracked
    ("request-list", ME, lambda: hpvm.request_memory([1, 2])),  # ERR:request-list
    ("untrack-untracked", ME, lambda: hpvm.untrack_memory(np.zeros(3))),  # ERR:untrack-untracked
    ("track-list", ME, lambda: hpvm.track_memory([1.0, 2.0])),  # ERR:track-list
    ("launch-leaf", LE, lambda: launch(P.inc_each, A, A.nbytes, C, C.nbytes)),  # ERR:launch-leaf
    ("compile-leaf", LE, lambda: hpvm.compile(P.inc_each, target="python")),  # ERR:compile-leaf
    ("launch-function", LE, lambda: launch(print, 1)),  # ERR:launch-function
    ("launch-list", LE, lambda: launch([P.vinc], 1)),  # ERR:launch-list
    ("compile-target", LE, lambda: hpvm.compile(P.vinc, target="tpu")),  # ERR:compile-target
    ("wait-not-handle", LE, lambda: hpvm.wait(42)),  # ERR:wait-not-handle
    ("push-not-handle", SE, lambda: hpvm.push("handle", 1)),  # ERR:push-not-handle
    ("pop-not-handle", SE, lambda: hpvm.pop(None)),  # ERR:pop-not-handle
]


@pytest.mark.parametrize("tag,cls,misuse", IN_RUNTIME, ids=[c[0] for c in IN_RUNTIME])
def test_misuse_in_runtime(rt, tag, cls, misuse):
    with pytest.raises(HPVMError) as info:
        misuse()
    check_clean(info, cls, tag)


def test_misuse_launches_nothing(rt, bufs):
    """A rejected launch runs no node: the output buffer is untouched."""
    a, c = bufs
    before = hpvm.stats()["launches"]
    with pytest.raises(LaunchError):
        hpvm.launch(P.vinc, a, a.nbytes, c, c.nbytes + 4, 8)
    assert hpvm.stats()["launches"] == before
    assert not c.any()


def test_wait_twice(rt, bufs):
    a, c = bufs
    handle = hpvm.launch(P.vinc, a, a.nbytes, c, c.nbytes, 8)
    assert hpvm.wait(handle) is None
    with pytest.raises(HPVMError) as info:
        hpvm.wait(handle)  # ERR:wait-twice
    check_clean(info, LaunchError, "wait-twice")


@pytest.mark.parametrize("op", ["push", "pop"])
def test_push_pop_on_non_streaming_handle(rt, bufs, op):
    a, c = bufs
    handle = hpvm.launch(P.vinc, a, a.nbytes, c, c.nbytes, 8)
    with pytest.raises(HPVMError) as info:
        if op == "push":
            hpvm.push(handle, a, a.nbytes, c, c.nbytes, 8)  # ERR:push-non-streaming
        else:
            hpvm.pop(handle)  # ERR:pop-non-streaming
    check_clean(info, StreamError, f"{op}-non-streaming")
    hpvm.wait(handle)


def test_untrack_then_request(rt, bufs):
    a, _ = bufs
    hpvm.track_memory(a)
    hpvm.track_memory(a)  # tracking twice is harmless
    hpvm.untrack_memory(a)
    with pytest.raises(HPVMError) as info:
        hpvm.request_memory(a)  # ERR:request-after-untrack
    check_clean(info, MemoryTrackingError, "request-after-untrack")


def test_launch_before_init(bufs):
    a, c = bufs
    with pytest.raises(HPVMError) as info:
        hpvm.launch(P.vinc, a, a.nbytes, c, c.nbytes, 8)  # ERR:before-init
    check_clean(info, LaunchError, "before-init")


def test_track_before_init(bufs):
    with pytest.raises(HPVMError) as info:
        hpvm.track_memory(bufs[0])  # ERR:track-before-init
    check_clean(info, LaunchError, "track-before-init")


def test_launch_after_cleanup(bufs):
    a, c = bufs
    with hpvm.runtime("python"):
        hpvm.wait(hpvm.launch(P.vinc, a, a.nbytes, c, c.nbytes, 8))
    with pytest.raises(HPVMError) as info:
        hpvm.launch(P.vinc, a, a.nbytes, c, c.nbytes, 8)  # ERR:after-cleanup
    check_clean(info, LaunchError, "after-cleanup")


def test_request_after_cleanup(bufs):
    a, c = bufs
    with hpvm.runtime("python"):
        hpvm.wait(hpvm.launch(P.vinc, a, a.nbytes, c, c.nbytes, 8))
    np.testing.assert_array_equal(c, a + 1)  # cleanup brought the data home
    with pytest.raises(HPVMError) as info:
        hpvm.request_memory(c)  # ERR:request-after-cleanup
    check_clean(info, LaunchError, "request-after-cleanup")


def test_streaming_launch_with_arguments(rt, bufs):
    a, c = bufs
    with pytest.raises(HPVMError) as info:
        hpvm.launch(P.vinc, a, a.nbytes, c, c.nbytes, 8, stream=True)  # ERR:stream-args
    check_clean(info, StreamError, "stream-args")


def test_cleanup_twice_is_harmless():
    hpvm.cleanup()
    hpvm.cleanup()


def test_calling_a_graph_directly(bufs):
    a, c = bufs
    with pytest.raises(HPVMError) as info:
        P.vinc(a, a.nbytes, c, c.nbytes, 8)  # ERR:call-graph
    check_error(info.value, LaunchError, HERE, "call-graph", None)


# -- errors while the graph runs point at the leaf's line ----------------------------------------


def test_out_of_bounds_points_at_the_leaf(rt, bufs):
    a, c = bufs
    with pytest.raises(HPVMError) as info:
        hpvm.wait(hpvm.launch(P.vinc, a, a.nbytes, c, c.nbytes, 9))
    exc = info.value
    assert isinstance(exc, ExecutionError), repr(exc)
    assert exc.loc.file == program_path(P) and exc.loc.line == marked_line(program_path(P), "out-of-bounds")
    assert "out-of-bounds" in str(exc)


# -- accepted forms (the checks are not over-eager) -----------------------------------------------


def test_accepted_scalar_forms(rt):
    a = np.zeros(4, dtype=np.float32)
    assert hpvm.wait(hpvm.launch(P.mixed, a, a.nbytes, np.int8(3), np.bool_(True), np.float32(0.5))) == 6
    assert hpvm.wait(hpvm.launch(P.mixed, a, np.array(a.nbytes), -128, 1, 2)) == -256
    hpvm.request_memory(a)
    assert a[0] == 3 + 0.5 - 128 + 2


def test_accepted_buffer_forms(rt):
    a = np.arange(8, dtype=np.float32).reshape(2, 4)  # any contiguous shape
    c = np.zeros(8, dtype=np.float32)
    hpvm.wait(hpvm.launch(P.vinc, a, a.nbytes - 16, c, c.nbytes, 4))  # a size below the buffer's
    hpvm.request_memory(c)
    np.testing.assert_array_equal(c, [1, 2, 3, 4, 0, 0, 0, 0])


def test_torch_misuse(rt):
    torch = pytest.importorskip("torch")
    c = np.zeros(8, dtype=np.float32)
    with pytest.raises(HPVMError) as info:
        hpvm.launch(P.vinc, torch.zeros(8, dtype=torch.float64), 64, c, 32, 8)  # ERR:torch-dtype
    check_clean(info, LaunchError, "torch-dtype")
    with pytest.raises(HPVMError) as info:
        hpvm.launch(P.vinc, torch.zeros(4, 4).t(), 64, c, 32, 8)  # ERR:torch-noncontig
    check_clean(info, LaunchError, "torch-noncontig")


@pytest.mark.parametrize("target", ["python", "cpu"])
def test_writing_a_tensor_that_requires_grad_is_refused(target):
    """As torch refuses in-place writes to a leaf that requires grad: autograd cannot see what a
    kernel writes. Reading one is fine; its detach() (same memory) may be written."""
    torch = pytest.importorskip("torch")
    x = torch.arange(8, dtype=torch.float32, requires_grad=True)
    y = torch.zeros(8, requires_grad=True)
    with hpvm.runtime(target):
        with pytest.raises(HPVMError) as info:
            hpvm.launch(P.vinc, x, 32, y, 32, 8)  # ERR:grad-out
        check_clean(info, LaunchError, "grad-out")
        assert "requires grad" in str(info.value) and "detach()" in str(info.value)
        with pytest.raises(HPVMError) as info:
            hpvm.launch(P.mixed, y, 32, 3, True, 1.0)  # ERR:grad-inout
        check_clean(info, LaunchError, "grad-inout")
        assert torch.equal(y, torch.zeros(8))  # nothing was written
        out = y.detach()
        hpvm.wait(hpvm.launch(P.vinc, x, 32, out, 32, 8))  # reading x is fine
        assert torch.equal(y.detach(), torch.arange(8, dtype=torch.float32) + 1)
        plain = torch.zeros(8)
        hpvm.wait(hpvm.launch(P.vinc, x, 32, plain, 32, 8))
        plain.requires_grad_(True)  # the same tensor as before, now requiring grad
        with pytest.raises(HPVMError) as info:
            hpvm.launch(P.vinc, x, 32, plain, 32, 8)  # ERR:grad-later
        check_clean(info, LaunchError, "grad-later")
        # under torch.no_grad() (an optimizer's step) torch writes it in place, and so may a
        # launch; grad mode on again (the recording replayed, the tensor's kind cached) refuses
        expected = torch.arange(8, dtype=torch.float32) + 1
        with torch.no_grad():
            for _ in range(3):
                plain.zero_()
                hpvm.wait(hpvm.launch(P.vinc, x, 32, plain, 32, 8))
                assert torch.equal(plain.detach(), expected)
        plain.detach().zero_()
        with pytest.raises(HPVMError) as info:
            hpvm.launch(P.vinc, x, 32, plain, 32, 8)  # ERR:grad-mode-on
        check_clean(info, LaunchError, "grad-mode-on")
        assert torch.equal(plain.detach(), torch.zeros(8))


@pytest.mark.parametrize("target", ["python", "cpu"])
def test_an_output_made_read_only_after_a_launch_is_refused(target, bufs):
    """A repeated launch (replayed on cpu without re-checking) still checks writability."""
    a, c = bufs
    with hpvm.runtime(target):
        for _ in range(2):
            hpvm.wait(hpvm.launch(P.vinc, a, 32, c, 32, 8))
        c.flags.writeable = False
        with pytest.raises(HPVMError) as info:
            hpvm.launch(P.vinc, a, 32, c, 32, 8)  # ERR:read-only-later
        check_clean(info, LaunchError, "read-only-later")


# -- gaps found by this suite, since fixed ------------------------------------------------------


def test_launch_none(rt):
    with pytest.raises(LaunchError):
        hpvm.launch(None)


def test_launch_with_keyword_arguments(rt, bufs):
    """Names are accepted (tests/test_launch_arguments.py has the forms); a wrong one is not."""
    a, c = bufs
    hpvm.wait(hpvm.launch(P.vinc, a, a.nbytes, c, c.nbytes, n=8))
    np.testing.assert_array_equal(c, a + 1)
    with pytest.raises(LaunchError, match="no parameter 'm'"):
        hpvm.launch(P.vinc, a, c, n=8, m=1)


def test_init_with_unknown_target():
    try:
        with pytest.raises(LaunchError):
            hpvm.init("tpu")
    finally:
        hpvm.cleanup()


def test_wait_after_cleanup(bufs):
    a, c = bufs
    with hpvm.runtime("python"):
        handle = hpvm.launch(P.vinc, a, a.nbytes, c, c.nbytes, 8)
    with pytest.raises(HPVMError) as info:
        hpvm.wait(handle)  # ERR:wait-after-cleanup
    check_clean(info, LaunchError, "wait-after-cleanup")




@pytest.mark.parametrize("device", ["fake:9", "fake:x", "cuda9", "tpu:0"])
def test_an_error_raised_where_no_source_is_known_names_the_users_call(
        monkeypatch: pytest.MonkeyPatch, device: str) -> None:
    """A bad HPVM_GPU_DEVICE is refused deep in the device layer, with no location of its own:
    the error names the line of the public call that reached it."""
    monkeypatch.setenv("HPVM_GPU_DEVICE", device)
    a = np.zeros(4, np.float32)
    with hpvm.runtime("gpu"), pytest.raises(HPVMError, match="HPVM_GPU_DEVICE") as info:
        hpvm.launch(P.vinc, a, a, 4)  # the line the error names
    line = next(i for i, text in enumerate(open(__file__).read().splitlines(), 1)
                if "hpvm.launch(P.vinc, a, a, 4)  # the line the error names" in text)
    assert info.value.loc is not None and (info.value.loc.file, info.value.loc.line) == (__file__, line)
