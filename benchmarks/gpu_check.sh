#!/usr/bin/env bash
# The checks that need a GPU, in one call on a machine with one (a lent device machine: its time is short, so
# everything runs from this one script): the fusion benchmark on CUDA with a profile of one step of each variant,
# then the CUDA tests. Writes machine.txt, bench.log, profile.txt and tests.log to $OUT (default /tmp/gpu-check).
#
#     OUT=/tmp/gpu-check bash benchmarks/gpu_check.sh [extra arguments for benchmarks/fusion.py]
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/gpu-check}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
PY=${PYTHON:-python3}
{ nvidia-smi --query-gpu=name,driver_version,memory.used,memory.total --format=csv
  $PY -c "import sys, torch, triton; print('python', sys.version.split()[0], 'torch', torch.__version__, 'triton', triton.__version__)"
  nproc; } 2>&1 | tee "$OUT/machine.txt"
timeout "${BENCH_TIMEOUT:-300}" $PY benchmarks/fusion.py --device cuda --dtype bfloat16 --thunder-executors "torch" \
  --steps 8 --rounds 2 --profile "$OUT/profile.txt" "$@" 2>&1 | tee "$OUT/bench.log" | grep -v "^thunder: inductor:"
echo "benchmark exit: ${PIPESTATUS[0]}"
timeout "${TESTS_TIMEOUT:-200}" $PY -m pytest -q -p no:cacheprovider -n 4 -rfEs tests/test_cuda.py tests/test_cudagraphs.py \
  tests/test_nvfuser.py tests/test_benchmarks.py > "$OUT/tests.log" 2>&1
echo "tests exit: $?"
tail -n 40 "$OUT/tests.log"
