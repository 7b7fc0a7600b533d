"""The gpu target's own launcher of compiled Triton kernels (backends/triton/launcher.py): which
parameters the cubin takes, their packed bytes, patching, the launch call and its errors, and when
Triton's launcher is used instead. Runs without a GPU (cuLaunchKernel is faked); on a GPU,
test_own_launcher_matches_tritons_on_the_gpu launches both and compares.

The fixtures are what triton 3.6.0 and 3.9.0 produce for one kernel compiled for sm_90 (on a CPU,
as triton_compile_check.py does): `CompiledKernel.src.signature` and the metadata fields the
launchers read, and the kernel's PTX parameters, for

    @triton.jit
    def probe(x, y, n, k, one, flag, scale, big, BLOCK: tl.constexpr): ...

called with two float32 tensors, n=100 (i32), k=2**40 (i64), one=1 (a constexpr: Triton
specialises an integer equal to 1), flag=True, scale=1.5 and big=2**63 + 16 (u64), BLOCK=256.
"""
from __future__ import annotations

import ctypes
import os
import struct
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from hpvm_py.backends.base import BufferArg
from hpvm_py.backends.triton import launcher as L
from hpvm_py.backends.triton import prepared as P
from hpvm_py.backends.triton.launcher import (OwnLauncher, TritonRunner, Unsupported, fast_launcher,
                                              own_launcher, parameters, refusal, slot_bits)
from hpvm_py.device import faults
from hpvm_py.device.devices import cuda_available
from hpvm_py.device.outputs import DeviceOutputs
from hpvm_py.errors import ExecutionError, LaunchError
from hpvm_py.types import Ptr, f32, i64
from programs import launch_params

ROOT = Path(__file__).resolve().parents[2]

# the same in 3.6.0 and 3.9.0 (ASTSource.signature: constexprs stay in it, marked)
SIGNATURE = {"x": "*fp32", "y": "*fp32", "n": "i32", "k": "i64", "one": "constexpr", "flag": "i1",
             "scale": "fp32", "big": "u64", "BLOCK": "constexpr"}
ARGS = [0x7F0000001000, 0x7F0000002000, 100, 1 << 40, 1, True, 1.5, (1 << 63) + 16, 256]
# the PTX entry's parameters, both versions: the kernel's, then global_scratch and profile_scratch
PTX_PARAMS = [".u64 .ptr", ".u64 .ptr", ".u32", ".u64", ".u8", ".f32", ".u64", ".u64 .ptr",
              ".u64 .ptr"]
_COMMON = dict(global_scratch_align=1, global_scratch_size=0, instrumentation_mode="",
               launch_cooperative_grid=False, launch_pdl=False, name="probe", num_ctas=1,
               num_stages=3, num_warps=4, profile_scratch_align=1, profile_scratch_size=0,
               shared=0, tensordesc_meta=[], tmem_size=0, warp_size=32,
               target=SimpleNamespace(backend="cuda", arch=90, warp_size=32))
METADATA = {
    "3.6.0": SimpleNamespace(**_COMMON, triton_version="3.6.0"),
    "3.9.0": SimpleNamespace(**_COMMON, triton_version="3.9.0", clc=False, sched4reg=False,
                             fpsan_homomorphic_casts=False, min_shared_mem=None),
}


def _slots(*values: int) -> bytes:
    return b"".join(struct.pack("<Q", v) for v in values)


def _launcher(args: list = ARGS, grid: tuple[int, int, int] = (3, 2, 1), shared: int = 0) -> OwnLauncher:
    return OwnLauncher(0xF00D, parameters(SIGNATURE), args, grid, 4, shared, 0, "probe", None)


class FakeLaunch:
    """cuLaunchKernel: records its calls, returns the codes it is given (0 once they run out)."""

    def __init__(self, *codes: int):
        self.calls: list[tuple] = []
        self.codes = list(codes)

    def __call__(self, *args) -> int:
        self.calls.append(args)
        return self.codes.pop(0) if self.codes else 0


def test_parameters_are_the_arguments_but_the_constexprs_in_order() -> None:
    params = parameters(SIGNATURE)
    assert params == [(0, "*fp32"), (1, "*fp32"), (2, "i32"), (3, "i64"), (5, "i1"), (6, "fp32"),
                      (7, "u64")]
    assert len(params) + L.SCRATCH_POINTERS == len(PTX_PARAMS)


@pytest.mark.parametrize("version", sorted(METADATA))
def test_both_versions_metadata_is_launched_by_the_own_launcher(version: str) -> None:
    assert refusal(METADATA[version]) is None


