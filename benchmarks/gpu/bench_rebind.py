"""Host cost of launching a compiled one-leaf graph on buffers it has not run on, on the GPU targets.

The graph: y[0] += k over one instance, on torch CUDA tensors of 1,024 floats. Per target, host
microseconds per launch + wait (median of batches, the GPU's queue drained before each batch):
  - same buffer: a replay (one captured CUDA graph);
  - same buffer, new scalar each launch: prepared launches, no graph;
  - a ring of 9 buffers, another each launch: each buffer's recording is kept, so each replays;
  - another of 65 live buffers each launch (more than the 64 recordings kept): the recorded launch
    copied and pointed at it ("rebound", the default), and the same with HPVM_REBIND=0 (the normal
    path: arguments bound, the plan walked, the kernel packed and launched through Triton's
    dispatch or cuda-bindings);
  - a tensor never seen before each launch (a fresh output per step, rebound);
  - a fresh torch.empty each launch, the last one dropped (a host loop's usual fresh output), and
    torch.empty alone, its part of that row.
Each row is checked against torch at the end. The peers, once: the same one-element update as a
hand-written Triton kernel launched through Triton's own dispatch + torch.cuda.synchronize, on one
tensor and on a tensor never seen each time, and torch's `add_` + synchronize on one never seen.
The floors, what any launcher in Python pays on this host: the same Triton kernel launched by
cuLaunchKernel on parameters packed once (hpvm-py's own launcher, nothing of its runtime) +
cuStreamSynchronize, on one tensor and pointed at a tensor never seen each time (its address read
and patched in), and cuStreamSynchronize alone on an empty stream.

Run: python benchmarks/gpu/bench_rebind.py [--targets gpu,nvptx] (needs CUDA)
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Callable

import torch
import triton
import triton.language as tl

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import hpvm_py as hpvm  # noqa: E402
from hpvm_py.backends.triton.launcher import own_launcher  # noqa: E402
from hpvm_py.device.libcuda import stream_synchronize  # noqa: E402
from hpvm_py.rt import replay  # noqa: E402
from _one_leaf import one_leaf  # noqa: E402
from _timing import per_call_us  # noqa: E402


def host_us(fn: Callable[[], object]) -> float:
    """Host microseconds per launch + wait, the GPU's queue drained before each batch."""
    return per_call_us(fn, calls=64, repeat=11, drain=torch.cuda.synchronize)


@triton.jit
def _bump(x, k):
    tl.store(x, tl.load(x) + k)


def peers() -> dict[str, float]:
    """Host microseconds per launch + synchronize of the peers (the module's docstring)."""
    def triton_launch(x: torch.Tensor) -> None:
        _bump[(1,)](x, 1.0)
        torch.cuda.synchronize()

    one = torch.zeros(1024, device="cuda")
    rows = {"Triton's dispatch, one tensor": host_us(lambda: triton_launch(one))}
    fresh = iter([torch.zeros(1024, device="cuda") for _ in range(64 * 11 + 1)])
    rows["Triton's dispatch, a tensor never seen"] = host_us(lambda: triton_launch(next(fresh)))
    fresh = iter([torch.zeros(1024, device="cuda") for _ in range(64 * 11 + 1)])
    rows["torch add_, a tensor never seen"] = host_us(
        lambda: (next(fresh).add_(1.0), torch.cuda.synchronize()))
    torch.cuda.synchronize()
    assert one[0].item() == 64 * 11 + 1 and not one[1:].any()
    rows.update(floors())
    return rows


def floors() -> dict[str, float]:
    """Host microseconds of the floors (the module's docstring): the kernel's own launch by
    cuLaunchKernel + cuStreamSynchronize, and the synchronize alone."""
    one = torch.zeros(1024, device="cuda")
    compiled = _bump[(1,)](one, 1.0)
    launcher = own_launcher(compiled, [one, 1.0], (1, 1, 1), torch.cuda.current_device(), "bump", None)
    stream = torch.cuda.current_stream().cuda_stream

    def launch_wait() -> None:
        launcher(stream)
        assert stream_synchronize(stream) == 0

    rows = {"floor: cuLaunchKernel + synchronize, one tensor": host_us(launch_wait)}
    fresh = iter([torch.zeros(1024, device="cuda") for _ in range(64 * 11 + 1)])

    def pointed_wait() -> None:
        launcher.set(0, next(fresh).data_ptr())
        launch_wait()

    rows["floor: the same pointed at a tensor never seen"] = host_us(pointed_wait)
    rows["floor: cuStreamSynchronize alone"] = host_us(lambda: stream_synchronize(stream))
    torch.cuda.synchronize()
    assert one[0].item() == 64 * 11 + 2 and not one[1:].any()
    return rows


def measure(target: str) -> dict[str, float]:
    pool = [torch.zeros(1024, device="cuda") for _ in range(replay._KEPT + 1)]  # more than kept
    size = len(pool)
    turn = iter(range(10**9))
    rows = {}
    with hpvm.runtime(target):
        compiled = hpvm.compile(one_leaf)

        def launch(x: torch.Tensor, k: float = 1.0) -> None:
            hpvm.wait(hpvm.launch(compiled, x, 4096, k))

        for x in pool:
            launch(x)
        rows["same buffer (CUDA graph)"] = host_us(lambda: launch(pool[0]))
        rows["same buffer, new scalar"] = host_us(lambda: launch(pool[0], float(next(turn) % 7)))
        rows["a ring of 9 buffers (each replays)"] = host_us(lambda: launch(pool[next(turn) % 9]))
        rows[f"another of {size} buffers (rebound)"] = host_us(lambda: launch(pool[next(turn) % size]))
        os.environ["HPVM_REBIND"] = "0"
        try:
            rows[f"another of {size} buffers, HPVM_REBIND=0"] = host_us(
                lambda: launch(pool[next(turn) % size]))
        finally:
            del os.environ["HPVM_REBIND"]
        fresh = iter([torch.zeros(1024, device="cuda") for _ in range(size * 12)])
        rows["a tensor never seen before (rebound)"] = host_us(lambda: launch(next(fresh)))
        rows["torch.empty alone"] = host_us(lambda: torch.empty(1024, device="cuda"))
        rows["a torch.empty each launch, the last dropped"] = host_us(
            lambda: launch(torch.empty(1024, device="cuda")))
        torch.cuda.synchronize()
        check = torch.zeros(1024, device="cuda")
        for k in (2.0, 0.5):
            launch(check, k)
        torch.cuda.synchronize()
        assert check[0].item() == 2.5 and not check[1:].any()
    return rows


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--targets", default="gpu,nvptx")
    args = parser.parse_args()
    print(torch.cuda.get_device_name(), "torch", torch.__version__)
    print("host microseconds per launch + wait of a one-leaf graph:")
    for target in args.targets.split(","):
        for name, us in measure(target).items():
            print(f"  {target:6s} {name:44s} {us:8.1f}")
    for name, us in peers().items():
        print(f"  {'peer':6s} {name:44s} {us:8.1f}")


if __name__ == "__main__":
    main()
