"""Load LLaDA and Dream checkpoints on transformers 5.

Two ways:

* **native** (default): the checkpoint runs on transformers' own classes. LLaDA is a Llama with
  bidirectional attention (``LlamaConfig(is_causal=False)``) whose weights are renamed on load with
  ``key_mapping``; Dream is a Qwen2 with bidirectional attention whose weights already carry Qwen2's
  names. No remote code runs, and loading fails loudly if a single weight is missing or left over.
* **remote** (``trust_remote_code=True``): the authors' own modeling code, after the compatibility
  shims of :mod:`hf_lrdwm.models.remote` fix what breaks on transformers 5; then
  :func:`hf_lrdwm.generation.patch` gives the model a watermark-aware ``diffusion_generate``.

Either way the returned model has ``diffusion_generate`` and a ``hf_lrdwm_tokenizer`` attribute (the
checkpoint's tokenizer, or ``None`` when the checkpoint has none).
"""

from __future__ import annotations

import json
import logging
import os
import warnings
from typing import Any

import torch

__all__ = [
    "CheckpointMismatchError",
    "LLADA_KEY_MAPPING",
    "SUPPORTED_MODEL_TYPES",
    "KNOWN_SPECIAL_IDS",
    "load_model",
    "native_config_from_llada",
    "native_config_from_dream",
]

logger = logging.getLogger(__name__)

#: ``model_type`` in a checkpoint's config.json -> the sampler family.
SUPPORTED_MODEL_TYPES = {"llada": "llada", "Dream": "dream"}

#: LLaDA parameter names -> Llama (or Qwen2: same names) parameter names. One regular expression per
#: target: transformers applies each entry as a separate renaming and only substitutes ``\1``. The
#: patterns are prefixes without ``$``: transformers also runs them in reverse when saving
#: (``save_original_format=True``) and would keep a ``$`` in the saved name.
LLADA_KEY_MAPPING: dict[str, str] = {
    r"^model\.transformer\.wte\.": "model.embed_tokens.",
    r"^model\.transformer\.blocks\.(\d+)\.attn_norm\.": r"model.layers.\1.input_layernorm.",
    r"^model\.transformer\.blocks\.(\d+)\.q_proj\.": r"model.layers.\1.self_attn.q_proj.",
    r"^model\.transformer\.blocks\.(\d+)\.k_proj\.": r"model.layers.\1.self_attn.k_proj.",
    r"^model\.transformer\.blocks\.(\d+)\.v_proj\.": r"model.layers.\1.self_attn.v_proj.",
    r"^model\.transformer\.blocks\.(\d+)\.attn_out\.": r"model.layers.\1.self_attn.o_proj.",
    r"^model\.transformer\.blocks\.(\d+)\.ff_norm\.": r"model.layers.\1.post_attention_layernorm.",
    r"^model\.transformer\.blocks\.(\d+)\.ff_proj\.": r"model.layers.\1.mlp.gate_proj.",
    r"^model\.transformer\.blocks\.(\d+)\.up_proj\.": r"model.layers.\1.mlp.up_proj.",
    r"^model\.transformer\.blocks\.(\d+)\.ff_out\.": r"model.layers.\1.mlp.down_proj.",
    r"^model\.transformer\.ln_f\.": "model.norm.",
    r"^model\.transformer\.ff_out\.": "lm_head.",
}

#: Special ids of the published checkpoints, used only when neither config.json nor a tokenizer gives
#: them and the config's mask / EOS ids identify the checkpoint family (see ``_fill_special_ids``).
KNOWN_SPECIAL_IDS = {
    "llada": {
        "mask_token_id": 126336,
        "eos_token_id": 126081,
        "eot_token_id": 126348,
        "bos_token_id": 126080,
    },
    "dream": {
        "mask_token_id": 151666,
        "eos_token_id": 151643,
        "eot_token_id": 151645,
        "bos_token_id": 151643,
    },
}

# The end-of-turn token of each family's chat template (stored as ``config.eot_token_id``) and the
# mask token's text (used when config.json lacks ``mask_token_id``).
_EOT_TOKEN = {"llada": "<|eot_id|>", "dream": "<|im_end|>"}
_MASK_TOKEN = {"llada": "<|mdm_mask|>", "dream": "<|mask|>"}

