"""Models: load LLaDA / Dream checkpoints on transformers 5, and tiny built-in stand-ins.

* :func:`load_model` — a checkpoint (local directory or Hub id) on transformers' own Llama / Qwen2
  classes with bidirectional attention (default), or on its remote code with compatibility shims
  (``trust_remote_code=True``, see :mod:`hf_lrdwm.models.remote`).
* :func:`tiny_model` — a random-weight model of either family with the real special ids (no download).
"""

from __future__ import annotations

from .loading import (
    LLADA_KEY_MAPPING,
    SUPPORTED_MODEL_TYPES,
    CheckpointMismatchError,
    load_model,
    native_config_from_dream,
    native_config_from_llada,
)
from .tiny import TINY_SPECIAL_IDS, tiny_model

__all__ = [
    "CheckpointMismatchError",
    "LLADA_KEY_MAPPING",
    "SUPPORTED_MODEL_TYPES",
    "TINY_SPECIAL_IDS",
    "load_model",
    "native_config_from_dream",
    "native_config_from_llada",
    "tiny_model",
]
