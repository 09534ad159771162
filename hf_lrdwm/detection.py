"""LR-DWM detection: per-token scores, a z-score and p-value, calibration on human text.

The default test counts every (side, context token, token) event once per text and tests the number
of green events against Binomial(n, gamma) with an exact one-sided p-value. Under a random key every
distinct event is an independent Bernoulli(gamma) draw, so the false-positive rate holds without
calibration; repeated pairs (boilerplate, code, lists) would otherwise count the same coin again and
again. ``statistic="paper"`` gives the LR-DWM paper's z: ``sum(s_i) / sqrt(sigma2 * E)`` over events
with a normal p-value, ``sigma2 = gamma * (1 - gamma)`` per event (sigma^2 = 1/2 per interior token at
gamma 0.5) or calibrated on human text. See ``docs/how-it-works.md``.
"""

from __future__ import annotations

import itertools
import logging
import math
import os
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch
from scipy import stats

from .config import LRDWMConfig
from .hashing import green_pairs, green_probability

__all__ = ["LRDWMDetector", "DetectionOutput", "Calibration", "KeyHealth"]

logger = logging.getLogger(__name__)

_STATISTICS = ("binomial", "paper")
# Integer dtypes whose values all fit in int64 and whose tensors skip the round trip through lists.
_FAST_DTYPES = (torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8)


@dataclass
class DetectionOutput:
    """Detection results for a batch of B inputs (numpy arrays of shape (B,)).

    Attributes:
        z_score: z of the green count (calibrated when the detector holds a calibration).
        p_value: one-sided p-value (exact binomial by default; normal for ``statistic="paper"``).
        prediction: ``True`` where the input is judged watermarked at the detector's FPR.
        num_tokens_scored: tokens with at least one scored neighbour.
        num_events: (side, context, token) events counted (after removing repeats if enabled).
        num_green: green events among them.
        green_fraction_left: share of green left events (NaN if none).
        green_fraction_right: share of green right events (NaN if none).
        token_scores: one float array per input, of the input's length:
            ``s_i = m_L + m_R - gamma * (number of neighbours used)``, NaN where not scored.
        reason: why an input could not be judged (``None`` where it could).
        threshold: the z threshold in force (``None`` for the binomial test, which uses ``p_value``).
        fpr: the false-positive rate the predictions were made at.
    """

    z_score: np.ndarray
    p_value: np.ndarray
    prediction: np.ndarray
    num_tokens_scored: np.ndarray
    num_events: np.ndarray
    num_green: np.ndarray
    green_fraction_left: np.ndarray
    green_fraction_right: np.ndarray
    token_scores: list[np.ndarray]
    reason: list[str | None]
    fpr: float
    threshold: float | None = None
    statistic: str = "binomial"

    def __len__(self) -> int:
        return int(self.z_score.shape[0])

    def __getitem__(self, index: int) -> dict[str, Any]:
        """The results of one input as a plain dict (JSON-friendly, token scores as a list)."""
        scores = self.token_scores[index]
        return {
            "z_score": _float(self.z_score[index]),
            "p_value": _float(self.p_value[index]),
            "prediction": bool(self.prediction[index]),
            "num_tokens_scored": int(self.num_tokens_scored[index]),
            "num_events": int(self.num_events[index]),
            "num_green": int(self.num_green[index]),
            "green_fraction_left": _float(self.green_fraction_left[index]),
            "green_fraction_right": _float(self.green_fraction_right[index]),
            "token_scores": [None if math.isnan(x) else float(x) for x in scores.tolist()],
            "reason": self.reason[index],
            "fpr": self.fpr,
            "threshold": self.threshold,
            "statistic": self.statistic,
        }

    def to_list(self, *, with_token_scores: bool = True) -> list[dict[str, Any]]:
        rows = [self[i] for i in range(len(self))]
        if not with_token_scores:
            for row in rows:
                row.pop("token_scores")
        return rows


def _float(x: Any) -> float | None:
    value = float(x)
    return None if math.isnan(value) else value


