"""Communication nodes on CPU ranks.

Multi-rank tests start real ranks with the venv's `mpiexec` (next to sys.executable) running the
programs in tests/programs/dist_*.py and examples/tp_mlp.py; each program compares with NumPy
references itself and reports what the test checks. Single-rank tests run in this process (a
process started without a launcher is a world of one rank).
"""
from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import hpvm_py as hpvm
from hpvm_py import In, InOut, Out, Ptr, f32, i32, i64
from hpvm_py.errors import CompileError, DistributedError, FrontendError, StreamError

ROOT = Path(__file__).resolve().parent.parent
PROGRAMS = ROOT / "tests" / "programs"
MPIEXEC = Path(sys.executable).parent / "mpiexec"
needs_mpiexec = pytest.mark.skipif(not MPIEXEC.exists(), reason=f"no mpiexec next to {sys.executable}: "
                                   "install the dist extra (make test does)")


def _launch(n: int, script: Path, *args: str, env: dict[str, str] | None = None,
            out: Path | None = None) -> str:
    """Run script on n ranks; returns the combined output (a failing rank fails the test)."""
    environment = {k: v for k, v in os.environ.items() if not k.startswith("HPVM_COMM_")}
    environment.update(PYTHONPATH=str(ROOT), HPVM_HEAP_BYTES="8M", HPVM_NUM_THREADS="1",
                       OMP_NUM_THREADS="1", **(env or {}))
    if out is not None:
        environment["HPVM_TEST_OUT"] = str(out)
    command = [str(MPIEXEC), "-n", str(n), sys.executable, str(script), *args]
    result = subprocess.run(command, capture_output=True, text=True, timeout=240, env=environment)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    return output


def _reports(out: Path, n: int) -> list[list[str]]:
    """Each rank's reported lines (tests/programs/dist_report.py)."""
    return [(out / f"rank{r}.txt").read_text().splitlines() if (out / f"rank{r}.txt").exists() else []
            for r in range(n)]


@pytest.fixture
def seed() -> str:
    return str(np.random.default_rng().integers(1 << 30))


# -- real ranks -------------------------------------------------------------------------------


@needs_mpiexec
@pytest.mark.parametrize("ranks, target, remote, checks, paths", [
    (2, "cpu", False, 28, "direct,one_shot,two_shot"),
    (2, "cpu", True, 26, "remote"),  # no translation and bit-identity checks: no peer heap mapped
    (4, "cpu", True, 26, "remote"),
    (4, "python", False, 28, "direct,one_shot,two_shot"),
    (2, "gpu", False, 28, "direct,one_shot,two_shot"),  # CPU ranks: the gpu target's leaves, host collectives
])
def test_every_collective_matches_numpy(ranks: int, target: str, remote: bool, checks: int, paths: str,
                                        seed: str, tmp_path: Path) -> None:
    env = {"HPVM_COMM_FORCE_REMOTE": "1"} if remote else {}
    output = _launch(ranks, PROGRAMS / "dist_collectives.py", seed, target, env=env, out=tmp_path)
    for r, lines in enumerate(_reports(tmp_path, ranks)):
        assert lines == [f"rank {r}: {checks} checks ok; paths {paths}"], (lines, output)


def _faulty(n: int) -> int:
    """The rank at fault in tests/programs/dist_faults.py: the middle one (the last of two)."""
    return n // 2


@needs_mpiexec
@pytest.mark.parametrize("ranks", [2, 4])
@pytest.mark.parametrize("remote", [False, True], ids=["heap", "engine"])
def test_faults(ranks: int, remote: bool, tmp_path: Path) -> None:
    """Disagreements, bad arguments, a full heap, then a rank that never arrives: every rank
    raises, naming the faulty one, and the survivors of the missing rank within the timeout."""
    env = {"HPVM_COMM_FORCE_REMOTE": "1"} if remote else {}
    output = _launch(ranks, PROGRAMS / "dist_faults.py", "cpu", "missing", env=env, out=tmp_path)
    everyone = ["size", "dtype", "kind", "exhausted"] + (["engine-any-buffer"] if remote else ["offset"])
    faulty = _faulty(ranks)
    for r, lines in enumerate(_reports(tmp_path, ranks)):
        assert all(f"FAULT {name} ok" in lines for name in everyone), (r, output)
        assert lines.count("FAULT in-step ok") == (5 if remote else 7), (r, output)
        own = ["local-argument", "not-on-heap"] if r == faulty else ["peer-argument", "peer-not-on-heap"]
        assert all(f"FAULT {name} ok" in lines for name in own[:1 if remote else 2]), (r, output)
        assert lines[-1] == ("FAULT missing skipped" if r == faulty else "FAULT missing ok"), (r, output)


