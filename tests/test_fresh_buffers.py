"""A loop that launches on a fresh buffer each time (a new output per step) takes a short path:
a buffer of the kind that last passed a parameter's checks (rt/buffers.py, buffer_kind) is tracked
without being described and checked again (rt/args.py). It must refuse exactly what a launch on a
cold runtime refuses, with the same message, and compute the same results. Random sequences of
good and bad buffers, fresh, reused and tracked, try to break that."""
from __future__ import annotations

import numpy as np
import pytest

import hpvm_py as hpvm
from hpvm_py.errors import ExecutionError, LaunchError
from hpvm_py.rt import args as launch_args
from hpvm_py.rt import executor
from hpvm_py.rt.buffers import host_view
from programs import out_coverage as P

torch = pytest.importorskip("torch")

N = 24
# kinds of buffer: what launch() must do with each in the input (a) and the output (c) position
REFUSED_ANYWHERE = ("f64", "i32", "strided", "torch_f16", "list")
REFUSED_AS_OUTPUT = ("readonly", "torch_grad")
GOOD = ("f32", "torch", "reused", "tracked")


def _make(kind: str, rng: np.random.Generator, pool: list[np.ndarray]) -> object:
    values = rng.standard_normal(N)
    if kind == "f32":
        return values.astype(np.float32)
    if kind == "f64":
        return values
    if kind == "i32":
        return values.astype(np.int32)
    if kind == "strided":
        return np.repeat(values.astype(np.float32), 2)[::2]
    if kind == "readonly":
        array = values.astype(np.float32)
        array.setflags(write=False)
        return array
    if kind == "torch":
        return torch.tensor(values, dtype=torch.float32)
    if kind == "torch_grad":
        return torch.tensor(values, dtype=torch.float32, requires_grad=True)
    if kind == "torch_f16":
        return torch.tensor(values, dtype=torch.float16)
    if kind == "list":
        return [float(v) for v in values]
    if kind == "short":
        return values[:-3].astype(np.float32)
    if kind == "reused":
        return pool[int(rng.integers(len(pool)))]
    assert kind == "tracked"
    return hpvm.track_memory(values.astype(np.float32))


def _cold_error(target: str, a: object, c: object) -> str:
    """What a runtime that never saw a buffer says of this launch."""
    with hpvm.runtime(target):
        with pytest.raises(LaunchError) as info:
            hpvm.launch(P.copy_graph, a, c, N)
    return info.value.message


def _host(buf: object) -> np.ndarray:
    if isinstance(buf, np.ndarray):
        return buf
    return buf.detach().numpy()


def test_random_fresh_buffers_are_refused_and_computed_as_on_a_cold_runtime(
        target: str, rng: np.random.Generator) -> None:
    kinds = GOOD * 3 + REFUSED_ANYWHERE + REFUSED_AS_OUTPUT + ("short",)
    steps = 40 if target == "gpu" else 80
    refusals = []  # (a, c, the warm runtime's message, where): a cold runtime must say the same
    with hpvm.runtime(target):
        pool = [rng.standard_normal(N).astype(np.float32) for _ in range(3)]
        for step in range(steps):
            a_kind, c_kind = (kinds[int(k)] for k in rng.integers(len(kinds), size=2))
            a, c = _make(a_kind, rng, pool), _make(c_kind, rng, pool)
            refused = a_kind in REFUSED_ANYWHERE or c_kind in REFUSED_ANYWHERE + REFUSED_AS_OUTPUT
            where = f"step {step}: a {a_kind}, c {c_kind}"
            if refused:
                with pytest.raises(LaunchError) as info:
                    hpvm.launch(P.copy_graph, a, c, N)
                assert info.value.loc.file == __file__
                refusals.append((a, c, info.value.message, where))
                continue
            expected = _host(a).copy()
            if "short" in (a_kind, c_kind):  # a size that does not cover the instances
                with pytest.raises((ExecutionError, LaunchError)):
                    hpvm.wait(hpvm.launch(P.copy_graph, a, c, N))
                continue
            hpvm.wait(hpvm.launch(P.copy_graph, a, c, N))
            if c_kind == "tracked":
                hpvm.request_memory(c)
            np.testing.assert_array_equal(_host(c)[:N], expected[:N], err_msg=where)
    assert refusals
    for a, c, message, where in refusals:
        assert message == _cold_error(target, a, c), where


def test_a_fresh_buffer_of_a_checked_kind_is_not_described_again(
        compiled_target: str, rng: np.random.Generator, monkeypatch: pytest.MonkeyPatch) -> None:
    described = []
    describe = launch_args.describe
    monkeypatch.setattr(launch_args, "describe", lambda buf: described.append(buf) or describe(buf))
    a = rng.standard_normal(N).astype(np.float32)
    with hpvm.runtime(compiled_target):
        compiled = hpvm.compile(P.copy_graph)
        for _ in range(12):
            c = np.zeros(N, np.float32)
            hpvm.wait(hpvm.launch(compiled, a, c, N))
            np.testing.assert_array_equal(c, a)
        assert [buf for buf in described if buf is not a] and len(described) == 2  # a, the first c
        c = np.zeros(N, np.float64)  # another kind: described, checked and refused
        with pytest.raises(LaunchError, match="must hold f32 elements, got f64"):
            hpvm.launch(compiled, a, c, N)
        assert len(described) == 3


@pytest.mark.parametrize("target", ["cpu", "python"])
def test_a_host_view_is_made_only_for_a_kernel_that_reads_it(
        target: str, rng: np.random.Generator, monkeypatch: pytest.MonkeyPatch) -> None:
    """The cpu target's kernels take a buffer's address: launches on tensors never seen make no flat
    NumPy view of them (BufferArg.host_array, several microseconds a tensor); the python target's
    interpreter reads through the view, made when it asks, and sees the tensor's data."""
    made: list[object] = []
    monkeypatch.setattr(executor, "host_view", lambda buf, elem: made.append(buf) or host_view(buf, elem))
    executor._viewer.cache_clear()  # (its viewers hold the function they call)
    try:
        with hpvm.runtime(target):
            compiled = hpvm.compile(P.copy_graph)
            outputs = []
            for _ in range(6):
                a = torch.tensor(rng.standard_normal(N), dtype=torch.float32)
                c = torch.zeros(N)
                hpvm.wait(hpvm.launch(compiled, a, c, N))
                assert torch.equal(c, a)
                outputs.append((a, c))
    finally:
        executor._viewer.cache_clear()
    if target == "cpu":
        assert made == []
    else:
        assert {id(buf) for buf in made} == {id(t) for pair in outputs for t in pair}
