#!/usr/bin/env bash
# Trains on several machines with torchrun: run this once on every node, with the same --nnodes and
# --rdzv-endpoint (HOST:PORT of one of the nodes, reachable from all). torchrun's c10d rendezvous then
# assigns the ranks; the job starts when all --nnodes nodes have joined.
#
#   bash launch/run_multi_node.sh --nnodes 2 --rdzv-endpoint HOST:PORT [--node-rank R]
#        [--nproc-per-node N] [--rdzv-id ID] [--] [train.py options ...]
#
# Each setting may come from the environment instead: NNODES, RDZV_ENDPOINT, NODE_RANK, NPROC_PER_NODE
# (default 1), RDZV_ID (default thunder-gpt; distinct per job sharing an endpoint); PYTHON names the
# interpreter (default: python). The c10d rendezvous orders the nodes itself: torchrun notes that it
# ignores --node-rank there. The job uses the thunder of this checkout (the same path on every node).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
while (($#)); do
  case "$1" in
    --nnodes) NNODES="$2"; shift 2 ;;
    --node-rank) NODE_RANK="$2"; shift 2 ;;
    --nproc-per-node) NPROC_PER_NODE="$2"; shift 2 ;;
    --rdzv-endpoint) RDZV_ENDPOINT="$2"; shift 2 ;;
    --rdzv-id) RDZV_ID="$2"; shift 2 ;;
    --) shift; break ;;
    *) break ;;
  esac
done
: "${NNODES:?give the number of nodes: --nnodes N (or NNODES)}"
: "${RDZV_ENDPOINT:?give the rendezvous address: --rdzv-endpoint HOST:PORT (or RDZV_ENDPOINT)}"
node_rank=()
if [[ -n "${NODE_RANK:-}" ]]; then node_rank=(--node-rank "$NODE_RANK"); fi
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
exec "${PYTHON:-python}" -m torch.distributed.run --nnodes "$NNODES" "${node_rank[@]}" \
  --nproc-per-node "${NPROC_PER_NODE:-1}" --rdzv-backend c10d --rdzv-endpoint "$RDZV_ENDPOINT" \
  --rdzv-id "${RDZV_ID:-thunder-gpt}" "$ROOT/launch/train.py" "$@"
