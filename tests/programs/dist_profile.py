"""Run under `mpiexec -n N python dist_profile.py TRACE [cpu|cuda]`: every rank profiles the same
block (an all-reduce graph launched twice) with the same path; rank 0 writes the merged trace
(tests/test_profile.py checks it on CPU ranks; `cuda`: GPU ranks, the gpu target)."""

import sys

import torch

import hpvm_py as hpvm
from hpvm_py import InOut, Ptr, f32, i64

DEVICE = sys.argv[2] if len(sys.argv) > 2 else "cpu"
hpvm.distributed.init(timeout=30, device=DEVICE)
RANK, WORLD = hpvm.distributed.rank(), hpvm.distributed.world_size()
node = hpvm.comm.all_reduce(f32)


@hpvm.graph
def summed(x: InOut[Ptr[f32]], x_bytes: i64):
    hpvm.node(node, buf=x, buf_bytes=x_bytes)


buf = hpvm.symmetric.empty((256,), torch.float32)
with hpvm.profile(sys.argv[1]):
    with hpvm.runtime("cpu" if DEVICE == "cpu" else "gpu"):
        for _ in range(2):
            buf.fill_(RANK + 1)
            hpvm.wait(hpvm.launch(summed, buf, buf.nbytes))
            assert float(buf[0]) == WORLD * (WORLD + 1) / 2
