"""Pieces shared by the diffusion samplers: watermark resolution and the output type."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from ..config import LRDWMConfig
from ..processor import LRDWMLogitsProcessor

__all__ = ["DiffusionGenerationOutput", "resolve_watermark"]


@dataclass
class DiffusionGenerationOutput:
    """What ``diffusion_generate(..., return_dict_in_generate=True)`` returns.

    Attributes:
        sequences: LongTensor [B, prompt + generated] (the final canvas).
        history: the canvas after every step (a list of LongTensors), when ``output_history=True``.
    """

    sequences: torch.Tensor
    history: list[torch.Tensor] | None = field(default=None)

    def __getitem__(self, key: str) -> Any:  # dict-style access, like transformers' ModelOutput
        return getattr(self, key)


def resolve_watermark(
    watermark: LRDWMConfig | LRDWMLogitsProcessor | None,
    *,
    vocab_size: int,
    mask_token_id: int,
    device: torch.device,
) -> LRDWMLogitsProcessor | None:
    """Turn the ``watermark=`` argument of a sampler into an in-place processor (or ``None``).

    A config builds a fresh processor for this call (its row cache is freed when the call returns);
    a processor is used as given after checking it fits the model.
    """
    if watermark is None:
        return None
    if isinstance(watermark, LRDWMConfig):
        return watermark.construct_processor(
            vocab_size=vocab_size, mask_token_id=mask_token_id, device=device, in_place=True
        )
    if isinstance(watermark, LRDWMLogitsProcessor):
        if watermark.vocab_size != vocab_size:
            raise ValueError(
                f"the watermark processor was built for vocab_size={watermark.vocab_size} but the model "
                f"produces {vocab_size} logits"
            )
        if watermark.mask_token_id != mask_token_id:
            raise ValueError(
                f"the watermark processor uses mask_token_id={watermark.mask_token_id} but the model's "
                f"mask token is {mask_token_id}"
            )
        return watermark
    raise TypeError(
        f"`watermark` must be an LRDWMConfig, an LRDWMLogitsProcessor or None, got {type(watermark).__name__}"
    )