_HUB_KWARGS = ("revision", "token", "cache_dir", "local_files_only", "force_download", "proxies", "subfolder")
_TOKENIZER_FILES = ("tokenizer_config.json", "tokenizer.json", "tokenizer.model", "vocab.json")


class CheckpointMismatchError(RuntimeError):
    """The checkpoint's weights do not fill the model exactly (missing, unexpected or mismatched keys)."""


# --------------------------------------------------------------------------------------------------
# configs
# --------------------------------------------------------------------------------------------------


def _unsupported(what: str) -> NotImplementedError:
    return NotImplementedError(
        f"this LLaDA checkpoint uses {what}, which hf_lrdwm's native loader does not support; "
        "load it with trust_remote_code=True instead"
    )


def native_config_from_llada(raw: dict[str, Any]) -> Any:
    """Build the transformers config that runs a LLaDA checkpoint natively from its config.json dict.

    The result is a ``LlamaConfig`` with ``is_causal=False`` (a ``Qwen2Config`` when only q/k/v carry a
    bias, ``include_qkv_bias``), keeping ``mask_token_id``, ``eos_token_id`` and ``pad_token_id``.
    Config traps handled: the MLP width is ``mlp_hidden_size`` when set, else ``mlp_ratio * d_model``;
    the KV-head count is ``n_kv_heads``, else 1 with ``multi_query_attention``, else ``n_heads``; the head
    dim is ``d_model // n_heads``; the context length is ``max_sequence_length``; the logits size is
    ``embedding_size`` (the padded vocabulary) when set, else ``vocab_size``.

    Raises:
        NotImplementedError: for layouts that are not "Llama with renamed weights" (another block type,
            a norm other than RMS with a weight and no bias, an activation other than SiLU, ALiBi, QK
            norm, logit scaling, QKV clipping, block groups, a bias on the untied LM head).
    """
    from transformers import LlamaConfig, Qwen2Config

    block_type = raw.get("block_type", "llama")
    if block_type != "llama":
        raise _unsupported(f"block_type={block_type!r} (only 'llama' is supported)")
    norm = raw.get("layer_norm_type", "rms")
    if norm != "rms":
        raise _unsupported(f"layer_norm_type={norm!r} (only 'rms' is supported)")
    activation = raw.get("activation_type", "silu")
    if activation != "silu":
        raise _unsupported(f"activation_type={activation!r} (only 'silu' is supported)")
    for flag, meaning in (
        ("alibi", "ALiBi attention biases"),
        ("attention_layer_norm", "QK layer norm"),
        ("input_emb_norm", "an input embedding norm"),
        ("scale_logits", "logit scaling"),
    ):
        if raw.get(flag):
            raise _unsupported(f"{flag}=True ({meaning})")
    if raw.get("rope", True) is False:
        raise _unsupported("rope=False (no rotary embedding)")
    if raw.get("clip_qkv") is not None:
        raise _unsupported(f"clip_qkv={raw['clip_qkv']}")
    if raw.get("block_group_size", 1) not in (None, 1):
        raise _unsupported(f"block_group_size={raw['block_group_size']}")
    if raw.get("layer_norm_with_affine", True) is False:
        raise _unsupported("layer_norm_with_affine=False (norms without a weight)")
    include_bias = bool(raw.get("include_bias", False))
    include_qkv_bias = bool(raw.get("include_qkv_bias", False))
    norm_bias = raw.get("bias_for_layer_norm")
    if norm_bias is None:
        norm_bias = include_bias
    if norm_bias:
        raise _unsupported("biases in the layer norms")
    tied = bool(raw.get("weight_tying", False))
    if include_bias and not tied:
        raise _unsupported("include_bias=True with an untied LM head (a bias on the LM head)")

    d_model, n_heads = int(raw["d_model"]), int(raw["n_heads"])
    if d_model % n_heads:
        raise ValueError(f"d_model={d_model} is not a multiple of n_heads={n_heads}")
    n_kv_heads = raw.get("n_kv_heads")
    if n_kv_heads is None:
        n_kv_heads = 1 if raw.get("multi_query_attention") else n_heads
    mlp_hidden = raw.get("mlp_hidden_size")
    if mlp_hidden is None:
        mlp_hidden = int(raw.get("mlp_ratio", 4) * d_model)

    common = dict(
        vocab_size=int(raw.get("embedding_size") or raw["vocab_size"]),
        hidden_size=d_model,
        intermediate_size=int(mlp_hidden),
        num_hidden_layers=int(raw["n_layers"]),
        num_attention_heads=n_heads,
        num_key_value_heads=int(n_kv_heads),
        hidden_act="silu",
        max_position_embeddings=int(raw.get("max_sequence_length", 1024)),
        rms_norm_eps=float(raw.get("rms_norm_eps", 1e-5)),
        rope_parameters={"rope_type": "default", "rope_theta": float(raw.get("rope_theta", 10000.0))},
        tie_word_embeddings=tied,
        attention_dropout=0.0,
        use_cache=False,
        is_causal=False,
        architectures=None,
        dtype=raw.get("dtype") or raw.get("torch_dtype"),
        **_raw_special_ids(raw),
    )
    if include_qkv_bias and not include_bias:
        # q/k/v with bias and an output projection without one: exactly Qwen2's attention.
        config = Qwen2Config(use_sliding_window=False, **common)
        config.architectures = ["Qwen2ForCausalLM"]
    else:
        config = LlamaConfig(
            head_dim=d_model // n_heads, attention_bias=include_bias, mlp_bias=include_bias, **common
        )
        config.architectures = ["LlamaForCausalLM"]
    config.diffusion_family = "llada"
    return config


