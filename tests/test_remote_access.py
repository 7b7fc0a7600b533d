"""The leaf device API: remote_load, remote_store and remote_atomic_add (docs/distributed.md).

- one process, no hpvm.distributed.init(): a world of one rank on every target, where rank 0 is
  the local buffer and any other rank is a located error;
- a stand-in world of two ranks inside this process (two heaps, the second one standing for rank
  1's heap as mapped here), launched on each backend directly, checked and unchecked: what lands
  where is checked, and the errors (rank, index, buffer not on the heap, peer heap not mapped);
- real ranks under mpiexec on cpu and python, 2 and 4 of them (tests/programs/dist_remote.py);
- the front end's type rules, the verifier, the text IR and the bounds proof of ranks.
"""
from __future__ import annotations

import inspect
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Iterator

import numpy as np
import pytest

import hpvm_py as hpvm
from hpvm_py import In, InOut, Out, Ptr, f16, f32, i32, i64
from hpvm_py.backends import registry
from hpvm_py.backends.base import BufferArg, NodeContext
from hpvm_py.distributed import ranks
from hpvm_py.support import world
from hpvm_py.errors import (CompileError, DistributedError, ExecutionError, FrontendError,
                            ParseError, VerificationError)
from hpvm_py.ir import kernel as K
from hpvm_py.ir.parser import parse_module
from hpvm_py.ir.printer import print_module
from hpvm_py.ir.verify import verify_module
from hpvm_py.passes.bounds import BoundsProof
from hpvm_py.rt.compiler import compile_graph
from test_distributed import PROGRAMS, _launch, _reports, needs_mpiexec

N = 300
COUNTERS = 4


@hpvm.leaf
def exchange(src: In[Ptr[f32]], src_bytes: i64, got: Out[Ptr[f32]], got_bytes: i64,
             inbox: Out[Ptr[f32]], inbox_bytes: i64, total: InOut[Ptr[i64]], total_bytes: i64,
             peer: i32):
    i = hpvm.instance_id(0)
    got[i] = hpvm.remote_load(src, i, peer)  # LOAD
    hpvm.remote_store(inbox, i, src[i] + 1.0, peer)  # STORE
    hpvm.remote_atomic_add(total, i % 4, 1, peer)  # ATOMIC


@hpvm.graph
def exchange_graph(src: In[Ptr[f32]], src_bytes: i64, got: Out[Ptr[f32]], got_bytes: i64,
                   inbox: Out[Ptr[f32]], inbox_bytes: i64, total: InOut[Ptr[i64]], total_bytes: i64,
                   peer: i32, n: i64):
    hpvm.node(exchange, grid=n, src=src, src_bytes=src_bytes, got=got, got_bytes=got_bytes,
              inbox=inbox, inbox_bytes=inbox_bytes, total=total, total_bytes=total_bytes, peer=peer)


@hpvm.leaf
def shifted(src: In[Ptr[f32]], src_bytes: i64, got: Out[Ptr[f32]], got_bytes: i64, shift: i64):
    i = hpvm.instance_id(0)
    got[i] = hpvm.remote_load(src, i + shift, 0)  # SHIFTED


@hpvm.graph
def shifted_graph(src: In[Ptr[f32]], src_bytes: i64, got: Out[Ptr[f32]], got_bytes: i64,
                  shift: i64, n: i64):
    hpvm.node(shifted, grid=n, src=src, src_bytes=src_bytes, got=got, got_bytes=got_bytes,
              shift=shift)


@hpvm.graph
def exchange_stream(src: In[Ptr[f32]], src_bytes: i64, got: Out[Ptr[f32]], got_bytes: i64,
                    inbox: Out[Ptr[f32]], inbox_bytes: i64, total: InOut[Ptr[i64]], total_bytes: i64,
                    peer: i32, n: i64):
    """exchange_graph as a stream: every push brings its own buffers."""
    s = hpvm.streaming
    hpvm.node(exchange, grid=n, src=s(src), src_bytes=src_bytes, got=s(got), got_bytes=got_bytes,
              inbox=s(inbox), inbox_bytes=inbox_bytes, total=s(total), total_bytes=total_bytes,
              peer=s(peer))


@hpvm.leaf
def data_ranks(src: In[Ptr[f32]], src_bytes: i64, who: In[Ptr[i32]], who_bytes: i64,
               got: Out[Ptr[f32]], got_bytes: i64):
    i = hpvm.instance_id(0)
    got[i] = hpvm.remote_load(src, i, who[i])


