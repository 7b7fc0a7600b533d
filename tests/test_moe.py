"""Mixture-of-experts communication nodes (hpvm.comm.moe_dispatch, moe_combine).

Multi-rank tests start real CPU ranks with mpiexec (tests/programs/dist_moe*.py), each comparing
with a plain NumPy reference of the whole world; the GPU kernels run there too, on CPU ranks
through Triton's interpreter. Single-rank tests run in this process.
"""
from __future__ import annotations

import os
import re
import subprocess
import sys

import numpy as np
import pytest
from conftest import needs_interpreter_loop_bounds

import hpvm_py as hpvm
from hpvm_py import In, Out, Ptr, f32, i32, i64
from hpvm_py.errors import CompileError, DistributedError, FrontendError
from test_distributed import PROGRAMS, ROOT, _launch, _reports, needs_mpiexec


@pytest.fixture
def seed() -> str:
    return str(np.random.default_rng().integers(1 << 30))


# -- real ranks -------------------------------------------------------------------------------


@needs_mpiexec
@pytest.mark.parametrize("ranks, target, remote, paths", [
    (2, "cpu", False, "direct"),
    (4, "cpu", False, "direct"),
    (3, "python", True, "remote"),
], ids=["2-cpu-heap", "4-cpu-heap", "3-python-engine"])
def test_moe_nodes_match_numpy(ranks: int, target: str, remote: bool, paths: str, seed: str,
                               tmp_path) -> None:  # noqa: ANN001
    """Dispatch and combine against the whole world's reference: random routing, everything to
    one rank (experts without rows, drops), no rows at all, gates or none, f32/bf16/f16/f64/u8;
    then a bad expert id on one rank, ranks disagreeing on the capacity and a wrong size make
    every rank raise, naming the node's line."""
    env = {"HPVM_COMM_FORCE_REMOTE": "1"} if remote else {}
    output = _launch(ranks, PROGRAMS / "dist_moe.py", seed, target, env=env, out=tmp_path)
    faults = ["MOE bad-expert ok", "MOE capacity ok", "MOE recv-size ok"]
    for r, lines in enumerate(_reports(tmp_path, ranks)):
        assert lines == faults + [f"rank {r}: 46 checks ok; paths {paths}"], (lines, output)


@needs_mpiexec
@needs_interpreter_loop_bounds
@pytest.mark.parametrize("ranks", [2, 4])
def test_moe_gpu_kernels_under_the_interpreter(ranks: int, seed: str, tmp_path) -> None:  # noqa: ANN001
    """The Triton kernels of GPU ranks, interpreted on CPU ranks over the CPU heap: exact against
    the reference, back to back, bad data reported on its rank only, a missing rank named."""
    output = _launch(ranks, PROGRAMS / "dist_moe_kernels.py", seed, env={"TRITON_INTERPRET": "1"},
                     out=tmp_path)
    bad = ranks // 2
    for r, lines in enumerate(_reports(tmp_path, ranks)):
        last = "MOE missing skipped" if r == bad else "MOE missing ok"
        assert lines == [f"rank {r}: 40 checks ok", last], (lines, output)


