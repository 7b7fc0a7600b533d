"""The quantized all-reduce (AITER's "quick reduce") and the fp8 output of the fused all-reduce +
RMSNorm (docs/distributed.md, "Quantized all-reduce"): the codec against torch's fp8 and the
documented error bound, the device codec against the host codec (Triton's interpreter, or the GPU),
the kernels' PTX for an H100, the chooser and the heap's workspace, the factories' errors, and
real CPU ranks running tests/programs/dist_quantized.py (2 and 4 ranks, heap and engine)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

import hpvm_py as hpvm
from hpvm_py import In, InOut, Out, Ptr, bf16, f32, i64, u8
from hpvm_py.distributed import chooser, quantize as Q
from hpvm_py.errors import CompileError, DistributedError, FrontendError

try:
    import triton
    import triton.language as tl

    from hpvm_py.distributed.gpu import quant_kernels as QK
except ImportError:  # the device codec's test skips
    triton = None

ROOT = Path(__file__).resolve().parent.parent
PROGRAMS = ROOT / "tests" / "programs"
MPIEXEC = Path(sys.executable).parent / "mpiexec"
needs_mpiexec = pytest.mark.skipif(not MPIEXEC.exists(), reason=f"no mpiexec next to {sys.executable}")


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng()


# -- the codec --------------------------------------------------------------------------------


def test_fp8_encoding_is_torchs_e4m3fn_rounding(rng: np.random.Generator) -> None:
    finite = np.unique(Q.FP8_VALUES[np.isfinite(Q.FP8_VALUES)].astype(np.float64))
    midpoints = (finite[1:] + finite[:-1]) / 2  # every tie, and both neighbours of it
    y = np.concatenate([rng.uniform(-448, 448, 20_000), rng.standard_normal(20_000) * 1e-2,
                        rng.standard_normal(5_000) * 1e-3, midpoints, np.nextafter(midpoints, 0),
                        np.nextafter(midpoints, 1e9), finite, [0.0, -0.0, -1e-30]]).astype(np.float32)
    want = torch.from_numpy(y).to(torch.float8_e4m3fn).view(torch.uint8).numpy()
    assert np.array_equal(Q.fp8_e4m3(y), want)
    decoded = torch.arange(256, dtype=torch.uint8).view(torch.float8_e4m3fn).float().numpy()
    assert np.array_equal(Q.FP8_VALUES, decoded, equal_nan=True)


@pytest.mark.parametrize("mode", Q.MODES)
def test_codec_error_is_within_half_a_step(mode: str, rng: np.random.Generator) -> None:
    n = 5000
    v = (rng.standard_normal(n) * np.exp(rng.uniform(-4, 4, n))).astype(np.float32)
    v[64:96] = 0
    layout = Q.Layout(n, mode)
    payload = np.zeros(layout.total, np.uint8)
    codes, scales = payload[:layout.code_bytes], payload[layout.scales_offset:].view(np.float32)
    Q.encode(v, mode, codes, scales)
    got = Q.decode(codes, scales, n, mode)
    absmax = np.repeat(np.abs(np.pad(v, (0, layout.padded - n))).reshape(-1, 32).max(1), 32)[:n]
    per_group = np.abs(np.pad(v, (0, -n % 32))).reshape(-1, 32).max(1)
    assert np.array_equal(scales[:len(per_group)], per_group / np.float32(Q.QMAX[mode]))
    if mode == "fp8":
        step = np.maximum(np.abs(v) / 16, absmax / (448 * 1024))
    else:
        step = absmax / (2 * Q.QMAX[mode])
    error = np.abs(got.astype(np.float64) - v)
    assert np.all(error <= step * (1 + 1e-6) + 3 * 2.0 ** -24 * absmax)
    assert np.mean(error / np.where(step > 0, step, 1)) > 0.1  # really rounded, not exact
    assert np.all(got[64:96] == 0) and np.all(scales[2] == 0)


def test_int4_codes_pack_the_even_element_low() -> None:
    v = np.zeros(32, np.float32)
    v[:4] = [7.0, -7.0, 1.0, 3.0]  # absmax 7: the scale is 1, the codes are the values
    layout = Q.Layout(32, "int4")
    codes, scales = np.zeros(layout.code_bytes, np.uint8), np.zeros(layout.groups, np.float32)
    Q.encode(v, "int4", codes, scales)
    assert scales[0] == 1.0 and list(codes[:3]) == [(7 + 8) | ((-7 + 8) << 4), (1 + 8) | ((3 + 8) << 4), 8 | (8 << 4)]
    assert list(Q.decode(codes, scales, 4, "int4")) == [7.0, -7.0, 1.0, 3.0]


def test_payload_layout() -> None:
    layout = Q.Layout(20_001, "int4")
    assert layout.padded == 3 * Q.PAD and layout.groups == 3 * Q.PAD // 32
    assert layout.code_bytes == 3 * Q.PAD // 2 and layout.scales_offset % 256 == 0
    assert layout.total == layout.scales_offset + 4 * layout.groups
    assert Q.Layout(0, "fp8").total == 0


# -- the device codec: bit for bit the host's ---------------------------------------------------

if triton is not None:
    @triton.jit
    def _roundtrip(x, codes, scales, y, n, MODE: tl.constexpr, QMAX: tl.constexpr,
                   CODE_BYTES: tl.constexpr, BLOCK: tl.constexpr):
        c = tl.program_id(0)
        offs = c * BLOCK + tl.arange(0, BLOCK)
        q, s = QK.encode(tl.load(x + offs, mask=offs < n, other=0.0).to(tl.float32), MODE, QMAX, BLOCK)
        tl.store(codes + c * CODE_BYTES + tl.arange(0, CODE_BYTES), q)
        tl.store(scales + c * (BLOCK // 32) + tl.arange(0, BLOCK // 32), s)
        tl.store(y + offs, QK.decode(q, s, MODE, BLOCK), mask=offs < n)

    @triton.jit
    def _decode(codes, scales, y, MODE: tl.constexpr, CODE_BYTES: tl.constexpr, BLOCK: tl.constexpr):
        c = tl.program_id(0)
        q = tl.load(codes + c * CODE_BYTES + tl.arange(0, CODE_BYTES))
        s = tl.load(scales + c * (BLOCK // 32) + tl.arange(0, BLOCK // 32))
        tl.store(y + c * BLOCK + tl.arange(0, BLOCK), QK.decode(q, s, MODE, BLOCK))


@pytest.mark.skipif(triton is None, reason="needs triton")
@pytest.mark.parametrize("mode", Q.MODES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_device_codec_is_the_host_codec(mode: str, dtype: torch.dtype, rng: np.random.Generator) -> None:
    """gpu/quant_kernels.py's encode and decode against quantize.py, in Triton's interpreter (CI)
    or on the GPU. The interpreter's own f32 -> fp8 cast truncates (the GPU's rounds to nearest
    even, as torch does), so there fp8 is checked through its scales and its decoding only."""
    interpreted = os.environ.get("TRITON_INTERPRET") == "1"
    device = "cpu" if interpreted else "cuda"
    n, block = 3000, 512
    x = torch.from_numpy((rng.standard_normal(n) * np.exp(rng.uniform(-5, 5, n))).astype(np.float32)).to(dtype)
    x[100:132] = 0
    layout = Q.Layout(n, mode)
    want_codes, want_scales = np.zeros(layout.code_bytes, np.uint8), np.zeros(layout.groups, np.float32)
    Q.encode(x.float().numpy(), mode, want_codes, want_scales)
    chunks = -(-n // block)
    used, groups = chunks * block * Q.BITS[mode] // 8, chunks * block // 32
    codes = torch.zeros(layout.code_bytes, dtype=torch.uint8, device=device)
    scales = torch.zeros(layout.groups, device=device)
    y = torch.zeros(n, device=device)
    _roundtrip[(chunks,)](x.to(device), codes, scales, y, n, MODE=Q.MODES.index(mode), QMAX=Q.QMAX[mode],
                          CODE_BYTES=block * Q.BITS[mode] // 8, BLOCK=block)
    assert np.array_equal(scales.cpu().numpy()[:groups], want_scales[:groups])
    if mode != "fp8" or not interpreted:
        assert np.array_equal(codes.cpu().numpy()[:used], want_codes[:used])
        assert np.array_equal(y.cpu().numpy().view(np.uint32), Q.decode(want_codes, want_scales, n, mode).view(np.uint32))
    y = torch.zeros(chunks * block, device=device)
    _decode[(chunks,)](torch.from_numpy(want_codes).to(device), torch.from_numpy(want_scales).to(device), y,
                       MODE=Q.MODES.index(mode), CODE_BYTES=block * Q.BITS[mode] // 8, BLOCK=block)
    want = Q.decode(want_codes, want_scales, chunks * block, mode)
    assert np.array_equal(y.cpu().numpy().view(np.uint32), want.view(np.uint32))


def test_quantized_kernels_compile_without_fused_products() -> None:
    pytest.importorskip("triton.backends.nvidia")
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = str(ROOT)
    result = subprocess.run([sys.executable, str(PROGRAMS / "gpu_quantized_ptx.py")], capture_output=True,
                            text=True, timeout=600, env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    lines = result.stdout.splitlines()
    assert len(lines) == 5, result.stdout
    for line in lines:
        name, *fields = line.split()
        counts = {k: int(v) for k, v in (f.split("=") for f in fields)}
        kernel, mode, _, world = name.split("/")
        # every signal releases to all peers in one vector exchange (signals.signal); every wait
        # acquires each peer's flag
        assert counts["release"] >= 2 and counts["acquire"] >= 2 * (int(world) - 1), line
        assert counts["div_rn"] > 0, line  # the scales and v / s are correctly rounded divisions
        assert (counts["e4m3"] > 0) == (mode == "fp8"), line
        if kernel == "all_reduce_quantized":
            assert counts["fma"] == 0, line  # code * scale + sum: two roundings, as on the host


# -- the chooser and the heap's workspace -------------------------------------------------------


def test_quantization_from_the_threshold_on(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HPVM_COMM_QUANTIZE_BYTES", raising=False)
    limit = chooser.QUANTIZE_BYTES["int4"]
    for mode, threshold in chooser.QUANTIZE_BYTES.items():
        assert chooser.quantization("all_reduce", mode, threshold) == mode
        assert chooser.quantization("all_reduce", mode, threshold - 1) == ""
    assert chooser.quantization("all_reduce", "", 1 << 30) == ""
    assert chooser.quantization("all_reduce_rmsnorm", "fp8", 8) == "fp8"  # an output: any size
    assert chooser.choose(True, "all_reduce", limit, "int4") == "quantized"
    assert chooser.choose(True, "all_reduce", limit - 1, "int4") == chooser.choose(True, "all_reduce", limit - 1)
    assert chooser.choose(False, "all_reduce", limit, "int4") == "remote"
    assert chooser.choose_gpu("all_reduce", limit, 2, "fp8") == "quantized"
    assert chooser.choose_gpu("all_reduce_rmsnorm", limit, 2, "fp8") == "direct"
    monkeypatch.setenv("HPVM_COMM_QUANTIZE_BYTES", "0")
    assert chooser.quantization("all_reduce", "fp8", 2) == "fp8"
    assert chooser.quantization("all_reduce", "fp8", 0) == ""  # nothing to quantize
    monkeypatch.setenv("HPVM_COMM_QUANTIZE_BYTES", "lots")
    with pytest.raises(DistributedError, match="HPVM_COMM_QUANTIZE_BYTES='lots' must be a number"):
        chooser.quantization("all_reduce", "fp8", 2)


def test_workspace_grows_from_the_end_of_the_heap(world: None) -> None:
    from hpvm_py.distributed import ranks

    heap = ranks.current().heap
    free = heap.free_bytes
    assert heap.reserve_workspace(1000) == heap.size - 1024
    assert heap.reserve_workspace(300) == heap.size - 512  # inside the reserved tail
    assert heap.free_bytes == free - 1024
    x = hpvm.symmetric.empty(heap.free_bytes - 512, torch.uint8)  # the user's allocations stop there
    with pytest.raises(DistributedError, match=r"requested 1024 bytes") as info:
        hpvm.symmetric.empty(1024, torch.uint8)
    assert info.value.rule == "heap-capacity"
    assert heap.reserve_workspace(1536) == heap.size - 1536  # the 512 bytes left
    assert heap.reserve_workspace(4096) is None  # x stands there
    assert x.data_ptr() + x.nbytes <= heap.my_base + heap.size - 1536


# -- nodes on one rank, in this process ---------------------------------------------------------


@pytest.fixture
def world(monkeypatch: pytest.MonkeyPatch):
    """A world of one rank with a small host heap; quantized from the first byte."""
    monkeypatch.setenv("HPVM_HEAP_BYTES", "2M")
    monkeypatch.setenv("HPVM_COMM_QUANTIZE_BYTES", "0")
    try:
        hpvm.distributed.init(timeout=5, device="cpu")
        yield
    finally:
        hpvm.distributed.finalize()


INT4 = hpvm.comm.all_reduce(bf16, quantize="int4")
RMS_FP8 = hpvm.comm.all_reduce_rmsnorm(f32, eps=1e-5, quantize="fp8")


@hpvm.graph
def quick_sum(x: InOut[Ptr[bf16]], x_bytes: i64):
    hpvm.node(INT4, buf=x, buf_bytes=x_bytes)


@hpvm.graph
def rms_fp8(x: InOut[Ptr[f32]], x_bytes: i64, r: InOut[Ptr[f32]], r_bytes: i64, w: In[Ptr[f32]],
            w_bytes: i64, hidden: i64, out: Out[Ptr[u8]], out_bytes: i64, s: Out[Ptr[f32]], s_bytes: i64):
    hpvm.node(RMS_FP8, x=x, x_bytes=x_bytes, residual=r, residual_bytes=r_bytes, weight=w,
              weight_bytes=w_bytes, hidden=hidden, out=out, out_bytes=out_bytes, scales=s, scales_bytes=s_bytes)


def test_one_rank_quantized_sum_is_its_own_decoded_payload(world: None, rng: np.random.Generator) -> None:
    n = 1500
    values = torch.from_numpy(rng.standard_normal(n).astype(np.float32)).to(torch.bfloat16)
    x = hpvm.symmetric.empty(n, torch.bfloat16)
    x.copy_(values)
    with hpvm.runtime("cpu"):
        hpvm.wait(hpvm.launch(quick_sum, x, x.nbytes))
    layout = Q.Layout(n, "int4")
    codes, scales = np.zeros(layout.code_bytes, np.uint8), np.zeros(layout.groups, np.float32)
    Q.encode(values.float().numpy(), "int4", codes, scales)
    assert torch.equal(x, torch.from_numpy(Q.decode(codes, scales, n, "int4")).to(torch.bfloat16))
    assert not torch.equal(x, values)  # int4 moves almost every value
    assert hpvm.stats()["collectives_quantized"] >= 1


def test_quantized_nodes_round_trip_through_text(world: None) -> None:
    text = hpvm.to_text(quick_sum)
    assert 'kind(all_reduce) options(dtype="bf16", op="sum", quantize="int4")' in text, text
    loaded = hpvm.from_text(text)
    assert hpvm.to_text(loaded) == text
    x = hpvm.symmetric.zeros(64, torch.bfloat16)
    x[:3] = torch.tensor([1.0, -7.0, 3.0])
    with hpvm.runtime("cpu"):
        hpvm.wait(hpvm.launch(loaded, x, x.nbytes))
    assert x[:3].tolist() == [1.0, -7.0, 3.0]  # multiples of absmax / 7: exact in int4
    assert hpvm.to_text(hpvm.from_text(hpvm.to_text(rms_fp8))) == hpvm.to_text(rms_fp8)
    assert "quantize" not in hpvm.to_text(quick_plain)  # a plain node's text is as before


@hpvm.graph
def quick_plain(x: InOut[Ptr[f32]], x_bytes: i64):
    hpvm.node(hpvm.comm.all_reduce(f32), buf=x, buf_bytes=x_bytes)


def test_one_rank_rmsnorm_writes_the_fp8_copy_of_x(world: None, rng: np.random.Generator) -> None:
    rows, hidden = 6, 80
    x, r = (hpvm.symmetric.empty(rows * hidden, torch.float32) for _ in range(2))
    w = hpvm.symmetric.empty(hidden, torch.float32)
    for t in (x, r, w):
        t.copy_(torch.from_numpy(rng.standard_normal(t.numel()).astype(np.float32)))
    x[hidden:2 * hidden] = 0  # with the residual's row zero too: a row of zeros, scale 0
    r[hidden:2 * hidden] = 0
    out = hpvm.symmetric.zeros(rows * hidden, torch.uint8)
    s = hpvm.symmetric.empty(rows, torch.float32)
    s.fill_(-1.0)
    with hpvm.runtime("cpu"):
        hpvm.wait(hpvm.launch(rms_fp8, x, x.nbytes, r, r.nbytes, w, w.nbytes, hidden, out, out.nbytes,
                              s, s.nbytes))
    v = x.view(rows, hidden)
    want_s = v.abs().amax(1) / torch.full((rows,), 448.0)
    assert torch.equal(s, want_s) and s[1] == 0
    safe = torch.where(want_s > 0, want_s, torch.ones(rows))[:, None]
    y = torch.where(want_s[:, None] > 0, v / safe, torch.zeros_like(v))  # a row of zeros: codes 0
    codes = y.clamp(-448, 448).to(torch.float8_e4m3fn).view(torch.uint8)
    assert torch.equal(out.view(rows, hidden), codes)
    assert not torch.all(out == 0)


def test_rmsnorm_fp8_buffers_of_the_wrong_size_are_named(world: None) -> None:
    rows, hidden = 2, 32
    x, r = (hpvm.symmetric.zeros(rows * hidden, torch.float32) for _ in range(2))
    w = hpvm.symmetric.zeros(hidden, torch.float32)
    out, s = hpvm.symmetric.zeros(rows * hidden, torch.uint8), hpvm.symmetric.zeros(rows, torch.float32)
    with hpvm.runtime("cpu"):
        with pytest.raises(DistributedError, match=r"out has 63 bytes; it must hold one fp8 byte per "
                                                   r"element of x \(64\)") as info:
            hpvm.wait(hpvm.launch(rms_fp8, x, x.nbytes, r, r.nbytes, w, w.nbytes, hidden, out, 63, s, s.nbytes))
        assert info.value.rule == "collective-arguments" and "test_quick_reduce.py" in str(info.value)
        with pytest.raises(DistributedError, match=r"scales has 4 bytes; it must hold one f32 per row"):
            hpvm.wait(hpvm.launch(rms_fp8, x, x.nbytes, r, r.nbytes, w, w.nbytes, hidden, out, out.nbytes, s, 4))


@pytest.mark.parametrize("make, message, rule", [
    (lambda: hpvm.comm.all_reduce(bf16, quantize="int3"), r"quantize='int3' is not one of fp8, int8, int4",
     "collective-options"),
    (lambda: hpvm.comm.all_reduce(bf16, quantize=["int8"]), r"quantize=\['int8'\] is not one of",
     "collective-options"),
    (lambda: hpvm.comm.all_reduce(hpvm.i32, quantize="int8"), r"element type i32 is not quantized",
     "collective-type"),
    (lambda: hpvm.comm.all_reduce(hpvm.f64, quantize="fp8"), r"element type f64 is not quantized",
     "collective-type"),
    (lambda: hpvm.comm.all_reduce(f32, op="max", quantize="fp8"), r"quantize='fp8' needs op='sum'",
     "collective-options"),
    (lambda: hpvm.comm.all_reduce_rmsnorm(f32, quantize="int8"), r"quantize='int8' is not one of fp8 ",
     "collective-options"),
])
def test_bad_quantize_options_are_frontend_errors(make, message: str, rule: str) -> None:  # noqa: ANN001
    with pytest.raises(FrontendError, match=message) as info:
        make()
    assert "test_quick_reduce.py" in str(info.value) and info.value.rule == rule


def test_parsed_library_node_with_a_bad_quantize_is_a_compile_error() -> None:
    text = hpvm.to_text(quick_sum)
    with pytest.raises(CompileError, match=r"quantize='int9' is not one of fp8, int8, int4"):
        hpvm.compile(hpvm.from_text(text.replace('quantize="int4"', 'quantize="int9"')), target="cpu")
    with pytest.raises(CompileError, match=r"dtype i32 is not quantized"):
        hpvm.compile(hpvm.from_text(text.replace('dtype="bf16"', 'dtype="i32"')), target="cpu")


def test_factories_keep_the_plain_node_unchanged() -> None:
    plain = hpvm.comm.all_reduce(f32)
    assert plain is hpvm.comm.all_reduce(f32, quantize=None)
    assert hpvm.comm.all_reduce(f32, quantize="fp8") is not plain
    assert hpvm.comm.all_reduce(f32, quantize="fp8").name.endswith("_qfp8")
    params, _ = RMS_FP8.signature()
    assert [(p.name, str(p.type)) for p in params][-4:] == [("out", "ptr<u8>"), ("out_bytes", "i64"),
                                                          ("scales", "ptr<f32>"), ("scales_bytes", "i64")]


# -- real ranks -------------------------------------------------------------------------------

QUICK_CHECKS = ([f"{m} {t}" for m in ("fp8", "int8", "int4") for t in ("f32", "bf16", "f16")]
                + ["threshold", "relaunch", "rmsnorm-fp8 f32", "rmsnorm-fp8 bf16", "own-threshold",
                   "in-step-after-threshold", "other-format", "in-step-after-format"])


@needs_mpiexec
@pytest.mark.parametrize("ranks, remote", [(2, False), (4, False), (2, True)], ids=["2-heap", "4-heap", "2-engine"])
def test_quantized_collectives_on_cpu_ranks(ranks: int, remote: bool, tmp_path: Path) -> None:
    environment = {k: v for k, v in os.environ.items() if not k.startswith("HPVM_COMM_")}
    environment.update(PYTHONPATH=str(ROOT), HPVM_HEAP_BYTES="8M", HPVM_NUM_THREADS="1", OMP_NUM_THREADS="1",
                       HPVM_TEST_OUT=str(tmp_path), HPVM_COMM_FORCE_REMOTE="1" if remote else "0")
    seed = str(np.random.default_rng().integers(1 << 30))
    command = [str(MPIEXEC), "-n", str(ranks), sys.executable, str(PROGRAMS / "dist_quantized.py"), seed, "cpu"]
    result = subprocess.run(command, capture_output=True, text=True, timeout=240, env=environment)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    want = [f"QUICK {c} ok" for c in QUICK_CHECKS] + ([] if remote else ["QUICK workspace-full ok"]) + ["QUICK done"]
    for r in range(ranks):
        assert (tmp_path / f"rank{r}.txt").read_text().splitlines() == want, (r, output)


@needs_mpiexec
@pytest.mark.skipif(triton is None, reason="needs triton")
@pytest.mark.parametrize("ranks", [2, 3])
def test_gpu_kernels_run_by_the_interpreter_on_cpu_ranks(ranks: int, tmp_path: Path) -> None:
    """The quantized all-reduce kernel, the fused RMSNorm kernel with its fp8 output and two-shot by
    stores, the GPU
    ranks' own Triton code, run by Triton's interpreter on CPU ranks whose heaps are shared memory
    (tests/programs/dist_kernels_interpreted.py): flags, peer translation, workspace layout and
    the codec against the host's, bit for bit (three ranks: the rank order of the f32 sum shows);
    then the kernels' own agreement check against a rank whose call differs."""
    environment = {k: v for k, v in os.environ.items() if not k.startswith("HPVM_COMM_")}
    environment.update(PYTHONPATH=str(ROOT), HPVM_HEAP_BYTES="8M", HPVM_NUM_THREADS="1", OMP_NUM_THREADS="1",
                       HPVM_TEST_OUT=str(tmp_path), TRITON_INTERPRET="1")
    seed = str(np.random.default_rng().integers(1 << 30))
    command = [str(MPIEXEC), "-n", str(ranks), sys.executable, str(PROGRAMS / "dist_kernels_interpreted.py"), seed]
    result = subprocess.run(command, capture_output=True, text=True, timeout=240, env=environment)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    want = ["KERNEL quantized int8 ok", "KERNEL quantized int4 ok", "KERNEL rmsnorm-fp8 ok", "KERNEL push ok",
            "KERNEL push early ok", "KERNEL two-shot all-gather ok", "KERNEL one-shot-push ok",
            *(f"KERNEL {kernel} {check} ok" for kernel in ("one_shot", "push", "push early")
              for check in ("mismatch-fingerprint", "mismatch-programs", "in-step-after-mismatch")),
            "KERNEL done"]
    for r in range(ranks):
        assert (tmp_path / f"rank{r}.txt").read_text().splitlines() == want, (r, output)