def line_of(marker: str) -> int:
    lines = Path(__file__).read_text().splitlines()
    return next(n for n, text in enumerate(lines, 1) if text.rstrip().endswith(f"# {marker}"))


def _run(target: str, *args: Any) -> None:
    with hpvm.runtime(target):
        hpvm.wait(hpvm.launch(exchange_graph, *args))


# -- one rank: no init --------------------------------------------------------------------------


def test_rank_zero_of_a_world_of_one_is_the_local_buffer(target: str, rng: np.random.Generator) -> None:
    src = rng.standard_normal(N).astype(np.float32)
    got, inbox = np.zeros(N, np.float32), np.zeros(N, np.float32)
    total = rng.integers(0, 100, COUNTERS).astype(np.int64)
    start = total.copy()
    _run(target, src, src.nbytes, got, got.nbytes, inbox, inbox.nbytes, total, total.nbytes, 0, N)
    assert np.array_equal(got, src)
    assert np.array_equal(inbox, src + np.float32(1))
    assert np.array_equal(total - start, np.bincount(np.arange(N) % COUNTERS, minlength=COUNTERS))


@pytest.mark.parametrize("peer", [1, -1, 7])
def test_a_rank_outside_a_world_of_one_is_a_located_error(target: str, peer: int) -> None:
    src = np.ones(N, np.float32)
    got, inbox, total = np.zeros(N, np.float32), np.zeros(N, np.float32), np.zeros(COUNTERS, np.int64)
    with pytest.raises(ExecutionError) as info:
        _run(target, src, src.nbytes, got, got.nbytes, inbox, inbox.nbytes, total, total.nbytes, peer, N)
    assert info.value.rule == "remote-rank"
    assert info.value.loc.line == line_of("LOAD")
    assert f"on rank {peer}: the ranks are 0 to 0" in str(info.value)
    assert not total.any()  # a failing access is skipped


def test_a_remote_index_outside_the_buffer_is_a_located_error(target: str, rng: np.random.Generator) -> None:
    src = rng.standard_normal(N).astype(np.float32)
    got = np.zeros(N, np.float32)
    with hpvm.runtime(target):
        hpvm.wait(hpvm.launch(shifted_graph, src, src.nbytes, got, got.nbytes, 0, N))
        assert np.array_equal(got, src)
        with pytest.raises(ExecutionError) as info:
            hpvm.wait(hpvm.launch(shifted_graph, src, src.nbytes, got, got.nbytes, 1, N))
    assert info.value.rule == "memory-in-bounds" and info.value.loc.line == line_of("SHIFTED")
    assert f"remote load from src[{N}]" in str(info.value)


# -- a stand-in world of two ranks in this process ------------------------------------------------


class StandInHeap:
    """Two heaps in one process: `heaps[0]` is this rank's, `heaps[1]` stands for rank 1's heap as
    mapped here. A buffer allocated at offset o has its twin at offset o of the other heap."""

    SIZE = 1 << 16

    def __init__(self, device: str, ranks_mapped: int = 2):
        import torch

        self.rank = 0
        self.heaps = [torch.zeros(self.SIZE, dtype=torch.uint8, device=device) for _ in range(2)]
        self.bases = np.array([h.data_ptr() for h in self.heaps][:ranks_mapped] + [0] * (2 - ranks_mapped),
                              dtype=np.int64)
        self.bases_array = self.bases
        self.bases_tensor = torch.from_numpy(self.bases).to(device)
        self.top = 0

    def contains(self, address: int, nbytes: int) -> bool:
        return int(self.bases[0]) <= address and address + nbytes <= int(self.bases[0]) + self.SIZE

    def empty(self, count: int, dtype: Any) -> list[Any]:
        """The buffer on both heaps: [this rank's, rank 1's twin]."""
        import torch

        itemsize = torch.tensor([], dtype=dtype).element_size()
        start, self.top = self.top, (self.top + count * itemsize + 255) // 256 * 256
        return [h[start:start + count * itemsize].view(dtype) for h in self.heaps]


