#!/bin/bash
# Every GPU test of the project, on a GPU machine with any number of GPUs, with its system python3
# (no venv, no network): from the repository root, `make device-test` or
#     bash tests/run_device_tests.sh [PART ...]      PART: pytest differential dist2 dist4 (default all)
# - pytest:       the test suite with HPVM_TEST_TARGETS=gpu,nvptx (the cpu and python targets are CI's);
# - differential: tests/differential/runner.py, $GRAPHS (500) random graphs on $DIFF_TARGETS
#                 (gpu,nvptx) against python; mismatching graphs are saved under
#                 $LOGDIR/reproducers (copy them to tests/differential/reproducers/ to make them tests);
# - dist2, dist4: tests/gpu_dist/run_device.sh at 2 and 4 ranks (4 only where there are >= 4 GPUs;
#                 2 ranks share one GPU on a one-GPU machine).
# One summary line per part, then a final one; exit 1 if a part failed. Logs go to $LOGDIR, and
# into $OUT/device-tests.tgz when $OUT is set (the device tool's folder). lark, missing on the
# GPU machines, is installed from a wheel in $WHEELS (default .whl/) when it cannot be imported.
# Each part fits in the device tool's 10 minutes a command; all four together may not.
set -u
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
LOGDIR=${LOGDIR:-/tmp/hpvm-device-tests}
SEED=${SEED:-$RANDOM}
GRAPHS=${GRAPHS:-500}
PARTS=${*:-pytest differential dist2 dist4}
mkdir -p "$LOGDIR"
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
# test_distributed's mpiexec is Open MPI's there, which refuses root without these
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
if ! env -u PYTHONPATH $PY -c 'import lark' 2>/dev/null; then
    # into the interpreter's own environment: the tests' subprocesses do not all pass PYTHONPATH on
    # (a lark found only through the caller's PYTHONPATH failed 75 of them); pip too runs without
    # it, or it finds that lark and installs nothing
    env -u PYTHONPATH $PY -m pip install -q --no-index --no-deps "${WHEELS:-.whl}"/lark-*.whl \
        || { echo "device-test: lark is missing and no wheel in ${WHEELS:-.whl}/"; exit 2; }
fi
GPUS=$($PY -c 'import torch; print(torch.cuda.device_count())' 2>/dev/null || echo 0)
JOBS=$(( $(nproc) < 16 ? $(nproc) : 16 ))
echo "device-test: $GPUS GPUs, seed $SEED, parts: $PARTS, logs in $LOGDIR"
SUMMARY=() FAILED=0

record() {  # part, ok (0/1), line
    SUMMARY+=("$1: $3")
    [ "$2" = 0 ] || FAILED=$((FAILED + 1))
    echo "== $1: $3"
}

part_pytest() {
    HPVM_TEST_TARGETS=gpu,nvptx timeout 580 $PY -m pytest -q -n "$JOBS" -p no:cacheprovider tests \
        --ignore=tests/test_distributed.py ${PYTEST_ARGS:-} > "$LOGDIR/pytest.log" 2>&1
    local rc=$?
    record pytest $rc "$(tail -n 1 "$LOGDIR/pytest.log") (exit $rc)"
    [ $rc = 0 ] || grep -E "^(FAILED|ERROR)" "$LOGDIR/pytest.log" | head -30
}

part_differential() {
    timeout 580 $PY tests/differential/runner.py --graphs "$GRAPHS" --targets "${DIFF_TARGETS:-gpu,nvptx}" --seed "$SEED" \
        --jobs "$JOBS" --save-dir "$LOGDIR/reproducers" > "$LOGDIR/differential.log" 2>&1
    local rc=$?
    record differential $rc "$(sed -n 's/^differential: \(.* graphs, targets .*\)/\1/p' "$LOGDIR/differential.log" | tail -n 1) (exit $rc)"
    [ $rc = 0 ] || grep -E "^(MISMATCH|REJECTED)" "$LOGDIR/differential.log" | head -30
}

part_dist() {  # ranks
    if [ "$1" -gt 2 ] && [ "$GPUS" -lt "$1" ]; then
        SUMMARY+=("dist$1: skipped ($GPUS GPUs)"); echo "== dist$1: skipped ($GPUS GPUs)"; return
    fi
    # every check step; the benchmark against NCCL is not a test (benchmarks/collectives.py)
    ONLY=${ONLY:-direct nodes nvptx faults faults-died tp_mlp remote remote-faults remote-faults-died} \
        NRANKS=$1 SEED=$SEED bash tests/gpu_dist/run_device.sh "$LOGDIR/dist$1" > "$LOGDIR/dist$1.log" 2>&1
    local steps passed
    steps=$(grep -c '^exit ' "$LOGDIR/dist$1.log")
    passed=$(grep -c '^exit 0$' "$LOGDIR/dist$1.log")
    record "dist$1" $(( steps == 0 || passed < steps )) "$passed/$steps steps passed at $1 ranks"
    grep -B1 -A20 '^exit [1-9]' "$LOGDIR/dist$1.log" | head -40
}

for part in $PARTS; do
    case $part in
        pytest|differential) "part_$part" ;;
        dist2) part_dist 2 ;;
        dist4) part_dist 4 ;;
        *) echo "device-test: unknown part $part (pytest, differential, dist2, dist4)"; exit 2 ;;
    esac
done
[ -n "${OUT:-}" ] && tar czf "$OUT/device-tests.tgz" -C "$LOGDIR" . 2>/dev/null
echo "device-test summary ($GPUS GPUs, seed $SEED):"
printf '  %s\n' "${SUMMARY[@]}"
echo "device-test: ${#SUMMARY[@]} parts, $FAILED failed"
[ $FAILED = 0 ]
