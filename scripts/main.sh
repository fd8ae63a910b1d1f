#!/usr/bin/env bash
# Sets up (if needed) and runs the main job: data-parallel training of a small GPT on the CPU, two
# processes under torchrun with thunder's DDP, printing the losses, the throughput and the collectives of
# the backward trace. Used by the README. Extra arguments go to launch/train.py (e.g. --steps 100);
# see launch/README.md. The quick tour of thunder itself is `python examples/quickstart.py`.
set -euo pipefail
cd "$(dirname "$0")/.."
python -m pip install -q "torch==2.13.0"
python -m pip install -q -e .
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}"  # two processes share the cores
bash launch/run_single_node.sh --nproc-per-node 2 --device cpu --show-trace --bucket-size-mb 0.5 "$@"