@needs_mpiexec
@pytest.mark.parametrize("ranks", [2, 4])
@pytest.mark.parametrize("remote", [False, True], ids=["heap", "engine"])
def test_rank_dying_mid_collective(ranks: int, remote: bool, tmp_path: Path) -> None:
    """A rank stops after the ranks agreed on a collective: every survivor raises, naming it."""
    env = {"HPVM_COMM_FORCE_REMOTE": "1"} if remote else {}
    output = _launch(ranks, PROGRAMS / "dist_faults.py", "cpu", "died", env=env, out=tmp_path)
    for r, lines in enumerate(_reports(tmp_path, ranks)):
        last = "FAULT died here" if r == _faulty(ranks) else "FAULT died ok"
        assert lines == ["FAULT in-step ok", last], (r, output)


RELAUNCH_CHECKS = ["small", "medium", "large", "bf16", "i32", "max", "new-set", "first-set-kept",
                   "alternating", "alternating", "alternating", "size", "in-step-after-size", "dtype",
                   "in-step-after-dtype", "buffer", "in-step-after-buffer", "kept-algorithm", "algorithm",
                   "in-step-after-algorithm", "collective",
                   "in-step-after-collective"]


@needs_mpiexec
@pytest.mark.parametrize("ranks, target, remote", [(2, "cpu", False), (4, "cpu", False),
                                                   (2, "cpu", True)], ids=["2-heap", "4-heap", "2-engine"])
def test_relaunched_collectives_agree_once(ranks: int, target: str, remote: bool, seed: str,
                                           tmp_path: Path) -> None:
    """Issue 22: relaunched communication nodes are exact on fresh inputs, replayed, agreed once
    per buffer set (again when the set changes); a rank that launches another size, element type,
    buffer or collective on the kept path makes every rank raise, naming it, and the ranks stay in
    step (tests/programs/dist_relaunch.py)."""
    env = {"HPVM_COMM_FORCE_REMOTE": "1"} if remote else {}
    output = _launch(ranks, PROGRAMS / "dist_relaunch.py", seed, target, env=env, out=tmp_path)
    want = [c for c in RELAUNCH_CHECKS if not (remote and ("buffer" in c or "algorithm" in c))]
    for r, lines in enumerate(_reports(tmp_path, ranks)):
        assert lines == [f"RELAUNCH {c} ok" for c in want] + ["RELAUNCH done"], (r, output)


@needs_mpiexec
@pytest.mark.parametrize("ranks", [2, 4])
def test_init_faults(ranks: int, tmp_path: Path) -> None:
    """Ranks with different heap sizes all refuse init(); a rank that never arrives is named."""
    environment = {k: v for k, v in os.environ.items() if not k.startswith("HPVM_")}
    environment.update(PYTHONPATH=str(ROOT), HPVM_TEST_OUT=str(tmp_path))
    script = [sys.executable, str(PROGRAMS / "dist_init_faults.py")]
    command = [str(MPIEXEC)]
    for r in range(ranks):  # one block per rank: the faulty rank's heap is half the others'
        heap = "4M" if r == _faulty(ranks) else "8M"
        command += ([":"] if r else []) + ["-n", "1", "-env", "HPVM_HEAP_BYTES", heap, *script]
    result = subprocess.run(command, capture_output=True, text=True, timeout=240, env=environment)
    assert result.returncode == 0, result.stdout + result.stderr
    assert _reports(tmp_path, ranks) == [["INIT heap-size ok"] + ["INIT missing ok"] * (r != _faulty(ranks))
                                         for r in range(ranks)], result.stdout + result.stderr


