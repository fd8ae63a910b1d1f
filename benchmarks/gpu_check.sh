#!/usr/bin/env bash
# The checks that need a GPU, in one call on a machine with one (a lent device machine: its time is short, so
# everything runs from this one script): the fusion benchmark on CUDA with a profile of one step of each variant,
# then, side by side, the CUDA tests and generated programs run on CUDA against eager (unfused, bitwise; fused with
# inductor, within float tolerance). Writes machine.txt, bench.log, profile.txt, tests.log, fuzz.log and fuzz.tgz
# (each failing program's repro) to $OUT (default /tmp/gpu-check).
#
#     OUT=/tmp/gpu-check bash benchmarks/gpu_check.sh [extra arguments for benchmarks/fusion.py]
#
# BENCH_TIMEOUT, TESTS_TIMEOUT and FUZZ_SECONDS bound the phases (seconds); FUZZ_SECONDS=0 leaves fuzzing out.
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/gpu-check}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 CUBLAS_WORKSPACE_CONFIG=:4096:8
PY=${PYTHON:-python3}
{ nvidia-smi --query-gpu=name,driver_version,memory.used,memory.total --format=csv
  $PY -c "import sys, torch, triton; print('python', sys.version.split()[0], 'torch', torch.__version__, 'triton', triton.__version__)"
  nproc; git log -1 --format=%h 2>/dev/null; } 2>&1 | tee "$OUT/machine.txt"
timeout "${BENCH_TIMEOUT:-300}" $PY benchmarks/fusion.py --device cuda --dtype bfloat16 --thunder-executors "" \
  --steps 8 --rounds 2 --profile "$OUT/profile.txt" "$@" 2>&1 | tee "$OUT/bench.log" | grep -v "^thunder: inductor:"
echo "benchmark exit: ${PIPESTATUS[0]}"

FUZZ_SECONDS=${FUZZ_SECONDS:-180}
FUZZ=/tmp/gpu-fuzz
pids=()
if [ "$FUZZ_SECONDS" != 0 ]; then  # one process per kind, each its own seeds, while the tests run
  for kind in "plain 0" "plain 100000" "nn 0" "fused 0" "fusednn 0"; do
    set -- $kind
    flags=""
    case $1 in nn) flags="--nn";; fused) flags="--fused";; fusednn) flags="--fused --nn";; esac
    $PY scripts/fuzz_programs.py --device "${FUZZ_DEVICE:-cuda}" --relayout $flags --start "$2" -n 1000000 --seconds "$FUZZ_SECONDS" \
      --quiet --out "$FUZZ/$1_$2" > "$FUZZ.$1_$2.log" 2>&1 &
    pids+=($!)
  done
fi
timeout "${TESTS_TIMEOUT:-200}" $PY -m pytest -q -p no:cacheprovider -n 4 -rfEs tests/test_cuda.py tests/test_cudagraphs.py \
  tests/test_nvfuser.py tests/test_benchmarks.py > "$OUT/tests.log" 2>&1
echo "tests exit: $?"
tail -n 30 "$OUT/tests.log"
if [ ${#pids[@]} != 0 ]; then
  wait "${pids[@]}"
  for f in "$FUZZ".*.log; do echo "== $f"; grep -A2 "seeds (" "$f" || tail -n 5 "$f"; done 2>&1 | tee "$OUT/fuzz.log"
  (cd "$FUZZ" && tar czf "$OUT/fuzz.tgz" .)
  ls "$FUZZ"/* | grep -v CRASH.txt | head -n 40
fi
