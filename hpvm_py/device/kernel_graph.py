"""A chain of kernels launched as one CUDA graph, built node by node through libcuda: a whole
stream item's kernels (rt/stream/item_slots.py), one graph launch instead of a cuLaunchKernel a
kernel. Built from the launches' packed parameters; a launch whose parameters changed since
(another buffer, another scalar) has its nodes set again before the next launch of the graph.

A launch takes part through `each_kernel(visit)` (GraphedLaunch): it calls visit(function, grid,
block, shared bytes, kernelParams address) for each kernel it would launch, in order, and returns
False when it cannot launch that way (then no graph is made, or the one there is dropped).
"""
from __future__ import annotations

import ctypes
import logging
from typing import Callable, Protocol, Sequence

from . import faults
from .libcuda import error_text, libcuda

log = logging.getLogger(__name__)

Visit = Callable[[int, tuple[int, int, int], tuple[int, int, int], int, int], None]


class GraphedLaunch(Protocol):
    def each_kernel(self, visit: Visit) -> bool: ...


class _KernelNodeParams(ctypes.Structure):
    """CUDA_KERNEL_NODE_PARAMS (the first version, which cuGraphAddKernelNode takes)."""

    _fields_ = [("func", ctypes.c_void_p),
                ("gridDimX", ctypes.c_uint), ("gridDimY", ctypes.c_uint), ("gridDimZ", ctypes.c_uint),
                ("blockDimX", ctypes.c_uint), ("blockDimY", ctypes.c_uint), ("blockDimZ", ctypes.c_uint),
                ("sharedMemBytes", ctypes.c_uint),
                ("kernelParams", ctypes.c_void_p), ("extra", ctypes.c_void_p)]


def _params(function: int, grid: tuple[int, int, int], block: tuple[int, int, int], shared: int,
            params: int) -> _KernelNodeParams:
    return _KernelNodeParams(function, *grid, *block, shared, params, None)


class GraphRefused(Exception):
    """The launches cannot run as a graph (a launch that cannot, or the driver refused)."""


class KernelGraph:
    """The launches, in order, as one executable CUDA graph (make(): None when they cannot be)."""

    def __init__(self, launches: Sequence[GraphedLaunch]):
        self._lib = lib = libcuda()
        if lib is None:
            raise GraphRefused("libcuda cannot be loaded")
        self._graph, self._exec = ctypes.c_void_p(), ctypes.c_void_p()
        self._check(lib.cuGraphCreate(ctypes.byref(self._graph), 0), "creating a graph")
        # per launch: its nodes, each with the parameters it was made with (set again from them)
        self.nodes: list[list[tuple[ctypes.c_void_p, _KernelNodeParams]]] = []
        last: list[ctypes.c_void_p] = []

        def add(function: int, grid: tuple[int, int, int], block: tuple[int, int, int], shared: int,
                params: int) -> None:
            node = ctypes.c_void_p()
            deps = (ctypes.c_void_p * 1)(last[0]) if last else None
            made = _params(function, grid, block, shared, params)
            self._check(lib.cuGraphAddKernelNode(ctypes.byref(node), self._graph, deps, len(last),
                                                 ctypes.byref(made)), "adding a kernel node")
            last[:] = [node]
            self.nodes[-1].append((node, made))

        try:
            for launch in launches:
                self.nodes.append([])
                if not launch.each_kernel(add):
                    raise GraphRefused(f"{type(launch).__name__} cannot be launched in a graph")
            self._check(lib.cuGraphInstantiateWithFlags(ctypes.byref(self._exec), self._graph, 0),
                        "instantiating a graph")
        except BaseException:
            self.close()
            raise

    @classmethod
    def make(cls, launches: Sequence[GraphedLaunch]) -> "KernelGraph | None":
        """The graph of the launches, or None (logged) when they cannot run as one."""
        try:
            return cls(launches)
        except GraphRefused as why:
            log.debug("kernels launched one by one: %s", why)
            return None

    def update(self, k: int, launch: GraphedLaunch) -> bool:
        """Set launch k's nodes to its parameters now; False when they no longer fit the graph
        (another function, block or number of kernels): the graph must go."""
        nodes = iter(self.nodes[k])
        fits = [True]

        def reset(function: int, grid: tuple[int, int, int], block: tuple[int, int, int], shared: int,
                  params: int) -> None:
            node = next(nodes, None)
            if node is None or not fits[0]:
                fits[0] = False
                return
            made = node[1]
            if made.func != function or made.kernelParams != params or \
                    (made.blockDimX, made.blockDimY, made.blockDimZ) != block:
                fits[0] = False  # (another kernel, or its parameters elsewhere)
                return
            made.gridDimX, made.gridDimY, made.gridDimZ = grid
            made.sharedMemBytes = shared
            # the driver reads the parameters' values behind kernelParams now
            code = self._lib.cuGraphExecKernelNodeSetParams(self._exec, node[0], ctypes.byref(made))
            fits[0] = code == 0

        return launch.each_kernel(reset) and fits[0] and next(nodes, None) is None

    def launch(self, stream: int) -> None:
        faults.raise_for(self._lib.cuGraphLaunch(self._exec, stream), "launching a stream item's graph")

    def close(self) -> None:
        if self._exec.value:
            self._lib.cuGraphExecDestroy(self._exec)
            self._exec = ctypes.c_void_p()
        if self._graph.value:
            self._lib.cuGraphDestroy(self._graph)
            self._graph = ctypes.c_void_p()

    @staticmethod
    def _check(code: int, what: str) -> None:
        if code:
            raise GraphRefused(f"{what}: {error_text(code)}")

