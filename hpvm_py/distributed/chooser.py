"""Which algorithm runs a collective: by where the ranks are, the collective and its size.
(docs/architecture.md, "Module notes": distributed/chooser.py)"""
from __future__ import annotations

from ..errors import DistributedError
from ..support import settings
from .gpu.heap import ONE_SHOT_PUSH_BYTES

# Measured with benchmarks/collectives.py on 2 CPU ranks of the 2-core development machine, f32:
# one-shot was faster up to 512 KiB in every run (docs/performance.md).
ONESHOT_BYTES = 512 << 10


def _bytes(setting: settings.Setting, default: int) -> int:
    """A threshold in bytes: the setting when it is set, else the default."""
    size = settings.byte_count(setting, DistributedError)
    return default if size is None else size


def oneshot_threshold() -> int:
    return _bytes(settings.COMM_ONESHOT_BYTES, ONESHOT_BYTES)


# Per format, the smallest all-reduce that a node with quantize= runs quantized; below it the exact
# all-reduce runs, which was as fast or faster there. Measured on 2 x H200, bf16 (benchmarks/
# collectives.py --gpu --quick, benchmarks/RESULTS.md): fp8 first beat the exact all-reduce at
# 16 MiB (54.9 against 63.1 µs), int8 at 32 MiB, int4 at 128 MiB.
QUANTIZE_BYTES = {"fp8": 16 << 20, "int8": 32 << 20, "int4": 128 << 20}


def quantize_threshold(mode: str) -> int:
    """The threshold of a format (HPVM_COMM_QUANTIZE_BYTES, when set, for every format)."""
    return _bytes(settings.COMM_QUANTIZE_BYTES, QUANTIZE_BYTES[mode])


def quantization(kind: str, quantize: str, nbytes: int) -> str:
    """The quantization a call applies ("" for none): the all-reduce's payload format from the
    threshold on; the fused RMSNorm's fp8 output always (it is an output, not a transport)."""
    if not quantize:
        return ""
    if kind == "all_reduce":  # an empty buffer has nothing to quantize
        return quantize if nbytes >= max(1, quantize_threshold(quantize)) else ""
    return quantize


def choose(single_host: bool, kind: str, nbytes: int, quantize: str = "") -> str:
    """"remote", or the heap algorithm; nbytes: the size argument of the collective's first buffer;
    quantize: the node's quantize= option ("" for none)."""
    if not single_host:
        return "remote"
    if kind == "all_reduce" and quantization(kind, quantize, nbytes):
        return "quantized"
    if kind == "all_reduce":
        return "one_shot" if nbytes <= oneshot_threshold() else "two_shot"
    return "direct"


# GPU ranks, by world size: the largest all-reduce (bytes) that runs one-shot; world sizes not
# listed use the last entry. Two GPUs: measured on 2 x H200 over NVLink (benchmarks/collectives.py
# --gpu, docs/performance.md): one-shot is ahead up to 1 MiB, two-shot from 2 MiB on (its pushes
# are faster than one-shot's pulls over NVLink: 341 against 324 GB/s busbw at 1 GiB). Four GPUs:
# measured on 4 x H200 (two runs, bf16 and f32): one-shot ahead up to 256 KiB, the two within
# 1 µs at 512 KiB (two-shot ahead in 3 of 4 rows), two-shot from 1 MiB. More ranks: the last entry
# (one-shot reads world x n bytes per rank, so two-shot takes over early).
GPU_ONESHOT_BYTES = {2: 1 << 20, 4: 256 << 10}


# Two GPU ranks run all-reduces larger than this with the stream kernel (gpu/stream_kernels.py).
# Measured on 2 x H200 (benchmarks/collectives.py --gpu, benchmarks/RESULTS.md): two-shot was
# faster at every size up to 256 MiB (808 against 898 µs at 256 MiB, bf16), so the stream kernel
# runs only where HPVM_COMM_STREAM_BYTES asks for it until its tuning wins somewhere.
GPU_STREAM_BYTES = 1 << 62


def stream_threshold() -> int:
    return _bytes(settings.COMM_STREAM_BYTES, GPU_STREAM_BYTES)