def test_the_block_packs_each_argument_as_tritons_launchers_do() -> None:
    launcher = _launcher()
    scale = struct.unpack("<I", struct.pack("<f", 1.5))[0]
    assert launcher.params.raw() == _slots(0x7F0000001000, 0x7F0000002000, 100, 1 << 40, 1, scale,
                                           (1 << 63) + 16, 0, 0)
    assert launcher.block == (128, 1, 1)  # 32 threads per warp, num_warps 4


def test_slot_bits() -> None:
    assert slot_bits("i32", -1) == 0xFFFFFFFF and slot_bits("i64", -1) == (1 << 64) - 1
    assert slot_bits("i32", 1 << 32 | 5) == 5  # truncated to the parameter's width
    assert slot_bits("i8", -2) == 0xFE and slot_bits("u16", 65537) == 1
    assert slot_bits("i1", True) == 1 and slot_bits("u1", False) == 0
    assert slot_bits("u64", (1 << 64) - 1) == (1 << 64) - 1
    assert slot_bits("i64", np.int64(-3)) == (1 << 64) - 3
    assert slot_bits("fp32", 1.5) == 0x3FC00000 and slot_bits("f32", -2.0) == 0xC0000000
    assert slot_bits("fp32", 1e300) == 0x7F800000  # a float's cast: inf, as in C
    assert slot_bits("fp64", 1.5) == 0x3FF8000000000000
    assert slot_bits("fp16", 1.0) == 0x3C00 and slot_bits("fp16", -0.5) == 0xB800
    assert slot_bits("bf16", 1.0) == 0x3F80
    assert slot_bits("bf16", 1.01171875) == 0x3F81  # fp32 0x3F818000: truncated, not rounded


def test_pointers_are_addresses() -> None:
    class Tensor:
        def data_ptr(self) -> int:
            return 0xABC000

    assert slot_bits("*fp32", 0x1000) == 0x1000 and slot_bits("*i8", np.uint64(64)) == 64
    assert slot_bits("*fp16", Tensor()) == 0xABC000 and slot_bits("*i64", None) == 0


def test_set_patches_one_slot_and_ignores_constexprs() -> None:
    launcher = _launcher()
    before = launcher.params.raw()
    launcher.set(2, -7)  # n
    launcher.set(0, 0x5000)  # x
    launcher.set(4, 1)  # `one`, a constexpr: in the code, nothing to patch
    after = launcher.params.raw()
    assert after[16:24] == struct.pack("<Q", 0xFFFFFFF9) and after[:8] == struct.pack("<Q", 0x5000)
    assert after[8:16] == before[8:16] and after[24:] == before[24:]


def test_a_launch_calls_cuLaunchKernel_with_the_block() -> None:
    launcher = _launcher(shared=1024)
    launcher._launch = fake = FakeLaunch()
    launcher(0x5151)
    assert fake.calls == [(0xF00D, 3, 2, 1, 128, 1, 1, 1024, 0x5151, launcher.params.address, None)]
    # the address array points at the slots, in order
    slots = launcher.params
    assert list(slots.pointers) == [ctypes.addressof(slots.slots) + 8 * i for i in range(slots.count)]


def test_an_empty_grid_launches_nothing() -> None:
    launcher = _launcher(grid=(0, 1, 1))
    launcher._launch = fake = FakeLaunch(1)
    launcher(0)
    assert fake.calls == []


def test_a_refused_launch_is_a_launch_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(L, "error_text", lambda code: "CUDA_ERROR_INVALID_VALUE")
    launcher = _launcher()
    launcher._launch = FakeLaunch(1)
    with pytest.raises(LaunchError, match=r"launching leaf probe \(grid \(3, 2, 1\), block "
                                          r"\(128, 1, 1\).*CUDA_ERROR_INVALID_VALUE"):
        launcher(0)


