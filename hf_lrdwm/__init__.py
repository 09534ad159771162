"""hf_lrdwm: LR-DWM watermarking and detection for diffusion language models (LLaDA, Dream).

>>> import torch
>>> from hf_lrdwm import LRDWMConfig, LRDWMDetector
>>> cfg = LRDWMConfig(key="my secret", delta=2.0, gamma=0.5)
>>> processor = cfg.construct_processor(vocab_size=1000, mask_token_id=999)
>>> detector = LRDWMDetector(cfg, vocab_size=1000)
"""

from __future__ import annotations

import logging

__version__ = "0.1.0.dev0"

from .config import LRDWMConfig  # noqa: E402
from .detection import Calibration, DetectionOutput, KeyHealth, LRDWMDetector  # noqa: E402
from .hashing import HASH_SCHEME, derive_key, green_pairs, green_reference, green_rows  # noqa: E402
from .processor import LRDWMLogitsProcessor  # noqa: E402

logging.getLogger(__name__).addHandler(logging.NullHandler())

# Registers the "watermark-detection" pipeline and the detector config/model with transformers through
# post-import hooks: transformers itself is not imported here (see hf_lrdwm/pipelines.py).
from . import pipelines  # noqa: E402, F401

# The transformers-facing parts are imported on first use, so that `import hf_lrdwm` for the hash,
# processor and detector needs only torch.
_LAZY = {
    "load_model": ("hf_lrdwm.models", "load_model"),
    "tiny_model": ("hf_lrdwm.models", "tiny_model"),
    "patch": ("hf_lrdwm.generation", "patch"),
    "attach_diffusion_generate": ("hf_lrdwm.generation", "attach_diffusion_generate"),
    "DiffusionGenerationOutput": ("hf_lrdwm.generation", "DiffusionGenerationOutput"),
}


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        module, attr = _LAZY[name]
        value = getattr(importlib.import_module(module), attr)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'hf_lrdwm' has no attribute {name!r}")


__all__ = [
    "__version__",
    "LRDWMConfig",
    "LRDWMLogitsProcessor",
    "LRDWMDetector",
    "DetectionOutput",
    "Calibration",
    "KeyHealth",
    "HASH_SCHEME",
    "derive_key",
    "green_pairs",
    "green_rows",
    "green_reference",
    "load_model",
    "tiny_model",
    "patch",
    "attach_diffusion_generate",
    "DiffusionGenerationOutput",
]
