"""The README's main job: generate with and without LR-DWM through both samplers, then detect.

Runs offline on a CPU in about a minute with the built-in tiny models (random weights, the real
LLaDA / Dream vocabularies and special ids). The text is gibberish; the mechanism is the point.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any

import torch
from tqdm.auto import tqdm

from .config import LRDWMConfig
from .detection import LRDWMDetector

__all__ = ["QuickstartRow", "run_quickstart", "format_table", "REAL_MODEL_COMMANDS"]

logger = logging.getLogger(__name__)

DEMO_KEY = "hf-lrdwm-quickstart (a public demo key: never use it for real)"

REAL_MODEL_COMMANDS = (
    "hf-lrdwm generate --model GSAI-ML/LLaDA-8B-Instruct --chat --delta 2 "
    "--gen-length 300 --steps 300 --block-length 25 --temperature 0 --device cuda --dtype bfloat16 "
    '--prompt "Write a short story about a lighthouse."',
    "hf-lrdwm generate --model Dream-org/Dream-v0-Instruct-7B --chat --delta 2 "
    "--max-new-tokens 300 --steps 300 --temperature 0.2 --top-p 0.95 --alg entropy --alg-temp 0 "
    '--device cuda --dtype bfloat16 --prompt "Write a short story about a lighthouse."',
)


@dataclass
class QuickstartRow:
    """One generation of the quickstart and its detection result."""

    sampler: str
    watermark: bool
    tokens: int
    z_score: float
    p_value: float
    verdict: str
    seconds: float


def _generate(
    model: Any, family: str, prompt: torch.Tensor, cfg: LRDWMConfig | None, length: int
) -> torch.Tensor:
    if family == "llada":
        out = model.diffusion_generate(
            prompt, steps=length, gen_length=length, block_length=length // 2, temperature=0.0, watermark=cfg
        )
    else:
        out = model.diffusion_generate(
            prompt,
            max_new_tokens=length,
            steps=length,
            temperature=0.2,  # the paper's setting, without top_p=0.95 (its sort over V is slow on CPU)
            alg="entropy",
            alg_temp=0.0,
            watermark=cfg,
        )
    return out[:, prompt.shape[1] :]


def run_quickstart(
    *,
    key: str = DEMO_KEY,
    delta: float = 2.0,
    gamma: float = 0.5,
    gen_length: int = 64,
    prompt_length: int = 16,
    seed: int = 0,
    families: tuple[str, ...] = ("llada", "dream"),
    progress: bool = True,
) -> list[QuickstartRow]:
    """Generate ``gen_length`` tokens per family, without and with the watermark, and detect each.

    Args:
        key: the watermark secret (the default is a public demo key).
        delta, gamma: watermark strength and green fraction.
        gen_length: tokens generated (also the number of steps; LLaDA uses two blocks).
        prompt_length: length of the random prompt.
        seed: seeds the models' weights, the prompts and the samplers.
        families: which samplers to run.
        progress: show a progress bar on stderr.

    Returns:
        One :class:`QuickstartRow` per generation.
    """
    from .models import tiny_model

    if gen_length < 4 or gen_length % 2:
        raise ValueError(f"gen_length must be an even number >= 4, got {gen_length}")
    cfg = LRDWMConfig(key=key, delta=delta, gamma=gamma)
    rows: list[QuickstartRow] = []
    jobs = [(family, wm) for family in families for wm in (False, True)]
    bar = tqdm(jobs, desc="quickstart", disable=not progress, leave=False)
    models: dict[str, Any] = {}
    for family, wm in bar:
        bar.set_postfix_str(f"{family} {'watermarked' if wm else 'vanilla'}")
        if family not in models:
            models[family] = tiny_model(family, seed=seed)
        model = models[family]
        special = model.config
        ignore = {
            int(t)
            for t in (
                special.mask_token_id,
                getattr(special, "eos_token_id", None),
                getattr(special, "eot_token_id", None),
                getattr(special, "pad_token_id", None),
            )
            if t is not None
        }
        low = min(ignore)
        gen = torch.Generator().manual_seed(seed)
        prompt = torch.randint(0, low, (1, prompt_length), generator=gen)
        torch.manual_seed(seed)
        start = time.perf_counter()
        generated = _generate(model, family, prompt, cfg if wm else None, gen_length)
        seconds = time.perf_counter() - start
        detector = LRDWMDetector(cfg, vocab_size=model.config.vocab_size, ignore_token_ids=ignore)
        result = detector(generated, prompt_ids=prompt[0].tolist())
        rows.append(
            QuickstartRow(
                sampler=family,
                watermark=wm,
                tokens=int(result.num_tokens_scored[0]),
                z_score=float(result.z_score[0]),
                p_value=float(result.p_value[0]),
                verdict="watermarked" if result.prediction[0] else "not detected",
                seconds=seconds,
            )
        )
        logger.info("quickstart %s watermark=%s: z=%.2f", family, wm, rows[-1].z_score)
    return rows


def format_table(rows: list[QuickstartRow]) -> str:
    """A fixed-width table of quickstart rows."""
    header = f"{'sampler':<8} {'watermark':<9} {'tokens':>6} {'z':>7} {'p':>9} {'verdict':<13} {'seconds':>7}"
    lines = [header, "-" * len(header)]
    for r in rows:
        lines.append(
            f"{r.sampler:<8} {'yes' if r.watermark else 'no':<9} {r.tokens:>6} {r.z_score:>7.2f} "
            f"{r.p_value:>9.2e} {r.verdict:<13} {r.seconds:>7.1f}"
        )
    return "\n".join(lines)
