"""Running a function on several ranks of a gloo process group, spawned by the test itself.

``run_ranks(worker, *args, world_size=2)`` starts ``world_size`` processes, each of which joins a gloo group
(a free port on localhost, a finite timeout), calls ``worker(rank, world_size, *args)`` and sends back its
(picklable) result; it returns the results by rank, or raises the first rank's error. Before the group
is destroyed every rank releases what holds pending work and waits at a barrier: gloo can abort at exit
when work outlives the group.
"""
from __future__ import annotations

import datetime
import gc
import os
import pickle
import socket
import tempfile
import time
import traceback

import torch.multiprocessing as mp

TIMEOUT_S = 120


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _entry(rank, world_size, port, out_dir, worker, args):
    import torch
    import torch.distributed as dist

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(world_size),
                      LOCAL_RANK=str(rank))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world_size, timeout=datetime.timedelta(seconds=60))
    try:
        result = ("ok", worker(rank, world_size, *args))
    except BaseException as e:  # sent back to the test, which raises it with this rank's traceback
        result = ("error", f"rank {rank}: {type(e).__name__}: {e}\n{traceback.format_exc()}")
    with open(os.path.join(out_dir, f"{rank}.pkl"), "wb") as f:
        pickle.dump(result, f)
    gc.collect()  # torch DDP reducers and pending work handles go before the group does
    if result[0] == "ok":
        dist.barrier()
    dist.destroy_process_group()


# The ranks are forked from a server process that has imported these once (``forkserver``): a rank then starts
# in a tenth of a second instead of the two a fresh interpreter takes to import torch and thunder (most of the
# distributed tests' time). Nothing in the server has run a kernel or started a thread.
_PRELOAD = ["torch", "torch.distributed", "thunder"]


def _start_method() -> str:
    import multiprocessing

    if "forkserver" not in multiprocessing.get_all_start_methods():
        return "spawn"
    multiprocessing.set_forkserver_preload(_PRELOAD)  # read when the server starts, at the first run
    return "forkserver"


def run_ranks(worker, *args, world_size: int = 2, timeout: float = TIMEOUT_S) -> list:
    with tempfile.TemporaryDirectory() as out_dir:
        ctx = mp.start_processes(_entry, args=(world_size, free_port(), out_dir, worker, args), nprocs=world_size,
                                 join=False, start_method=_start_method())
        deadline = time.monotonic() + timeout
        try:
            while not ctx.join(timeout=1):
                if time.monotonic() > deadline:
                    raise TimeoutError(f"{worker.__name__} did not finish on {world_size} ranks within {timeout} s")
        finally:
            for p in ctx.processes:
                if p.is_alive():
                    p.kill()
        results = []
        for rank in range(world_size):
            with open(os.path.join(out_dir, f"{rank}.pkl"), "rb") as f:
                status, value = pickle.load(f)
            if status == "error":
                raise AssertionError(value)
            results.append(value)
        return results
