"""Diffusion samplers with the LR-DWM watermark: LLaDA's and Dream's official loops, faithfully.

``attach_diffusion_generate(model, family)`` gives a model a ``diffusion_generate`` method;
``patch(model)`` does the same for models loaded with their own remote code.
"""

from __future__ import annotations

import types
from typing import Any, Literal

from .common import DiffusionGenerationOutput, resolve_watermark

__all__ = ["DiffusionGenerationOutput", "attach_diffusion_generate", "patch", "resolve_watermark", "FAMILIES"]

FAMILIES = ("llada", "dream")


def attach_diffusion_generate(model: Any, family: Literal["llada", "dream"]) -> Any:
    """Bind the ``family``'s sampler as ``model.diffusion_generate`` and return the model.

    >>> import torch, transformers
    >>> cfg = transformers.LlamaConfig(vocab_size=64, hidden_size=16, intermediate_size=32,
    ...     num_hidden_layers=1, num_attention_heads=2, is_causal=False, mask_token_id=63)
    >>> model = attach_diffusion_generate(transformers.LlamaForCausalLM(cfg), "llada")
    >>> callable(model.diffusion_generate)
    True
    """
    if family == "llada":
        from .llada import llada_generate as sampler
    elif family == "dream":
        from .dream import dream_generate as sampler
    else:
        raise ValueError(f"unknown diffusion model family {family!r}; expected one of {FAMILIES}")
    model.diffusion_generate = types.MethodType(sampler, model)
    model._hf_lrdwm_family = family
    return model


def patch(model: Any) -> Any:
    """Add (LLaDA) or wrap (Dream) ``diffusion_generate`` on a model loaded with remote code.

    See :func:`hf_lrdwm.generation.patching.patch`.
    """
    from .patching import patch as _patch

    return _patch(model)