@dataclass
class Calibration:
    """Null statistics of one key (and settings) estimated on human text.

    Attributes:
        null_mean: mean green rate per event on human text (``gamma`` in theory).
        null_var: variance per event of the green count (``gamma * (1 - gamma)`` in theory; larger
            when events are dependent).
        sigma2: the paper's per-token sigma^2 (``2 * null_var``).
        threshold: the empirical (1 - fpr) quantile of the calibrated z on the human texts (the
            ``ceil((1 - fpr) * (n + 1))``-th smallest value, so a new human text exceeds it with
            probability <= fpr when texts are exchangeable).
        threshold_ci: a 95% interval for the true (1 - fpr) quantile (order statistics).
        fpr: target false-positive rate.
        num_texts: human texts used (those with at least ``min_tokens`` scored tokens).
        statistic, ignore_repeated_pairs: the settings it was made with.
    """

    null_mean: float
    null_var: float
    sigma2: float
    threshold: float
    threshold_ci: tuple[float, float]
    fpr: float
    num_texts: int
    statistic: str
    ignore_repeated_pairs: bool

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["threshold_ci"] = list(self.threshold_ci)
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Calibration:
        data = dict(data)
        data["threshold_ci"] = tuple(data["threshold_ci"])
        return cls(**data)


@dataclass
class KeyHealth:
    """How a key behaves on a reference corpus of human text (uncalibrated detector).

    Attributes:
        observed_fpr: share of human texts flagged at the nominal ``fpr``.
        num_flagged, num_texts: the counts behind it.
        fpr_ci: 95% Clopper-Pearson interval of the observed FPR.
        p_excess: one-sided binomial p-value of seeing this many flags if the true FPR were ``fpr``.
        healthy: ``p_excess >= 0.01`` (no significant excess of false positives).
        mean_z, std_z: mean and standard deviation of z over the human texts (0 and 1 in theory).
    """

    observed_fpr: float
    num_flagged: int
    num_texts: int
    fpr: float
    fpr_ci: tuple[float, float]
    p_excess: float
    healthy: bool
    mean_z: float
    std_z: float
    details: dict[str, Any] = field(default_factory=dict)


