"""The training data: a text file read as bytes (a vocabulary of 256 tokens, no tokenizer to download).

The default is ``corpus.txt`` beside this file, a few KB of public-domain text shipped in the repository.
Each rank trains on its own contiguous slice of the bytes (rank ``r`` of ``W`` reads the ``r``-th of ``W``
equal slices) and draws random windows from it with a generator seeded by ``(seed, rank)``, so a run is
reproducible and no two ranks read the same data.
"""
from __future__ import annotations

from pathlib import Path

import torch

DEFAULT_CORPUS = Path(__file__).with_name("corpus.txt")
VOCAB_SIZE = 256


def load_bytes(path: str | Path = DEFAULT_CORPUS) -> torch.Tensor:
    """The file's bytes as a 1-D int64 tensor of token ids in [0, 256)."""
    raw = Path(path).read_bytes()
    return torch.frombuffer(bytearray(raw), dtype=torch.uint8).long() if raw else torch.empty(0, dtype=torch.long)


class ShardedBatches:
    """An endless iterator of ``(inputs, targets)`` batches of shape ``(batch, seq_len)`` for one rank:
    targets are the inputs shifted by one byte."""

    def __init__(self, data: torch.Tensor, *, rank: int, world_size: int, batch: int, seq_len: int, seed: int,
                 device: torch.device):
        n = data.numel()
        shard = data[rank * n // world_size:(rank + 1) * n // world_size]
        if shard.numel() < seq_len + 1:
            raise ValueError(
                f"--seq-len {seq_len} needs at least {seq_len + 1} bytes per rank, but the data's {n} bytes split "
                f"over {world_size} ranks give {shard.numel()}: use a shorter --seq-len, fewer ranks or a larger "
                "--data file")
        self.windows = shard.unfold(0, seq_len + 1, 1)  # (number of windows, seq_len + 1), a view
        self.batch = batch
        self.device = device
        self.generator = torch.Generator().manual_seed(seed * 1_000_003 + rank)

    def __iter__(self):
        return self

    def __next__(self) -> tuple[torch.Tensor, torch.Tensor]:
        starts = torch.randint(0, self.windows.shape[0], (self.batch,), generator=self.generator)
        rows = self.windows[starts].to(self.device)
        return rows[:, :-1].contiguous(), rows[:, 1:].contiguous()
