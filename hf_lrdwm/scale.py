"""Detection at scale: score a whole :mod:`datasets` dataset with ``Dataset.map``.

:func:`detect_dataset` adds the detector's verdict as new columns (``wm_z_score``, ``wm_p_value``,
``wm_prediction``, ``wm_num_tokens_scored`` by default) to a ``datasets.Dataset`` (or ``DatasetDict``,
``IterableDataset``, ``IterableDatasetDict``). The work is done by ``map(batched=True)``, so it is
cached like any other ``map`` and runs in ``num_proc`` worker processes when asked: the detector
(config, keys, tokenizer and calibration) is pickled to each worker.

Example:
    >>> import torch
    >>> from datasets import Dataset
    >>> from hf_lrdwm import LRDWMConfig, LRDWMDetector
    >>> from hf_lrdwm.scale import detect_dataset
    >>> ids = torch.randint(0, 1000, (4, 64), generator=torch.Generator().manual_seed(0)).tolist()
    >>> ds = Dataset.from_dict({"input_ids": ids})
    >>> det = LRDWMDetector(LRDWMConfig(key="demo"), vocab_size=1000)
    >>> scored = detect_dataset(ds, det, ids_field="input_ids")
    >>> scored.column_names
    ['input_ids', 'wm_z_score', 'wm_p_value', 'wm_prediction', 'wm_num_tokens_scored']
    >>> list(scored["wm_prediction"])
    [False, False, False, False]
"""

from __future__ import annotations

import math
import os
from typing import Any

import torch

from .detection import LRDWMDetector

__all__ = ["detect_dataset", "DEFAULT_COLUMNS", "AVAILABLE_COLUMNS"]

DEFAULT_COLUMNS = ("z_score", "p_value", "prediction", "num_tokens_scored")
# Column name -> datasets feature dtype. NaN scores (nothing scored) are stored as null.
_DTYPES = {
    "z_score": "float64",
    "p_value": "float64",
    "prediction": "bool",
    "num_tokens_scored": "int64",
    "num_events": "int64",
    "num_green": "int64",
    "green_fraction_left": "float64",
    "green_fraction_right": "float64",
    "reason": "string",
}
AVAILABLE_COLUMNS = tuple(_DTYPES)
# The process that imported this module: a map worker forked from it has another pid (a spawned worker
# imports the module again and has no inherited thread pool to worry about).
_IMPORT_PID = os.getpid()


def _detect_batch(
    values: list[Any],
    *,
    detector: LRDWMDetector,
    prefix: str,
    columns: tuple[str, ...],
    fpr: float | None,
) -> dict[str, list[Any]]:
    """The ``map`` function (module level, so that it pickles): one batch of texts or id lists."""
    if os.getpid() != _IMPORT_PID and torch.get_num_threads() > 1:
        # A forked map worker: GNU OpenMP's thread pool does not survive fork(), and a torch op that
        # opens a parallel region after the parent used one waits forever. One thread per worker
        # (num_proc workers are the parallelism) never opens one.
        torch.set_num_threads(1)
    if not values:
        return {prefix + name: [] for name in columns}
    out = detector(list(values), fpr=fpr)
    result: dict[str, list[Any]] = {}
    for name in columns:
        if name == "reason":
            result[prefix + name] = list(out.reason)
            continue
        data = getattr(out, name).tolist()
        if _DTYPES[name] == "float64":
            data = [None if math.isnan(x) else x for x in data]
        result[prefix + name] = data
    return result


