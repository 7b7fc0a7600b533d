"""Direct calls into the CUDA driver (libcuda through ctypes) for the hot path of a replayed
launch: a kernel or CUDA-graph launch through cuda-bindings or torch costs microseconds of Python
wrapping, a ctypes call about one. None where libcuda cannot be loaded (then the callers use
cuda-bindings or torch as before).

Calls that return at once (launches, records, queries, asynchronous copies) keep the interpreter's
lock (`ctypes.PyDLL`): a ctypes call that lets it go hands it to any other thread that wants it,
which then keeps it for up to the switch interval (5 ms) while this thread waits to take it back.
A stream's runner thread makes a dozen such calls an item while the host thread pushes the next:
with the lock let go each time, the two threads on two cores traded it a dozen times a frame
(docs/streaming.md). Calls that wait for the GPU (`_blocking()`: synchronisations) let it go."""
from __future__ import annotations

import ctypes
import functools
from typing import Any


@functools.cache
def _libcuda() -> Any:
    """libcuda for the calls that return at once: they keep the interpreter's lock."""
    return _load(ctypes.PyDLL)


@functools.cache
def _blocking() -> Any:
    """libcuda for the calls that wait for the GPU: they let the interpreter's lock go."""
    return _load(ctypes.CDLL)


def _load(loader: Any) -> Any:
    """libcuda through a ctypes loader, with the prototypes below; None where it cannot be loaded."""
    try:
        return _declare(loader("libcuda.so.1"))
    except OSError:
        return None


def _declare(lib: Any) -> Any:
    """Set the prototypes of the calls used here on a handle of libcuda."""
    # CUresult cuLaunchKernel(CUfunction, 3 x grid, 3 x block, shared bytes, CUstream,
    # void **params, void **extra)
    lib.cuLaunchKernel.restype = ctypes.c_int
    lib.cuLaunchKernel.argtypes = [ctypes.c_void_p] + [ctypes.c_uint] * 7 + [ctypes.c_void_p] * 3
    # CUresult cuGraphLaunch(CUgraphExec, CUstream)
    lib.cuGraphLaunch.restype = ctypes.c_int
    lib.cuGraphLaunch.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
    lib.cuCtxSynchronize.restype = ctypes.c_int
    lib.cuCtxSynchronize.argtypes = []
    # CUresult cuDeviceGet(CUdevice *, int); cuDevicePrimaryCtxRetain(CUcontext *, CUdevice);
    # cuCtxSetCurrent(CUcontext)
    lib.cuDeviceGet.restype = lib.cuDevicePrimaryCtxRetain.restype = ctypes.c_int
    lib.cuDeviceGet.argtypes = [ctypes.POINTER(ctypes.c_int), ctypes.c_int]
    lib.cuDevicePrimaryCtxRetain.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_int]
    lib.cuCtxSetCurrent.restype = ctypes.c_int
    lib.cuCtxSetCurrent.argtypes = [ctypes.c_void_p]
    # CUresult cuMemcpyDtoHAsync_v2(void *dst, CUdeviceptr src, size_t bytes, CUstream);
    # cuStreamSynchronize(CUstream)
    lib.cuMemcpyDtoHAsync_v2.restype = lib.cuStreamSynchronize.restype = ctypes.c_int
    lib.cuMemcpyDtoHAsync_v2.argtypes = [ctypes.c_void_p, ctypes.c_uint64, ctypes.c_size_t,
                                         ctypes.c_void_p]
    lib.cuStreamSynchronize.argtypes = [ctypes.c_void_p]
    # CUresult cuPointerGetAttribute(void *data, CUpointer_attribute, CUdeviceptr)
    lib.cuPointerGetAttribute.restype = ctypes.c_int
    lib.cuPointerGetAttribute.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_uint64]
    # events: cuEventCreate(CUevent *, flags), cuEventRecord(CUevent, CUstream),
    # cuEventQuery(CUevent), cuEventSynchronize(CUevent), cuEventDestroy_v2(CUevent),
    # cuStreamWaitEvent(CUstream, CUevent, flags)
    for name in ("cuEventCreate", "cuEventRecord", "cuEventQuery", "cuEventSynchronize",
                 "cuEventDestroy_v2", "cuStreamWaitEvent"):
        getattr(lib, name).restype = ctypes.c_int
    lib.cuEventCreate.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_uint]
    lib.cuEventRecord.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
    lib.cuEventQuery.argtypes = lib.cuEventSynchronize.argtypes = [ctypes.c_void_p]
    lib.cuEventDestroy_v2.argtypes = [ctypes.c_void_p]
    lib.cuStreamWaitEvent.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_uint]
    # graphs built node by node (device/kernel_graph.py): cuGraphCreate(CUgraph *, flags),
    # cuGraphAddKernelNode(CUgraphNode *, CUgraph, const CUgraphNode *deps, size_t, params *),
    # cuGraphInstantiateWithFlags(CUgraphExec *, CUgraph, flags),
    # cuGraphExecKernelNodeSetParams(CUgraphExec, CUgraphNode, params *), and their destroyers
    for name in ("cuGraphCreate", "cuGraphAddKernelNode", "cuGraphInstantiateWithFlags",
                 "cuGraphExecKernelNodeSetParams", "cuGraphExecDestroy", "cuGraphDestroy"):
        getattr(lib, name).restype = ctypes.c_int
    lib.cuGraphCreate.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_uint]
    lib.cuGraphAddKernelNode.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_void_p,
                                         ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
    lib.cuGraphInstantiateWithFlags.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_void_p,
                                                ctypes.c_ulonglong]
    lib.cuGraphExecKernelNodeSetParams.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
    lib.cuGraphExecDestroy.argtypes = lib.cuGraphDestroy.argtypes = [ctypes.c_void_p]
    return lib