def test_moe_kernels_compile_for_sm90_with_ordered_flags() -> None:
    pytest.importorskip("triton.backends.nvidia")
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env.update(PYTHONPATH=str(ROOT), TRITON_DEFAULT_FP_FUSION="1")
    result = subprocess.run([sys.executable, str(PROGRAMS / "gpu_moe_ptx.py")], capture_output=True,
                            text=True, timeout=600, env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    lines = result.stdout.splitlines()
    assert len(lines) == 10, result.stdout
    steps = {"moe_count": 0, "moe_dispatch": 3, "moe_combine": 2}  # signalled steps per call
    for line in lines:
        name, *fields = line.split()
        kernel, world, label = name.split("/")
        counts = {k: int(v) for k, v in (f.split("=") for f in fields)}
        peers = int(world) - 1
        # each step signals every peer with a release exchange (one vector exchange: a thread per
        # peer) and polls each peer's flag with acquire loads
        assert counts["release"] >= steps[kernel], line
        assert counts["acquire"] >= steps[kernel] * peers, line
        assert counts["timer"] >= steps[kernel], line  # every wait is bounded
        if label in ("bf16", "u8"):
            assert counts["v4"] >= 1, line  # rows move in 16-byte vectors


@needs_mpiexec
def test_moe_layer_example_two_ranks() -> None:
    # every rank checks itself against the single-process reference and exits non-zero otherwise
    output = _launch(2, ROOT / "examples" / "moe_layer.py", "--target", "cpu", "--capacity", "5")
    assert output.count("OK, max error") == 2, output


# -- one rank, in this process ----------------------------------------------------------------


H, E, C = 4, 3, 2
DISPATCH = hpvm.comm.moe_dispatch(f32, hidden=H, experts=E, capacity=C)
COMBINE = hpvm.comm.moe_combine(f32, hidden=H, experts=E, capacity=C)


@hpvm.graph
def round_trip(tokens: In[Ptr[f32]], tokens_bytes: i64, expert: In[Ptr[i32]], expert_bytes: i64,
               recv: Out[Ptr[f32]], recv_bytes: i64, counts: Out[Ptr[i32]], counts_bytes: i64,
               origin: Out[Ptr[i32]], origin_bytes: i64, slot: Out[Ptr[i32]], slot_bytes: i64,
               gate: In[Ptr[f32]], gate_bytes: i64, out: Out[Ptr[f32]], out_bytes: i64):
    hpvm.node(DISPATCH, tokens=tokens, tokens_bytes=tokens_bytes, expert=expert, expert_bytes=expert_bytes,
              recv=recv, recv_bytes=recv_bytes, counts=counts, counts_bytes=counts_bytes,
              origin=origin, origin_bytes=origin_bytes, slot=slot, slot_bytes=slot_bytes)
    hpvm.node(COMBINE, expert_out=recv, expert_out_bytes=recv_bytes, slot=slot, slot_bytes=slot_bytes,
              gate=gate, gate_bytes=gate_bytes, out=out, out_bytes=out_bytes)


@pytest.fixture
def world():
    """A world of one rank (no launcher) with a small host heap."""
    os.environ["HPVM_HEAP_BYTES"] = "1M"
    try:
        hpvm.distributed.init(timeout=5, device="cpu")
        yield
    finally:
        hpvm.distributed.finalize()
        del os.environ["HPVM_HEAP_BYTES"]


def _buffers(tokens: int, route: list[int], rng: np.random.Generator) -> list:
    import torch

    zeros = hpvm.symmetric.zeros
    x = zeros((tokens, H), torch.float32)
    x.copy_(torch.from_numpy(rng.standard_normal((tokens, H)).astype(np.float32)))
    expert = zeros(tokens, torch.int32)
    expert.copy_(torch.tensor(route, dtype=torch.int32))
    gate = zeros(tokens, torch.float32)
    gate.copy_(torch.from_numpy(rng.random(tokens).astype(np.float32)))
    return [x, expert, zeros((E, C, H), torch.float32), zeros((1, E), torch.int32),
            zeros((E, C, 2), torch.int32), zeros(tokens, torch.int32), gate,
            zeros((tokens, H), torch.float32)]


def test_one_rank_groups_by_expert_and_drops_past_capacity(world: None, target: str,
                                                            rng) -> None:  # noqa: ANN001
    route = [2, 0, 2, -1, 2, 1, 0]  # expert 2 gets three rows: the last one is dropped (C = 2)
    x, expert, recv, counts, origin, slot, gate, out = bufs = _buffers(len(route), route, rng)
    with hpvm.runtime(target):
        hpvm.wait(hpvm.launch(round_trip, *[v for b in bufs for v in (b, b.nbytes)]))
    assert counts.tolist() == [[2, 1, 3]]  # every routed row counted, kept or not
    assert slot.tolist() == [4, 0, 5, -1, -1, 2, 1]  # expert x capacity + position
    assert origin[2].tolist() == [[0, 0], [0, 2]] and origin[1].tolist() == [[0, 5], [-1, -1]]
    assert np.array_equal(recv[0].numpy(), x[[1, 6]].numpy())
    assert np.array_equal(recv[2].numpy(), x[[0, 2]].numpy())
    kept = (slot >= 0).numpy()
    want = (x * gate[:, None]).numpy() * kept[:, None]
    assert np.array_equal(out.numpy(), want)  # dropped and unrouted rows are zero


def test_one_rank_without_gate_gives_the_rows_back(world: None, rng) -> None:  # noqa: ANN001
    route = list(rng.integers(-1, E, 5))
    x, expert, recv, counts, origin, slot, gate, out = bufs = _buffers(5, route, rng)
    flat = [v for b in bufs for v in (b, b.nbytes)]
    flat[13] = 0  # gate_bytes = 0: no gate
    with hpvm.runtime("cpu"):
        hpvm.wait(hpvm.launch(round_trip, *flat))
    kept = (slot >= 0).numpy()
    assert np.array_equal(out.numpy()[kept], x.numpy()[kept]) and not out.numpy()[~kept].any()


def test_bad_expert_id_names_rank_and_row(world: None, rng) -> None:  # noqa: ANN001
    bufs = _buffers(4, [0, 1, 7, 2], rng)
    with hpvm.runtime("cpu"), pytest.raises(DistributedError, match=r"rank 0's expert ids hold 7 at row 2 "
                                                                   r"\(1 row\(s\) outside \[-1, 3\)") as info:
        hpvm.wait(hpvm.launch(round_trip, *[v for b in bufs for v in (b, b.nbytes)]))
    assert info.value.rule == "moe-routing" and "test_moe.py" in str(info.value)


def test_wrong_sizes_are_named(world: None, rng) -> None:  # noqa: ANN001
    bufs = _buffers(4, [0, 1, 1, 2], rng)
    flat = [v for b in bufs for v in (b, b.nbytes)]
    flat[3] = 12  # expert_bytes: three ids for four rows
    with hpvm.runtime("cpu"), pytest.raises(DistributedError, match=r"expert has 12 bytes; it must hold "
                                                                   r"one i32 per row of tokens \(4 rows\)"):
        hpvm.wait(hpvm.launch(round_trip, *flat))
    flat[3], flat[13] = 16, 8  # a gate of two weights for four rows
    with hpvm.runtime("cpu"), pytest.raises(DistributedError, match=r"gate has 8 bytes") as info:
        hpvm.wait(hpvm.launch(round_trip, *flat))
    assert info.value.rule == "collective-arguments" and "test_moe.py" in str(info.value)


def test_moe_nodes_round_trip_through_text(world: None, rng) -> None:  # noqa: ANN001
    text = hpvm.to_text(round_trip)
    assert re.search(r'kind\(moe_dispatch\) options\(dtype="f32", hidden=4, experts=3, '
                     r'capacity=2\)', text), text
    loaded = hpvm.from_text(text)
    assert hpvm.to_text(loaded) == text
    route = [1, 1, 0, 2]
    bufs = _buffers(4, route, rng)
    with hpvm.runtime("cpu"):
        hpvm.wait(hpvm.launch(loaded, *[v for b in bufs for v in (b, b.nbytes)]))
    assert bufs[5].tolist() == [2, 3, 0, 4]


SEND, BACK = hpvm.comm.moe_dispatch, hpvm.comm.moe_combine


@pytest.mark.parametrize("make, message", [
    (lambda: SEND(f32, hidden=0, experts=4, capacity=8), "hidden=0 must be a positive int"),
    (lambda: SEND(f32, hidden=8, experts=True, capacity=8), "experts=True must be a positive int"),
    (lambda: BACK(f32, hidden=8, experts=4, capacity="8"), "capacity='8' must be a positive int"),
    (lambda: BACK(f32, hidden=8, experts=4, capacity=[8]), r"capacity=\[8\] must be a positive"),
    (lambda: SEND(f32, hidden=8, experts=1 << 16, capacity=1 << 16), "must each be below 2"),
    (lambda: BACK(i32, hidden=8, experts=4, capacity=8), "i32 is not a floating-point type"),
    (lambda: SEND(hpvm.u64, hidden=8, experts=4, capacity=8), "element type .* is not supported"),
])
def test_bad_moe_options_are_frontend_errors(make, message: str) -> None:  # noqa: ANN001
    with pytest.raises(FrontendError, match=message) as info:
        make()
    assert "test_moe.py" in str(info.value)


def test_parsed_moe_node_with_bad_options_is_a_compile_error() -> None:
    text = hpvm.to_text(round_trip).replace("capacity=2", "capacity=-2", 1)
    with pytest.raises(CompileError, match="capacity=-2 must be a positive int"):
        hpvm.compile(hpvm.from_text(text), target="cpu")


def test_experts_must_divide_among_ranks() -> None:
    """Checked at launch (the world size is known there): the same mistake on every rank."""
    from hpvm_py.distributed.moe_plan import size_error

    assert "experts = 6 is not a multiple of the world size (4)" in size_error(
        "moe_dispatch", [0] * 6, 4, 8, 6, 2, 4)


def test_positions_follow_source_rank_then_row() -> None:
    from hpvm_py.distributed import moe_plan as P

    routes = [np.array([1, 0, 1, -1], np.int32), np.array([1, 1, 0, 1], np.int32)]
    counts = P.counts_matrix(routes, 2)
    assert counts.tolist() == [[1, 2], [1, 3]]
    assert P.positions(routes[1], counts[:1].sum(axis=0)).tolist() == [2, 3, 1, 4]
    assert P.slots(routes[1], np.array([2, 3, 1, 4]), 4).tolist() == [6, 7, 1, -1]


@pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1",
                    reason="the stand-in heap is host memory: Triton's interpreter only")
