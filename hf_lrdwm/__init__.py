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
]
