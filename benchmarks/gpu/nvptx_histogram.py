"""The nvptx target's histogram with per-block shared atomics (a `malloc`ed scratch of 256 counts
per group, merged once per group): the SIMT peer of the gpu target's histogram, launched by
bench_nvptx.py and bench_gpu.py on the same kind of data."""
from __future__ import annotations

from typing import Callable

import numpy as np
import torch

import hpvm_py as hpvm
from hpvm_py import In, InOut, Ptr, i32, i64
from hpvm_py.backends.base import BufferArg, NodeContext
from hpvm_py.backends.nvptx import NvptxBackend


@hpvm.leaf
def histogram_block(data: In[Ptr[i32]], data_bytes: i64, bins: InOut[Ptr[i32]], bins_bytes: i64,
                    n: i64):
    local = hpvm.malloc(256 * 4, i32)
    me = hpvm.get_node()
    t = hpvm.get_node_instance_id_x(me)
    width = hpvm.get_num_node_instances_x(me)
    blk = hpvm.get_node_instance_id_x(hpvm.get_parent_node(me))
    blocks = hpvm.get_num_node_instances_x(hpvm.get_parent_node(me))
    for i in range(blk * width + t, n, blocks * width):
        hpvm.atomic_add(local, i64(data[i]), i32(1))
    hpvm.barrier()
    hpvm.atomic_add(bins, t, local[t])


def _buf(t: torch.Tensor) -> BufferArg:
    return BufferArg(obj=t, address=t.data_ptr(), nbytes=t.numel() * t.element_size(), array=None)


def nvptx_histogram(xs: torch.Tensor, bins: torch.Tensor, groups: int) -> Callable[[], None]:
    """A launch of `groups` groups of 256 instances adding the counts of xs (values in [0, 256))
    into the 256 int32 bins."""
    modes = ("buffer", "uniform", "buffer", "uniform", "uniform")
    ctx = NodeContext(level_dims=(1, 1), input_modes=modes, output_modes=())
    kernel = NvptxBackend().compile_leaf(histogram_block.ir, ctx)
    args = [_buf(xs), np.int64(xs.numel() * 4), _buf(bins), np.int64(1024), np.int64(xs.numel())]
    return lambda: kernel.launch(args, [], [(256,), (groups,)])
