"""nvptx's flat mapping for narrow leaves under many parent instances: c[k] = 2 a[k] + 1 over 16M
f32 elements, written as a leaf of w instances inside an internal node replicated 16M / w times
(w = 1, 4, 8, 16, 64), against the same elements as one flat leaf of 16M instances in the same
process (the mapping's best case: whole warps along x). Per shape: microseconds per launch +
wait (replays, best of 5 batches of 21), effective GB/s (8 bytes an element) and the ratio to
the flat leaf. Each result is checked against torch.

Run on a GPU machine: python benchmarks/gpu/bench_narrow_leaves.py
"""
from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Callable

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run from a checkout
import hpvm_py as hpvm  # noqa: E402
from hpvm_py import In, Out, Ptr, f32, i64  # noqa: E402

ELEMENTS = 1 << 24
WIDTHS = (1, 4, 8, 16, 64)


@hpvm.leaf
def scale(a: In[Ptr[f32]], a_bytes: i64, c: Out[Ptr[f32]], c_bytes: i64):
    me = hpvm.get_node()
    width = hpvm.get_num_node_instances_x(me)
    k = hpvm.get_node_instance_id_x(hpvm.get_parent_node(me)) * width + hpvm.get_node_instance_id_x(me)
    c[k] = a[k] * 2.0 + 1.0


@hpvm.graph
def per_parent(a: In[Ptr[f32]], a_bytes: i64, c: Out[Ptr[f32]], c_bytes: i64, w: i64):
    hpvm.node(scale, grid=w, a=a, a_bytes=a_bytes, c=c, c_bytes=c_bytes)


@hpvm.graph
def narrow(a: In[Ptr[f32]], a_bytes: i64, c: Out[Ptr[f32]], c_bytes: i64, w: i64, p: i64):
    hpvm.node(per_parent, grid=p, a=a, a_bytes=a_bytes, c=c, c_bytes=c_bytes, w=w)


@hpvm.leaf
def scale_flat(a: In[Ptr[f32]], a_bytes: i64, c: Out[Ptr[f32]], c_bytes: i64):
    k = hpvm.get_node_instance_id_x(hpvm.get_node())
    c[k] = a[k] * 2.0 + 1.0


@hpvm.graph
def flat(a: In[Ptr[f32]], a_bytes: i64, c: Out[Ptr[f32]], c_bytes: i64, n: i64):
    hpvm.node(scale_flat, grid=n, a=a, a_bytes=a_bytes, c=c, c_bytes=c_bytes)


def launch_us(run: Callable[[], object]) -> float:
    """Microseconds per launch + wait of a batch of 21 launches, the best of 5 batches."""
    best = float("inf")
    for _ in range(5):
        torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(21):
            handle = run()
        hpvm.wait(handle)
        torch.cuda.synchronize()
        best = min(best, (time.perf_counter() - start) / 21)
    return best * 1e6


def main() -> None:
    os.environ.setdefault("HPVM_GPU_LOWERING", "off")  # nvptx's own kernels, not the faster of two
    print(torch.cuda.get_device_name(), f"{ELEMENTS} f32 elements, target nvptx")
    a = torch.rand(ELEMENTS, device="cuda")
    want = a * 2 + 1
    with hpvm.runtime("nvptx"):
        c = torch.empty_like(a)
        flat_graph = hpvm.compile(flat)
        hpvm.wait(hpvm.launch(flat_graph, a, a.nbytes, c, c.nbytes, ELEMENTS))
        assert torch.equal(c, want)
        ceiling = launch_us(lambda: hpvm.launch(flat_graph, a, a.nbytes, c, c.nbytes, ELEMENTS))
        print(f"  one flat leaf of {ELEMENTS}: {ceiling:8.1f} us  {8 * ELEMENTS / ceiling / 1e3:7.1f} GB/s")
        graph = hpvm.compile(narrow)
        for w in WIDTHS:
            p = ELEMENTS // w
            c = torch.empty_like(a)
            hpvm.wait(hpvm.launch(graph, a, a.nbytes, c, c.nbytes, w, p))
            assert torch.equal(c, want), w
            us = launch_us(lambda: hpvm.launch(graph, a, a.nbytes, c, c.nbytes, w, p))
            print(f"  leaf of {w:2d} under {p:8d} parents: {us:8.1f} us  "
                  f"{8 * ELEMENTS / us / 1e3:7.1f} GB/s  {ceiling / us:5.2f}x the flat leaf")


if __name__ == "__main__":
    main()