def native_config_from_dream(raw: dict[str, Any]) -> Any:
    """Build the ``Qwen2Config`` (``is_causal=False``) that runs a Dream checkpoint natively.

    Raises:
        NotImplementedError: for ``rope_scaling`` or sliding-window attention (no published Dream
            checkpoint uses them).
    """
    from transformers import Qwen2Config

    if raw.get("rope_scaling"):
        raise NotImplementedError(
            f"this Dream checkpoint uses rope_scaling={raw['rope_scaling']!r}, which hf_lrdwm's native "
            "loader does not support; load it with trust_remote_code=True instead"
        )
    if raw.get("use_sliding_window"):
        raise NotImplementedError(
            "this Dream checkpoint uses sliding-window attention, which hf_lrdwm's native loader does not "
            "support; load it with trust_remote_code=True instead"
        )
    n_heads = int(raw.get("num_attention_heads", 32))
    config = Qwen2Config(
        vocab_size=int(raw.get("vocab_size", 151936)),
        hidden_size=int(raw.get("hidden_size", 4096)),
        intermediate_size=int(raw.get("intermediate_size", 22016)),
        num_hidden_layers=int(raw.get("num_hidden_layers", 32)),
        num_attention_heads=n_heads,
        num_key_value_heads=int(raw.get("num_key_value_heads") or n_heads),
        hidden_act=raw.get("hidden_act", "silu"),
        max_position_embeddings=int(raw.get("max_position_embeddings", 32768)),
        rms_norm_eps=float(raw.get("rms_norm_eps", 1e-6)),
        rope_parameters={"rope_type": "default", "rope_theta": float(raw.get("rope_theta", 10000.0))},
        tie_word_embeddings=bool(raw.get("tie_word_embeddings", False)),
        attention_dropout=0.0,
        use_sliding_window=False,
        use_cache=False,
        is_causal=False,
        dtype=raw.get("dtype") or raw.get("torch_dtype"),
        **_raw_special_ids(raw),
    )
    config.architectures = ["Qwen2ForCausalLM"]
    config.diffusion_family = "dream"
    return config


def _raw_special_ids(raw: dict[str, Any]) -> dict[str, Any]:
    # Explicit None: LlamaConfig would otherwise invent bos=1 / eos=2.
    return {
        name: raw.get(name)
        for name in ("mask_token_id", "eos_token_id", "pad_token_id", "bos_token_id", "eot_token_id")
    }


# --------------------------------------------------------------------------------------------------
# files
# --------------------------------------------------------------------------------------------------


def _hub_kwargs(kwargs: dict[str, Any]) -> dict[str, Any]:
    return {k: kwargs[k] for k in _HUB_KWARGS if k in kwargs}


def _resolve_file(
    name_or_path: str, filename: str, hub_kwargs: dict[str, Any], *, required: bool = False
) -> str | None:
    """Path of ``filename`` in a local directory or a Hub repository (cached download), else None.

    With ``required``, a Hub lookup that fails raises transformers' own error (not found, offline, ...).
    """
    subfolder = hub_kwargs.get("subfolder") or ""
    if os.path.isdir(name_or_path):
        path = os.path.join(name_or_path, subfolder, filename)
        return path if os.path.isfile(path) else None
    from transformers.utils import cached_file

    if required:
        return cached_file(name_or_path, filename, **hub_kwargs)
    return cached_file(
        name_or_path,
        filename,
        _raise_exceptions_for_missing_entries=False,
        _raise_exceptions_for_connection_errors=False,
        **hub_kwargs,
    )