def test_torchrun_environment_uses_gloo(seed: str, tmp_path: Path) -> None:
    """Ranks started as torchrun starts them (RANK, WORLD_SIZE, MASTER_ADDR/PORT): the handshake
    and, forced remote, the collectives go through torch.distributed's gloo."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    environment = {k: v for k, v in os.environ.items() if not k.startswith(("HPVM_COMM_", "PMI_"))}
    environment.update(PYTHONPATH=str(ROOT), HPVM_HEAP_BYTES="8M", HPVM_NUM_THREADS="1",
                       OMP_NUM_THREADS="1", HPVM_COMM_FORCE_REMOTE="1", HPVM_TEST_OUT=str(tmp_path),
                       MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), WORLD_SIZE="2")
    ranks = [subprocess.Popen([sys.executable, str(PROGRAMS / "dist_collectives.py"), seed, "cpu"],
                              env=dict(environment, RANK=str(r), LOCAL_RANK=str(r)),
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for r in range(2)]
    outputs = [p.communicate(timeout=240)[0] for p in ranks]
    assert [p.returncode for p in ranks] == [0, 0], outputs
    for r, lines in enumerate(_reports(tmp_path, 2)):
        assert lines == [f"rank {r}: 26 checks ok; paths remote"], outputs


@needs_mpiexec
def test_tp_mlp_example_two_ranks() -> None:
    # every rank checks itself against the single-process reference and exits non-zero otherwise
    output = _launch(2, ROOT / "examples" / "tp_mlp.py", "--target", "cpu")
    assert output.count(": fused all-reduce + rmsnorm") == 2, output


def test_tp_mlp_example_unfused_on_one_rank(world: None) -> None:
    import tp_mlp

    assert tp_mlp.main("cpu", rows=4, fused=False) < 1e-4


# -- one rank, in this process ----------------------------------------------------------------


@pytest.fixture
def world():
    """A world of one rank (no launcher) with a small host heap (also on a machine with a GPU)."""
    os.environ["HPVM_HEAP_BYTES"] = "1M"
    try:
        hpvm.distributed.init(timeout=5, device="cpu")
        yield
    finally:
        hpvm.distributed.finalize()
        del os.environ["HPVM_HEAP_BYTES"]


def test_single_rank_world_and_heap_allocation(world: None) -> None:
    import torch

    assert hpvm.distributed.rank() == 0 and hpvm.distributed.world_size() == 1
    assert hpvm.distributed.local_rank() == 0
    a = hpvm.symmetric.empty((3, 5), hpvm.f32)
    b = hpvm.symmetric.empty(7, np.int16)
    c = hpvm.symmetric.zeros(4, torch.bfloat16)
    assert a.shape == (3, 5) and a.dtype == torch.float32 and a.device.type == "cpu"
    assert b.dtype == torch.int16 and c.dtype == torch.bfloat16 and torch.all(c == 0)
    addresses = [t.data_ptr() for t in (a, b, c)]
    assert all(p % 256 == 0 for p in addresses)
    assert addresses[0] + a.nbytes <= addresses[1] and addresses[1] + b.nbytes <= addresses[2]
    a.fill_(2.0)
    b.fill_(-3)
    assert torch.all(a == 2.0) and torch.all(b == -3)  # no overlap


def test_heap_segments_leave_nothing_in_dev_shm(world: None) -> None:
    from hpvm_py.distributed import heap, ranks

    job = ranks.current().job
    assert not [f for f in os.listdir(heap.heap_dir()) if job in f]  # unlinked once mapped


def test_heap_larger_than_shared_memory_fails_at_init(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HPVM_HEAP_BYTES", "1048576G")  # beyond any /dev/shm: refused up front
    with pytest.raises(DistributedError, match=r"cannot reserve a symmetric heap of \d+ bytes in "
                                               r"\S+ \(\d+ bytes free there\)"):
        hpvm.distributed.init(device="cpu")
    assert not hpvm.distributed.is_initialized()


def test_heap_exhaustion_names_requested_and_free_bytes(world: None) -> None:
    free = hpvm.symmetric.free_bytes()
    with pytest.raises(DistributedError, match=rf"requested {free + 4} bytes, \d+ bytes free") as info:
        hpvm.symmetric.empty(free // 4 + 1, hpvm.f32)
    assert "test_distributed.py" in str(info.value)
    hpvm.symmetric.empty(free // 8, hpvm.f32)  # still usable


@pytest.mark.parametrize("name, value, message", [
    ("HPVM_COMM_TIMEOUT", "soon", "HPVM_COMM_TIMEOUT='soon' must be a positive number of seconds"),
    ("HPVM_COMM_TIMEOUT", "-1", "must be a positive number"),
    ("HPVM_DIST_LAUNCHER", "slurm", "HPVM_DIST_LAUNCHER='slurm' is not one of mpi, torch, single"),
    ("HPVM_HEAP_BYTES", "lots", "HPVM_HEAP_BYTES='lots' must be a number of bytes"),
    ("HPVM_HEAP_BYTES", "12", "of at least 4352"),
])
def test_bad_settings_are_rejected_at_init(name: str, value: str, message: str,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(name, value)
    with pytest.raises(DistributedError, match=re.escape(message)):
        hpvm.distributed.init()
    assert not hpvm.distributed.is_initialized()


def test_bad_init_timeout_is_rejected() -> None:
    with pytest.raises(DistributedError, match=r"timeout=0 must be positive") as info:
        hpvm.distributed.init(timeout=0)
    assert "test_distributed.py" in str(info.value)


def test_bad_oneshot_threshold_is_rejected(world: None, monkeypatch: pytest.MonkeyPatch) -> None:
    x = hpvm.symmetric.empty(4, hpvm.f32)
    monkeypatch.setenv("HPVM_COMM_ONESHOT_BYTES", "big")
    with hpvm.runtime("cpu"), pytest.raises(DistributedError, match="HPVM_COMM_ONESHOT_BYTES='big'"):
        hpvm.wait(hpvm.launch(sum_graph, x, x.nbytes))


def test_heap_and_ranks_need_init() -> None:
    with pytest.raises(DistributedError, match=r"hpvm.distributed.init\(\)") as info:
        hpvm.symmetric.empty(4, hpvm.f32)
    assert "test_distributed.py" in str(info.value)
    with pytest.raises(DistributedError, match="has not been called"):
        hpvm.distributed.rank()


SUM = hpvm.comm.all_reduce(f32)


@hpvm.graph
def sum_graph(x: InOut[Ptr[f32]], x_bytes: i64):
    hpvm.node(SUM, buf=x, buf_bytes=x_bytes)


@hpvm.graph
def gather_graph(src: In[Ptr[i32]], src_bytes: i64, dst: Out[Ptr[i32]], dst_bytes: i64):
    hpvm.node(hpvm.comm.all_gather(i32), src=src, src_bytes=src_bytes, dst=dst, dst_bytes=dst_bytes)


def test_collective_without_init_names_the_node(compiled_target: str) -> None:
    x = np.ones(4, np.float32)
    with hpvm.runtime(compiled_target), pytest.raises(DistributedError, match="hpvm.distributed.init") as info:
        hpvm.wait(hpvm.launch(sum_graph, x, x.nbytes))
    assert "hpvm.node(SUM" in str(info.value)  # the node's line, with a caret


def test_single_rank_collectives_are_identities(world: None, target: str) -> None:
    import torch

    x = hpvm.symmetric.empty(100, hpvm.f32)
    values = torch.randn(100)
    x.copy_(values)
    src = hpvm.symmetric.empty(9, hpvm.i32)
    src.copy_(torch.randint(-50, 50, (9,), dtype=torch.int32))
    dst = hpvm.symmetric.zeros(9, hpvm.i32)
    with hpvm.runtime(target):
        hpvm.wait(hpvm.launch(sum_graph, x, x.nbytes))
        hpvm.wait(hpvm.launch(gather_graph, src, src.nbytes, dst, dst.nbytes))
    assert torch.equal(x, values) and torch.equal(dst, src)


def test_collectives_refuse_streaming_launches(world: None) -> None:
    with hpvm.runtime("cpu"), pytest.raises(StreamError, match="cannot run in a streaming launch") as info:
        hpvm.launch(sum_graph, stream=True)
    assert "hpvm.node(SUM" in str(info.value)


def test_buffer_not_on_heap_is_named(world: None) -> None:
    x = np.ones(16, np.float32)
    with hpvm.runtime("cpu"), pytest.raises(DistributedError, match=r"buffer 'x' \(input 'buf'\) \(64 "
                                                                   r"bytes at 0x[0-9a-f]+\) is not on the "
                                                                   r"symmetric heap") as info:
        hpvm.wait(hpvm.launch(sum_graph, x, x.nbytes))
    assert info.value.rule == "buffer-on-heap"


def test_library_nodes_round_trip_through_text_and_run(world: None) -> None:
    import torch

    text = hpvm.to_text(gather_graph)
    assert re.search(r"library @all_gather_i32\S* kind\(all_gather\) options\(dtype=\"i32\"\)", text), text
    loaded = hpvm.from_text(text)
    assert hpvm.to_text(loaded) == text
    src = hpvm.symmetric.empty(5, hpvm.i32)
    src.copy_(torch.arange(5, dtype=torch.int32) * 7)
    dst = hpvm.symmetric.zeros(5, hpvm.i32)
    with hpvm.runtime("cpu"):
        hpvm.wait(hpvm.launch(loaded, src, src.nbytes, dst, dst.nbytes))
    assert torch.equal(dst, src)


def test_parsed_library_node_with_unknown_kind_is_a_compile_error() -> None:
    text = hpvm.to_text(sum_graph).replace("kind(all_reduce)", "kind(all_shuffle)")
    with pytest.raises(CompileError, match="library kind 'all_shuffle' is unknown"):
        hpvm.compile(hpvm.from_text(text), target="cpu")
    text = hpvm.to_text(sum_graph).replace('op="sum"', 'op="mean"')
    with pytest.raises(CompileError, match="op='mean' is not one of sum, max, min"):
        hpvm.compile(hpvm.from_text(text), target="cpu")


@pytest.mark.parametrize("make, message", [
    (lambda: hpvm.comm.all_reduce(f32, op="avg"), "op='avg' is not one of sum, max, min"),
    (lambda: hpvm.comm.all_reduce(hpvm.u64), "element type .* is not supported"),
    (lambda: hpvm.comm.all_reduce("complex"), "element type 'complex' is not supported"),
    (lambda: hpvm.comm.all_reduce_rmsnorm(i32), "i32 is not a floating-point type"),
    (lambda: hpvm.comm.all_reduce_rmsnorm(f32, eps=0.0), "eps=0.0 must be a positive number"),
    (lambda: hpvm.comm.broadcast(f32, root=-1), "root=-1 must be a rank number"),
])
def test_bad_collective_options_are_frontend_errors(make, message: str) -> None:  # noqa: ANN001
    with pytest.raises(FrontendError, match=message) as info:
        make()
    assert "test_distributed.py" in str(info.value)


def test_factories_return_one_node_function_per_configuration() -> None:
    assert hpvm.comm.all_reduce(f32) is hpvm.comm.all_reduce(np.float32)
    assert hpvm.comm.all_reduce(f32, op="max") is not hpvm.comm.all_reduce(f32)
    assert hpvm.comm.broadcast(f32, root=1).name != hpvm.comm.broadcast(f32, root=0).name


@hpvm.graph
def replicated_sum(x: InOut[Ptr[f32]], x_bytes: i64, n: i64):
    hpvm.node(SUM, grid=n, buf=x, buf_bytes=x_bytes)


def test_replicated_collective_is_rejected() -> None:
    with pytest.raises(CompileError, match="a collective runs once per rank") as info:
        hpvm.compile(replicated_sum, target="cpu")
    assert info.value.rule == "collective-once"


@pytest.mark.parametrize("target", ["cpu", "python", "gpu", "nvptx"])
def test_init_device_may_name_a_target(target: str) -> None:
    """init(device=target) puts the heap where that target's nodes run: the GPU targets on the GPU
    when there is one, on the host under Triton's interpreter (CI)."""
    from hpvm_py.device.devices import cuda_available
    from hpvm_py.distributed.ranks import device_kind

    expected = "cuda" if target in ("gpu", "nvptx") and cuda_available() else "cpu"
    assert device_kind(target) == expected
    with pytest.raises(DistributedError, match=r"device='tpu' is not one of cpu, cuda, nor a target"):
        device_kind("tpu")
