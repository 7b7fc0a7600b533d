#!/bin/sh
# One device call (issue 9 section 4): the GPU tests of the runtime (replay, streams, streaming,
# faults) and the files that launch graphs, then the launch and streaming benchmarks. Full output
# under $OUT; pass --profile to profile the replays.
set -u
export HPVM_CACHE_DIR=/tmp/hpvm-cache PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
HPVM_TEST_TARGETS=gpu,nvptx timeout 240 python3 -m pytest -q -n 14 -p no:randomly -p no:cacheprovider \
  tests/test_gpu_runtime.py tests/test_replay.py tests/test_streaming.py tests/test_runtime.py \
  tests/test_lifecycle.py tests/test_api_misuse.py tests/test_examples.py tests/test_rules.py \
  tests/backends/test_triton.py tests/backends/test_nvptx_launch.py > "$OUT/tests.txt" 2>&1
grep -E "passed|failed|FAILED|Error" "$OUT/tests.txt" | tail -15
timeout 100 python3 benchmarks/gpu/bench_launch.py "$@" > "$OUT/bench_launch.txt" 2>&1
grep -v "^ *[0-9].*{built-in\|^$" "$OUT/bench_launch.txt" | tail -40
timeout 200 python3 benchmarks/gpu/bench_stream.py > "$OUT/bench_stream.txt" 2>&1; tail -14 "$OUT/bench_stream.txt"