# GPU ranks, by world size: all-reduces larger than this run two-shot by stores (gpu/kernels.py's
# all_reduce_push) instead of two-shot; world sizes not listed never do. Two GPUs, since push's
# first chunk goes with the arrival (gpu/launch.py's shapes), measured on 2 x H200
# (benchmarks/collectives.py --gpu, benchmarks/RESULTS.md): push ahead from 2 MiB (2026-11-27: 15.1
# against 15.6 µs at 2 MiB, 21.5 against 21.8 at 4 MiB, bf16; f32 15.6 / 15.8 and 21.9 / 23.0;
# 760.5 against 807.8 at 256 MiB). Four GPUs, since push stores to its peers in turn from the next
# rank on (4 x H200, 2026-11-28, one table with every algorithm forced): bf16 two-shot / push
# 24.8 / 24.3 µs at 2 MiB, 34.5 / 34.9 at 4 MiB, 60.0 / 52.0 at 8 MiB, 107.4 / 87.2 at 16 MiB; f32
# 19.9 / 19.7 at 1 MiB, 25.7 / 23.8 at 2 MiB, 40.3 / 34.6 at 4 MiB. The links carry stores
# faster than the replies of loads.
GPU_PUSH_BYTES = {2: 1 << 20, 4: 4 << 20}
# The same for 4-byte elements where they cross over earlier (four GPUs: above).
GPU_PUSH_BYTES_WIDE = {4: 1 << 20}


# GPU ranks, by world size: the largest all-reduce that runs one-shot by stores (gpu/kernels.py's
# all_reduce_one_shot_push: one round trip instead of one-shot's two; at most gpu/heap.py's
# ONE_SHOT_PUSH_BYTES); world sizes not listed never do. Measured on 2 and 4 x H200
# (benchmarks/collectives.py --gpu, benchmarks/RESULTS.md): ahead of one-shot and two-shot at
# every size to 512 KiB, bf16 and f32, eager and as CUDA graphs (4 GPUs, graphs: 5.8 against
# 8.7 µs at 8 KiB, 12.6 against 15.7 at 512 KiB).
GPU_ONE_SHOT_PUSH_BYTES = {2: 512 << 10, 4: 512 << 10}


def one_shot_push_threshold(world_size: int) -> int:
    """HPVM_COMM_ONE_SHOT_PUSH_BYTES, else the measured one; never above what its rows hold."""
    limit = _bytes(settings.COMM_ONE_SHOT_PUSH_BYTES, GPU_ONE_SHOT_PUSH_BYTES.get(world_size, 0))
    return min(limit, ONE_SHOT_PUSH_BYTES)


def push_threshold(world_size: int, elem_bytes: int = 2) -> int:
    """HPVM_COMM_PUSH_BYTES, else the measured one for this world size and element width."""
    measured = GPU_PUSH_BYTES_WIDE.get(world_size) if elem_bytes >= 4 else None
    return _bytes(settings.COMM_PUSH_BYTES, measured or GPU_PUSH_BYTES.get(world_size, 1 << 62))


def choose_gpu(kind: str, nbytes: int, world_size: int, quantize: str = "", elem_bytes: int = 2) -> str:
    """The GPU kernel for a collective of ranks on one host. An all-reduce up to the one-shot
    kernels' limit (HPVM_COMM_ONESHOT_BYTES, else the larger of the measured thresholds of
    one-shot and one-shot by stores) runs one-shot by stores up to its own threshold
    (HPVM_COMM_ONE_SHOT_PUSH_BYTES), else one-shot; above it, the stream kernel
    (HPVM_COMM_STREAM_BYTES), then two-shot by stores (HPVM_COMM_PUSH_BYTES), else two-shot."""
    if kind == "all_reduce" and quantization(kind, quantize, nbytes):
        return "quantized"
    if kind != "all_reduce":
        return "direct"
    if settings.COMM_ONESHOT_BYTES.text():
        limit = oneshot_threshold()
    else:
        limit = max(GPU_ONESHOT_BYTES.get(world_size, GPU_ONESHOT_BYTES[max(GPU_ONESHOT_BYTES)]),
                    GPU_ONE_SHOT_PUSH_BYTES.get(world_size, 0))
    if nbytes <= limit:
        return "one_shot_push" if nbytes <= one_shot_push_threshold(world_size) else "one_shot"
    if world_size == 2 and nbytes > stream_threshold():
        return "stream"
    return "push" if nbytes > push_threshold(world_size, elem_bytes) else "two_shot"
