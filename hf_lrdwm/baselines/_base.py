"""Common plumbing of the baseline processors (argument checks, the sampler protocol)."""

from __future__ import annotations

import torch

from ..config import LRDWMConfig
from ..processor import LRDWMLogitsProcessor


class BaselineProcessor(LRDWMLogitsProcessor):
    """Base of the peer re-implementations.

    It subclasses :class:`~hf_lrdwm.LRDWMLogitsProcessor` only to share its protocol (so the samplers'
    ``watermark=`` accepts it unchanged) and its argument checks; subclasses override ``__call__`` and
    ``reset``. ``config`` supplies ``delta``, ``gamma``, the keys and ``confidence_sees_watermark``.
    """

    name = "baseline"

    def __init__(
        self,
        *,
        config: LRDWMConfig,
        vocab_size: int,
        mask_token_id: int,
        device: torch.device | str | None = None,
        in_place: bool = False,
    ) -> None:
        super().__init__(
            config=config,
            vocab_size=vocab_size,
            mask_token_id=mask_token_id,
            device=device,
            in_place=in_place,
        )

    def _output(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        self._check(input_ids, scores)
        return scores if self.in_place else scores.clone()

    def reset(self) -> None:
        """Nothing is cached between calls by default."""

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(config={self.config!r}, vocab_size={self.vocab_size}, "
            f"mask_token_id={self.mask_token_id}, in_place={self.in_place})"
        )