def _read_config_dict(name_or_path: str, hub_kwargs: dict[str, Any]) -> dict[str, Any]:
    path = _resolve_file(name_or_path, "config.json", hub_kwargs, required=True)
    if path is None:
        raise OSError(f"the directory {name_or_path!r} has no config.json")
    with open(path, encoding="utf-8") as fh:
        return json.load(fh)


def _family_of(raw: dict[str, Any]) -> str:
    """The sampler family of a config.json dict, or a ValueError naming what is supported."""
    model_type = raw.get("model_type")
    if model_type in SUPPORTED_MODEL_TYPES:
        return SUPPORTED_MODEL_TYPES[model_type]
    # A model saved by hf_lrdwm after native loading (a bidirectional Llama / Qwen2) loads again.
    family = raw.get("diffusion_family")
    if model_type in ("llama", "qwen2") and family in ("llada", "dream") and raw.get("is_causal") is False:
        return family
    supported = " and ".join(repr(t) for t in SUPPORTED_MODEL_TYPES)
    raise ValueError(
        f"unsupported model_type {model_type!r}: hf_lrdwm.load_model loads the model types {supported} "
        "(LLaDA and Dream checkpoints); for other diffusion models load them yourself and call "
        "hf_lrdwm.patch(model)"
    )


def _load_tokenizer(
    name_or_path: str, family: str | None, hub_kwargs: dict[str, Any], trust_remote_code: bool
) -> Any:
    """The checkpoint's tokenizer, or None when it ships none (a weights-only directory)."""
    if not any(_resolve_file(name_or_path, f, hub_kwargs) for f in _TOKENIZER_FILES):
        return None
    from transformers import AutoTokenizer

    first_error: Exception | None = None
    if not (
        family == "dream" and not trust_remote_code and _tokenizer_needs_remote_code(name_or_path, hub_kwargs)
    ):
        try:
            return AutoTokenizer.from_pretrained(
                name_or_path, trust_remote_code=trust_remote_code, **hub_kwargs
            )
        except Exception as err:  # noqa: BLE001 - reported below, the model itself is still usable
            first_error = err
    if family == "dream":
        # Dream's tokenizer_config.json names its own class (DreamTokenizer, remote code); the class is a
        # copy of Qwen2's tokenizer, and its files (vocab.json, merges.txt, added tokens) are Qwen2's.
        from transformers import Qwen2Tokenizer

        try:
            return Qwen2Tokenizer.from_pretrained(name_or_path, **hub_kwargs)
        except Exception as err:  # noqa: BLE001
            first_error = first_error or err
    warnings.warn(
        f"could not load the tokenizer of {name_or_path!r} ({type(first_error).__name__}: {first_error}); "
        "model.hf_lrdwm_tokenizer is None",
        stacklevel=3,
    )
    return None


def _tokenizer_needs_remote_code(name_or_path: str, hub_kwargs: dict[str, Any]) -> bool:
    path = _resolve_file(name_or_path, "tokenizer_config.json", hub_kwargs)
    if path is None:
        return False
    with open(path, encoding="utf-8") as fh:
        auto_map = json.load(fh).get("auto_map") or {}
    return isinstance(auto_map, dict) and "AutoTokenizer" in auto_map


def _token_id(tokenizer: Any, token: str) -> int | None:
    if tokenizer is None:
        return None
    vocab = tokenizer.get_vocab()
    return vocab.get(token)


