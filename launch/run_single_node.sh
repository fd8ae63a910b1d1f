#!/usr/bin/env bash
# Trains on this machine with torchrun: N processes (default 2; on CUDA one per GPU) and thunder's DDP.
#
#   bash launch/run_single_node.sh [--nproc-per-node N] [train.py options ...]
#
# NPROC_PER_NODE may be set instead of the flag; PYTHON names the interpreter (default: python).
# The job uses the thunder of this checkout. Example:
#   bash launch/run_single_node.sh --nproc-per-node 2 --grad-accum 2 --show-trace
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
NPROC_PER_NODE="${NPROC_PER_NODE:-2}"
case "${1:-}" in
  --nproc-per-node) NPROC_PER_NODE="$2"; shift 2 ;;
  --nproc-per-node=*) NPROC_PER_NODE="${1#*=}"; shift ;;
esac
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
exec "${PYTHON:-python}" -m torch.distributed.run --standalone --nproc-per-node "$NPROC_PER_NODE" \
  "$ROOT/launch/train.py" "$@"