@pytest.fixture
def stand_in_world(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """Installs a world of two ranks whose heap the test provides: yields a setter."""
    def install(heap: StandInHeap) -> None:
        stand_in = SimpleNamespace(rank=0, size=2, heap=heap)
        monkeypatch.setattr(ranks, "_world", stand_in)
        monkeypatch.setattr(world, "_current", stand_in)  # what the layers below distributed read

    yield install


def _device_of(target: str) -> str:
    if target == "nvptx":
        return "cuda"
    if target == "gpu":
        from hpvm_py.backends.triton.host_math import interpreting

        return "cpu" if interpreting() else "cuda"
    return "cpu"


def _buffer(tensor: Any, target: str) -> BufferArg:
    host = target in ("cpu", "python")
    return BufferArg(obj=tensor, address=tensor.data_ptr(), nbytes=tensor.numel() * tensor.element_size(),
                     array=tensor.numpy() if host else None)


def _exchange_kernel(target: str, checked: bool) -> Any:
    (leaf, ctx, kernel), = compile_graph(exchange_graph, target).leaf_kernels()
    if checked and target != "python":
        return registry.get(target).compile_leaf(leaf, ctx, checked=True)
    return kernel


@pytest.mark.parametrize("checked", [False, True])
def test_two_ranks_stand_in_every_access_reaches_the_peer(target: str, checked: bool,
                                                          stand_in_world: Any,
                                                          rng: np.random.Generator) -> None:
    import torch

    heap = StandInHeap(_device_of(target))
    stand_in_world(heap)
    src, got, inbox = (heap.empty(N, torch.float32) for _ in range(3))
    total = heap.empty(COUNTERS, torch.int64)
    mine, theirs = (torch.from_numpy(rng.standard_normal(N).astype(np.float32)) for _ in range(2))
    src[0].copy_(mine)
    src[1].copy_(theirs)
    kernel = _exchange_kernel(target, checked)
    args = [_buffer(src[0], target), src[0].nbytes, _buffer(got[0], target), got[0].nbytes,
            _buffer(inbox[0], target), inbox[0].nbytes, _buffer(total[0], target), total[0].nbytes,
            np.int32(1)]
    kernel.launch(args, [], [(N,)])
    counts = np.bincount(np.arange(N) % COUNTERS, minlength=COUNTERS)
    assert np.array_equal(got[0].cpu().numpy(), theirs.numpy())  # read from rank 1
    assert not got[1].any()
    assert np.array_equal(inbox[1].cpu().numpy(), mine.numpy() + np.float32(1))  # written on rank 1
    assert not inbox[0].any()
    assert np.array_equal(total[1].cpu().numpy(), counts) and not total[0].any()
    args[-1] = np.int32(0)  # rank 0: this rank's own buffers
    kernel.launch(args, [], [(N,)])
    assert np.array_equal(got[0].cpu().numpy(), mine.numpy())
    assert np.array_equal(total[0].cpu().numpy(), counts)


def test_two_ranks_stand_in_errors(target: str, stand_in_world: Any) -> None:
    import torch

    heap = StandInHeap(_device_of(target))
    stand_in_world(heap)
    src, got, inbox = (heap.empty(N, torch.float32) for _ in range(3))
    total = heap.empty(COUNTERS, torch.int64)
    kernel = _exchange_kernel(target, checked=True)

    def launch(peer: int, first: Any = None) -> None:
        kernel.launch([_buffer(first if first is not None else src[0], target), src[0].nbytes,
                       _buffer(got[0], target), got[0].nbytes, _buffer(inbox[0], target),
                       inbox[0].nbytes, _buffer(total[0], target), total[0].nbytes, np.int32(peer)],
                      [], [(N,)])

    with pytest.raises(ExecutionError) as info:
        launch(2)
    assert info.value.rule == "remote-rank" and info.value.loc.line == line_of("LOAD")
    assert "on rank 2: the ranks are 0 to 1 (a world of 2)" in str(info.value)
    assert not total[0].any() and not total[1].any()
    private = torch.zeros(N, dtype=torch.float32, device=_device_of(target))
    with pytest.raises(DistributedError) as info:
        launch(1, first=private)
    assert info.value.rule == "buffer-on-heap" and "'src'" in str(info.value)
    assert info.value.loc.line == line_of("LOAD")


def test_a_peer_heap_not_mapped_here_is_refused(stand_in_world: Any) -> None:
    """Ranks on other hosts (or HPVM_COMM_FORCE_REMOTE) have no mapped heap: no remote access."""
    import torch

    heap = StandInHeap("cpu", ranks_mapped=1)
    stand_in_world(heap)
    src, got, inbox = (heap.empty(N, torch.float32) for _ in range(3))
    total = heap.empty(COUNTERS, torch.int64)
    with pytest.raises(DistributedError) as info:
        _run("cpu", src[0], src[0].nbytes, got[0], got[0].nbytes, inbox[0], inbox[0].nbytes, total[0],
             total[0].nbytes, 0, N)
    assert info.value.rule == "remote-host" and "rank(s) [1]" in str(info.value)


@pytest.mark.parametrize("target", ["cpu", "python"])  # GPU targets: the backend-level tests
def test_a_graph_launch_in_a_stand_in_world_checks_the_heap(target: str, stand_in_world: Any) -> None:
    """Through hpvm.launch on the host targets: the user's heap tensors are used in place."""
    import torch

    heap = StandInHeap("cpu")
    stand_in_world(heap)
    src, got, inbox = (heap.empty(N, torch.float32) for _ in range(3))
    total = heap.empty(COUNTERS, torch.int64)
    src[1].copy_(torch.arange(N, dtype=torch.float32))
    _run(target, src[0], src[0].nbytes, got[0], got[0].nbytes, inbox[0], inbox[0].nbytes, total[0],
         total[0].nbytes, 1, N)
    assert torch.equal(got[0], src[1]) and int(total[1].sum()) == N
    outside = torch.zeros(COUNTERS, dtype=torch.int64)
    with pytest.raises(DistributedError) as info:
        _run(target, src[0], src[0].nbytes, got[0], got[0].nbytes, inbox[0], inbox[0].nbytes, outside,
             outside.nbytes, 1, N)
    assert info.value.rule == "buffer-on-heap" and "'total'" in str(info.value)
    assert info.value.loc.line == line_of("ATOMIC")


@pytest.mark.parametrize("target", ["cpu", "python"])  # GPU targets: the backend-level tests
def test_a_stream_checks_every_item_s_buffers_on_the_heap(target: str, stand_in_world: Any) -> None:
    """A stream stage reuses its packed launch from item to item (rt/stream/stage_launch.py); an item whose
    buffer behind a remote access is off the heap must still be refused, after items that were on it."""
    import torch

    heap = StandInHeap("cpu")
    stand_in_world(heap)
    items = [[heap.empty(N, torch.float32) for _ in range(3)] + [heap.empty(COUNTERS, torch.int64)]
             for _ in range(2)]
    outside = torch.zeros(COUNTERS, dtype=torch.int64)
    with hpvm.runtime(target):
        h = hpvm.launch(exchange_stream, stream=True)
        for src, got, inbox, total in items:
            src[1].copy_(torch.rand(N))
            hpvm.push(h, src[0], src[0].nbytes, got[0], got[0].nbytes, inbox[0], inbox[0].nbytes,
                      total[0], total[0].nbytes, 1, N)
        for src, got, _, total in items:
            hpvm.pop(h, timeout=60)
            assert torch.equal(got[0], src[1]) and int(total[1].sum()) == N
        src, got, inbox, _ = items[0]
        hpvm.push(h, src[0], src[0].nbytes, got[0], got[0].nbytes, inbox[0], inbox[0].nbytes,
                  outside, outside.nbytes, 1, N)
        with pytest.raises(DistributedError) as info:
            hpvm.pop(h, timeout=60)
        assert info.value.rule == "buffer-on-heap" and "'total'" in str(info.value)
        with pytest.raises(DistributedError):
            hpvm.wait(h, timeout=60)
    assert not outside.any()


# -- real ranks ---------------------------------------------------------------------------------


@pytest.fixture
def one_rank_world(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """hpvm.distributed.init() without a launcher: a world of one rank with a real heap."""
    monkeypatch.setenv("HPVM_HEAP_BYTES", "1M")
    hpvm.distributed.init(timeout=5, device="cpu")
    try:
        yield
    finally:
        hpvm.distributed.finalize()


def test_an_initialised_world_of_one_uses_its_heap(one_rank_world: None, rng: np.random.Generator) -> None:
    import torch

    src, got, inbox = (hpvm.symmetric.zeros(N, torch.float32) for _ in range(3))
    total = hpvm.symmetric.zeros(COUNTERS, torch.int64)
    src.copy_(torch.from_numpy(rng.standard_normal(N).astype(np.float32)))
    for target in ("cpu", "python"):
        _run(target, src, src.nbytes, got, got.nbytes, inbox, inbox.nbytes, total, total.nbytes, 0, N)
        assert torch.equal(got, src) and torch.equal(inbox, src + 1)
    assert int(total.sum()) == 2 * N
    private = torch.zeros(N, dtype=torch.float32)
    with pytest.raises(DistributedError) as info:
        _run("cpu", src, src.nbytes, got, got.nbytes, private, private.nbytes, total, total.nbytes, 0, N)
    assert info.value.rule == "buffer-on-heap" and "'inbox'" in str(info.value)
    assert info.value.loc.line == line_of("STORE")


@needs_mpiexec
def test_the_halo_example_on_two_ranks_and_alone(tmp_path: Path) -> None:
    example = Path(__file__).resolve().parent.parent / "examples" / "halo.py"
    output = _launch(2, example, "--target", "cpu", "--cells", "300", "--steps", "7")
    assert "rank 0 of 2: 300 cells x 7 steps match NumPy" in output
    assert "rank 1 of 2: 300 cells x 7 steps match NumPy" in output
    output = _launch(1, example, "--target", "python", "--cells", "50", "--steps", "3")
    assert "rank 0 of 1: 50 cells x 3 steps match NumPy" in output


@needs_mpiexec
@pytest.mark.parametrize("ranks, target", [(2, "cpu"), (2, "python"), (4, "cpu")])
def test_real_ranks(ranks: int, target: str, tmp_path: Path, rng: np.random.Generator) -> None:
    seed = str(rng.integers(1 << 30))
    output = _launch(ranks, PROGRAMS / "dist_remote.py", seed, target, out=tmp_path)
    want = [[f"rank {r}: {12 if r == 0 else 11} checks ok"] for r in range(ranks)]  # rank 0 counts tickets
    assert _reports(tmp_path, ranks) == want, output


# -- the bounds proof ---------------------------------------------------------------------------


def _proof(leaf: Any, modes: tuple[str, ...]) -> BoundsProof:
    return BoundsProof(leaf.ir, NodeContext(level_dims=(1,), input_modes=modes, output_modes=()))


def _host(count: int, dtype: Any = np.float32) -> BufferArg:
    array = np.zeros(count, dtype)
    return BufferArg(obj=array, address=array.ctypes.data, nbytes=array.nbytes, array=array)


@pytest.mark.parametrize("peer, world, proven", [(0, 1, True), (1, 1, False), (1, 2, True),
                                                 (2, 2, False), (-1, 2, False), (3, 4, True)])
def test_the_proof_bounds_ranks_by_the_world(peer: int, world: int, proven: bool) -> None:
    proof = _proof(exchange, ("buffer", "uniform") * 4 + ("uniform",))
    assert proof.remote
    args = [_host(N), N * 4, _host(N), N * 4, _host(N), N * 4, _host(COUNTERS, np.int64), COUNTERS * 8, peer]
    assert proof.holds(args, [(N,)], world) is proven
    args[2] = _host(N - 1)  # got too small: the index fails whatever the rank
    assert proof.holds(args, [(N,)], world) is False


def test_the_proof_does_not_know_ranks_read_from_memory() -> None:
    proof = _proof(data_ranks, ("buffer", "uniform") * 3)
    args = [_host(N), N * 4, _host(N, np.int32), N * 4, _host(N), N * 4]
    assert proof.holds(args, [(N,)], 1 << 20) is False


def test_ranks_read_from_memory_are_checked(target: str, rng: np.random.Generator) -> None:
    src = rng.standard_normal(N).astype(np.float32)
    who, got = np.zeros(N, np.int32), np.zeros(N, np.float32)

    @hpvm.graph
    def root(src: In[Ptr[f32]], src_bytes: i64, who: In[Ptr[i32]], who_bytes: i64,
             got: Out[Ptr[f32]], got_bytes: i64, n: i64):
        hpvm.node(data_ranks, grid=n, src=src, src_bytes=src_bytes, who=who, who_bytes=who_bytes,
                  got=got, got_bytes=got_bytes)

    with hpvm.runtime(target):
        hpvm.wait(hpvm.launch(root, src, src.nbytes, who, who.nbytes, got, got.nbytes, N))
        assert np.array_equal(got, src)
        who[N // 2] = 1
        with pytest.raises(ExecutionError) as info:
            hpvm.wait(hpvm.launch(root, src, src.nbytes, who, who.nbytes, got, got.nbytes, N))
    assert info.value.rule == "remote-rank"
    assert info.value.loc.line == inspect.getsourcelines(data_ranks.pyfunc)[1] + 4


# -- front end, verifier, text IR -----------------------------------------------------------------


BAD_LEAVES = '''
import hpvm_py as hpvm
from hpvm_py import In, Out, Ptr, f32, i64

@hpvm.leaf
def scratch(a: In[Ptr[f32]], a_bytes: i64):
    s = hpvm.malloc(64, hpvm.f32)
    x = hpvm.remote_load(s, 0, 1)

@hpvm.leaf
def float_rank(a: In[Ptr[f32]], a_bytes: i64):
    x = hpvm.remote_load(a, 0, 1.5)

@hpvm.leaf
def float_index(a: Out[Ptr[f32]], a_bytes: i64):
    hpvm.remote_store(a, 0.5, 1.0, 0)

@hpvm.leaf
def store_value(a: Out[Ptr[f32]], a_bytes: i64):
    x = hpvm.remote_store(a, 0, 1.0, 0)

@hpvm.leaf
def arity(a: In[Ptr[f32]], a_bytes: i64):
    x = hpvm.remote_load(a, 0)

@hpvm.leaf
def not_pointer(a: In[Ptr[f32]], a_bytes: i64, k: i64):
    x = hpvm.remote_atomic_add(k, 0, 1, 0)

@hpvm.leaf
def reads_out(a: Out[Ptr[f32]], a_bytes: i64):
    x = hpvm.remote_load(a, 0, 0)

@hpvm.leaf
def writes_in(a: In[Ptr[f32]], a_bytes: i64):
    hpvm.remote_store(a, 0, 1.0, 0)

@hpvm.func
def helper(a: Ptr[f32]) -> f32:
    return hpvm.remote_load(a, 0, 0)

@hpvm.leaf
def calls_helper(a: In[Ptr[f32]], a_bytes: i64):
    x = helper(a)
'''


@pytest.mark.parametrize("name, error, rule, text", [
    ("scratch", VerificationError, "remote-access", "pointer parameter"),
    ("float_rank", FrontendError, None, "a rank must be an integer"),
    ("float_index", FrontendError, None, "an index must be an integer"),
    ("store_value", FrontendError, None, "remote_store() is a statement"),
    ("arity", FrontendError, None, "remote_load() takes 3 argument(s)"),
    ("not_pointer", VerificationError, "remote-access", "pointer parameter"),
    ("reads_out", VerificationError, "pointer-direction", "declared Out"),
    ("writes_in", VerificationError, "pointer-direction", "declared In"),
    ("calls_helper", VerificationError, "helper-no-intrinsics", "remote_load() is an HPVM intrinsic"),
])
def test_type_rules(tmp_path: Path, name: str, error: type, rule: str | None, text: str) -> None:
    import importlib.util

    path = tmp_path / f"bad_remote_{name}.py"
    path.write_text(BAD_LEAVES)
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    leaf = getattr(module, name)
    with pytest.raises(error) as info:
        leaf.ir  # noqa: B018 - lowering happens on first use
        hpvm.compile(_root_for(leaf), target="python")
    assert info.value.rule == rule and text in str(info.value)
    assert info.value.loc.file == str(path) and info.value.loc.line > 5


def _root_for(leaf: Any) -> Any:
    from programs import common

    return common.root_for(leaf)


def test_outside_a_leaf_the_intrinsics_raise() -> None:
    with pytest.raises(FrontendError) as info:
        hpvm.remote_load(None, 0, 0)
    assert info.value.rule == "intrinsics-in-leaves"


def test_text_ir_round_trip() -> None:
    text = hpvm.to_text(exchange_graph)
    assert "remote_load<f32>(%src, %i, %peer)" in text
    assert "on %peer" in text and "remote_atomic.add<i64>(%total," in text
    module = parse_module(text)
    assert print_module(module) == text
    leaf = module.functions[exchange.ir.name]
    assert leaf == exchange.ir
    assert len(list(K.remote_accesses(leaf.body))) == 3
    assert hpvm.to_text(hpvm.from_text(text)) == text


def test_text_ir_runs_like_the_python_graph(rng: np.random.Generator) -> None:
    graph = hpvm.from_text(hpvm.to_text(exchange_graph))
    src = rng.standard_normal(N).astype(np.float32)
    got, inbox, total = np.zeros(N, np.float32), np.zeros(N, np.float32), np.zeros(COUNTERS, np.int64)
    with hpvm.runtime("cpu"):
        hpvm.wait(hpvm.launch(graph, src, src.nbytes, got, got.nbytes, inbox, inbox.nbytes, total,
                              total.nbytes, 0, N))
    assert np.array_equal(got, src) and int(total.sum()) == N


TEXT = '''module @root
graph @root(%a: inout ptr<f32>, %n: i64) -> () {
  node %k = @k [%n]
  bind_in %a -> %k.0
  bind_in %n -> %k.1
}
leaf @k(%a: inout ptr<f32>, %n: i64) -> () target(any) {
  local %s: ptr<f32>
  local %x: f32
  %s = malloc<ptr<f32>>(64:i64)
  %x = BODY
}
'''


@pytest.mark.parametrize("body, rule", [
    ("remote_load<f32>(%s, 0:i64, 0:i64)", "remote-access"),
    ("remote_load<f32>(%a, 0:i64, 0.5:f32)", "remote-access"),
    ("remote_atomic.add<f32>(%s, 0:i64, 1.0:f32, 0:i32)", "remote-access"),
    ("remote_load<f32>(%a, 0:i64, 0:i64)", None),
])
def test_the_verifier_checks_parsed_remote_accesses(body: str, rule: str | None) -> None:
    text = TEXT.replace("BODY", body)
    if rule is None:
        verify_module(parse_module(text))
        return
    with pytest.raises(VerificationError) as info:  # (a float rank: at parse, by its types)
        verify_module(parse_module(text))
    assert info.value.rule == rule


def test_a_remote_store_without_its_rank_does_not_parse() -> None:
    text = TEXT.replace("%x = BODY", "store %a[0:i64] = 1.0:f32 on")
    with pytest.raises(ParseError):
        parse_module(text)


@hpvm.leaf
def half_counter(total: InOut[Ptr[f16]], total_bytes: i64, peer: i32):
    hpvm.remote_atomic_add(total, 0, 1.0, peer)  # HALF


@hpvm.graph
def half_counter_graph(total: InOut[Ptr[f16]], total_bytes: i64, peer: i32, n: i64):
    hpvm.node(half_counter, grid=n, total=total, total_bytes=total_bytes, peer=peer)


@pytest.mark.skipif(not registry.compilable("gpu"), reason="no triton")
def test_a_16_bit_remote_atomic_add_on_gpu_is_a_located_compile_error(monkeypatch: pytest.MonkeyPatch) -> None:
    """Triton's f16/bf16 atomics are a compare-and-swap loop on this rank's buffer: refused (where
    nvptx runs, such a leaf falls back to it: rt/placement.py; here nvptx is taken away)."""
    available = registry.available
    monkeypatch.setattr(registry, "available", lambda t: False if t == "nvptx" else available(t))
    with pytest.raises(CompileError) as info:
        compile_graph(half_counter_graph, "gpu")
    assert "remote_atomic_add on f16" in str(info.value) and "nvptx" in str(info.value)
    assert info.value.loc.line == line_of("HALF")


def test_a_recorded_remote_launch_does_not_replay_after_its_world_ended(
        stand_in_world: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """A replay must not run a remote access through the heap bases packed in another world: the
    peer heaps they point into are freed once the world is left (a replay read and wrote freed
    memory). Launched again without the world, it is the normal path's located rank error."""
    import torch

    heap = StandInHeap("cpu")
    stand_in_world(heap)
    src, got, inbox = (heap.empty(N, torch.float32) for _ in range(3))
    total = heap.empty(COUNTERS, torch.int64)
    args = (src[0], src[0].nbytes, got[0], got[0].nbytes, inbox[0], inbox[0].nbytes, total[0],
            total[0].nbytes, 1, N)
    with hpvm.runtime("cpu"):
        for _ in range(2):
            hpvm.wait(hpvm.launch(exchange_graph, *args))
        assert hpvm.stats()["replayed_launches"] == 1
        monkeypatch.setattr(ranks, "_world", None)
        monkeypatch.setattr(world, "_current", None)
        with pytest.raises(ExecutionError) as info:
            hpvm.wait(hpvm.launch(exchange_graph, *args))
        assert info.value.rule == "remote-rank"
        assert hpvm.stats()["replayed_launches"] == 1
