"""Where this process stands in the job (from torchrun's environment), the device it trains on, and the
life of the process group: created with a finite timeout, torn down cleanly on success and on failure.
"""
from __future__ import annotations

import dataclasses
import datetime
import gc
from typing import Mapping

import torch
import torch.distributed as dist

# what torchrun (torch.distributed.run) sets for every worker
TORCHRUN_VARS = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")
BACKENDS = {"cpu": "gloo", "cuda": "nccl"}  # device type -> torch.distributed backend


@dataclasses.dataclass(frozen=True)
class Placement:
    """This process's place in the job: rank ``rank`` of ``world_size``, ``local_rank`` on its node."""
    rank: int = 0
    local_rank: int = 0
    world_size: int = 1
    torchrun: bool = False  # started by torchrun (its environment is set)

    @classmethod
    def from_environ(cls, environ: Mapping[str, str]) -> "Placement":
        present = [v for v in TORCHRUN_VARS if v in environ]
        if not present:
            return cls()
        missing = [v for v in TORCHRUN_VARS if v not in environ]
        if missing:
            raise ValueError(f"torchrun's environment is incomplete ({', '.join(present)} set but "
                             f"{', '.join(missing)} not): start the script with torchrun, or unset them")
        return cls(int(environ["RANK"]), int(environ["LOCAL_RANK"]), int(environ["WORLD_SIZE"]), True)


def choose_device(requested: str, local_rank: int) -> torch.device:
    """``auto``: CUDA when available, else the CPU. On CUDA each local rank gets its own device."""
    if requested == "auto":
        requested = "cuda" if torch.cuda.is_available() else "cpu"
    if requested == "cpu":
        return torch.device("cpu")
    if not torch.cuda.is_available():
        raise ValueError("--device cuda: no CUDA device is available here; use --device cpu or --device auto")
    count = torch.cuda.device_count()
    if local_rank >= count:
        raise ValueError(f"--device cuda: local rank {local_rank} needs a GPU of its own but this node has {count}: "
                         f"start at most {count} processes per node (torchrun --nproc-per-node)")
    torch.cuda.set_device(local_rank)
    return torch.device("cuda", local_rank)


def init(device: torch.device, timeout_s: float) -> None:
    """Joins the job's process group (address, rank and size from torchrun's environment). Every collective
    that waits longer than ``timeout_s`` fails instead of hanging (see [Note: ending a job])."""
    kwargs = {"device_id": device} if device.type == "cuda" else {}
    dist.init_process_group(BACKENDS[device.type], timeout=datetime.timedelta(seconds=timeout_s), **kwargs)


# [Note: ending a job]
# A job must end, with the failing rank's error, whichever rank fails. The rank that raises tears its
# process group down and exits non-zero; torchrun then stops the other workers of its node, and a rank on
# another node blocked in a collective with it fails when the peer's connection closes, or at the latest
# after the process group's timeout (--timeout-s). The failing rank does not enter a barrier (its peers may
# be inside a collective it will never join). Before the group is destroyed, everything that could hold
# pending collective work (the jitted module, its gradient buckets, the optimizer, the exception's frames)
# is released and collected: gloo aborts the process ("terminate called without an active exception")
# when such work outlives its group. On success all ranks meet in a barrier first, so none destroys the
# group while another still uses it.
def shutdown(*, clean: bool) -> None:
    """Ends this process's part of the job (see [Note: ending a job]); nothing to do without a group."""
    if not dist.is_initialized():
        return
    gc.collect()
    if clean:
        dist.barrier()
    dist.destroy_process_group()
