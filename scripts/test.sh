#!/usr/bin/env bash
# Sets up (if needed) and runs the test suite. Used by the README and by .ci/run.
set -euo pipefail
cd "$(dirname "$0")/.."
python -m pip install -q "torch==2.13.0"
python -m pip install -q -e ".[test]"
python -m pytest tests -n 2 --dist loadgroup "$@"
