"""Token ids that carry a strong LR-DWM watermark, built directly from the hash (shared by tests)."""

from __future__ import annotations

import torch

from hf_lrdwm import LRDWMConfig
from hf_lrdwm.hashing import green_pairs


def greedy_watermarked_ids(cfg: LRDWMConfig, vocab: int, n: int, seed: int, low: int = 2) -> list[int]:
    """Greedy ids whose every token is green for both neighbours (what a strong watermark gives)."""
    gen = torch.Generator().manual_seed(seed)
    cands = torch.arange(low, vocab)
    ids = [int(torch.randint(low, vocab, (1,), generator=gen))]
    while len(ids) < n:
        prev = torch.full_like(cands, ids[-1])
        ok = green_pairs(cfg.key_left, prev, cands, cfg.gamma) & green_pairs(
            cfg.key_right, cands, prev, cfg.gamma
        )
        choices = cands[ok]
        ids.append(int(choices[torch.randint(len(choices), (1,), generator=gen)]))
    return ids