def _fill_special_ids(config: Any, family: str, tokenizer: Any) -> None:
    """Complete mask / EOS / PAD / BOS / end-of-turn ids on a native config.

    Order: config.json, then the tokenizer (``<|eot_id|>`` for LLaDA, ``<|im_end|>`` for Dream as
    ``eot_token_id``; the mask token by its text), then the published ids when the checkpoint's mask
    and EOS ids are those of the published family (LLaDA-8B / Dream-7B and their fine-tunes).
    """
    if getattr(config, "mask_token_id", None) is None:
        config.mask_token_id = _token_id(tokenizer, _MASK_TOKEN[family])
    if getattr(config, "eot_token_id", None) is None:
        config.eot_token_id = _token_id(tokenizer, _EOT_TOKEN[family])
    if tokenizer is not None:
        if getattr(config, "eos_token_id", None) is None:
            config.eos_token_id = tokenizer.eos_token_id
        if getattr(config, "bos_token_id", None) is None:
            config.bos_token_id = tokenizer.bos_token_id
        if getattr(config, "pad_token_id", None) is None:
            config.pad_token_id = tokenizer.pad_token_id
    known = KNOWN_SPECIAL_IDS[family]
    if config.mask_token_id == known["mask_token_id"] and config.eos_token_id == known["eos_token_id"]:
        for name, value in known.items():
            if getattr(config, name, None) is None:
                setattr(config, name, value)
    if config.mask_token_id is None:
        warnings.warn(
            "the checkpoint names no mask token (no mask_token_id in config.json, no mask token in a "
            "tokenizer); set model.config.mask_token_id before calling diffusion_generate",
            stacklevel=3,
        )


# --------------------------------------------------------------------------------------------------
# loading
# --------------------------------------------------------------------------------------------------


def _check_loading_info(name_or_path: str, info: dict[str, Any]) -> None:
    problems = []
    for field in ("missing_keys", "unexpected_keys", "mismatched_keys", "error_msgs"):
        values = sorted(str(v) for v in (info.get(field) or ()))
        if values:
            shown = ", ".join(values[:20]) + (f", ... ({len(values)} in all)" if len(values) > 20 else "")
            problems.append(f"{field.replace('_', ' ')}: {shown}")
    if problems:
        raise CheckpointMismatchError(
            f"the weights of {name_or_path!r} do not match the native model exactly (names after renaming "
            "to transformers' Llama/Qwen2 names); "
            + "; ".join(problems)
            + ". This checkpoint's layout differs from the published LLaDA/Dream ones: try "
            "trust_remote_code=True."
        )


def load_model(
    name_or_path: str | os.PathLike,
    *,
    dtype: torch.dtype | str | None = None,
    device: torch.device | str | None = None,
    device_map: Any = None,
    trust_remote_code: bool = False,
    load_tokenizer: bool = True,
    **kwargs: Any,
) -> Any:
    """Load a LLaDA or Dream checkpoint (local directory or Hub id) ready for watermarked generation.

    Args:
        name_or_path: a local directory or a Hub repository id.
        dtype: passed to ``from_pretrained`` (``None``: transformers' default, ``"auto"``, i.e. the
            checkpoint's own dtype).
        device: move the loaded model there (``model.to(device)``). Exclusive with ``device_map``.
        device_map: passed to ``from_pretrained`` (e.g. ``"auto"``; needs ``accelerate``).
        trust_remote_code: ``False`` (default): run the checkpoint on transformers' own Llama / Qwen2
            classes with bidirectional attention (no remote code). ``True``: run the authors' code,
            with the transformers-5 fixes of :mod:`hf_lrdwm.models.remote`.
        load_tokenizer: load the checkpoint's tokenizer when it has one.
        **kwargs: passed to ``from_pretrained`` (``revision``, ``token``, ``cache_dir``,
            ``local_files_only``, ``attn_implementation``, ...); the Hub arguments are also used for
            config.json and the tokenizer.

    Returns:
        The model, in eval mode, with ``model.diffusion_generate(...)`` (the family's official sampling
        loop, watermark-aware) and ``model.hf_lrdwm_tokenizer`` (the tokenizer, or ``None`` when the
        checkpoint has none). On the native path ``model.config`` carries ``mask_token_id``,
        ``eos_token_id``, ``pad_token_id``, ``bos_token_id`` and ``eot_token_id`` (LLaDA's
        ``<|eot_id|>``, Dream's ``<|im_end|>``) when they are known.

    Raises:
        ValueError: a model type other than LLaDA's ``"llada"`` and Dream's ``"Dream"`` (native path).
        NotImplementedError: a LLaDA / Dream variant whose layout the native path does not cover.
        CheckpointMismatchError: the checkpoint's weights do not fill the native model exactly.
    """
    if device is not None and device_map is not None:
        raise ValueError("pass either device or device_map, not both")
    for reserved in ("config", "key_mapping", "output_loading_info"):
        if reserved in kwargs:
            raise TypeError(f"load_model() sets {reserved!r} itself")
    name_or_path = os.fspath(name_or_path)
    if dtype is not None:
        kwargs["dtype"] = dtype
    if device_map is not None:
        kwargs["device_map"] = device_map
    if trust_remote_code:
        model = _load_remote(name_or_path, load_tokenizer, kwargs)
    else:
        model = _load_native(name_or_path, load_tokenizer, kwargs)
    if device is not None:
        model = model.to(device)
    model.eval()
    return model