def test_a_fault_shown_at_a_launch_is_reported_as_a_fault(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(L, "error_text", lambda code: "CUDA_ERROR_ILLEGAL_ADDRESS")
    monkeypatch.setattr(faults, "_lost", None)  # restored after the test: the device stays usable
    launcher = _launcher()
    launcher._launch = FakeLaunch(700)
    with pytest.raises(ExecutionError, match="faulted on the GPU") as info:
        launcher(0)
    assert info.value.rule == "gpu-fault"


def test_a_thread_without_a_context_gets_the_devices(monkeypatch: pytest.MonkeyPatch) -> None:
    made: list[int] = []
    monkeypatch.setattr(L, "make_current", lambda ordinal: made.append(ordinal) or True)
    launcher = OwnLauncher(0xF00D, parameters(SIGNATURE), ARGS, (1, 1, 1), 4, 0, 3, "probe", None)
    launcher._launch = fake = FakeLaunch(L.CUDA_ERROR_INVALID_CONTEXT)
    launcher(9)
    assert made == [3] and len(fake.calls) == 2


@pytest.mark.parametrize("field, value", [
    ("num_ctas", 2), ("launch_cooperative_grid", True), ("launch_pdl", True),
    ("global_scratch_size", 128), ("profile_scratch_size", 64), ("instrumentation_mode", "gsan"),
    ("tensordesc_meta", [{"swizzle": 3}]), ("shared", 229 * 1024), ("warp_size", 64),
    ("target", SimpleNamespace(backend="hip", arch=942, warp_size=64)),
])
def test_kernels_using_what_only_tritons_launcher_does_are_refused(field: str, value: object) -> None:
    metadata = SimpleNamespace(**{**vars(METADATA["3.9.0"]), field: value})
    assert refusal(metadata) is not None


@pytest.mark.parametrize("kind", ["tensordesc<fp32[64, 64]>", "nvTmaDesc", ("*fp32", "i32")])
def test_signatures_with_descriptors_or_tuples_are_refused(kind: object) -> None:
    with pytest.raises(Unsupported):
        parameters({"x": "*fp32", "d": kind})


class Compiled:
    """A stand-in for Triton's CompiledKernel: metadata, src.signature, function, [grid]."""

    def __init__(self, metadata: object = METADATA["3.6.0"], function: int = 0xF00D,
                 signature: dict = SIGNATURE):
        self.metadata = metadata
        self.src = SimpleNamespace(signature=signature)
        self.function = function
        self.runs: list = []

    def __getitem__(self, grid: tuple) -> object:
        return lambda *args, stream=None: self.runs.append((grid, args, stream))


@pytest.fixture
def libcuda(monkeypatch: pytest.MonkeyPatch) -> FakeLaunch:
    """A cuLaunchKernel (this machine may have no libcuda)."""
    fake = FakeLaunch()
    monkeypatch.setattr(L, "launch_kernel", lambda: fake)
    monkeypatch.delenv("HPVM_TRITON_LAUNCHER", raising=False)
    return fake


def test_the_own_launcher_is_chosen_by_default(libcuda: FakeLaunch) -> None:
    compiled = Compiled()
    got = fast_launcher(compiled, ARGS, (2, 1, 1), 0, "probe", None)
    assert isinstance(got, OwnLauncher)
    assert got.owner is compiled  # it keeps the kernel's module loaded
    got(77)
    assert libcuda.calls[0][:5] == (0xF00D, 2, 1, 1, 128) and libcuda.calls[0][8] == 77


def test_hpvm_triton_launcher_triton_keeps_tritons(libcuda: FakeLaunch,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HPVM_TRITON_LAUNCHER", "triton")
    compiled = Compiled()
    got = fast_launcher(compiled, ARGS, (2, 1, 1), 0, "probe", None)
    assert isinstance(got, TritonRunner)
    got.set(2, 50)
    got(77)
    assert compiled.runs == [((2, 1, 1), tuple(ARGS[:2] + [50] + ARGS[3:]), 77)]
    assert libcuda.calls == []


def test_a_wrong_hpvm_triton_launcher_is_an_error(libcuda: FakeLaunch,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HPVM_TRITON_LAUNCHER", "fast")
    with pytest.raises(LaunchError, match="HPVM_TRITON_LAUNCHER='fast': expected own or triton"):
        fast_launcher(Compiled(), ARGS, (2, 1, 1), 0, "probe", None)


@pytest.mark.parametrize("case", ["no libcuda", "unsupported", "not loaded", "arguments", "hooks"])
def test_tritons_launcher_stands_in(case: str, libcuda: FakeLaunch,
                                    monkeypatch: pytest.MonkeyPatch) -> None:
    compiled, args = Compiled(), ARGS
    if case == "no libcuda":
        monkeypatch.setattr(L, "launch_kernel", lambda: None)
    elif case == "unsupported":
        compiled = Compiled(SimpleNamespace(**{**vars(METADATA["3.9.0"]), "launch_pdl": True}))
    elif case == "not loaded":
        compiled = Compiled(function=0)
    elif case == "arguments":
        args = ARGS[:-1]  # the trailing constexpr missing
    else:
        monkeypatch.setattr(L, "hooks_set", lambda: True)
    with pytest.raises(Unsupported):
        own_launcher(compiled, args, (2, 1, 1), 0, "probe", None)
    assert isinstance(fast_launcher(compiled, args, (2, 1, 1), 0, "probe", None), TritonRunner)


def test_tritons_launch_hooks_are_seen() -> None:
    knobs = pytest.importorskip("triton.knobs")
    assert not L.hooks_set()

    def hook(metadata: object) -> None:
        pass

    knobs.runtime.launch_enter_hook.add(hook)
    try:
        assert L.hooks_set()
    finally:
        knobs.runtime.launch_enter_hook.remove(hook)
    assert not L.hooks_set()


class Recorder:
    def __init__(self) -> None:
        self.sets: list[tuple[int, object]] = []

    def set(self, position: int, value: object) -> None:
        self.sets.append((position, value))


def test_a_prepared_launch_patches_its_launcher_within_a_specialisation() -> None:
    kernel = SimpleNamespace(leaf=SimpleNamespace(params=[SimpleNamespace(type=i64)]))
    launch = P.TritonLaunch(kernel, None, object(), [5], {}, (1, 1, 1), None, None, [], {0: 0}, {}, 0)
    launch._fast = recorder = Recorder()
    launch.set_uniform(0, 7)
    assert recorder.sets == [(0, 7)] and launch._fast is recorder
    launch.set_uniform(0, 1)  # a constexpr for Triton: another kernel, dispatched again
    assert launch._fast is None


def test_a_prepared_launch_relaunches_through_the_own_launcher(libcuda: FakeLaunch,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """TritonLaunch (prepared.py) with Triton stood in for: the first run dispatches, later runs
    are cuLaunchKernel calls on the packed block; a scalar patched within its class changes its
    slot, a buffer its address; a scalar of another class dispatches again (a new block)."""
    dispatched: list[tuple] = []
    signature = {"x": "*fp32", "k": "i32", "n": "i64", "BLOCK": "constexpr"}

    class Jit:
        arg_names = list(signature)

        def __getitem__(self, grid: tuple) -> object:
            def dispatch(*args: object, **options: object) -> Compiled:
                dispatched.append(args)
                return Compiled(signature=signature, function=0xBEEF)
            return dispatch

    class Tensor:
        device = "cuda:0"

        def __init__(self, address: int):
            self.address = address

        def data_ptr(self) -> int:
            return self.address

    params = [SimpleNamespace(type=Ptr[f32]), SimpleNamespace(type=f32), SimpleNamespace(type=i64)]
    leaf = SimpleNamespace(name="scale", loc=None, params=params)
    monkeypatch.setattr(P, "interpreting", lambda: False)
    monkeypatch.setattr(P, "current_stream", lambda: 7)
    monkeypatch.setattr(P, "current_device", lambda: 0)
    monkeypatch.setattr(P, "typed_tensor", lambda obj, elem: obj)
    call = [Tensor(0x10000), slot_bits("fp32", 2.0), 1 << 40]
    launch = P.TritonLaunch(SimpleNamespace(leaf=leaf), None, Jit(), call, {"BLOCK": 128}, (4, 1, 1),
                            DeviceOutputs([], "scale", None), None, [], {1: 1, 2: 2}, {}, 0, {0: 0})
    launch.start()
    assert len(dispatched) == 1 and libcuda.calls == []
    launch.set_uniform(1, 4.0)  # 2.0 and 4.0: both bit patterns multiples of 16
    launch.set_buffer(0, BufferArg(Tensor(0x20000), 0x20000, 64, None))
    launch.start()
    call = libcuda.calls[-1]
    assert call[:9] == (0xBEEF, 4, 1, 1, 128, 1, 1, 0, 7) and len(dispatched) == 1
    assert launch._fast.params.raw() == _slots(0x20000, slot_bits("fp32", 4.0), 1 << 40, 0, 0)
    launch.set_uniform(1, 1.1)  # not a multiple of 16: Triton compiled another kernel for it
    launch.start()
    assert len(dispatched) == 2 and len(libcuda.calls) == 1
    launch.start()
    assert len(libcuda.calls) == 2
    assert launch._fast.params.raw() == _slots(0x20000, slot_bits("fp32", 1.1), 1 << 40, 0, 0)


def test_the_parameters_match_the_ptx_of_kernels_compiled_as_launched() -> None:
    """Triton's compiler runs on the CPU: leaves whose scalars fall in every specialisation class
    compiled for sm_90 as their launches would dispatch them; the own launcher's parameters are
    checked against each kernel's PTX entry (triton_compile_check.check_parameters)."""
    pytest.importorskip("triton.backends.nvidia")
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = os.pathsep.join(str(p) for p in (ROOT, ROOT / "examples", ROOT / "tests"))
    done = subprocess.run([sys.executable, str(Path(__file__).parent / "triton_compile_check.py"),
                           "launches:programs.launch_params"], capture_output=True, text=True,
                          timeout=600, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.count("compiled mixed") == 2 * len(launch_params.LAUNCHES)


@pytest.mark.skipif(not cuda_available(), reason="a real GPU")
def test_own_launcher_matches_tritons_on_the_gpu() -> None:
    """Graphs relaunched (replays) through each launcher on random inputs give the same bytes."""
    script = ROOT / "tests" / "backends" / "triton_launcher_check.py"
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = os.pathsep.join(str(p) for p in (ROOT, ROOT / "examples", ROOT / "tests"))
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          timeout=600, env=env)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "own launcher: same results" in done.stdout
