#!/usr/bin/env python
"""How many positions LR-DWM biases per step (masks with a revealed neighbour), LLaDA vs Dream.

Tiny random-weight backbones at V = 8,192, prompt 32, 128 tokens, 128 steps; LLaDA: block 32, T 0,
low-confidence; Dream: entropy, T 0.2, top_p 0.95. Prints the median, mean and max count per step.

Usage:
    python scripts/count_frontier.py            # a few seconds
"""

from __future__ import annotations

import statistics
import sys

import torch

from hf_lrdwm import LRDWMConfig
from hf_lrdwm.generation.dream import dream_generate
from hf_lrdwm.generation.llada import llada_generate
from hf_lrdwm.models import tiny_model

VOCAB = 8192


def count(family: str) -> list[int]:
    model = tiny_model(family, vocab_size=VOCAB)
    mask = model.config.mask_token_id
    proc = LRDWMConfig(key="frontier", delta=2.0).construct_processor(
        vocab_size=VOCAB, mask_token_id=mask, in_place=True
    )
    counts: list[int] = []
    positions = proc.bias_positions

    def counted(ids: torch.Tensor, **sides: bool | None) -> tuple[torch.Tensor, torch.Tensor]:
        left, right = positions(ids, **sides)
        counts.append(int((left | right).sum()))
        return left, right

    proc.bias_positions = counted
    prompt = torch.randint(0, VOCAB - 8, (1, 32), generator=torch.Generator().manual_seed(0))
    torch.manual_seed(0)
    if family == "llada":
        llada_generate(model, prompt, steps=128, gen_length=128, block_length=32, watermark=proc)
    else:
        kw = dict(steps=128, max_new_tokens=128, temperature=0.2, top_p=0.95, alg="entropy")
        dream_generate(model, prompt, watermark=proc, **kw)
    return counts


def main() -> int:
    for family in ("llada", "dream"):
        c = count(family)
        print(f"{family}: biased positions per step: median {statistics.median(c)}, "
              f"mean {statistics.mean(c):.1f}, max {max(c)} ({len(c)} steps)")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