class LRDWMDetector:
    """Detects the LR-DWM watermark in token ids or text.

    Args:
        config: the :class:`~hf_lrdwm.LRDWMConfig` used at generation (keys, gamma, sides).
        tokenizer: needed for text input (any callable HF tokenizer); optional for ids.
        fpr: false-positive rate of ``prediction`` (default 0.01).
        ignore_repeated_pairs: count each (side, context, token) event once per text (default; keeps
            the FPR on repetitive human text).
        min_tokens: inputs with fewer scored tokens get ``prediction=False`` and a reason.
        statistic: ``"binomial"`` (exact binomial test, default) or ``"paper"`` (the LR-DWM paper's
            z = sum(s_i) / (sigma * sqrt(T)) with a normal p-value).
        ignore_token_ids: ids that are neither scored nor used as context (EOS / EoT / pad / mask runs
            that end DLM outputs). Default: the tokenizer's special ids, if a tokenizer is given.
        vocab_size: ids must be in ``[0, vocab_size)``; default ``len(tokenizer)`` if a tokenizer is given.
        calibration: a :class:`Calibration` from :meth:`calibrate` (or set later).
        device: where the hashing runs (default CPU).

    Example:
        >>> import torch
        >>> from hf_lrdwm import LRDWMConfig, LRDWMDetector
        >>> det = LRDWMDetector(LRDWMConfig(key="demo"), vocab_size=1000)
        >>> out = det(torch.randint(0, 1000, (2, 200), generator=torch.Generator().manual_seed(0)))
        >>> out.prediction.tolist(), out.num_tokens_scored.tolist()
        ([False, False], [200, 200])
    """

    def __init__(
        self,
        config: LRDWMConfig,
        tokenizer: Any = None,
        *,
        fpr: float = 0.01,
        ignore_repeated_pairs: bool = True,
        min_tokens: int = 16,
        statistic: Literal["binomial", "paper"] = "binomial",
        ignore_token_ids: Iterable[int] | None = None,
        vocab_size: int | None = None,
        calibration: Calibration | None = None,
        device: torch.device | str | None = None,
    ) -> None:
        if not isinstance(config, LRDWMConfig):
            raise TypeError(f"`config` must be an LRDWMConfig, got {type(config).__name__}")
        config.validate()
        _check_fpr(fpr)
        if statistic not in _STATISTICS:
            raise ValueError(f"`statistic` must be one of {_STATISTICS}, got {statistic!r}")
        if isinstance(min_tokens, bool) or not isinstance(min_tokens, int) or min_tokens < 1:
            raise ValueError(f"`min_tokens` must be an int >= 1, got {min_tokens!r}")
        self.config = config
        self.tokenizer = tokenizer
        self.fpr = float(fpr)
        self.ignore_repeated_pairs = bool(ignore_repeated_pairs)
        self.min_tokens = min_tokens
        self.statistic = statistic
        if ignore_token_ids is None:
            ignore_token_ids = getattr(tokenizer, "all_special_ids", None) or []
        self.ignore_token_ids = sorted({int(t) for t in ignore_token_ids})
        if vocab_size is None and tokenizer is not None:
            try:
                vocab_size = len(tokenizer)
            except TypeError:
                vocab_size = None
        if vocab_size is not None and (isinstance(vocab_size, bool) or int(vocab_size) < 2):
            raise ValueError(f"`vocab_size` must be an int >= 2, got {vocab_size!r}")
        self.vocab_size = int(vocab_size) if vocab_size is not None else None
        self.calibration = calibration
        self.device = torch.device(device) if device is not None else torch.device("cpu")
        self._gamma = green_probability(config.gamma)

    def __repr__(self) -> str:
        return (
            f"LRDWMDetector(config={self.config!r}, fpr={self.fpr}, statistic={self.statistic!r}, "
            f"ignore_repeated_pairs={self.ignore_repeated_pairs}, min_tokens={self.min_tokens}, "
            f"calibrated={self.calibration is not None})"
        )

    # ------------------------------------------------------------------------------------------
    # Input normalisation
    # ------------------------------------------------------------------------------------------
    def _tokenize(self, texts: list[str]) -> list[list[int]]:
        if self.tokenizer is None:
            raise ValueError(
                "text input needs a tokenizer: pass `tokenizer=` to LRDWMDetector, or give token ids"
            )
        enc = self.tokenizer(texts, add_special_tokens=False)
        return [list(ids) for ids in enc["input_ids"]]

    def _to_id_lists(self, inputs: Any) -> tuple[list[list[int]], bool]:
        """Normalise the accepted input types to a list of id lists; also report if the input was one item."""
        if isinstance(inputs, str):
            return self._tokenize([inputs]), True
        if isinstance(inputs, np.ndarray):
            inputs = torch.from_numpy(inputs)
        if isinstance(inputs, torch.Tensor):
            if inputs.dtype.is_floating_point or inputs.dtype.is_complex or inputs.dtype == torch.bool:
                raise TypeError(f"token ids must be an integer tensor, got dtype {inputs.dtype}")
            if inputs.dim() == 1:
                return [inputs.tolist()], True
            if inputs.dim() == 2:
                return inputs.tolist(), False
            raise ValueError(f"a tensor of token ids must be 1-D or 2-D, got shape {tuple(inputs.shape)}")
        if isinstance(inputs, (list, tuple)):
            if len(inputs) == 0:
                return [], False
            if all(isinstance(x, str) for x in inputs):
                return self._tokenize(list(inputs)), False
            if all(isinstance(x, (int, np.integer)) and not isinstance(x, bool) for x in inputs):
                return [[int(x) for x in inputs]], True
            seqs = []
            for n, item in enumerate(inputs):
                if isinstance(item, torch.Tensor | np.ndarray):
                    arr = item if isinstance(item, np.ndarray) else item.cpu().numpy()
                    if arr.ndim != 1 or arr.dtype.kind not in "iu":
                        raise TypeError(f"input {n} must be a 1-D integer array of token ids")
                    seqs.append([int(x) for x in arr.tolist()])
                elif isinstance(item, (list, tuple)) and set(map(type, item)) <= {int}:
                    seqs.append(list(item))  # plain ints (the common case), checked at C speed
                elif isinstance(item, (list, tuple)) and all(
                    isinstance(x, (int, np.integer)) and not isinstance(x, bool) for x in item
                ):
                    seqs.append([int(x) for x in item])
                else:
                    raise TypeError(
                        f"input {n} is a {type(item).__name__}; expected a list of token ids "
                        "(and not a mix of text and ids)"
                    )
            return seqs, False
        raise TypeError(
            "detector input must be a str, a list of str, a 1-D/2-D integer tensor or a list of token-id "
            f"lists, got {type(inputs).__name__}"
        )

    def _to_flat(self, inputs: Any) -> tuple[torch.Tensor, torch.Tensor]:
        """The inputs as one flat int64 CPU tensor of ids and an int64 tensor of per-input lengths.

        Same inputs, errors and ids as :meth:`_to_id_lists`, but 1-D/2-D integer tensors and arrays are
        reshaped without a round trip through Python lists, and id lists are packed with numpy.
        """
        t = inputs
        if isinstance(t, np.ndarray) and t.dtype in (np.int64, np.int32, np.int16, np.int8, np.uint8):
            t = torch.from_numpy(t)
        if isinstance(t, torch.Tensor) and t.dtype in _FAST_DTYPES and t.dim() in (1, 2):
            ids = t.detach().to(device="cpu", dtype=torch.int64).reshape(-1)
            if t.dim() == 1:
                return ids, torch.tensor([t.shape[0]], dtype=torch.int64)
            return ids, torch.full((t.shape[0],), t.shape[1], dtype=torch.int64)
        seqs, _single = self._to_id_lists(inputs)
        return self._pack(seqs)

    def _pack(self, seqs: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
        """Id lists -> (flat int64 tensor, lengths); ids that do not fit int64 raise ``_check_ids``' error."""
        lengths = np.fromiter((len(s) for s in seqs), dtype=np.int64, count=len(seqs))
        total = int(lengths.sum())
        try:
            flat = np.fromiter(itertools.chain.from_iterable(seqs), dtype=np.int64, count=total)
        except OverflowError:
            self._check_ids(seqs)  # raises the ValueError for ids < 0 or too large
            raise
        return torch.from_numpy(flat), torch.from_numpy(lengths)

    def _check_flat(self, ids: torch.Tensor) -> None:
        """:meth:`_check_ids` on a flat int64 tensor (same checks, same messages)."""
        if ids.numel() == 0:
            return
        self._check_range(int(ids.min()), int(ids.max()))

    def _check_ids(self, seqs: list[list[int]]) -> None:
        lo = min((min(s) for s in seqs if s), default=0)
        hi = max((max(s) for s in seqs if s), default=0)
        self._check_range(lo, hi)

    def _check_range(self, lo: int, hi: int) -> None:
        """The smallest and largest id of the input: >= 0, inside the vocabulary, a plausible id."""
        if lo < 0:
            raise ValueError(f"token ids must be >= 0, got {lo}")
        if self.vocab_size is not None and hi >= self.vocab_size:
            raise ValueError(f"token id {hi} is outside the vocabulary (vocab_size={self.vocab_size})")
        if hi >= 1 << 40:
            raise ValueError(f"token id {hi} is too large to be a token id")

    # ------------------------------------------------------------------------------------------
    # Core: events and counts (vectorised over the whole batch)
    # ------------------------------------------------------------------------------------------
    def _events(self, seqs: list[list[int]], prompt_ids: list[list[int]] | None) -> dict[str, Any]:
        """Green counts and per-token scores for a batch of id lists."""
        ids, lengths = self._pack(seqs)
        return self._events_flat(ids, lengths, prompt_ids)

    def _events_flat(
        self, ids: torch.Tensor, lengths: torch.Tensor, prompt_ids: list[list[int]] | None
    ) -> dict[str, Any]:
        """:meth:`_events` on a flat int64 tensor of ids and the per-input lengths (see :meth:`_to_flat`)."""
        B = int(lengths.numel())
        pre = torch.zeros(B, dtype=torch.bool)
        if prompt_ids is not None:
            pre = torch.tensor([bool(p) for p in prompt_ids], dtype=torch.bool)
        if pre.any():
            # put each prompt's last token in front of its input (context only)
            last = torch.tensor([p[-1] for p in prompt_ids if p], dtype=torch.int64)
            lengths = lengths + pre
            at = (torch.cumsum(lengths, 0) - lengths)[pre]
            keep = torch.ones(int(lengths.sum()), dtype=torch.bool)
            keep[at] = False
            flat = torch.empty(keep.shape[0], dtype=torch.int64)
            flat[keep] = ids
            flat[at] = last
            ids = flat
        total = int(ids.numel())
        seq_of = torch.repeat_interleave(torch.arange(B), lengths)
        usable = torch.ones(total, dtype=torch.bool)
        if self.ignore_token_ids and total:
            usable &= ~torch.isin(ids, torch.tensor(self.ignore_token_ids, dtype=torch.int64))
        scorable = usable.clone()
        starts = torch.cumsum(lengths, 0) - lengths
        if pre.any():
            scorable[starts[pre]] = False  # the prompt's last token: context only
        gamma = self._gamma
        green_count = torch.zeros(B, dtype=torch.int64)
        event_count = torch.zeros(B, dtype=torch.int64)
        side_green = torch.zeros(2, B, dtype=torch.int64)
        side_events = torch.zeros(2, B, dtype=torch.int64)
        tok_score = torch.zeros(total, dtype=torch.float64)
        tok_nb = torch.zeros(total, dtype=torch.int64)
        if total >= 2:
            same = seq_of[1:] == seq_of[:-1]
            sides = []
            if self.config.use_left:  # token j, context j-1
                valid = same & scorable[1:] & usable[:-1]
                tok_pos = torch.nonzero(valid).squeeze(1) + 1
                sides.append((0, self.config.key_left, tok_pos, tok_pos - 1))
            if self.config.use_right:  # token j, context j+1
                valid = same & scorable[:-1] & usable[1:]
                tok_pos = torch.nonzero(valid).squeeze(1)
                sides.append((1, self.config.key_right, tok_pos, tok_pos + 1))
            for side, key, tok_pos, ctx_pos in sides:
                if tok_pos.numel() == 0:
                    continue
                tok = ids[tok_pos]
                ctx = ids[ctx_pos]
                seq = seq_of[tok_pos]
                green = green_pairs(key, ctx.to(self.device), tok.to(self.device), self.config.gamma).cpu()
                tok_score.index_add_(0, tok_pos, green.double() - gamma)
                tok_nb.index_add_(0, tok_pos, torch.ones_like(tok_pos))
                if self.ignore_repeated_pairs:
                    seq, green = _unique_events(seq, ctx, tok, green)
                g = torch.bincount(seq, weights=green.double(), minlength=B).round().long()
                n = torch.bincount(seq, minlength=B)
                side_green[side] += g
                side_events[side] += n
                green_count += g
                event_count += n
        scored = tok_nb > 0
        tok_score[~scored] = float("nan")
        tokens_scored = (
            torch.bincount(seq_of[scored], minlength=B) if total else torch.zeros(B, dtype=torch.int64)
        )
        flat_scores = tok_score.numpy()
        token_scores = [
            flat_scores[a + p : a + n].copy()
            for a, p, n in zip(starts.tolist(), pre.tolist(), lengths.tolist(), strict=True)
        ]
        if B and bool((lengths == lengths[0]).all()) and bool((pre == pre[0]).all()):
            # rectangular batch: one row-wise nansum (same pairwise sums as one nansum per row)
            raw_sum = np.nansum(flat_scores.reshape(B, -1)[:, int(pre[0]) :], axis=1)
        else:
            raw_sum = np.array([np.nansum(a) for a in token_scores]) if B else np.zeros(0)
        return {
            "green": green_count.numpy(),
            "events": event_count.numpy(),
            "side_green": side_green.numpy(),
            "side_events": side_events.numpy(),
            "tokens_scored": tokens_scored.numpy(),
            "token_scores": token_scores,
            "raw_sum": raw_sum,
        }

    def _statistics(
        self, ev: dict[str, Any], fpr: float
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, float | None]:
        g = ev["green"].astype(np.float64)
        n = ev["events"].astype(np.float64)
        gamma = self._gamma
        cal = self.calibration
        with np.errstate(divide="ignore", invalid="ignore"):
            if cal is not None:
                z = (g - cal.null_mean * n) / np.sqrt(cal.null_var * n)
                p = stats.norm.sf(z)
                threshold = cal.threshold if math.isclose(fpr, cal.fpr) else _calibrated_threshold(cal, fpr)
                pred = z > threshold
            elif self.statistic == "paper":
                z = (g - gamma * n) / np.sqrt(gamma * (1 - gamma) * n)
                p = stats.norm.sf(z)
                threshold = float(stats.norm.isf(fpr))
                pred = z > threshold
            else:
                z = (g - gamma * n) / np.sqrt(gamma * (1 - gamma) * n)
                p = stats.binom.sf(g - 1, n, gamma)
                threshold = None
                pred = p <= fpr
        empty = n == 0
        z = np.where(empty, np.nan, z)
        p = np.where(empty, 1.0, p)
        pred = np.where(empty, False, pred)
        return z, p, pred.astype(bool), threshold

    # ------------------------------------------------------------------------------------------
    # Public API
    # ------------------------------------------------------------------------------------------
    def __call__(
        self,
        inputs: str | Sequence[str] | torch.Tensor | Sequence[Sequence[int]],
        *,
        prompt_ids: Sequence[int] | Sequence[Sequence[int]] | None = None,
        fpr: float | None = None,
    ) -> DetectionOutput:
        """Score a batch of inputs.

        Args:
            inputs: a str, a list of str (needs a tokenizer), a 1-D/2-D integer tensor, a list of ids,
                or a (ragged) list of id lists.
            prompt_ids: the prompt's ids (one list for all inputs, or one per input): its last token is
                the left context of the first token.
            fpr: false-positive rate for this call (default: the detector's).

        Returns:
            :class:`DetectionOutput` with one entry per input.
        """
        fpr = self.fpr if fpr is None else _check_fpr(fpr)
        ids, lengths = self._to_flat(inputs)
        prompts = _normalise_prompts(prompt_ids, int(lengths.numel()))
        if lengths.numel():
            self._check_flat(ids)
            if prompts is not None:
                self._check_ids([p for p in prompts if p])
        ev = self._events_flat(ids, lengths, prompts)
        z, p, pred, threshold = self._statistics(ev, fpr)
        reasons: list[str | None] = []
        for length, n_tok in zip(lengths.tolist(), ev["tokens_scored"].tolist(), strict=True):
            if length == 0:
                reasons.append("empty input: nothing to score")
            elif n_tok < self.min_tokens:
                reasons.append(f"too few tokens scored ({n_tok} < min_tokens={self.min_tokens})")
            else:
                reasons.append(None)
        pred = pred & np.array([r is None for r in reasons], dtype=bool)
        with np.errstate(divide="ignore", invalid="ignore"):
            frac_l = ev["side_green"][0] / ev["side_events"][0]
            frac_r = ev["side_green"][1] / ev["side_events"][1]
        return DetectionOutput(
            z_score=np.asarray(z, dtype=np.float64),
            p_value=np.asarray(p, dtype=np.float64),
            prediction=np.asarray(pred, dtype=bool),
            num_tokens_scored=ev["tokens_scored"].astype(np.int64),
            num_events=ev["events"].astype(np.int64),
            num_green=ev["green"].astype(np.int64),
            green_fraction_left=np.asarray(frac_l, dtype=np.float64),
            green_fraction_right=np.asarray(frac_r, dtype=np.float64),
            token_scores=ev["token_scores"],
            reason=reasons,
            fpr=fpr,
            threshold=threshold,
            statistic="calibrated-" + self.statistic if self.calibration is not None else self.statistic,
        )

    detect = __call__

    def _null_counts(self, human_inputs: Any, batch_size: int) -> tuple[np.ndarray, np.ndarray]:
        seqs, _ = self._to_id_lists(human_inputs)
        gs, ns = [], []
        for start in range(0, len(seqs), batch_size):
            chunk = seqs[start : start + batch_size]
            self._check_ids(chunk)
            ev = self._events(chunk, None)
            keep = ev["tokens_scored"] >= self.min_tokens
            gs.append(ev["green"][keep])
            ns.append(ev["events"][keep])
        g = np.concatenate(gs) if gs else np.zeros(0)
        n = np.concatenate(ns) if ns else np.zeros(0)
        return g.astype(np.float64), n.astype(np.float64)

    def calibrate(
        self, human_inputs: Any, *, fpr: float | None = None, batch_size: int = 256, apply: bool = True
    ) -> Calibration:
        """Estimate this key's null mean/variance and the empirical z threshold on human text.

        Args:
            human_inputs: texts or id lists known not to carry this watermark (a few thousand of
                200-400 tokens give a usable 1% threshold; the interval says how usable).
            fpr: target false-positive rate (default: the detector's).
            batch_size: inputs scored at once.
            apply: store the result in ``self.calibration`` so later calls use it.
        """
        fpr = self.fpr if fpr is None else _check_fpr(fpr)
        g, n = self._null_counts(human_inputs, batch_size)
        m = len(n)
        if m < 10:
            raise ValueError(
                f"calibration needs at least 10 human texts with >= min_tokens scored tokens, got {m}"
            )
        mean = float(g.sum() / n.sum())
        var = float(np.mean((g - mean * n) ** 2 / n))
        z = np.sort((g - mean * n) / np.sqrt(var * n))
        k = math.ceil((1 - fpr) * (m + 1))  # 1-based order statistic
        threshold = float(z[min(k, m) - 1])
        if k > m:
            logger.warning(
                "%d human texts are too few for fpr=%g: the threshold is the largest null z and the "
                "achieved FPR may exceed the target",
                m,
                fpr,
            )
        lo_k = int(stats.binom.ppf(0.025, m, 1 - fpr))
        hi_k = int(stats.binom.isf(0.025, m, 1 - fpr)) + 1
        ci = (float(z[max(lo_k, 1) - 1]), float(z[min(hi_k, m) - 1]))
        cal = Calibration(
            null_mean=mean,
            null_var=var,
            sigma2=2 * var,
            threshold=threshold,
            threshold_ci=ci,
            fpr=fpr,
            num_texts=m,
            statistic=self.statistic,
            ignore_repeated_pairs=self.ignore_repeated_pairs,
        )
        if apply:
            self.calibration = cal
        return cal

    def key_health(self, human_inputs: Any, *, fpr: float | None = None, batch_size: int = 256) -> KeyHealth:
        """Report this key's false-positive rate on a reference corpus of human text (uncalibrated).

        A fixed key colours the (context, token) pairs that all human texts share the same way, so one
        key's FPR on real text can differ from the nominal one; this measures it.
        """
        fpr = self.fpr if fpr is None else _check_fpr(fpr)
        saved = self.calibration
        self.calibration = None
        try:
            seqs, _ = self._to_id_lists(human_inputs)
            zs, flags = [], []
            for start in range(0, len(seqs), batch_size):
                out = self(seqs[start : start + batch_size], fpr=fpr)
                ok = np.array([r is None for r in out.reason], dtype=bool)
                zs.append(out.z_score[ok])
                flags.append(out.prediction[ok])
        finally:
            self.calibration = saved
        z = np.concatenate(zs) if zs else np.zeros(0)
        flag = np.concatenate(flags) if flags else np.zeros(0, dtype=bool)
        m = int(flag.size)
        if m == 0:
            raise ValueError("key_health needs human texts with at least min_tokens scored tokens")
        k = int(flag.sum())
        ci = stats.binomtest(k, m, fpr).proportion_ci(confidence_level=0.95, method="exact")
        p_excess = float(stats.binom.sf(k - 1, m, fpr))
        return KeyHealth(
            observed_fpr=k / m,
            num_flagged=k,
            num_texts=m,
            fpr=fpr,
            fpr_ci=(float(ci.low), float(ci.high)),
            p_excess=p_excess,
            healthy=p_excess >= 0.01,
            mean_z=float(np.mean(z)),
            std_z=float(np.std(z)),
        )

    # ------------------------------------------------------------------------------------------
    # Detector repos (hf_lrdwm.hub): saved, loaded and pushed like a model
    # ------------------------------------------------------------------------------------------
    def save_pretrained(self, save_directory: str | os.PathLike) -> Path:
        """Write a detector repo: ``config.json`` (keys and settings, mode 0o600), the tokenizer files,
        a one-scalar ``model.safetensors`` and a ``README.md`` model card (no keys). Keep it private.

        ``pipeline("watermark-detection", model=save_directory)`` and :meth:`from_pretrained` load it
        (after ``import hf_lrdwm``; no ``trust_remote_code``). See ``docs/hub.md``.
        """
        from .hub import save_detector

        return save_detector(self, save_directory)

    @classmethod
    def from_pretrained(
        cls,
        pretrained: str | os.PathLike,
        *,
        tokenizer: Any = None,
        token: str | bool | None = None,
        revision: str | None = None,
        cache_dir: str | os.PathLike | None = None,
        device: torch.device | str | None = None,
    ) -> LRDWMDetector:
        """Load a detector repo (a directory from :meth:`save_pretrained` or a Hub repo id): the keys,
        settings and calibration from ``config.json``, and the repo's tokenizer if it has one (or
        ``tokenizer=``)."""
        from .hub import load_detector

        return load_detector(
            pretrained,
            tokenizer=tokenizer,
            token=token,
            revision=revision,
            cache_dir=cache_dir,
            device=device,
            detector_class=cls,
        )

    def push_to_hub(
        self,
        repo_id: str,
        *,
        private: bool = True,
        token: str | bool | None = None,
        commit_message: str = "Upload LR-DWM watermark detector",
    ) -> str:
        """Upload the detector repo to the Hub, **private by default** (it holds the keys); returns the
        commit URL. ``private=False`` logs a warning; an existing public repo is refused unless
        ``private=False``."""
        from .hub import push_detector

        return push_detector(self, repo_id, private=private, token=token, commit_message=commit_message)


def _unique_events(
    seq: torch.Tensor, ctx: torch.Tensor, tok: torch.Tensor, green: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Keep one of each (sequence, context, token) event (same event -> same colour)."""
    bits = max(int(torch.maximum(ctx.max(), tok.max())).bit_length(), 1)
    seq_bits = max(int(seq.max()).bit_length(), 1)
    if 2 * bits + seq_bits <= 62:
        code = (seq << (2 * bits)) | (ctx << bits) | tok
        uniq, inverse = torch.unique(code, return_inverse=True)
    else:
        uniq, inverse = torch.unique(torch.stack([seq, ctx, tok], 1), dim=0, return_inverse=True)
    first = torch.full((uniq.shape[0],), inverse.numel(), dtype=torch.int64)
    first.scatter_reduce_(0, inverse, torch.arange(inverse.numel()), reduce="amin")
    return seq[first], green[first]


def _check_fpr(fpr: Any) -> float:
    if isinstance(fpr, bool) or not isinstance(fpr, (int, float)) or not 0.0 < float(fpr) < 1.0:
        raise ValueError(f"`fpr` must be a float in (0, 1), got {fpr!r}")
    return float(fpr)


def _calibrated_threshold(cal: Calibration, fpr: float) -> float:
    """Threshold at another FPR than the calibrated one: the normal quantile of the calibrated z."""
    return float(stats.norm.isf(fpr))


def _normalise_prompts(prompt_ids: Any, batch: int) -> list[list[int]] | None:
    if prompt_ids is None:
        return None
    if isinstance(prompt_ids, torch.Tensor | np.ndarray):
        prompt_ids = prompt_ids.tolist()
    if not isinstance(prompt_ids, (list, tuple)):
        raise TypeError(
            f"`prompt_ids` must be a list of ids or a list of id lists, got {type(prompt_ids).__name__}"
        )
    if all(isinstance(x, (int, np.integer)) and not isinstance(x, bool) for x in prompt_ids):
        return [[int(x) for x in prompt_ids]] * batch
    if len(prompt_ids) != batch:
        raise ValueError(f"got {len(prompt_ids)} prompts for {batch} inputs")
    out = []
    for n, p in enumerate(prompt_ids):
        if isinstance(p, torch.Tensor | np.ndarray):
            p = p.tolist()
        if not isinstance(p, (list, tuple)) or not all(
            isinstance(x, int) and not isinstance(x, bool) for x in p
        ):
            raise TypeError(f"prompt {n} must be a list of token ids")
        out.append(list(p))
    return out