def detect_dataset(
    dataset: Any,
    detector: LRDWMDetector,
    *,
    text_field: str = "text",
    ids_field: str | None = None,
    batch_size: int = 256,
    num_proc: int | None = None,
    prefix: str = "wm_",
    columns: tuple[str, ...] | list[str] = DEFAULT_COLUMNS,
    fpr: float | None = None,
    **map_kwargs: Any,
) -> Any:
    """Score every row of ``dataset`` with ``detector`` and return it with the results as new columns.

    Args:
        dataset: a ``datasets.Dataset``, ``DatasetDict``, ``IterableDataset`` or ``IterableDatasetDict``.
        detector: the :class:`~hf_lrdwm.LRDWMDetector` (with a tokenizer for text; calibrated or not).
        text_field: the column holding the texts (used unless ``ids_field`` is given).
        ids_field: the column holding token-id lists instead of texts (no tokenizer needed).
        batch_size: rows scored at once (``map``'s ``batch_size``).
        num_proc: worker processes for ``map`` (not for iterable datasets, which are lazy).
        prefix: prepended to the new column names (``"wm_"``: ``wm_z_score``, ...).
        columns: which results to add: any of :data:`AVAILABLE_COLUMNS`; default ``z_score``, ``p_value``,
            ``prediction``, ``num_tokens_scored``. Float columns hold null where nothing was scored.
        fpr: false-positive rate of ``prediction`` (default: the detector's).
        **map_kwargs: passed on to ``map`` (``desc``, ``load_from_cache_file``, ``keep_in_memory``, ...).

    Returns:
        A dataset of the same kind with the new columns (lazy for iterable datasets).

    Raises:
        ValueError: unknown ``columns``, a missing input column, new columns that already exist, or
            ``num_proc`` with an iterable dataset.
    """
    import datasets

    if not isinstance(detector, LRDWMDetector):
        raise TypeError(f"`detector` must be an LRDWMDetector, got {type(detector).__name__}")
    columns = tuple(columns)
    unknown = [c for c in columns if c not in _DTYPES]
    if unknown or not columns:
        raise ValueError(f"`columns` must be a non-empty subset of {AVAILABLE_COLUMNS}, got {list(columns)}")
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"`batch_size` must be a positive int, got {batch_size!r}")
    if num_proc is not None and (isinstance(num_proc, bool) or not isinstance(num_proc, int) or num_proc < 1):
        raise ValueError(f"`num_proc` must be a positive int or None, got {num_proc!r}")
    field = ids_field if ids_field is not None else text_field
    if ids_field is None and detector.tokenizer is None:
        raise ValueError(
            "text columns need a detector with a tokenizer (or give token ids with `ids_field=`)"
        )

    iterable = isinstance(dataset, (datasets.IterableDataset, datasets.IterableDatasetDict))
    if not iterable and not isinstance(dataset, (datasets.Dataset, datasets.DatasetDict)):
        raise TypeError(f"`dataset` must be a datasets.Dataset or DatasetDict, got {type(dataset).__name__}")
    if iterable and num_proc is not None:
        raise ValueError("`num_proc` needs a map-style dataset; an IterableDataset is processed lazily")

    splits = (
        dict(dataset) if isinstance(dataset, (datasets.DatasetDict, datasets.IterableDatasetDict)) else {}
    )
    parts = list(splits.values()) if splits else [dataset]
    new = [prefix + name for name in columns]
    features_of = []
    for part in parts:
        names = part.column_names
        if names is not None:  # None: an iterable dataset whose columns are unknown until read
            if field not in names:
                raise ValueError(f"the dataset has no column {field!r} (columns: {names})")
            clash = [c for c in new if c in names]
            if clash:
                raise ValueError(f"the dataset already has columns {clash}: pass another `prefix`")
        features = part.features
        if features is not None:
            features = features.copy()
            for name, col in zip(columns, new, strict=True):
                features[col] = datasets.Value(_DTYPES[name])
        features_of.append(features)

    fn_kwargs = {
        "detector": detector,
        "prefix": prefix,
        "columns": columns,
        "fpr": fpr,
    }
    kwargs: dict[str, Any] = {
        "batched": True,
        "batch_size": batch_size,
        "input_columns": [field],
        "fn_kwargs": fn_kwargs,
        **map_kwargs,
    }
    if num_proc is not None:
        kwargs["num_proc"] = num_proc
    if splits:
        mapped = {
            name: part.map(_detect_batch, features=features, **kwargs)
            for (name, part), features in zip(splits.items(), features_of, strict=True)
        }
        return type(dataset)(mapped)
    return dataset.map(_detect_batch, features=features_of[0], **kwargs)
