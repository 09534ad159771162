"""Tiny random-weight LLaDA / Dream stand-ins: the built-in default model (no downloads).

The networks are the native ones :func:`hf_lrdwm.load_model` builds (bidirectional Llama for LLaDA,
bidirectional Qwen2 for Dream) at a toy size, with the family's real special-token ids, so the
samplers, the watermark and the detector run exactly as they do on the real checkpoints. The text they
produce is meaningless.
"""

from __future__ import annotations

from typing import Any, Literal

import torch

__all__ = ["TINY_SPECIAL_IDS", "tiny_model"]

#: The real vocabulary size and special ids of each family (LLaDA-8B, Dream-7B).
TINY_SPECIAL_IDS: dict[str, dict[str, int]] = {
    "llada": {
        "vocab_size": 126464,
        "mask_token_id": 126336,
        "eos_token_id": 126081,
        "pad_token_id": 126081,
        "eot_token_id": 126348,
        "bos_token_id": 126080,
    },
    "dream": {
        "vocab_size": 152064,
        "mask_token_id": 151666,
        "eos_token_id": 151643,
        "pad_token_id": 151643,
        "eot_token_id": 151645,  # <|im_end|>
        "bos_token_id": 151643,
    },
}

# Offsets from the top of a reduced vocabulary: id = vocab_size - offset.
_REDUCED_OFFSETS: dict[str, dict[str, int]] = {
    "llada": {"mask_token_id": 1, "eot_token_id": 2, "eos_token_id": 3, "pad_token_id": 3, "bos_token_id": 4},
    "dream": {"mask_token_id": 1, "eot_token_id": 2, "eos_token_id": 3, "pad_token_id": 3, "bos_token_id": 3},
}


def _special_ids(family: str, vocab_size: int | None) -> dict[str, int]:
    real = TINY_SPECIAL_IDS[family]
    if vocab_size is None or vocab_size >= real["vocab_size"]:
        return {**real, "vocab_size": vocab_size or real["vocab_size"]}
    if vocab_size < 8:
        raise ValueError(f"vocab_size must be at least 8, got {vocab_size}")
    ids = {name: vocab_size - offset for name, offset in _REDUCED_OFFSETS[family].items()}
    return {"vocab_size": vocab_size, **ids}


def tiny_model(
    family: Literal["llada", "dream"] = "llada",
    *,
    vocab_size: int | None = None,
    hidden_size: int = 64,
    num_layers: int = 2,
    seed: int = 0,
    dtype: torch.dtype = torch.float32,
    initializer_range: float = 0.5,
) -> Any:
    """A small random-weight model of ``family`` with ``diffusion_generate`` attached.

    Args:
        family: ``"llada"`` (bidirectional ``LlamaForCausalLM``, MHA, untied head) or ``"dream"``
            (bidirectional ``Qwen2ForCausalLM``, GQA with 2 KV heads, q/k/v biases).
        vocab_size: ``None``: the family's real vocabulary (LLaDA 126,464; Dream 152,064) and real
            special ids (LLaDA: mask 126336, EOS/PAD 126081, EoT 126348, BOS 126080; Dream: mask
            151666, EOS/PAD/BOS 151643, ``<|im_end|>`` 151645 as ``eot_token_id``). A smaller
            vocabulary ``V`` (>= 8) moves the special ids to its top: mask ``V-1``, end of turn
            ``V-2``, EOS/PAD ``V-3``, and BOS ``V-4`` (LLaDA) or ``V-3`` (Dream, whose BOS is its
            EOS). A larger one keeps the real ids.
        hidden_size: model width; heads of size 16 (``hidden_size // 16`` of them, at least one).
        num_layers: number of transformer blocks.
        seed: weights are a deterministic function of the arguments; the global RNG is not touched.
        dtype: parameter dtype.
        initializer_range: standard deviation of the random weights. The default 0.5 (not
            transformers' 0.02) gives peaked, position-dependent logits, so the samplers produce varied
            gibberish instead of one repeated token; the mask token's output row is zero, so it is
            never predicted.

    Returns:
        The model in eval mode; ``model.config`` carries the special ids, ``model.hf_lrdwm_tokenizer`` is
        ``None``.
    """
    from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

    from ..generation import attach_diffusion_generate

    if family not in TINY_SPECIAL_IDS:
        raise ValueError(f"unknown family {family!r}; expected 'llada' or 'dream'")
    num_heads = max(1, hidden_size // 16)
    if hidden_size % num_heads or (hidden_size // num_heads) % 2:
        raise ValueError(f"hidden_size={hidden_size} must split into {num_heads} heads of even size")
    ids = _special_ids(family, vocab_size)
    common = dict(
        hidden_size=hidden_size,
        num_hidden_layers=num_layers,
        num_attention_heads=num_heads,
        max_position_embeddings=4096,
        tie_word_embeddings=False,
        use_cache=False,
        is_causal=False,
        **ids,
    )
    if family == "llada":
        config = LlamaConfig(
            intermediate_size=3 * hidden_size,
            num_key_value_heads=num_heads,
            rms_norm_eps=1e-5,
            rope_parameters={"rope_type": "default", "rope_theta": 500000.0},
            **common,
        )
        model_class = LlamaForCausalLM
    else:
        config = Qwen2Config(
            intermediate_size=4 * hidden_size,
            num_key_value_heads=2 if num_heads % 2 == 0 else num_heads,
            rms_norm_eps=1e-6,
            rope_parameters={"rope_type": "default", "rope_theta": 1000000.0},
            use_sliding_window=False,
            **common,
        )
        model_class = Qwen2ForCausalLM
    config.diffusion_family = family
    config._name_or_path = f"hf_lrdwm/tiny-{family}"

    # Construction draws from the global RNG: fork it, then set every parameter from a local generator
    # in a fixed order so the weights depend only on the arguments (not on transformers' init code).
    with torch.random.fork_rng(devices=[]):
        model = model_class(config)
    generator = torch.Generator().manual_seed(seed)
    std = initializer_range
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.endswith("norm.weight"):
                param.fill_(1.0)
            else:
                param.normal_(0.0, std, generator=generator)
        # A trained DLM never predicts the mask token: a zero output row keeps its logit at 0, far
        # below the largest of the V - 1 random logits.
        model.lm_head.weight[config.mask_token_id].zero_()
    model = model.to(dtype).eval()
    attach_diffusion_generate(model, family)
    model.hf_lrdwm_tokenizer = None
    return model
