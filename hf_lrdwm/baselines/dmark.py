"""DMARK-style watermark: the full V x V green table built once, left row plus right column."""

from __future__ import annotations

import time

import torch

from ..config import LRDWMConfig
from ..hashing import candidate_words, green_rows
from ._base import BaselineProcessor

__all__ = ["DMarkStyleProcessor", "build_dmark_table", "dmark_table_nbytes"]

_MASK64 = (1 << 64) - 1
_DEFAULT_MAX_TABLE_BYTES = 4 << 30  # refuse to allocate an unpacked table above 4 GiB


def dmark_table_nbytes(vocab_size: int, packed: bool = False) -> int:
    """Bytes of DMARK's green table: ``V**2`` as a bool matrix, ``ceil(V**2 / 8)`` as a packed bit file.

    >>> dmark_table_nbytes(126464) / 1e9, round(dmark_table_nbytes(126464, packed=True) / 1e9, 2)
    (15.993143296, 2.0)
    """
    cells = int(vocab_size) * int(vocab_size)
    return -(-cells // 8) if packed else cells


def build_dmark_table(
    vocab_size: int,
    key: int,
    gamma: float,
    *,
    source: str = "rng",
    device: torch.device | str | None = None,
) -> torch.Tensor:
    """The bool table ``G[prev, cand]`` (V x V): is ``cand`` green after ``prev``?

    ``source="rng"`` (DMARK's construction): row ``prev`` is ``V`` i.i.d. Bernoulli(``gamma``) draws
    from a generator seeded with ``prev * key`` (mod 2**64), so row 0 is the same for every key. A
    local ``torch.Generator`` replaces DMARK's seeding of the global RNG. ``source="hash"``: the rows of
    our keyed hash (``green_rows(key, prev, gamma)``), i.e. ``G[prev] == G_L(prev)`` of LR-DWM.
    Both are O(V**2) work and memory.
    """
    if source not in ("rng", "hash"):
        raise ValueError(f"`source` must be 'rng' or 'hash', got {source!r}")
    device = torch.device(device) if device is not None else torch.device("cpu")
    table = torch.empty((vocab_size, vocab_size), dtype=torch.bool, device=device)
    if source == "hash":
        words = candidate_words(vocab_size, device=device)
        chunk = 256
        for start in range(0, vocab_size, chunk):
            ctx = torch.arange(start, min(start + chunk, vocab_size), dtype=torch.int64, device=device)
            table[start : start + chunk] = green_rows(key, ctx, gamma, cand_words=words)
        return table
    gen = torch.Generator(device=device)
    buf = torch.empty(vocab_size, dtype=torch.float32, device=device)
    for prev in range(vocab_size):
        gen.manual_seed((prev * key) & _MASK64)
        buf.uniform_(0.0, 1.0, generator=gen)
        torch.lt(buf, gamma, out=table[prev])
    return table


class DMarkStyleProcessor(BaselineProcessor):
    """DMARK-style bias from a precomputed V x V boolean green table.

    At construction the whole table ``G`` (``V**2`` bytes: 16.0 GB for LLaDA's V = 126,464, 23.1 GB for
    Dream's 152,064) is built once and kept in memory. At each call, a masked position whose left
    neighbour ``a`` is revealed gets ``+delta`` on the row ``G[a]``; with ``bidirectional=True`` one
    whose right neighbour ``c`` is revealed also gets ``+delta`` on the column ``G[:, c]`` (the tokens
    after which ``c`` would be green: the inverse lookup that needs the full table). Both add up.

    Args:
        config: ``delta``, ``gamma`` and the keys (the DMARK key is the low 32 bits of ``k_L``).
        bidirectional: add the right-neighbour column (DMARK's "bidirectional" variant).
        table_source: ``"rng"`` (DMARK's seeded Bernoulli rows) or ``"hash"`` (our hash's rows).
        max_table_bytes: refuse (``MemoryError``) to build a table larger than this (default 4 GiB);
            use :func:`dmark_table_nbytes` for the analytic size at full V.

    Attributes:
        table: the bool [V, V] table; ``build_seconds``: the time it took to build.

    Simplifications: no "predict" variants (argmax of a masked neighbour's logits as a stand-in
    context); the bias is added to the logits for the sampler to use, where DMARK re-picks the token of
    each selected position in its own Python loop; the table is built in memory, not loaded from a
    packed bit file; the bias is always a logit bias (DMARK adds it to ``exp(logits) / gumbel`` at
    temperature > 0).
    """

    name = "dmark"

    def __init__(
        self,
        *,
        config: LRDWMConfig,
        vocab_size: int,
        mask_token_id: int,
        bidirectional: bool = True,
        table_source: str = "rng",
        max_table_bytes: int = _DEFAULT_MAX_TABLE_BYTES,
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
        nbytes = dmark_table_nbytes(vocab_size)
        if nbytes > max_table_bytes:
            raise MemoryError(
                f"DMARK's table for V={vocab_size} needs {nbytes / 1e9:.1f} GB "
                f"(packed: {dmark_table_nbytes(vocab_size, packed=True) / 1e9:.2f} GB), above "
                f"max_table_bytes={max_table_bytes}; use a reduced vocabulary"
            )
        self.bidirectional = bool(bidirectional)
        self.table_source = table_source
        self.dmark_key = config.key_left & 0xFFFFFFFF
        t0 = time.perf_counter()
        self.table = build_dmark_table(
            vocab_size, self.dmark_key, config.gamma, source=table_source, device=device
        )
        self.build_seconds = time.perf_counter() - t0

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        out = self._output(input_ids, scores)
        delta = self.config.delta
        if delta == 0.0:
            return out
        table = self.table
        if table.device != scores.device:
            self.table = table = table.to(scores.device)
        input_ids = input_ids.to(scores.device)
        b, i, has_l, has_r, ctx_l, ctx_r = self._frontier(input_ids, left=True, right=self.bidirectional)
        if b.numel() == 0:
            return out
        # Rows G[a] of the left contexts and columns G[:, c] of the right ones, gathered on demand.
        bias = table[ctx_l].to(out.dtype) * has_l[:, None].to(out.dtype)
        if self.bidirectional:
            cols = table[:, ctx_r].t().to(out.dtype)
            bias += cols * has_r[:, None].to(out.dtype)
        bias.mul_(delta)
        out.index_put_((b, i), bias, accumulate=True)
        return out

    def reset(self) -> None:
        """The table is kept: DMARK builds it once."""
