"""`LRDWMLogitsProcessor`: adds the LR-DWM bias to the logits of a diffusion canvas."""

from __future__ import annotations

import logging
from collections import OrderedDict
from typing import TYPE_CHECKING, Literal

import torch

from .hashing import candidate_words, context_seeds, green_from_seeds, green_rows

if TYPE_CHECKING:  # pragma: no cover
    from .config import LRDWMConfig

__all__ = ["LRDWMLogitsProcessor"]

logger = logging.getLogger(__name__)

_LEFT, _RIGHT = 0, 1
_ROW_CHUNK = 8  # green rows hashed at once (bounds the int64 scratch to 8 * V * 8 bytes)
# "batched" path: green rows hashed per kernel batch, bounded so the int64 scratch (two [rows, V]
# buffers) stays under 64 MiB: 33 rows at V = 126,464 (16 positions with both neighbours).
_BATCH_SCRATCH_BYTES = 64 * 2**20
_STRATEGIES = ("auto", "cached", "batched")


class LRDWMLogitsProcessor:
    """Adds ``delta`` to the green sets keyed by the revealed neighbours of each masked position.

    For a position ``i`` that is a mask in the canvas: if ``input_ids[b, i-1]`` is revealed (not the
    mask token), ``delta`` is added to ``G_L(input_ids[b, i-1])``; if ``input_ids[b, i+1]`` is revealed,
    ``delta`` is added to ``G_R(input_ids[b, i+1])``. So ``out - in == delta * (m_L + m_R)`` at mask
    positions (one addition per position, in the logits' dtype) and ``0`` everywhere else. Revealed
    positions, masks with no revealed neighbour and the vocabulary axis are never touched.

    Args:
        config: the :class:`~hf_lrdwm.LRDWMConfig` (keys, delta, gamma, sides).
        vocab_size: size of the logits' last axis.
        mask_token_id: id of the mask token.
        device: where green rows are computed at first (they follow the logits' device).
        in_place: if ``True`` the bias is added into ``scores`` and ``scores`` is returned (what the
            samplers use: no copy of the [B, L, V] logits); if ``False`` (default) ``scores`` is left
            unchanged and a new tensor is returned.
        max_cached_rows: bound on the green rows kept between calls (``"cached"`` strategy). A row is a
            bool [V] tensor (V bytes: 124 KiB for LLaDA's V = 126,464). Only the rows of contexts that
            sat next to a mask in the latest call are kept, so in a diffusion loop the cache holds the
            current frontier; each row is hashed once while its token stays on the frontier.
        strategy: how the bias is computed; every strategy gives bit-identical logits.
            ``"cached"``: rows hashed one at a time and cached between calls, biases added position by
            position (hashing a row, O(V) integer work, is the expensive part on a CPU).
            ``"batched"``: no cache and no per-position Python loop: context seeds come from a [2, V]
            per-key table, the rows of up to 16 positions (both sides) are hashed and added in one go,
            about 25 kernels per batch and two small device -> host synchronisations per call (on a GPU,
            hashing is nearly free and kernel launches are what cost).
            ``"auto"`` (default): ``"cached"`` for CPU logits, ``"batched"`` for any other device.

    Call ``processor(input_ids, scores)`` with ``input_ids`` a LongTensor [B, L] (the canvas, masks
    included) and ``scores`` a float tensor [B, L, V] (fp32, bf16 or fp16). Two positional arguments,
    so the processor also works inside ``transformers.LogitsProcessorList``.

    Example:
        >>> import torch
        >>> from hf_lrdwm import LRDWMConfig
        >>> proc = LRDWMConfig(key="demo", delta=2.0).construct_processor(vocab_size=50, mask_token_id=49)
        >>> canvas = torch.tensor([[5, 49, 49, 7]])
        >>> out = proc(canvas, torch.zeros(1, 4, 50))
        >>> sorted(set(out[0, 1].tolist()) | set(out[0, 2].tolist()))  # 0, delta or 2 * delta
        [0.0, 2.0]
        >>> bool(out[0, 0].abs().sum() == 0 and out[0, 3].abs().sum() == 0)  # revealed: untouched
        True
    """

    def __init__(
        self,
        *,
        config: LRDWMConfig,
        vocab_size: int,
        mask_token_id: int,
        device: torch.device | str | None = None,
        in_place: bool = False,
        max_cached_rows: int = 1024,
        strategy: Literal["auto", "cached", "batched"] = "auto",
    ) -> None:
        from .config import LRDWMConfig

        if not isinstance(config, LRDWMConfig):
            raise TypeError(f"`config` must be an LRDWMConfig, got {type(config).__name__}")
        config.validate()
        if isinstance(vocab_size, bool) or not isinstance(vocab_size, int) or vocab_size <= 1:
            raise ValueError(f"`vocab_size` must be an int > 1, got {vocab_size!r}")
        if isinstance(mask_token_id, bool) or not isinstance(mask_token_id, int) or mask_token_id < 0:
            raise ValueError(f"`mask_token_id` must be a non-negative int, got {mask_token_id!r}")
        if isinstance(max_cached_rows, bool) or not isinstance(max_cached_rows, int) or max_cached_rows < 0:
            raise ValueError(f"`max_cached_rows` must be an int >= 0, got {max_cached_rows!r}")
        if strategy not in _STRATEGIES:
            raise ValueError(f"`strategy` must be one of {_STRATEGIES}, got {strategy!r}")
        self.config = config
        self.strategy = strategy
        self.vocab_size = vocab_size
        self.mask_token_id = mask_token_id
        self.in_place = bool(in_place)
        self.max_cached_rows = max_cached_rows
        self._device = torch.device(device) if device is not None else None
        self._cand_words: torch.Tensor | None = None
        self._seeds: torch.Tensor | None = None
        self._cache: OrderedDict[tuple[int, int], torch.Tensor] = OrderedDict()
        self.rows_hashed = 0  # how many green rows were computed (diagnostics / tests)

    # -- cache ----------------------------------------------------------------------------------
    def reset(self) -> None:
        """Free the cached green rows (samplers call this when a generation call returns)."""
        self._cache.clear()
        self._cand_words = None
        self._seeds = None

    @property
    def cache_nbytes(self) -> int:
        """Bytes held by cached green rows."""
        return sum(row.numel() * row.element_size() for row in self._cache.values())

    def _words(self, device: torch.device) -> torch.Tensor:
        if self._cand_words is None or self._cand_words.device != device:
            self._cache.clear()
            self._cand_words = candidate_words(self.vocab_size, device=device)
        return self._cand_words

    def _rows(self, side: int, contexts: list[int], device: torch.device) -> dict[int, torch.Tensor]:
        """Green rows for unique context ids of one side, from the cache or freshly hashed."""
        words = self._words(device)
        key = self.config.key_left if side == _LEFT else self.config.key_right
        found: dict[int, torch.Tensor] = {}
        missing = []
        for ctx in contexts:
            row = self._cache.get((side, ctx))
            if row is None:
                missing.append(ctx)
            else:
                found[ctx] = row
        for start in range(0, len(missing), _ROW_CHUNK):
            chunk = missing[start : start + _ROW_CHUNK]
            rows = green_rows(
                key,
                torch.tensor(chunk, dtype=torch.int64, device=device),
                self.config.gamma,
                cand_words=words,
            )
            self.rows_hashed += len(chunk)
            for ctx, row in zip(chunk, rows.unbind(0), strict=True):
                found[ctx] = row.clone() if len(chunk) > 1 else row
        return found

    # -- main entry -----------------------------------------------------------------------------
    def bias_positions(
        self, input_ids: torch.Tensor, *, left: bool | None = None, right: bool | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Which positions receive a left / right bias: two bool tensors [B, L].

        ``left[b, i]``: ``i`` is a mask and ``i - 1`` is revealed; ``right[b, i]``: ``i`` is a mask and
        ``i + 1`` is revealed. Only the sides enabled in the config are set (``left`` / ``right``
        override that choice).
        """
        use_left = self.config.use_left if left is None else left
        use_right = self.config.use_right if right is None else right
        mask = input_ids == self.mask_token_id
        revealed = ~mask
        left_m = torch.zeros_like(mask)
        right_m = torch.zeros_like(mask)
        if use_left:
            left_m[:, 1:] = mask[:, 1:] & revealed[:, :-1]
        if use_right:
            right_m[:, :-1] = mask[:, :-1] & revealed[:, 1:]
        return left_m, right_m

    def _frontier(
        self, input_ids: torch.Tensor, *, left: bool | None = None, right: bool | None = None
    ) -> tuple[torch.Tensor, ...]:
        """The positions that get any bias, as 1-D tensors ``(b, i, has_left, has_right, ctx_left,
        ctx_right)`` (``ctx_*`` is a clamped neighbour where ``has_*`` is false). Its ``nonzero`` is a
        device -> host synchronisation."""
        left_m, right_m = self.bias_positions(input_ids, left=left, right=right)
        positions = torch.nonzero(left_m | right_m)  # [N, 2]
        b, i = positions[:, 0], positions[:, 1]
        L = input_ids.shape[1]
        ctx_left = input_ids[b, (i - 1).clamp(min=0)]
        ctx_right = input_ids[b, (i + 1).clamp(max=L - 1)]
        return b, i, left_m[b, i], right_m[b, i], ctx_left, ctx_right

    def _check(self, input_ids: torch.Tensor, scores: torch.Tensor) -> None:
        if not isinstance(input_ids, torch.Tensor) or not isinstance(scores, torch.Tensor):
            raise TypeError(
                "LRDWMLogitsProcessor expects tensors (input_ids, scores), got "
                f"({type(input_ids).__name__}, {type(scores).__name__})"
            )
        if input_ids.dim() != 2:
            raise ValueError(f"`input_ids` must be the canvas [B, L], got shape {tuple(input_ids.shape)}")
        if input_ids.dtype.is_floating_point or input_ids.dtype == torch.bool:
            raise TypeError(f"`input_ids` must hold integer token ids, got dtype {input_ids.dtype}")
        if scores.dim() != 3:
            raise ValueError(
                "`scores` must be logits for every canvas position [B, L, V], "
                f"got shape {tuple(scores.shape)}"
            )
        if not scores.dtype.is_floating_point:
            raise TypeError(f"`scores` must be floating point, got dtype {scores.dtype}")
        if tuple(scores.shape[:2]) != tuple(input_ids.shape):
            raise ValueError(
                f"`scores` shape {tuple(scores.shape)} does not match "
                f"`input_ids` shape {tuple(input_ids.shape)}"
            )
        if scores.shape[-1] != self.vocab_size:
            raise ValueError(
                f"`scores` has a vocabulary axis of {scores.shape[-1]} but the processor was built for "
                f"vocab_size={self.vocab_size}"
            )

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        """Return the watermarked logits.

        Args:
            input_ids: LongTensor [B, L], the canvas with mask tokens.
            scores: FloatTensor [B, L, V], the logits of every canvas position.

        Returns:
            FloatTensor [B, L, V] (``scores`` itself when ``in_place=True``).
        """
        self._check(input_ids, scores)
        out = scores if self.in_place else scores.clone()
        delta = self.config.delta
        if delta == 0.0:
            return out
        input_ids = input_ids.to(scores.device)
        frontier = self._frontier(input_ids)
        if frontier[0].numel() == 0:
            self._cache.clear()
            return out
        strategy = self.strategy
        if strategy == "auto":
            strategy = "cached" if scores.device.type == "cpu" else "batched"
        if strategy == "batched":
            self._add_batched(frontier, out, delta)
            return out
        b_idx, i_idx, has_left, has_right, ctx_left, ctx_right = frontier
        L = input_ids.shape[1]
        # One device -> host transfer for all the bookkeeping of this step.
        host = torch.stack([b_idx, i_idx, has_left.long(), has_right.long(), ctx_left, ctx_right]).tolist()
        bs, is_, hl, hr, cl, cr = host
        device = scores.device
        rows_left = self._rows(_LEFT, sorted({c for c, h in zip(cl, hl, strict=True) if h}), device)
        rows_right = self._rows(_RIGHT, sorted({c for c, h in zip(cr, hr, strict=True) if h}), device)
        flat = out.view(-1, self.vocab_size) if out.is_contiguous() else None
        for b, i, h_l, h_r, c_l, c_r in zip(bs, is_, hl, hr, cl, cr, strict=True):
            target = flat[b * L + i] if flat is not None else out[b, i]
            if h_l and h_r:
                # One rounding in the logits' dtype: add delta * (m_L + m_R) in a single step.
                count = rows_left[c_l].to(torch.uint8) + rows_right[c_r].to(torch.uint8)
                target.add_(count, alpha=delta)
            elif h_l:
                target.add_(rows_left[c_l], alpha=delta)
            else:
                target.add_(rows_right[c_r], alpha=delta)
        self._keep(rows_left, rows_right)
        return out

    def _seed_table(self, device: torch.device) -> torch.Tensor:
        """Context seeds of every token id for both keys, [2, V] int64 (2 MB at V = 126k), kept per device."""
        if self._seeds is None or self._seeds.device != device:
            ids = torch.arange(self.vocab_size, dtype=torch.int64, device=device)
            self._seeds = torch.stack(
                [context_seeds(self.config.key_left, ids), context_seeds(self.config.key_right, ids)]
            )
        return self._seeds

    def _add_batched(self, frontier: tuple[torch.Tensor, ...], out: torch.Tensor, delta: float) -> None:
        """The ``"batched"`` strategy: a fixed handful of kernels per batch of positions, no Python loop
        over positions. Seeds come from a per-key table (one gather), both sides are hashed in one block."""
        self._cache.clear()
        b_idx, i_idx, has_left, has_right, ctx_left, ctx_right = frontier
        n, V = b_idx.shape[0], self.vocab_size
        cfg = self.config
        sides, has, ctxs = [], [], []
        if cfg.use_left:
            sides.append(_LEFT)
            has.append(has_left)
            ctxs.append(ctx_left)
        if cfg.use_right:
            sides.append(_RIGHT)
            has.append(has_right)
            ctxs.append(ctx_right)
        ctx = torch.stack(ctxs)  # [S, N]
        has_s = torch.stack(has)  # [S, N]
        # A second (cheap: the queue is empty by now) synchronisation: are all contexts inside V?
        if bool(((ctx >= 0) & (ctx < V)).all()):  # the usual case: one gather from the seed table
            seeds = self._seed_table(out.device)[torch.tensor(sides, device=out.device)[:, None], ctx]
        else:  # ids outside the vocabulary (a prompt from a larger tokenizer): hash them directly
            keys = (cfg.key_left, cfg.key_right)
            seeds = torch.stack([context_seeds(keys[side], c) for side, c in zip(sides, ctxs, strict=True)])
        words = self._words(out.device)
        per_batch = max(1, _BATCH_SCRATCH_BYTES // (16 * V * len(sides)))
        for start in range(0, n, per_batch):
            stop = start + per_batch
            green = green_from_seeds(seeds[:, start:stop], cfg.gamma, cand_words=words)
            green = green.view(len(sides), -1, V)
            green &= has_s[:, start:stop, None]  # a position without this neighbour gets nothing from it
            count = green.sum(0, dtype=torch.uint8)  # m_L + m_R, [n, V]
            self.rows_hashed += green.shape[0] * green.shape[1]
            bb, ii = b_idx[start:stop], i_idx[start:stop]
            rows = out[bb, ii]  # [n, V] copy; one rounding: rows + delta * (m_L + m_R)
            rows.add_(count, alpha=delta)
            out[bb, ii] = rows

    def _keep(self, rows_left: dict[int, torch.Tensor], rows_right: dict[int, torch.Tensor]) -> None:
        """Keep only this call's rows (the frontier), at most ``max_cached_rows`` of them."""
        cache: OrderedDict[tuple[int, int], torch.Tensor] = OrderedDict()
        for side, rows in ((_LEFT, rows_left), (_RIGHT, rows_right)):
            for ctx, row in rows.items():
                if len(cache) >= self.max_cached_rows:
                    break
                cache[(side, ctx)] = row
        self._cache = cache

    def __repr__(self) -> str:
        return (
            f"LRDWMLogitsProcessor(config={self.config!r}, vocab_size={self.vocab_size}, "
            f"mask_token_id={self.mask_token_id}, in_place={self.in_place}, strategy={self.strategy!r})"
        )
