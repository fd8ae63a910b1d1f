#!/usr/bin/env bash
# Sets up (if needed) and runs the main job: an example that jits a model, runs it and prints its traces.
# Used by the README. Any extra arguments are passed to the example.
set -euo pipefail
cd "$(dirname "$0")/.."
python -m pip install -q "torch==2.13.0"
python -m pip install -q -e .
python examples/quickstart.py "$@"
