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

    def _frontier(self, input_ids: torch.Tensor, left: bool, right: bool) -> tuple[torch.Tensor, ...]:
        """Masked positions with a revealed left / right neighbour.

        Returns ``(b, i, has_left, has_right, ctx_left, ctx_right)`` as 1-D tensors over the positions
        that get any bias (``ctx_*`` is clamped garbage where ``has_*`` is false).
        """
        mask = input_ids == self.mask_token_id
        revealed = ~mask
        has_l = torch.zeros_like(mask)
        has_r = torch.zeros_like(mask)
        if left:
            has_l[:, 1:] = mask[:, 1:] & revealed[:, :-1]
        if right:
            has_r[:, :-1] = mask[:, :-1] & revealed[:, 1:]
        pos = torch.nonzero(has_l | has_r)
        b, i = pos[:, 0], pos[:, 1]
        L = input_ids.shape[1]
        ctx_l = input_ids[b, (i - 1).clamp(min=0)]
        ctx_r = input_ids[b, (i + 1).clamp(max=L - 1)]
        return b, i, has_l[b, i], has_r[b, i], ctx_l, ctx_r

    def reset(self) -> None:
        """Nothing is cached between calls by default."""

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(config={self.config!r}, vocab_size={self.vocab_size}, "
            f"mask_token_id={self.mask_token_id}, in_place={self.in_place})"
        )
