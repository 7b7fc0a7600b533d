"""The CUDA driver, through NVIDIA's cuda-bindings (imported on first use: CI has no GPU).

Kernels run in the device's primary context, the one torch uses, so device buffers are torch CUDA
tensors and launches go on torch's current stream.
"""
from __future__ import annotations

import functools
import re
import threading
from typing import Any

from ...errors import CompileError, LaunchError
from ...support import settings
from ...support.loc import Loc
from ..base import symbol_name
from .toolchain import DEFAULT_ARCH

_lock = threading.Lock()


def cuda_driver() -> Any:
    from cuda.bindings import driver  # noqa: PLC0415 - optional dependency, needed only on a GPU
    return driver


@functools.cache
def unusable_reason() -> str | None:
    """None when kernels can run here, else why not (what to install or change)."""
    try:
        driver = cuda_driver()
    except ImportError:
        return "NVIDIA's cuda-bindings package is not installed: pip install cuda-bindings"
    try:
        import torch  # noqa: PLC0415
    except ImportError:
        return "torch is not installed (target 'nvptx' keeps device buffers in torch CUDA tensors)"
    try:
        (err,) = driver.cuInit(0)
    except Exception as exc:  # noqa: BLE001 - cuda-bindings raises its own error when libcuda is absent
        return f"no NVIDIA driver on this machine (libcuda could not be loaded: {type(exc).__name__})"
    if err != driver.CUresult.CUDA_SUCCESS:
        return f"no usable CUDA driver (cuInit: {error_name(err)})"
    err, count = driver.cuDeviceGetCount()
    if err != driver.CUresult.CUDA_SUCCESS or count == 0:
        return "no CUDA GPU on this machine"
    if not torch.cuda.is_available():
        return "torch was built without CUDA (install a CUDA build of torch)"
    return None


def error_name(err: Any) -> str:
    driver = cuda_driver()
    if isinstance(err, int):  # a code returned through ctypes (device/libcuda.py)
        try:
            err = driver.CUresult(err)
        except ValueError:
            return f"CUDA error {err}"
    got, name = driver.cuGetErrorName(err)
    return name.decode() if got == driver.CUresult.CUDA_SUCCESS and name else str(err)


def check(result: tuple, what: str, loc: Loc) -> Any:
    """The value(s) of a cuda-bindings call, or a LaunchError naming the call and the error."""
    driver = cuda_driver()
    err, *values = result
    if err != driver.CUresult.CUDA_SUCCESS:
        raise LaunchError(f"{what} failed: {error_name(err)}", loc)
    return values[0] if len(values) == 1 else values


def arch() -> str:
    """The GPU architecture kernels are assembled for: $HPVM_NVPTX_ARCH, else the first GPU's,
    else sm_90 (where there is no GPU, as in CI)."""
    env = settings.NVPTX_ARCH.text()
    if env:
        # LLVM only notes an unknown processor on stderr and ptxas's refusal would read as an
        # internal error: a name that is no architecture is refused here, naming the setting
        if not re.fullmatch(r"sm_[1-9][0-9]{1,2}[af]?", env):
            raise CompileError(f"{settings.NVPTX_ARCH.name}={env!r}: expected a GPU architecture "
                               "such as sm_80, sm_90 or sm_90a")
        return env
    return _gpu_arch()  # read per call like other settings: only the GPU's answer is kept


@functools.cache
def _gpu_arch() -> str:
    if unusable_reason() is not None:
        return DEFAULT_ARCH
    driver = cuda_driver()
    dev = check(driver.cuDeviceGet(0), "cuDeviceGet", None)
    attrs = driver.CUdevice_attribute
    major = check(driver.cuDeviceGetAttribute(attrs.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR,
                                              dev), "cuDeviceGetAttribute", None)
    minor = check(driver.cuDeviceGetAttribute(attrs.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR,
                                              dev), "cuDeviceGetAttribute", None)
    return f"sm_{major}{minor}"


@functools.cache
def primary_context(ordinal: int) -> Any:
    driver = cuda_driver()
    dev = check(driver.cuDeviceGet(ordinal), "cuDeviceGet", None)
    return check(driver.cuDevicePrimaryCtxRetain(dev), "cuDevicePrimaryCtxRetain", None)


@functools.cache
def limits(ordinal: int) -> dict[str, int]:
    """The launch limits of a device."""
    driver = cuda_driver()
    dev = check(driver.cuDeviceGet(ordinal), "cuDeviceGet", None)
    attrs = driver.CUdevice_attribute

    def get(attr: Any) -> int:
        return int(check(driver.cuDeviceGetAttribute(attr, dev), "cuDeviceGetAttribute", None))

    return {
        "threads": get(attrs.CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK),
        "block_x": get(attrs.CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X),
        "block_y": get(attrs.CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y),
        "block_z": get(attrs.CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z),
        "shared": get(attrs.CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN),
    }


def make_current(ordinal: int) -> None:
    driver = cuda_driver()
    check(driver.cuCtxSetCurrent(primary_context(ordinal)), "cuCtxSetCurrent", None)


class LoadedCubin:
    """A cubin loaded on each device it runs on (once per device), and its kernel function."""

    def __init__(self, cubin: bytes, name: str, loc: Loc):
        self.cubin = cubin
        self.name = name
        self.loc = loc
        self._functions: dict[int, Any] = {}
        self._modules: list[Any] = []
        self._shared_set: dict[int, int] = {}  # ordinal -> dynamic shared bytes allowed so far

    def function(self, ordinal: int) -> Any:
        fn = self._functions.get(ordinal)
        if fn is not None:
            return fn
        with _lock:
            if ordinal not in self._functions:
                driver = cuda_driver()
                make_current(ordinal)
                module = check(driver.cuModuleLoadData(self.cubin), f"loading leaf {self.name}",
                               self.loc)
                self._modules.append(module)
                self._functions[ordinal] = check(
                    driver.cuModuleGetFunction(module, symbol_name(self.name).encode()),
                    f"finding kernel {self.name}", self.loc)
            return self._functions[ordinal]

    def allow_shared(self, ordinal: int, nbytes: int) -> None:
        """Opt in to more than 48 KiB of dynamic shared memory for this kernel."""
        if nbytes <= self._shared_set.get(ordinal, 48 * 1024):
            return
        driver = cuda_driver()
        attr = driver.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
        check(driver.cuFuncSetAttribute(self.function(ordinal), attr, nbytes),
              f"allowing {nbytes} bytes of shared memory to leaf {self.name}", self.loc)
        self._shared_set[ordinal] = nbytes
