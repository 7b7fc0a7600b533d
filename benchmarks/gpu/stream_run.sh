#!/bin/sh
# One device call for GPU streaming (issue 9 section 4): the stream benchmark on this tree (with a
# profile of the scheduler thread), the GPU tests of streaming, the runtime, replay and placement,
# then, given OLD=<an earlier tree> (and OLD_TARGETS), the same benchmark on that tree: a
# before/after from one machine. Full output under $OUT.
set -u
export HPVM_CACHE_DIR=/tmp/hpvm-cache PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
timeout 200 python3 benchmarks/gpu/bench_stream.py --profile "$OUT/profile.txt" > "$OUT/bench_stream.txt" 2>&1
tail -12 "$OUT/bench_stream.txt"
HPVM_TEST_TARGETS=gpu,nvptx timeout 200 python3 -m pytest -q -n 14 -p no:randomly -p no:cacheprovider \
  tests/test_streaming.py tests/test_gpu_streaming.py tests/test_gpu_runtime.py tests/test_replay.py \
  tests/test_runtime.py tests/test_placement.py > "$OUT/tests.txt" 2>&1
grep -E "passed|failed|FAILED|Error" "$OUT/tests.txt" | tail -15
if [ -n "${OLD:-}" ]; then
  (cd "$OLD" && PYTHONPATH="/tmp/site:$OLD" HPVM_CACHE_DIR=/tmp/hpvm-cache-old timeout 150 \
    python3 benchmarks/gpu/bench_stream.py --targets "${OLD_TARGETS:-gpu,nvptx}") > "$OUT/bench_stream_old.txt" 2>&1
  echo "== before (OLD tree)"; tail -6 "$OUT/bench_stream_old.txt"
fi
