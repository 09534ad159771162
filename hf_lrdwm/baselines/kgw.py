"""Left-only KGW: the naive adaptation of the autoregressive red-green watermark to a diffusion canvas."""

from __future__ import annotations

import torch

from ..config import LRDWMConfig
from ..processor import LRDWMLogitsProcessor
from ._base import BaselineProcessor

__all__ = ["KGWLeftProcessor"]

_MASK64 = (1 << 64) - 1


class KGWLeftProcessor(BaselineProcessor):
    """KGW with a context width of one, used on a diffusion canvas: left neighbour only.

    A masked position whose left neighbour ``c`` is revealed gets ``+delta`` on the green list of ``c``;
    every other position is untouched (a mask after a mask gets nothing: the weakness DMARK and WM-DLM
    point at). Two green-list functions:

    * ``green="randperm"`` (default, KGW's own): the first ``int(gamma * V)`` ids of ``randperm(V)``
      drawn from a generator seeded with ``hashing_key * c`` (mod 2**64), recomputed for every
      biased position at every step, as transformers' ``WatermarkLogitsProcessor`` does for every
      generated token (O(V) work per position, no cache). As in KGW, context token 0 seeds 0 and gets
      the same list for every key.
    * ``green="lrdwm"``: our keyed hash with ``k_L``; then the output equals
      ``LRDWMLogitsProcessor`` with ``sides="left"`` (same row cache), which isolates the effect of the
      missing right side from the cost of the green-list function.

    Simplifications: context width 1 and ``lefthash`` only (no ``selfhash``); a local
    ``torch.Generator`` instead of the global RNG (the sampler's random draws are not disturbed); the
    KGW key defaults to the low 32 bits of ``k_L`` (pass ``hashing_key=15485863`` for transformers'
    default).
    """

    name = "kgw-left"

    def __init__(
        self,
        *,
        config: LRDWMConfig,
        vocab_size: int,
        mask_token_id: int,
        green: str = "randperm",
        hashing_key: int | None = None,
        device: torch.device | str | None = None,
        in_place: bool = False,
    ) -> None:
        if green not in ("randperm", "lrdwm"):
            raise ValueError(f"`green` must be 'randperm' or 'lrdwm', got {green!r}")
        config = config.copy(sides="left")
        super().__init__(
            config=config,
            vocab_size=vocab_size,
            mask_token_id=mask_token_id,
            device=device,
            in_place=in_place,
        )
        self.green = green
        self.hashing_key = int(hashing_key) if hashing_key is not None else config.key_left & 0xFFFFFFFF
        self.greenlist_size = int(vocab_size * config.gamma)
        self._generator: torch.Generator | None = None

    def greenlist(self, context: int, device: torch.device | str = "cpu") -> torch.Tensor:
        """KGW's green ids for a context token (``green="randperm"``): LongTensor [int(gamma * V)]."""
        device = torch.device(device)
        if self._generator is None or self._generator.device != device:
            self._generator = torch.Generator(device=device)
        seed = (self.hashing_key * int(context)) & _MASK64
        self._generator.manual_seed(seed)
        perm = torch.randperm(self.vocab_size, generator=self._generator, device=device)
        return perm[: self.greenlist_size]

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        if self.green == "lrdwm":
            return super().__call__(input_ids, scores)
        out = self._output(input_ids, scores)
        if self.config.delta == 0.0:
            return out
        input_ids = input_ids.to(scores.device)
        b, i, _, _, ctx, _ = self._frontier(input_ids, left=True, right=False)
        flat = out.view(-1, self.vocab_size) if out.is_contiguous() else None
        L = input_ids.shape[1]
        for bb, ii, c in zip(b.tolist(), i.tolist(), ctx.tolist(), strict=True):
            target = flat[bb * L + ii] if flat is not None else out[bb, ii]
            ids = self.greenlist(c, scores.device)
            target[ids] += self.config.delta
        return out

    def reset(self) -> None:
        LRDWMLogitsProcessor.reset(self)  # frees the row cache of green="lrdwm"
