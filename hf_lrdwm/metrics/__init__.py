"""Hugging Face ``evaluate`` metrics shipped with hf_lrdwm.

>>> from hf_lrdwm import metrics
>>> metrics.available()
['tpr_at_fpr']
>>> metric = metrics.load("tpr_at_fpr")  # doctest: +SKIP
>>> # the same as evaluate.load(metrics.path("tpr_at_fpr")), from inside the installed package

Each metric is a folder ``<name>/`` holding the evaluate script ``<name>.py``, its card ``README.md`` (with
Hugging Face Space front matter) and a Space ``app.py``; the folder can be pushed to the Hub as is.
The pure computation of TPR@FPR is :func:`hf_lrdwm.metrics.tpr_at_fpr.core.tpr_at_fpr` (numpy only).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

__all__ = ["available", "path", "load"]

_HERE = Path(__file__).resolve().parent


def available() -> list[str]:
    """Names of the metrics shipped with hf_lrdwm."""
    return sorted(p.name for p in _HERE.iterdir() if p.is_dir() and (p / f"{p.name}.py").is_file())


def path(name: str) -> str:
    """Local path of the metric folder ``name`` (what ``evaluate.load`` accepts)."""
    folder = _HERE / name
    if not name or "/" in name or "\\" in name or not (folder / f"{name}.py").is_file():
        raise ValueError(f"unknown hf_lrdwm metric {name!r}; available: {available()}")
    return str(folder)


def load(name: str, **kwargs: Any):
    """``evaluate.load`` the metric ``name`` from inside the installed package (offline, no Hub access).

    Keyword arguments are passed to :func:`evaluate.load` (e.g. ``experiment_id``, ``keep_in_memory``).
    """
    try:
        import evaluate
    except ImportError as err:  # pragma: no cover - depends on the environment
        raise ImportError("hf_lrdwm.metrics.load needs `evaluate`: pip install 'hf-lrdwm[eval]'") from err
    return evaluate.load(path(name), **kwargs)