@needs_interpreter_loop_bounds
def test_gpu_direct_api_on_one_rank_through_the_interpreter(world: None, rng,  # noqa: ANN001
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """gpu/moe_launch.py's direct API (what the runner of GPU ranks calls), its checks and its
    kernels, with the GPU heap's helpers stood in by the CPU heap (one rank, Triton's
    interpreter; the kernels' multi-rank runs are test_moe_gpu_kernels_under_the_interpreter)."""
    import types

    import torch

    from hpvm_py.distributed import ranks
    from hpvm_py.distributed.gpu import moe_launch as M
    from hpvm_py.distributed.gpu import signals
    from hpvm_py.distributed.gpu.heap import CONTROL_BYTES
    from tests.programs import host_clock

    here = ranks.current()
    ctrl, status = hpvm.symmetric.zeros(CONTROL_BYTES // 8, torch.int64), torch.zeros(1, dtype=torch.int64)
    monkeypatch.setattr(signals, "now_ns", host_clock.now_ns)
    heap = types.SimpleNamespace(device="cpu", contains=here.heap.contains, bases=here.heap.bases)
    monkeypatch.setattr(M, "_heap", lambda: (here, heap))
    monkeypatch.setattr(M, "_common", lambda w, heap, fingerprint: dict(
        ctrl=ctrl, bases=torch.tensor(heap.bases, dtype=torch.int64), rank=0,
        status_addr=status.data_ptr(), timeout_ns=10 ** 9, fingerprint=fingerprint, WORLD=1))
    monkeypatch.setattr(M, "_run", lambda key, launch: launch())
    route = [2, 0, 2, -1, 2, 1, 0]
    x, expert, recv, counts, origin, slot, gate, out = _buffers(len(route), route, rng)
    M.moe_dispatch(x, expert, recv, counts, origin, slot, H, E, C)
    assert slot.tolist() == [4, 0, 5, -1, -1, 2, 1] and counts.tolist() == [[2, 1, 3]]
    assert origin[2].tolist() == [[0, 0], [0, 2]] and origin[1].tolist() == [[0, 5], [-1, -1]]
    assert torch.equal(recv[0], x[[1, 6]]) and torch.equal(recv[2], x[[0, 2]])
    M.moe_combine(recv, slot, gate, out, H, E, C)
    assert torch.equal(out, x * gate[:, None] * (slot >= 0)[:, None])
    M.moe_combine(recv, slot, None, out, H, E, C)
    assert torch.equal(out, x * (slot >= 0)[:, None]) and int(status[0]) == 0
    with pytest.raises(DistributedError, match="must be int32 .not: expert"):
        M.moe_dispatch(x, hpvm.symmetric.zeros(7, torch.int64), recv, counts, origin, slot, H, E, C)
    with pytest.raises(DistributedError, match="recv has 88 bytes"):
        M.moe_dispatch(x, expert, recv.view(-1)[:-2], counts, origin, slot, H, E, C)
    with pytest.raises(DistributedError, match="gate must be float32"):
        M.moe_combine(recv, slot, hpvm.symmetric.zeros(7, torch.float64), out, H, E, C)
