#!/usr/bin/env bash
# Sets up (if needed) and runs the test suite. Used by the README and by .ci/run.
# Tests that start several processes (marked `distributed`: gloo ranks, torchrun) run on their own after the
# rest, which runs on 2 xdist workers: running both at once would oversubscribe a 2-core machine.
set -euo pipefail
cd "$(dirname "$0")/.."
python -m pip install -q "torch==2.13.0"
python -m pip install -q -e ".[test]"
status=0
run() { "$@" || { local s=$?; [ "$s" -eq 5 ] || status=$s; }; }  # 5: the arguments selected none of these tests
run python -m pytest tests -n 2 --dist loadgroup -m "not distributed" "$@"
run python -m pytest tests -p no:xdist -m distributed "$@"
exit "$status"
