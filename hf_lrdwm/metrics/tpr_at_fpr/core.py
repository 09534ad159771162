"""TPR at a fixed FPR and ROC AUC for watermark detection scores (numpy only).

This file is the pure core of the ``tpr_at_fpr`` evaluate metric. It depends only on numpy, so it can be
used (and tested) without ``evaluate``; the metric script imports it with a relative import, which
``evaluate.load`` copies along with the script.

Convention: a higher score means "more likely watermarked"; a text is flagged when ``score > threshold``
(strictly greater, so a score tied with the threshold counts as negative).
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence
from typing import Any

import numpy as np

__all__ = ["tpr_at_fpr", "roc_auc"]


def _as_arrays(predictions: Any, references: Any) -> tuple[np.ndarray, np.ndarray]:
    """Validate the inputs; return (negative scores sorted ascending, positive scores sorted ascending)."""
    try:
        scores = np.asarray(predictions, dtype=np.float64)
    except (TypeError, ValueError) as err:
        raise ValueError(f"predictions must be a sequence of real numbers: {err}") from None
    try:
        labels = np.asarray(references, dtype=np.float64)
    except (TypeError, ValueError) as err:
        raise ValueError(f"references must be a sequence of 0/1 labels: {err}") from None
    if scores.ndim != 1 or labels.ndim != 1:
        raise ValueError(
            f"predictions and references must be 1-D sequences, got shapes {scores.shape} and {labels.shape}"
        )
    if scores.shape[0] != labels.shape[0]:
        raise ValueError(
            "predictions and references must have the same length, "
            f"got {scores.shape[0]} and {labels.shape[0]}"
        )
    if not np.all(np.isfinite(scores)):
        bad = int(np.flatnonzero(~np.isfinite(scores))[0])
        raise ValueError(f"predictions must be finite (no NaN or inf); predictions[{bad}] = {scores[bad]}")
    is_pos = labels == 1
    is_neg = labels == 0
    if not np.all(is_pos | is_neg):
        bad = int(np.flatnonzero(~(is_pos | is_neg))[0])
        raise ValueError(
            f"references must be 1 (watermarked) or 0 (human); references[{bad}] = {labels[bad]:g}"
        )
    n_pos, n_neg = int(is_pos.sum()), int(is_neg.sum())
    if n_pos == 0 or n_neg == 0:
        raise ValueError(
            "both classes are needed: got "
            f"{n_pos} positives (references == 1) and {n_neg} negatives (references == 0)"
        )
    return np.sort(scores[is_neg]), np.sort(scores[is_pos])


def _as_fprs(fpr: Any) -> tuple[list[float], bool]:
    """Validate ``fpr``; return (targets, whether a single float was given)."""
    if isinstance(fpr, np.ndarray) and fpr.ndim == 0:
        fpr = fpr.item()
    single = isinstance(fpr, numbers.Real) and not isinstance(fpr, bool)
    if single:
        targets = [fpr]
    elif isinstance(fpr, (Sequence, np.ndarray)) and not isinstance(fpr, (str, bytes)):
        targets = list(fpr)
        if not targets:
            raise ValueError("fpr must be a float in (0, 1) or a non-empty list of such floats, got []")
    else:
        raise ValueError(f"fpr must be a float in (0, 1) or a list of such floats, got {fpr!r}")
    out = []
    for t in targets:
        if isinstance(t, bool) or not isinstance(t, numbers.Real) or not (0.0 < float(t) < 1.0):
            raise ValueError(f"each target fpr must be a real number strictly between 0 and 1, got {t!r}")
        out.append(float(t))
    return out, single


def _max_false_positives(target: float, n_neg: int) -> int:
    """The largest k in [0, n_neg - 1] with k / n_neg <= target (the comparison done in floating point)."""
    k = min(max(math.floor(target * n_neg), 0), n_neg - 1)
    while k + 1 < n_neg and (k + 1) / n_neg <= target:
        k += 1
    while k > 0 and k / n_neg > target:
        k -= 1
    return k


def _auc(neg: np.ndarray, pos: np.ndarray) -> float:
    # Mann-Whitney U / (P * N): pairs with pos > neg count 1, ties 1/2. Counted exactly in integers.
    below = np.searchsorted(neg, pos, side="left").astype(np.int64)
    below_or_tied = np.searchsorted(neg, pos, side="right").astype(np.int64)
    twice_u = int(below.sum()) + int(below_or_tied.sum())
    return twice_u / (2 * pos.shape[0] * neg.shape[0])


def roc_auc(predictions: Any, references: Any) -> float:
    """ROC AUC = P(score of a positive > score of a negative), ties counted as 1/2 (Mann-Whitney U)."""
    neg, pos = _as_arrays(predictions, references)
    return _auc(neg, pos)


def tpr_at_fpr(predictions: Any, references: Any, fpr: float | Sequence[float] = 0.01) -> dict[str, Any]:
    """True-positive rate at a target false-positive rate, with the threshold that achieves it.

    Args:
        predictions: detection scores, higher = more likely watermarked (finite floats).
        references: 1 for watermarked (positive), 0 for human-written (negative).
        fpr: target false-positive rate in (0, 1), or a list of them.

    For each target, the threshold ``t`` is the smallest value among the negative scores (and ``-inf``)
    such that the achieved FPR, the share of negatives with ``score > t``, is ``<= fpr``. Because both
    rates only decrease as ``t`` grows, this ``t`` gives the largest TPR (share of positives with
    ``score > t``) of all thresholds whose FPR is within the target. Scores equal to ``t`` count as
    negative, so ties never push the FPR over the target (the achieved FPR can be below it).

    Returns:
        dict with ``tpr``, ``threshold``, ``fpr`` (achieved), ``true_positives``, ``false_positives``
        (each a float/int for a float ``fpr``, a list for a list), and ``roc_auc``, ``num_positives``,
        ``num_negatives``.

    Raises:
        ValueError: lengths differ, a score is NaN/inf, a label is not 0/1, a class is missing, or an
            fpr is not in (0, 1).
    """
    targets, single = _as_fprs(fpr)
    neg, pos = _as_arrays(predictions, references)
    n_neg, n_pos = int(neg.shape[0]), int(pos.shape[0])
    tprs, thresholds, fprs, tps, fps = [], [], [], [], []
    for target in targets:
        k = _max_false_positives(target, n_neg)
        # The (k+1)-th largest negative score: at most k negatives lie strictly above it, while any smaller
        # candidate would let at least k + 1 through. k < n_neg since target < 1, so t is always finite.
        t = float(neg[n_neg - 1 - k])
        fp = n_neg - int(np.searchsorted(neg, t, side="right"))
        tp = n_pos - int(np.searchsorted(pos, t, side="right"))
        tprs.append(tp / n_pos)
        thresholds.append(t)
        fprs.append(fp / n_neg)
        tps.append(tp)
        fps.append(fp)
    pick = (lambda xs: xs[0]) if single else (lambda xs: xs)
    return {
        "tpr": pick(tprs),
        "threshold": pick(thresholds),
        "fpr": pick(fprs),
        "roc_auc": _auc(neg, pos),
        "num_positives": n_pos,
        "num_negatives": n_neg,
        "true_positives": pick(tps),
        "false_positives": pick(fps),
    }