# CUresult of a call made with no context current in the calling thread
CUDA_ERROR_INVALID_CONTEXT = 201


def error_text(code: int) -> str:
    """The driver's name of an error code (CUDA_ERROR_...)."""
    lib = _libcuda()
    name = ctypes.c_char_p()
    if lib is None or lib.cuGetErrorName(code, ctypes.byref(name)) != 0 or not name.value:
        return f"CUDA error {code}"
    return name.value.decode()


def launch_kernel() -> Any:
    """libcuda's cuLaunchKernel, or None."""
    lib = _libcuda()
    return None if lib is None else lib.cuLaunchKernel


def graph_launch() -> Any:
    """libcuda's cuGraphLaunch, or None."""
    lib = _libcuda()
    return None if lib is None else lib.cuGraphLaunch


def stream_synchronize(stream: int) -> int:
    """Wait for what `stream` holds: the CUresult; -1 where libcuda cannot be loaded."""
    lib = _blocking()
    return -1 if lib is None else lib.cuStreamSynchronize(stream)


# CU_POINTER_ATTRIBUTE_DEVICE_POINTER: the address by which kernels reach a host or device pointer
_DEVICE_POINTER = 3


def device_address(host: int) -> int | None:
    """The address by which kernels reach pinned host memory at `host`; None where libcuda cannot
    be loaded or the memory is not mapped for the GPU."""
    lib = _libcuda()
    if lib is None:
        return None
    address = ctypes.c_uint64(0)
    return None if lib.cuPointerGetAttribute(ctypes.byref(address), _DEVICE_POINTER, host) \
        else address.value


def copy_to_host_async(host: int, device: int, nbytes: int, stream: int) -> int:
    """Queue a copy of `nbytes` from device address `device` to pinned host address `host` on
    `stream`: the CUresult; -1 where libcuda cannot be loaded."""
    lib = _libcuda()
    return -1 if lib is None else lib.cuMemcpyDtoHAsync_v2(host, device, nbytes, stream)


def context_synchronize() -> Any:
    """libcuda's cuCtxSynchronize (waits for every stream of the calling thread's current
    context), or None."""
    lib = _blocking()
    return None if lib is None else lib.cuCtxSynchronize


_contexts: dict[int, int] = {}  # device ordinal -> its primary context, retained once


def make_current(ordinal: int) -> bool:
    """Make device `ordinal`'s primary context (the one torch and Triton use) current in this
    thread, which may have none yet; False when that fails."""
    lib = _libcuda()
    if lib is None:
        return False
    context = _contexts.get(ordinal)
    if context is None:
        device, handle = ctypes.c_int(), ctypes.c_void_p()
        if lib.cuDeviceGet(ctypes.byref(device), ordinal) != 0 or \
                lib.cuDevicePrimaryCtxRetain(ctypes.byref(handle), device) != 0 or not handle.value:
            return False
        context = _contexts[ordinal] = handle.value
    return lib.cuCtxSetCurrent(context) == 0


CUDA_ERROR_NOT_READY = 600  # cuEventQuery: work before the event is still running
_EVENT_DISABLE_TIMING = 2


class DriverEvents:
    """CUDA events through libcuda (a torch event costs microseconds of Python a use): made,
    recorded, queried, waited for and destroyed by handle. Each call returns libcuda's CUresult."""

    def __init__(self, lib: Any, blocking: Any):
        self.record = lib.cuEventRecord
        self.query = lib.cuEventQuery
        self.synchronize = blocking.cuEventSynchronize
        self.destroy = lib.cuEventDestroy_v2
        self.stream_wait = lib.cuStreamWaitEvent
        self._create = lib.cuEventCreate

    def create(self) -> int:
        """A new event (without timing), or 0 when the driver refuses."""
        handle = ctypes.c_void_p()
        if self._create(ctypes.byref(handle), _EVENT_DISABLE_TIMING) != 0:
            return 0
        return handle.value or 0


@functools.cache
def driver_events() -> DriverEvents | None:
    """libcuda's event calls, or None where libcuda cannot be loaded."""
    lib = _libcuda()
    return None if lib is None else DriverEvents(lib, _blocking())


def libcuda() -> Any:
    """libcuda through ctypes, with the prototypes above, or None where it cannot be loaded."""
    return _libcuda()
