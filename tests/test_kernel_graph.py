"""device/kernel_graph.py on a stand-in for libcuda (CI has no GPU): the nodes of a chain of
launches, each depending on the one before, their parameters copied when they are made and set
again only for the launches that changed, and a graph refused (or given up) when a launch cannot
be in one. tests/test_stream_items.py runs real graphs on a GPU."""
from __future__ import annotations

import ctypes

import pytest

from hpvm_py.device import kernel_graph as KG


class FakeDriver:
    """The libcuda calls KernelGraph makes, recording what each node holds."""

    def __init__(self) -> None:
        self.nodes: dict[int, dict] = {}  # node handle -> what it was made or set with
        self.deps: dict[int, list[int]] = {}
        self.sets: list[int] = []
        self.launches: list[tuple[int, int]] = []
        self.destroyed: list[str] = []
        self.refuse_add = False
        self._next = 100

    def _handle(self, out) -> int:
        self._next += 1
        out._obj.value = self._next
        return self._next

    @staticmethod
    def _read(params) -> dict:
        p = params._obj
        slots = ctypes.cast(p.kernelParams, ctypes.POINTER(ctypes.c_void_p))
        first = ctypes.cast(slots[0], ctypes.POINTER(ctypes.c_uint64))[0]
        return {"func": p.func, "grid": (p.gridDimX, p.gridDimY, p.gridDimZ),
                "block": (p.blockDimX, p.blockDimY, p.blockDimZ), "first": first}

    def cuGraphCreate(self, out, flags):
        self._handle(out)
        return 0

    def cuGraphAddKernelNode(self, out, graph, deps, count, params):
        if self.refuse_add:
            return 1
        node = self._handle(out)
        self.nodes[node] = self._read(params)
        self.deps[node] = [deps[i] for i in range(count)]
        return 0

    def cuGraphInstantiateWithFlags(self, out, graph, flags):
        self._handle(out)
        return 0

    def cuGraphExecKernelNodeSetParams(self, graph_exec, node, params):
        self.nodes[node.value] = self._read(params)
        self.sets.append(node.value)
        return 0

    def cuGraphLaunch(self, graph_exec, stream):
        self.launches.append((graph_exec.value, stream))
        return 0

    def cuGraphExecDestroy(self, graph_exec):
        self.destroyed.append("exec")
        return 0

    def cuGraphDestroy(self, graph):
        self.destroyed.append("graph")
        return 0


class Launch:
    """A launch of `kernels` kernels whose first parameter slot holds `value`."""

    def __init__(self, function: int, value: int, kernels: int = 1, can: bool = True):
        self.function, self.kernels, self.can = function, kernels, can
        self.slots = (ctypes.c_uint64 * 1)(value)
        self.pointers = (ctypes.c_void_p * 1)(ctypes.addressof(self.slots))

    def set(self, value: int) -> None:
        self.slots[0] = value

    def each_kernel(self, visit) -> bool:
        if not self.can:
            return False
        for k in range(self.kernels):
            visit(self.function, (k + 1, 1, 1), (128, 1, 1), 0, ctypes.addressof(self.pointers))
        return True


@pytest.fixture
def driver(monkeypatch) -> FakeDriver:
    fake = FakeDriver()
    monkeypatch.setattr(KG, "libcuda", lambda: fake)
    return fake


def test_the_launches_become_a_chain_of_nodes_holding_their_parameters(driver: FakeDriver) -> None:
    launches = [Launch(7, 11), Launch(8, 22, kernels=2), Launch(9, 33)]
    graph = KG.KernelGraph.make(launches)
    assert graph is not None
    order = sorted(driver.nodes)
    assert [driver.nodes[n]["func"] for n in order] == [7, 8, 8, 9]
    assert [driver.nodes[n]["first"] for n in order] == [11, 22, 22, 33]
    assert [driver.nodes[n]["grid"] for n in order] == [(1, 1, 1), (1, 1, 1), (2, 1, 1), (1, 1, 1)]
    assert [driver.deps[n] for n in order] == [[], [order[0]], [order[1]], [order[2]]]
    launches[0].set(99)  # copied when made: the node keeps 11 until set again
    assert driver.nodes[order[0]]["first"] == 11
    graph.launch(5)
    assert driver.launches[-1][1] == 5


def test_only_a_changed_launch_has_its_nodes_set_again(driver: FakeDriver) -> None:
    launches = [Launch(7, 11), Launch(8, 22, kernels=2)]
    graph = KG.KernelGraph.make(launches)
    first, second, third = sorted(driver.nodes)
    launches[1].set(44)
    assert graph.update(1, launches[1])
    assert driver.sets == [second, third]
    assert driver.nodes[second]["first"] == driver.nodes[third]["first"] == 44
    assert driver.nodes[first]["first"] == 11


def test_a_launch_that_no_longer_fits_its_nodes_is_refused(driver: FakeDriver) -> None:
    launches = [Launch(7, 11), Launch(8, 22)]
    graph = KG.KernelGraph.make(launches)
    launches[1].function = 10  # another kernel (e.g. the plain one of a split loop)
    assert not graph.update(1, launches[1])
    launches[1].function, launches[1].kernels = 8, 2  # more kernels than nodes
    assert not graph.update(1, launches[1])
    launches[1].kernels, launches[1].can = 1, False  # (Triton's dispatch again)
    assert not graph.update(1, launches[1])


def test_no_graph_when_a_launch_cannot_be_in_one_or_the_driver_refuses(driver: FakeDriver) -> None:
    assert KG.KernelGraph.make([Launch(7, 1), Launch(8, 2, can=False)]) is None
    assert "graph" in driver.destroyed  # what was made so far is given back
    driver.refuse_add = True
    assert KG.KernelGraph.make([Launch(7, 1)]) is None


def test_no_graph_without_libcuda(monkeypatch) -> None:
    monkeypatch.setattr(KG, "libcuda", lambda: None)
    assert KG.KernelGraph.make([Launch(7, 1)]) is None
