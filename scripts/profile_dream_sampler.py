#!/usr/bin/env python
"""Does Dream's sampler step cost more on watermarked logits than on vanilla ones?

Builds one mid-generation Dream canvas (tiny backbone, real vocabulary V = 152,064: prompt 32, 40
tokens revealed, the rest masked with 30 scattered reveals), takes its logits once, applies the LR-DWM
processor (delta 2), and times Dream's sampler step (``_sample_tokens``: temperature 0.2, top_p 0.95,
entropy confidence) and its pieces on the masked rows of the vanilla and of the watermarked logits,
alternating, median of 7 timings per repetition. Prints the ratios (watermarked / vanilla).

Usage:
    python scripts/profile_dream_sampler.py            # ~1 minute on 2 CPU cores
"""

from __future__ import annotations

import statistics
import sys
import time

import torch
import torch.nn.functional as F

from hf_lrdwm import LRDWMConfig
from hf_lrdwm.generation.dream import DreamSamplingConfig, _sample_tokens
from hf_lrdwm.models import tiny_model


def _median_time(fn, x: torch.Tensor, n: int = 7) -> float:
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn(x)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main() -> int:
    torch.manual_seed(0)
    model = tiny_model("dream")
    mask = model.config.mask_token_id
    canvas = torch.randint(0, 100_000, (1, 160))
    canvas[0, 72:] = mask
    canvas[0, 72 + torch.randperm(88)[:30]] = 7
    with torch.no_grad():
        logits = model(input_ids=canvas).logits
    logits = torch.cat([logits[:, :1], logits[:, :-1]], 1)  # Dream's shift
    proc = LRDWMConfig(key="profile", delta=2.0).construct_processor(
        vocab_size=logits.shape[-1], mask_token_id=mask
    )
    marked = proc(canvas, logits)
    masked = canvas == mask
    cfg = DreamSamplingConfig(temperature=0.2, top_p=0.95, alg="entropy", mask_token_id=mask)
    print(f"masked rows: {int(masked.sum())}, V = {logits.shape[-1]:,}")

    def step(x: torch.Tensor) -> None:
        _sample_tokens(x, cfg, "entropy")

    for rep in range(2):
        a = [_median_time(step, logits[masked]) for _ in range(3)]
        b = [_median_time(step, marked[masked]) for _ in range(3)]
        va, vb = statistics.median(a), statistics.median(b)
        print(f"sampler step, measurement {rep}: vanilla {va:.3f} s, marked {vb:.3f} s, ratio {vb / va:.3f}")
    A, B = logits[masked] / 0.2, marked[masked] / 0.2
    pieces = {
        "sort": lambda x: torch.sort(x, descending=True),
        "softmax": lambda x: F.softmax(x, -1),
        "cumsum": lambda x: torch.cumsum(x, -1),
        "multinomial": lambda x: torch.multinomial(F.softmax(x, -1), 1),
        "log": lambda x: torch.log(x),
    }
    for name, fn in pieces.items():
        va, vb = _median_time(fn, A, 9), _median_time(fn, B, 9)
        print(f"{name:12s} vanilla {va * 1e3:7.1f} ms  watermarked {vb * 1e3:7.1f} ms  ratio {vb / va:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