def _load_native(name_or_path: str, load_tokenizer: bool, kwargs: dict[str, Any]) -> Any:
    from transformers import LlamaForCausalLM, Qwen2ForCausalLM

    from ..generation import attach_diffusion_generate

    hub_kwargs = _hub_kwargs(kwargs)
    raw = _read_config_dict(name_or_path, hub_kwargs)
    family = _family_of(raw)
    if raw.get("model_type") in ("llama", "qwen2"):  # saved after native loading: already native
        from transformers import AutoConfig

        config = AutoConfig.from_pretrained(name_or_path, **hub_kwargs)
    elif family == "llada":
        config = native_config_from_llada(raw)
    else:
        config = native_config_from_dream(raw)
    # LLaDA weights are renamed on load. transformers' save_pretrained writes them back under LLaDA's
    # names by default (save_original_format=True), so a saved LLaDA needs the mapping again; the
    # patterns only match LLaDA's names, so Llama-named weights pass unchanged.
    key_mapping = LLADA_KEY_MAPPING if family == "llada" else None
    tokenizer = _load_tokenizer(name_or_path, family, hub_kwargs, False) if load_tokenizer else None
    _fill_special_ids(config, family, tokenizer)

    model_class = Qwen2ForCausalLM if config.model_type == "qwen2" else LlamaForCausalLM
    if key_mapping is not None:
        kwargs["key_mapping"] = key_mapping
    model, info = model_class.from_pretrained(name_or_path, config=config, output_loading_info=True, **kwargs)
    _check_loading_info(name_or_path, info)
    attach_diffusion_generate(model, family)
    model.hf_lrdwm_tokenizer = tokenizer
    return model


def _load_remote(name_or_path: str, load_tokenizer: bool, kwargs: dict[str, Any]) -> Any:
    from transformers import AutoConfig
    from transformers.dynamic_module_utils import get_class_from_dynamic_module

    from . import remote

    hub_kwargs = _hub_kwargs(kwargs)
    raw = _read_config_dict(name_or_path, hub_kwargs)
    config = AutoConfig.from_pretrained(name_or_path, trust_remote_code=True, **hub_kwargs)
    remote.fix_use_cache(config, bool(raw.get("use_cache", False)))

    auto_map = dict(getattr(config, "auto_map", None) or raw.get("auto_map") or {})
    reference = auto_map.get("AutoModel") or auto_map.get("AutoModelForCausalLM")
    if isinstance(reference, (list, tuple)):
        reference = reference[0]
    if not reference:
        raise ValueError(
            f"{name_or_path!r} has no remote modeling code (no AutoModel / AutoModelForCausalLM in "
            "auto_map); load it with trust_remote_code=False"
        )
    # Resolve the class the way AutoModel does, so the shims reach its module before any instance exists.
    model_class = get_class_from_dynamic_module(reference, name_or_path, **hub_kwargs)
    applied = remote.apply_class_shims(model_class)
    model = model_class.from_pretrained(name_or_path, config=config, **kwargs)
    applied += remote.apply_model_shims(model, use_cache=bool(raw.get("use_cache", False)))
    if applied:
        logger.info("hf_lrdwm: transformers-5 fixes applied to %s: %s", name_or_path, ", ".join(applied))

    family = SUPPORTED_MODEL_TYPES.get(raw.get("model_type"))
    model.hf_lrdwm_tokenizer = (
        _load_tokenizer(name_or_path, family, hub_kwargs, True) if load_tokenizer else None
    )
    if family is not None:
        for name in ("mask_token_id", "eos_token_id", "pad_token_id", "bos_token_id", "eot_token_id"):
            if not hasattr(model.config, name):
                setattr(model.config, name, None)
        _fill_special_ids(model.config, family, model.hf_lrdwm_tokenizer)
    from ..generation import patch

    return patch(model)
