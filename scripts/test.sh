#!/usr/bin/env bash
# Sets up (if needed) and runs the test suite. Used by the README and by .ci/run.
# Tests that start several processes (marked `distributed`: gloo ranks, torchrun) run on their own after the
# rest, which runs on 2 xdist workers: running both at once would oversubscribe a 2-core machine.
set -euo pipefail
cd "$(dirname "$0")/.."
python -m pip install -q "torch==2.13.0"
python -m pip install -q -e ".[test]"
# torchvision and timm for the vision tests, in a folder of their own that only tests/libraries.py puts on the path:
# PyPI's torchvision is a CUDA build whose extension does not load against the CPU torch, and installed beside
# transformers and lightning it would break their imports (see tests/libraries.py).
vision_libs="torchvision==0.28.0 timm==1.0.31"
if [ "$(cat .test-libs/PINNED 2>/dev/null)" != "$vision_libs" ]; then
  rm -rf .test-libs
  python -m pip install -q --no-deps --target .test-libs $vision_libs
  echo "$vision_libs" > .test-libs/PINNED
fi
status=0
run() { "$@" || { local s=$?; [ "$s" -eq 5 ] || status=$s; }; }  # 5: the arguments selected none of these tests
run python -m pytest tests -n 2 --dist loadgroup -m "not distributed" "$@"
run python -m pytest tests -p no:xdist -m distributed "$@"
exit "$status"
