#!/bin/sh
# One device call (issue 9 section 4): the GPU tests of the launch replay, streams, streaming and
# faults, then the launch and streaming benchmarks. Full output under $OUT.
set -u
export HPVM_CACHE_DIR=/tmp/hpvm-cache PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
HPVM_TEST_TARGETS=gpu,nvptx timeout 300 python3 -m pytest -q -n 8 -p no:randomly -p no:cacheprovider \
  tests/test_gpu_runtime.py tests/test_replay.py tests/test_streaming.py tests/test_runtime.py \
  tests/test_lifecycle.py tests/backends/test_triton.py tests/backends/test_nvptx_launch.py \
  > "$OUT/tests.txt" 2>&1
grep -E "passed|failed|FAILED|Error" "$OUT/tests.txt" | tail -15
timeout 100 python3 benchmarks/gpu/bench_launch.py "$@" > "$OUT/bench_launch.txt" 2>&1
grep -v "^ *[0-9].*{built-in\|^$" "$OUT/bench_launch.txt" | tail -60
timeout 150 python3 benchmarks/gpu/bench_stream.py > "$OUT/bench_stream.txt" 2>&1; tail -12 "$OUT/bench_stream.txt"
