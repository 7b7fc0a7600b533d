"""cpu backend: bounds-checked builds, launch validation and compile errors."""
import inspect

import numpy as np
import pytest
from cpu_harness import buffer, leaves_from_source, run

import hpvm_py as hpvm
from hpvm_py import In, Out, Ptr, f32, i64
from hpvm_py.backends.base import NodeContext
from hpvm_py.backends.cpu import CpuBackend
from hpvm_py.errors import CompileError, ExecutionError, LaunchError


@hpvm.leaf
def shifted_copy(a: In[Ptr[f32]], a_bytes: i64, b: Out[Ptr[f32]], b_bytes: i64, k: i64):
    i = hpvm.get_node_instance_id_x(hpvm.get_node())
    v = a[i + k]
    b[i * 2] = v


def _line_of(text: str) -> int:
    lines, first = inspect.getsourcelines(shifted_copy.pyfunc)
    return first + next(n for n, line in enumerate(lines) if text in line)


def test_out_of_bounds_load_is_reported_with_its_line():
    a = np.arange(10, dtype=np.float32)
    b = np.zeros(20, np.float32)
    with pytest.raises(ExecutionError) as info:
        run(shifted_copy, [(10,)], a, None, b, None, 3, checked=True)
    err = info.value
    assert err.loc.line == _line_of("v = a[i + k]") and err.loc.file == __file__
    assert "a[10]" in str(err) and "0 to 9" in str(err)
    # the failing loads were skipped (loaded 0) and the run went on
    assert list(b[0:14:2]) == list(range(3, 10))
    assert list(b[14::2]) == [0, 0, 0]


def test_out_of_bounds_store_is_reported_with_its_line():
    a = np.arange(10, dtype=np.float32)
    b = np.zeros(15, np.float32)
    with pytest.raises(ExecutionError) as info:
        run(shifted_copy, [(10,)], a, None, b, None, 0, checked=True)
    assert info.value.loc.line == _line_of("b[i * 2] = v")
    assert "b[16]" in str(info.value) and "15 elements" in str(info.value)
    assert f"{__file__}:{_line_of('b[i * 2] = v')}" in str(info.value)


def test_limit_comes_from_the_size_argument():
    a = np.arange(10, dtype=np.float32)
    b = np.zeros(20, np.float32)
    with pytest.raises(ExecutionError) as info:  # a_bytes says 8 elements, the array has 10
        run(shifted_copy, [(10,)], a, np.int64(32), b, None, 0, checked=True)
    assert "a[8]" in str(info.value)


def test_checked_and_unchecked_agree_in_bounds():
    a = np.arange(40, dtype=np.float32)
    b1, b2 = np.zeros(40, np.float32), np.zeros(40, np.float32)
    run(shifted_copy, [(20,)], a, None, b1, None, 5, checked=True)
    run(shifted_copy, [(20,)], a, None, b2, None, 5)
    assert np.array_equal(b1, b2)


def test_scratch_and_atomics_are_checked():
    mod = leaves_from_source("""
        @hpvm.leaf
        def scratch(h: InOut[Ptr[i32]], h_bytes: i64):
            tid = hpvm.get_node_instance_id_x(hpvm.get_node())
            s = hpvm.malloc(16, i32)
            s[tid] = 1
            hpvm.atomic_add(h, tid * 3, 1)
    """)
    run(mod.scratch, [(4,), ()], np.zeros(100, np.int32), None, checked=True)  # all in bounds
    h = np.zeros(6, np.int32)
    with pytest.raises(ExecutionError) as info:
        run(mod.scratch, [(3,), ()], h, None, checked=True)
    assert "atomic on h[6]" in str(info.value)
    with pytest.raises(ExecutionError) as info:
        run(mod.scratch, [(5,), ()], np.zeros(100, np.int32), None, checked=True)
    assert "store to s[4]" in str(info.value)


def test_launch_validates_arguments():
    ctx = NodeContext(level_dims=(1,), input_modes=("buffer", "uniform", "buffer", "uniform", "uniform"),
                      output_modes=())
    kernel = CpuBackend().compile_leaf(shifted_copy.ir, ctx)
    a, b = np.zeros(8, np.float32), np.zeros(16, np.float32)
    good = [buffer(a), np.int64(32), buffer(b), np.int64(64), np.int64(0)]
    kernel.launch(good, [], [(8,)])
    with pytest.raises(LaunchError, match="takes 5 argument"):
        kernel.launch(good[:4], [], [(8,)])
    with pytest.raises(LaunchError, match="needs a buffer"):
        kernel.launch([a] + good[1:], [], [(8,)])
    with pytest.raises(LaunchError, match="uniform scalar"):
        kernel.launch(good[:4] + [np.zeros(3)], [], [(8,)])
    with pytest.raises(LaunchError, match="not a i64 value"):
        kernel.launch(good[:4] + [None], [], [(8,)])
    with pytest.raises(LaunchError, match="dimension"):
        kernel.launch(good, [], [(8, 2)])
    with pytest.raises(LaunchError, match="levels"):
        kernel.launch(good, [], [(8,), (2,)])
    with pytest.raises(LaunchError, match="output"):
        kernel.launch(good, [np.zeros(3)], [(8,)])


def test_output_arrays_are_validated():
    mod = leaves_from_source("""
        @hpvm.leaf
        def one(x: f32) -> f32:
            return x
    """)
    ctx = NodeContext(level_dims=(1,), input_modes=("per_instance",), output_modes=("per_instance",))
    kernel = CpuBackend().compile_leaf(mod.one.ir, ctx)
    with pytest.raises(LaunchError, match="float32"):
        kernel.launch([np.zeros(4, np.float32)], [np.zeros(4, np.float64)], [(4,)])
    with pytest.raises(LaunchError, match="at least 4"):
        kernel.launch([np.zeros(2, np.float32)], [np.zeros(4, np.float32)], [(4,)])


def test_print_is_for_the_python_target_only():
    mod = leaves_from_source("""
        @hpvm.leaf
        def talk(a: In[Ptr[f32]], a_bytes: i64):
            print("value", a[0])
    """)
    with pytest.raises(CompileError, match="print\\(\\) is supported only by target='python'"):
        run(mod.talk, [(1,)], np.zeros(1, np.float32), None)


def test_equal_ir_from_elsewhere_reports_its_own_lines():
    import copy

    from hpvm_py.ir import kernel as K
    from hpvm_py.support.loc import Loc

    other = copy.deepcopy(shifted_copy.ir)
    for stmt in K.walk_stmts(other.body):
        if isinstance(stmt, K.Assign) and stmt.target == "v":
            stmt.value.loc = Loc("elsewhere.hpvm", 42, 0)
    assert repr(other) == repr(shifted_copy.ir)
    ctx = NodeContext(level_dims=(1,), input_modes=("buffer", "uniform", "buffer", "uniform",
                                                    "uniform"), output_modes=())
    first = CpuBackend().compile_leaf(shifted_copy.ir, ctx, checked=True)
    second = CpuBackend().compile_leaf(other, ctx, checked=True)
    assert second._code is first._code
    a, b = np.zeros(4, np.float32), np.zeros(8, np.float32)
    args = [buffer(a), np.int64(a.nbytes), buffer(b), np.int64(b.nbytes), np.int64(1)]
    with pytest.raises(ExecutionError) as info:
        second.launch(args, [], [(4,)])
    assert info.value.loc == Loc("elsewhere.hpvm", 42, 0)
