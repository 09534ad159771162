"""Loading LLaDA / Dream checkpoints natively, the remote-code shims, and the tiny built-in models.

Fidelity: tiny checkpoints in the published layouts (LLaDA's names and config fields, Dream's Qwen2
names) with random weights are loaded by ``hf_lrdwm.load_model`` and their logits compared, in float64,
with a forward pass written here from the architecture's description (embedding, RMSNorm, rotate-half
RoPE with ``cat(freqs, freqs)``, bidirectional attention with GQA, SwiGLU ``down(silu(gate x) * up x)``,
final norm, head). The reference reads the checkpoint's own parameter names, so the key mapping is
checked too.

Remote code: the published modeling files cannot be downloaded here, so small stand-ins written in the
tests reproduce the documented transformers-5 failures through the same API (a config class without
``use_cache``, a rotary embedding that looks up ``ROPE_INIT_FUNCTIONS['default']``, a generation config
whose ``validate`` takes no ``user_set_attributes`` and that carries ``eps``/``steps``/``alg``, an
``_init_weights`` override). They show the shims work on that API, not that the real files load.
"""

from __future__ import annotations

import json
import math
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file
from tiny_tokenizers import train_byte_bpe

from hf_lrdwm import LRDWMConfig
from hf_lrdwm.models import (
    CheckpointMismatchError,
    load_model,
    native_config_from_dream,
    native_config_from_llada,
    tiny_model,
)
from hf_lrdwm.models import remote as remote_shims
from hf_lrdwm.models.loading import _fill_special_ids

LLADA_AUTO_MAP = {
    "AutoConfig": "configuration_llada.LLaDAConfig",
    "AutoModel": "modeling_llada.LLaDAModelLM",
    "AutoModelForCausalLM": "modeling_llada.LLaDAModelLM",
}
DREAM_AUTO_MAP = {"AutoConfig": "configuration_dream.DreamConfig", "AutoModel": "modeling_dream.DreamModel"}


# ------------------------------------------------------------------------------------------------
# checkpoints in the published layouts
# ------------------------------------------------------------------------------------------------


def llada_config(**overrides):
    """A config.json of LLaDA's layout (field names and traps of the published one, toy sizes)."""
    cfg = {
        "model_type": "llada",
        "architectures": ["LLaDAModelLM"],
        "auto_map": LLADA_AUTO_MAP,
        "d_model": 32,
        "n_heads": 4,
        "n_kv_heads": None,  # null: as many KV heads as query heads
        "n_layers": 2,
        "mlp_ratio": 4,  # 4 * 32 = 128 would be wrong ...
        "mlp_hidden_size": 48,  # ... the MLP width is this
        "vocab_size": 120,
        "embedding_size": 128,  # padded: the embedding and the logits have 128 rows
        "rope_theta": 10000.0,
        "rms_norm_eps": 1e-5,
        "max_sequence_length": 64,
        "block_type": "llama",
        "layer_norm_type": "rms",
        "activation_type": "silu",
        "include_bias": False,
        "include_qkv_bias": False,
        "weight_tying": False,
        "alibi": False,
        "rope": True,
        "attention_layer_norm": False,
        "scale_logits": False,
        "clip_qkv": None,
        "block_group_size": 1,
        "bias_for_layer_norm": False,
        "layer_norm_with_affine": True,
        "multi_query_attention": None,
        "mask_token_id": 126,
        "eos_token_id": 125,
        "pad_token_id": 125,
        "use_cache": False,
        "init_device": "meta",
        "precision": "amp_bf16",
    }
    cfg.update(overrides)
    return cfg


def _randn(gen, *shape, scale=1.0):
    return torch.randn(*shape, generator=gen) * scale


def llada_weights(cfg, seed=0):
    """Random weights under LLaDA's parameter names."""
    gen = torch.Generator().manual_seed(seed)
    d, n_heads = cfg["d_model"], cfg["n_heads"]
    n_kv = cfg["n_kv_heads"] or n_heads
    head_dim = d // n_heads
    ffn = cfg["mlp_hidden_size"] or cfg["mlp_ratio"] * d
    vocab = cfg["embedding_size"] or cfg["vocab_size"]
    sd = {"model.transformer.wte.weight": _randn(gen, vocab, d)}
    for n in range(cfg["n_layers"]):
        p = f"model.transformer.blocks.{n}."
        sd[p + "attn_norm.weight"] = 1 + _randn(gen, d, scale=0.1)
        sd[p + "q_proj.weight"] = _randn(gen, d, d, scale=d**-0.5)
        sd[p + "k_proj.weight"] = _randn(gen, n_kv * head_dim, d, scale=d**-0.5)
        sd[p + "v_proj.weight"] = _randn(gen, n_kv * head_dim, d, scale=d**-0.5)
        if cfg["include_qkv_bias"]:
            sd[p + "q_proj.bias"] = _randn(gen, d, scale=0.1)
            sd[p + "k_proj.bias"] = _randn(gen, n_kv * head_dim, scale=0.1)
            sd[p + "v_proj.bias"] = _randn(gen, n_kv * head_dim, scale=0.1)
        sd[p + "attn_out.weight"] = _randn(gen, d, d, scale=d**-0.5)
        sd[p + "ff_norm.weight"] = 1 + _randn(gen, d, scale=0.1)
        sd[p + "ff_proj.weight"] = _randn(gen, ffn, d, scale=d**-0.5)
        sd[p + "up_proj.weight"] = _randn(gen, ffn, d, scale=d**-0.5)
        sd[p + "ff_out.weight"] = _randn(gen, d, ffn, scale=ffn**-0.5)
    sd["model.transformer.ln_f.weight"] = 1 + _randn(gen, d, scale=0.1)
    if not cfg["weight_tying"]:
        sd["model.transformer.ff_out.weight"] = _randn(gen, vocab, d, scale=d**-0.5)
    return sd


def llada_canonical(sd, cfg):
    """The test's own reading of LLaDA's names (independent of the library's regular expressions)."""
    w = {"embed": sd["model.transformer.wte.weight"], "final_norm": sd["model.transformer.ln_f.weight"]}
    w["head"] = sd[
        "model.transformer.wte.weight" if cfg["weight_tying"] else "model.transformer.ff_out.weight"
    ]
    parts = {
        "attn_norm": "attn_norm.weight",
        "q": "q_proj.weight",
        "k": "k_proj.weight",
        "v": "v_proj.weight",
        "q_bias": "q_proj.bias",
        "k_bias": "k_proj.bias",
        "v_bias": "v_proj.bias",
        "o": "attn_out.weight",
        "ff_norm": "ff_norm.weight",
        "gate": "ff_proj.weight",
        "up": "up_proj.weight",
        "down": "ff_out.weight",
    }
    for n in range(cfg["n_layers"]):
        for short, name in parts.items():
            key = f"model.transformer.blocks.{n}.{name}"
            if key in sd:
                w[f"{n}.{short}"] = sd[key]
    return w


def dream_config(**overrides):
    """A config.json of Dream's layout (Qwen2 fields, model_type "Dream")."""
    cfg = {
        "model_type": "Dream",
        "architectures": ["DreamModel"],
        "auto_map": DREAM_AUTO_MAP,
        "vocab_size": 96,
        "hidden_size": 32,
        "intermediate_size": 56,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "hidden_act": "silu",
        "max_position_embeddings": 128,
        "rms_norm_eps": 1e-6,
        "rope_theta": 10000.0,
        "rope_scaling": None,
        "tie_word_embeddings": False,
        "use_sliding_window": False,
        "sliding_window": 128,
        "max_window_layers": 2,
        "attention_dropout": 0.0,
        "mask_token_id": 95,
        "pad_token_id": 92,
        "eos_token_id": 92,
        "bos_token_id": 92,
        "torch_dtype": "float32",
        "use_cache": True,
    }
    cfg.update(overrides)
    return cfg


def dream_weights(cfg, seed=0):
    """Random weights under Dream's (= Qwen2's) parameter names."""
    gen = torch.Generator().manual_seed(seed)
    d, n_heads, n_kv = cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_key_value_heads"]
    head_dim, ffn, vocab = d // n_heads, cfg["intermediate_size"], cfg["vocab_size"]
    sd = {"model.embed_tokens.weight": _randn(gen, vocab, d)}
    for n in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{n}."
        sd[p + "input_layernorm.weight"] = 1 + _randn(gen, d, scale=0.1)
        sd[p + "self_attn.q_proj.weight"] = _randn(gen, d, d, scale=d**-0.5)
        sd[p + "self_attn.q_proj.bias"] = _randn(gen, d, scale=0.1)
        sd[p + "self_attn.k_proj.weight"] = _randn(gen, n_kv * head_dim, d, scale=d**-0.5)
        sd[p + "self_attn.k_proj.bias"] = _randn(gen, n_kv * head_dim, scale=0.1)
        sd[p + "self_attn.v_proj.weight"] = _randn(gen, n_kv * head_dim, d, scale=d**-0.5)
        sd[p + "self_attn.v_proj.bias"] = _randn(gen, n_kv * head_dim, scale=0.1)
        sd[p + "self_attn.o_proj.weight"] = _randn(gen, d, d, scale=d**-0.5)
        sd[p + "post_attention_layernorm.weight"] = 1 + _randn(gen, d, scale=0.1)
        sd[p + "mlp.gate_proj.weight"] = _randn(gen, ffn, d, scale=d**-0.5)
        sd[p + "mlp.up_proj.weight"] = _randn(gen, ffn, d, scale=d**-0.5)
        sd[p + "mlp.down_proj.weight"] = _randn(gen, d, ffn, scale=ffn**-0.5)
    sd["model.norm.weight"] = 1 + _randn(gen, d, scale=0.1)
    sd["lm_head.weight"] = _randn(gen, vocab, d, scale=d**-0.5)
    return sd


def dream_canonical(sd, cfg):
    w = {
        "embed": sd["model.embed_tokens.weight"],
        "final_norm": sd["model.norm.weight"],
        "head": sd["lm_head.weight"],
    }
    parts = {
        "attn_norm": "input_layernorm.weight",
        "q": "self_attn.q_proj.weight",
        "k": "self_attn.k_proj.weight",
        "v": "self_attn.v_proj.weight",
        "q_bias": "self_attn.q_proj.bias",
        "k_bias": "self_attn.k_proj.bias",
        "v_bias": "self_attn.v_proj.bias",
        "o": "self_attn.o_proj.weight",
        "ff_norm": "post_attention_layernorm.weight",
        "gate": "mlp.gate_proj.weight",
        "up": "mlp.up_proj.weight",
        "down": "mlp.down_proj.weight",
    }
    for n in range(cfg["num_hidden_layers"]):
        for short, name in parts.items():
            w[f"{n}.{short}"] = sd[f"model.layers.{n}.{name}"]
    return w


def write_checkpoint(directory: Path, config: dict, state_dict: dict) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "config.json").write_text(json.dumps(config, indent=2))
    save_file(
        {k: v.contiguous() for k, v in state_dict.items()},
        str(directory / "model.safetensors"),
        {"format": "pt"},
    )
    return directory


# ------------------------------------------------------------------------------------------------
# the reference forward pass, from the description
# ------------------------------------------------------------------------------------------------


def reference_logits(w, *, n_layers, n_heads, n_kv, theta, eps, input_ids, attention_mask=None):
    """Bidirectional pre-norm transformer in float64; positions 0..L-1 (also with left padding)."""
    w = {k: v.double() for k, v in w.items()}
    x = w["embed"][input_ids]
    batch, length, d = x.shape
    head_dim = d // n_heads
    pos = torch.arange(length, dtype=torch.float64)
    inv_freq = 1.0 / theta ** (torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)
    freqs = pos[:, None] * inv_freq[None, :]
    angles = torch.cat([freqs, freqs], dim=-1)
    cos, sin = angles.cos(), angles.sin()

    def rms(h, weight):
        return weight * (h / torch.sqrt(h.pow(2).mean(-1, keepdim=True) + eps))

    def rotate_half(t):
        first, second = t[..., : head_dim // 2], t[..., head_dim // 2 :]
        return torch.cat([-second, first], dim=-1)

    def proj(h, n, name, heads):
        out = h @ w[f"{n}.{name}"].T
        if f"{n}.{name}_bias" in w:
            out = out + w[f"{n}.{name}_bias"]
        return out.view(batch, length, heads, head_dim).transpose(1, 2)

    for n in range(n_layers):
        h = rms(x, w[f"{n}.attn_norm"])
        q, k, v = proj(h, n, "q", n_heads), proj(h, n, "k", n_kv), proj(h, n, "v", n_kv)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        k = k.repeat_interleave(n_heads // n_kv, dim=1)
        v = v.repeat_interleave(n_heads // n_kv, dim=1)
        scores = q @ k.transpose(-1, -2) / math.sqrt(head_dim)  # no causal mask: bidirectional
        if attention_mask is not None:
            scores = scores.masked_fill(~attention_mask.bool()[:, None, None, :], float("-inf"))
        attn = torch.softmax(scores, dim=-1) @ v
        x = x + attn.transpose(1, 2).reshape(batch, length, d) @ w[f"{n}.o"].T
        h = rms(x, w[f"{n}.ff_norm"])
        x = x + (torch.nn.functional.silu(h @ w[f"{n}.gate"].T) * (h @ w[f"{n}.up"].T)) @ w[f"{n}.down"].T
    return rms(x, w["final_norm"]) @ w["head"].T


def llada_reference(sd, cfg, input_ids, attention_mask=None):
    return reference_logits(
        llada_canonical(sd, cfg),
        n_layers=cfg["n_layers"],
        n_heads=cfg["n_heads"],
        n_kv=cfg["n_kv_heads"] or cfg["n_heads"],
        theta=cfg["rope_theta"],
        eps=cfg["rms_norm_eps"],
        input_ids=input_ids,
        attention_mask=attention_mask,
    )


def dream_reference(sd, cfg, input_ids, attention_mask=None):
    return reference_logits(
        dream_canonical(sd, cfg),
        n_layers=cfg["num_hidden_layers"],
        n_heads=cfg["num_attention_heads"],
        n_kv=cfg["num_key_value_heads"],
        theta=cfg["rope_theta"],
        eps=cfg["rms_norm_eps"],
        input_ids=input_ids,
        attention_mask=attention_mask,
    )


def _ids(vocab, shape, seed=1):
    return torch.randint(0, vocab, shape, generator=torch.Generator().manual_seed(seed))


# ------------------------------------------------------------------------------------------------
# native LLaDA
# ------------------------------------------------------------------------------------------------

LLADA_CASES = {
    "mha-null-kv-heads": {},
    "gqa": {"n_kv_heads": 2},
    "qkv-bias": {"include_qkv_bias": True, "n_kv_heads": 2},
    "tied": {"weight_tying": True, "n_kv_heads": 1},
}


@pytest.mark.parametrize("case", list(LLADA_CASES))
def test_llada_native_matches_reference(tmp_path, case):
    cfg = llada_config(**LLADA_CASES[case])
    sd = llada_weights(cfg)
    model = load_model(write_checkpoint(tmp_path / case, cfg, sd), dtype=torch.float64)

    c = model.config
    assert c.is_causal is False
    assert c.intermediate_size == 48  # mlp_hidden_size, not mlp_ratio * d_model
    assert c.num_key_value_heads == (cfg["n_kv_heads"] or cfg["n_heads"])
    assert c.vocab_size == 128 and c.hidden_size == 32 and c.num_hidden_layers == 2
    assert c.max_position_embeddings == 64 and c.rms_norm_eps == 1e-5
    assert (c.mask_token_id, c.eos_token_id, c.pad_token_id) == (126, 125, 125)
    assert c.tie_word_embeddings is cfg["weight_tying"]
    assert c.model_type == ("qwen2" if case == "qkv-bias" else "llama")
    assert callable(model.diffusion_generate) and model.hf_lrdwm_tokenizer is None
    assert next(model.parameters()).dtype == torch.float64
    # every checkpoint tensor landed in the model, under the test's own reading of the names
    own = llada_canonical(sd, cfg)
    assert torch.equal(model.model.layers[1].mlp.down_proj.weight, own["1.down"].double())
    assert torch.equal(model.model.layers[0].input_layernorm.weight, own["0.attn_norm"].double())
    assert torch.equal(model.lm_head.weight, own["head"].double())

    ids = _ids(cfg["vocab_size"], (2, 11))
    with torch.no_grad():
        logits = model(ids).logits
    assert logits.shape == (2, 11, 128)
    torch.testing.assert_close(logits, llada_reference(sd, cfg, ids), rtol=0, atol=1e-5)


def test_llada_left_padding_matches_reference(tmp_path):
    cfg = llada_config(n_kv_heads=2)
    sd = llada_weights(cfg, seed=3)
    model = load_model(write_checkpoint(tmp_path / "ckpt", cfg, sd), dtype=torch.float64)
    ids = _ids(cfg["vocab_size"], (2, 10), seed=4)
    mask = torch.ones(2, 10, dtype=torch.long)
    mask[0, :3] = 0
    ids[0, :3] = cfg["pad_token_id"]
    with torch.no_grad():
        logits = model(ids, attention_mask=mask).logits
        alone = model(ids[:1, 3:]).logits
    ref = llada_reference(sd, cfg, ids, attention_mask=mask)
    torch.testing.assert_close(logits[0, 3:], ref[0, 3:], rtol=0, atol=1e-5)
    torch.testing.assert_close(logits[1], ref[1], rtol=0, atol=1e-5)
    # the pads are invisible: the padded row equals the same tokens alone (RoPE is relative)
    torch.testing.assert_close(logits[0, 3:], alone[0], rtol=0, atol=1e-5)


@pytest.mark.parametrize("family", ["llada", "dream"])
def test_native_attention_is_bidirectional(tmp_path, family):
    if family == "llada":
        cfg = llada_config()
        model = load_model(write_checkpoint(tmp_path / "l", cfg, llada_weights(cfg)))
    else:
        cfg = dream_config()
        model = load_model(write_checkpoint(tmp_path / "d", cfg, dream_weights(cfg)))
    ids = _ids(cfg["vocab_size"], (1, 9))
    changed = ids.clone()
    changed[0, -1] = (ids[0, -1] + 1) % cfg["vocab_size"]
    with torch.no_grad():
        before, after = model(ids).logits, model(changed).logits
    # position 0 sees the token at position 8, to its right
    assert (before[0, 0] - after[0, 0]).abs().max() > 1e-3


@pytest.mark.parametrize("original_names", [True, False])
def test_llada_saved_after_native_loading_loads_again(tmp_path, original_names):
    cfg = llada_config(n_kv_heads=2)
    model = load_model(write_checkpoint(tmp_path / "ckpt", cfg, llada_weights(cfg)))
    # transformers writes LLaDA's names back by default (save_original_format=True), Llama's otherwise
    model.save_pretrained(tmp_path / "saved", save_original_format=original_names)
    again = load_model(tmp_path / "saved")
    assert type(again) is type(model) and again.config.diffusion_family == "llada"
    ids = _ids(cfg["vocab_size"], (1, 8))
    with torch.no_grad():
        torch.testing.assert_close(again(ids).logits, model(ids).logits, rtol=0, atol=0)


def test_llada_missing_and_unexpected_weights_fail_loudly(tmp_path):
    cfg = llada_config()
    sd = llada_weights(cfg)
    extra = dict(sd, **{"model.transformer.blocks.0.attn_norm.bias": torch.zeros(32)})
    with pytest.raises(
        CheckpointMismatchError, match=r"unexpected keys: model\.layers\.0\.input_layernorm\.bias"
    ):
        load_model(write_checkpoint(tmp_path / "extra", cfg, extra))
    missing = {k: v for k, v in sd.items() if k != "model.transformer.blocks.1.up_proj.weight"}
    with pytest.raises(
        CheckpointMismatchError, match=r"missing keys: model\.layers\.1\.mlp\.up_proj\.weight"
    ):
        load_model(write_checkpoint(tmp_path / "missing", cfg, missing))


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"block_type": "sequential"}, "block_type"),
        ({"layer_norm_type": "default"}, "layer_norm_type"),
        ({"activation_type": "swiglu"}, "activation_type"),
        ({"alibi": True}, "alibi"),
        ({"scale_logits": True}, "scale_logits"),
        ({"include_bias": True}, "LM head"),
        ({"bias_for_layer_norm": None, "include_bias": True, "weight_tying": True}, "layer norms"),
    ],
)
def test_llada_unsupported_layouts(overrides, message):
    with pytest.raises(NotImplementedError, match=message):
        native_config_from_llada(llada_config(**overrides))


def test_llada_config_traps():
    c = native_config_from_llada(llada_config(mlp_hidden_size=None, multi_query_attention=True))
    assert c.intermediate_size == 4 * 32 and c.num_key_value_heads == 1
    c = native_config_from_llada(llada_config(embedding_size=None, rope_theta=500000.0))
    assert c.vocab_size == 120 and c.rope_parameters["rope_theta"] == 500000.0
    c = native_config_from_llada(
        llada_config(include_bias=True, weight_tying=True, bias_for_layer_norm=False)
    )
    assert c.attention_bias and c.mlp_bias and c.tie_word_embeddings


def test_other_model_types_are_refused(tmp_path):
    write_checkpoint(tmp_path / "m", {"model_type": "mistral", "hidden_size": 8}, {"x": torch.zeros(1)})
    with pytest.raises(ValueError, match=r"'mistral'.*'llada' and 'Dream'"):
        load_model(tmp_path / "m")
    with pytest.raises(ValueError, match="either device or device_map"):
        load_model(tmp_path / "m", device="cpu", device_map="cpu")


def test_published_special_ids_fill_in_without_tokenizer():
    c = native_config_from_llada(llada_config(mask_token_id=126336, eos_token_id=126081, pad_token_id=126081))
    _fill_special_ids(c, "llada", None)
    assert (c.eot_token_id, c.bos_token_id) == (126348, 126080)
    c = native_config_from_dream(dream_config(mask_token_id=151666, eos_token_id=151643, pad_token_id=151643))
    _fill_special_ids(c, "dream", None)
    assert c.eot_token_id == 151645
    c = native_config_from_llada(llada_config())  # toy ids: nothing invented
    _fill_special_ids(c, "llada", None)
    assert c.eot_token_id is None and c.bos_token_id is None


# ------------------------------------------------------------------------------------------------
# native Dream
# ------------------------------------------------------------------------------------------------


def test_dream_native_matches_reference(tmp_path):
    cfg = dream_config()
    sd = dream_weights(cfg)
    model = load_model(write_checkpoint(tmp_path / "dream", cfg, sd), dtype=torch.float64)
    c = model.config
    assert c.model_type == "qwen2" and c.is_causal is False and c.num_key_value_heads == 2
    assert (c.mask_token_id, c.eos_token_id, c.pad_token_id, c.bos_token_id) == (95, 92, 92, 92)
    ids = _ids(cfg["vocab_size"], (2, 12), seed=5)
    mask = torch.ones(2, 12, dtype=torch.long)
    mask[1, :4] = 0
    with torch.no_grad():
        logits = model(ids).logits
        padded = model(ids, attention_mask=mask).logits
    torch.testing.assert_close(logits, dream_reference(sd, cfg, ids), rtol=0, atol=1e-5)
    ref_padded = dream_reference(sd, cfg, ids, attention_mask=mask)
    torch.testing.assert_close(padded[1, 4:], ref_padded[1, 4:], rtol=0, atol=1e-5)


def test_dream_native_keeps_checkpoint_dtype_by_default(tmp_path):
    cfg = dream_config(torch_dtype="bfloat16")
    sd = {k: v.bfloat16() for k, v in dream_weights(cfg).items()}
    model = load_model(write_checkpoint(tmp_path / "bf16", cfg, sd), device="cpu")
    assert next(model.parameters()).dtype == torch.bfloat16
    model = load_model(tmp_path / "bf16", dtype=torch.float32)
    assert next(model.parameters()).dtype == torch.float32


@pytest.mark.parametrize("family", ["dream", "llada"])
def test_unsupported_dream_layouts(family):
    if family == "dream":
        with pytest.raises(NotImplementedError, match="rope_scaling"):
            native_config_from_dream(dream_config(rope_scaling={"type": "linear", "factor": 2.0}))
        with pytest.raises(NotImplementedError, match="sliding-window"):
            native_config_from_dream(dream_config(use_sliding_window=True))
    else:
        with pytest.raises(KeyError):
            native_config_from_llada({"model_type": "llada"})


# ------------------------------------------------------------------------------------------------
# tokenizers
# ------------------------------------------------------------------------------------------------


def _bpe(specials):
    return train_byte_bpe(
        ["the quick brown fox jumps over the lazy dog"] * 4, vocab_size=110, special_tokens=specials
    )


def test_llada_tokenizer_present_and_absent(tmp_path):
    from transformers import PreTrainedTokenizerFast

    cfg = llada_config()
    sd = llada_weights(cfg)
    bare = load_model(write_checkpoint(tmp_path / "bare", cfg, sd))
    assert bare.hf_lrdwm_tokenizer is None and bare.config.eot_token_id is None

    specials = ["<|startoftext|>", "<|endoftext|>", "<|eot_id|>", "<|mdm_mask|>"]
    fast = PreTrainedTokenizerFast(
        tokenizer_object=_bpe(specials), bos_token="<|startoftext|>", eos_token="<|endoftext|>"
    )
    directory = write_checkpoint(tmp_path / "with_tok", cfg, sd)
    fast.save_pretrained(directory)
    model = load_model(directory)
    tok = model.hf_lrdwm_tokenizer
    assert tok is not None and tok("the fox").input_ids == fast("the fox").input_ids
    assert model.config.eot_token_id == fast.convert_tokens_to_ids("<|eot_id|>")
    assert model.config.bos_token_id == fast.bos_token_id
    assert model.config.mask_token_id == 126  # config.json wins over the tokenizer
    assert load_model(directory, load_tokenizer=False).hf_lrdwm_tokenizer is None


def test_dream_tokenizer_without_remote_code_falls_back_to_qwen2(tmp_path):
    cfg = dream_config()
    directory = write_checkpoint(tmp_path / "dream_tok", cfg, dream_weights(cfg))
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|mask|>"]
    bpe = _bpe(specials)
    bpe.model.save(str(directory))  # vocab.json + merges.txt, as Dream ships them
    added = {
        str(bpe.token_to_id(t)): {
            "content": t,
            "special": True,
            "lstrip": False,
            "rstrip": False,
            "normalized": False,
        }
        for t in specials
    }
    tok_cfg = {
        "tokenizer_class": "DreamTokenizer",  # Dream's own class: remote code
        "auto_map": {"AutoTokenizer": ["tokenization_dream.DreamTokenizer", None]},
        "added_tokens_decoder": added,
        "eos_token": "<|endoftext|>",
        "pad_token": "<|endoftext|>",
    }
    (directory / "tokenizer_config.json").write_text(json.dumps(tok_cfg))
    model = load_model(directory)
    tok = model.hf_lrdwm_tokenizer
    assert type(tok).__name__ == "Qwen2Tokenizer"
    assert model.config.eot_token_id == bpe.token_to_id("<|im_end|>")
    assert tok.decode(tok("the lazy dog").input_ids) == "the lazy dog"


# ------------------------------------------------------------------------------------------------
# tiny built-in models
# ------------------------------------------------------------------------------------------------


def test_tiny_models_have_the_real_ids():
    llada = tiny_model("llada")
    c = llada.config
    assert (c.vocab_size, c.mask_token_id, c.eos_token_id, c.eot_token_id, c.bos_token_id) == (
        126464,
        126336,
        126081,
        126348,
        126080,
    )
    assert c.is_causal is False and type(llada).__name__ == "LlamaForCausalLM"
    assert llada.lm_head.weight.shape == (126464, 64) and callable(llada.diffusion_generate)
    dream = tiny_model("dream", num_layers=1)
    c = dream.config
    assert (c.vocab_size, c.mask_token_id, c.eos_token_id, c.pad_token_id, c.eot_token_id) == (
        152064,
        151666,
        151643,
        151643,
        151645,
    )
    assert type(dream).__name__ == "Qwen2ForCausalLM" and c.is_causal is False


def test_tiny_model_reduced_vocab_determinism_and_rng():
    state = torch.random.get_rng_state()
    a = tiny_model("llada", vocab_size=300, hidden_size=32, num_layers=1, seed=7)
    assert torch.equal(state, torch.random.get_rng_state())  # the global RNG is untouched
    b = tiny_model("llada", vocab_size=300, hidden_size=32, num_layers=1, seed=7)
    c = tiny_model("llada", vocab_size=300, hidden_size=32, num_layers=1, seed=8)
    pa, pb, pc = (dict(m.named_parameters()) for m in (a, b, c))
    assert all(torch.equal(pa[k], pb[k]) for k in pa)
    assert not torch.equal(pa["lm_head.weight"], pc["lm_head.weight"])
    cfg = a.config
    assert (cfg.mask_token_id, cfg.eot_token_id, cfg.eos_token_id, cfg.bos_token_id) == (299, 298, 297, 296)
    d = tiny_model("dream", vocab_size=200, dtype=torch.bfloat16)
    assert (d.config.mask_token_id, d.config.eot_token_id, d.config.eos_token_id) == (199, 198, 197)
    assert next(d.parameters()).dtype == torch.bfloat16
    with pytest.raises(ValueError):
        tiny_model("gpt2")


@pytest.mark.parametrize("family", ["llada", "dream"])
def test_tiny_model_generates_and_round_trips(tmp_path, family):
    model = tiny_model(family, vocab_size=256, hidden_size=32)
    prompt = _ids(200, (1, 6))
    if family == "llada":
        out = model.diffusion_generate(prompt, steps=4, gen_length=4, block_length=4)
    else:
        out = model.diffusion_generate(prompt, max_new_tokens=4, steps=4)
    out = out if isinstance(out, torch.Tensor) else out.sequences
    assert out.shape == (1, 10) and torch.equal(out[:, :6], prompt)
    assert not (out == model.config.mask_token_id).any()
    # a model saved after loading loads again natively, identically
    model.save_pretrained(tmp_path / "saved")
    again = load_model(tmp_path / "saved")
    assert again.config.mask_token_id == model.config.mask_token_id and again.config.is_causal is False
    with torch.no_grad():
        torch.testing.assert_close(again(prompt).logits, model(prompt).logits, rtol=0, atol=0)


# ------------------------------------------------------------------------------------------------
# remote code: stand-ins reproducing the documented transformers-5 failures
# ------------------------------------------------------------------------------------------------

FAKE_LLADA_CONFIG = '''
from transformers import PretrainedConfig


class LLaDAConfig(PretrainedConfig):
    """Declares its own fields; like the published class it does not declare use_cache."""

    model_type = "llada"

    def __init__(self, d_model=16, vocab_size=40, embedding_size=None, mask_token_id=None, **kwargs):
        self.d_model = d_model
        self.vocab_size = vocab_size
        self.embedding_size = embedding_size
        self.mask_token_id = mask_token_id
        super().__init__(**kwargs)
'''

FAKE_LLADA_MODELING = '''
import torch
from torch import nn
from transformers import PreTrainedModel
from transformers.modeling_outputs import CausalLMOutputWithPast

from .configuration_llada import LLaDAConfig


class LLaDAModelLM(PreTrainedModel):
    """Embedding, a bidirectional mean over the (unpadded) sequence, an output layer."""

    config_class = LLaDAConfig

    def __init__(self, config):
        super().__init__(config)
        size = config.embedding_size or config.vocab_size
        self.wte = nn.Embedding(size, config.d_model)
        self.ff_out = nn.Linear(config.d_model, size, bias=False)
        self.post_init()

    def forward(self, input_ids, attention_mask=None, use_cache=None, **kwargs):
        if use_cache is None:
            use_cache = self.config.use_cache  # AttributeError on transformers 5
        if use_cache:
            raise ValueError("no KV cache in a diffusion model")
        h = self.wte(input_ids)
        if attention_mask is None:
            attention_mask = torch.ones_like(input_ids)
        m = attention_mask[..., None].to(h.dtype)
        context = (h * m).sum(1, keepdim=True) / m.sum(1, keepdim=True)
        return CausalLMOutputWithPast(logits=self.ff_out(h + context))
'''

FAKE_DREAM_CONFIG = """
from transformers import PretrainedConfig


class DreamConfig(PretrainedConfig):
    model_type = "Dream"

    def __init__(self, vocab_size=40, hidden_size=16, num_attention_heads=1, rope_theta=10000.0,
                 mask_token_id=None, **kwargs):
        self.vocab_size = vocab_size
        self.hidden_size = hidden_size
        self.num_attention_heads = num_attention_heads
        self.rope_theta = rope_theta
        self.mask_token_id = mask_token_id
        super().__init__(**kwargs)
"""

FAKE_DREAM_GENERATION = '''
import copy

import torch
import torch.nn.functional as F
from transformers import GenerationConfig, __version__


class DreamGenerationConfig(GenerationConfig):
    """Sets its own fields (Dream's names and defaults); validate() has the 4.x-era signature."""

    def __init__(self, **kwargs):
        self.temperature = kwargs.pop("temperature", 0.0)
        self.top_p = kwargs.pop("top_p", None)
        self.top_k = kwargs.pop("top_k", None)
        self.max_length = kwargs.pop("max_length", 20)
        self.max_new_tokens = kwargs.pop("max_new_tokens", None)
        self.eps = kwargs.pop("eps", 1e-3)
        self.steps = kwargs.pop("steps", 512)
        self.alg = kwargs.pop("alg", "origin")
        self.alg_temp = kwargs.pop("alg_temp", None)
        self.output_history = kwargs.pop("output_history", False)
        self.return_dict_in_generate = kwargs.pop("return_dict_in_generate", False)
        self.num_return_sequences = kwargs.pop("num_return_sequences", 1)
        self.mask_token_id = kwargs.pop("mask_token_id", None)
        self.pad_token_id = kwargs.pop("pad_token_id", None)
        self.bos_token_id = kwargs.pop("bos_token_id", None)
        self.eos_token_id = kwargs.pop("eos_token_id", None)
        self.generation_kwargs = kwargs.pop("generation_kwargs", {})
        self._from_model_config = kwargs.pop("_from_model_config", False)
        self._commit_hash = kwargs.pop("_commit_hash", None)
        self.transformers_version = kwargs.pop("transformers_version", __version__)
        if not self._from_model_config:
            for key, value in kwargs.items():
                setattr(self, key, value)
        self.validate(is_init=True)

    def validate(self, is_init=False):
        pass


class DreamGenerationMixin:
    """A short masked-diffusion loop with Dream's interface: hooks, shifted logits, confidence order."""

    def diffusion_generate(self, inputs=None, generation_config=None, **kwargs):
        tokens_hook = kwargs.pop("generation_tokens_hook_func", lambda step, x, logits: x)
        logits_hook = kwargs.pop("generation_logits_hook_func", lambda step, x, logits: logits)
        if generation_config is None:
            generation_config = DreamGenerationConfig.from_model_config(self.config)
        generation_config = copy.deepcopy(generation_config)
        generation_config.update(**kwargs)
        cfg = generation_config
        length = inputs.shape[1] + cfg.max_new_tokens if cfg.max_new_tokens else cfg.max_length
        x = F.pad(inputs, (0, length - inputs.shape[1]), value=cfg.mask_token_id)
        timesteps = torch.linspace(1, cfg.eps, cfg.steps + 1)
        x = tokens_hook(None, x, None)
        for i in range(cfg.steps):
            mask_index = x == cfg.mask_token_id
            logits = self(x).logits
            logits = torch.cat([logits[:, :1], logits[:, :-1]], dim=1)
            logits = logits_hook(i, x, logits)
            t, s = timesteps[i], timesteps[i + 1]
            confidence, tokens = torch.softmax(logits.float(), dim=-1).max(dim=-1)
            confidence = torch.where(mask_index, confidence, torch.tensor(-float("inf")))
            if i < cfg.steps - 1:
                count = int(mask_index.sum(1).float().mean() * (1 - s / t))
            else:
                count = int(mask_index.sum(1).max())
            if count > 0:
                chosen = confidence.topk(count, dim=-1).indices
                revealed = mask_index.gather(1, chosen)
                new = torch.where(revealed, tokens.gather(1, chosen), x.gather(1, chosen))
                x = x.scatter(1, chosen, new)
            x = tokens_hook(i, x, logits)
        return x
'''

FAKE_DREAM_MODELING = """
import torch
from torch import nn
from transformers import PreTrainedModel
from transformers.modeling_outputs import CausalLMOutputWithPast
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

from .configuration_dream import DreamConfig
from .generation_utils import DreamGenerationConfig, DreamGenerationMixin


class DreamRotaryEmbedding(nn.Module):
    def __init__(self, config, device=None):
        super().__init__()
        self.rope_type = "default"
        self.rope_kwargs = {}
        self.config = config
        self.rope_init_fn = ROPE_INIT_FUNCTIONS[self.rope_type]  # KeyError: 'default' on transformers 5
        inv_freq, self.attention_scaling = self.rope_init_fn(self.config, device, **self.rope_kwargs)
        self.register_buffer("inv_freq", inv_freq, persistent=False)
        self.original_inv_freq = self.inv_freq

    def forward(self, x, position_ids):
        freqs = position_ids[..., None].float() * self.inv_freq[None, None, :]
        emb = torch.cat([freqs, freqs], dim=-1)
        return emb.cos().to(x.dtype), emb.sin().to(x.dtype)


def rotate_half(x):
    a, b = x.chunk(2, dim=-1)
    return torch.cat([-b, a], dim=-1)


class DreamPreTrainedModel(PreTrainedModel):
    config_class = DreamConfig
    base_model_prefix = "model"

    def _init_weights(self, module):  # overrides transformers' own (as the published code does)
        if isinstance(module, (nn.Linear, nn.Embedding)):
            module.weight.data.normal_(mean=0.0, std=0.02)


class DreamBaseModel(DreamPreTrainedModel):
    def __init__(self, config):
        super().__init__(config)
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size)
        self.rotary_emb = DreamRotaryEmbedding(config)
        self.post_init()

    def forward(self, input_ids):
        h = self.embed_tokens(input_ids)
        position_ids = torch.arange(input_ids.shape[1])[None]
        cos, sin = self.rotary_emb(h, position_ids)
        q = h * cos + rotate_half(h) * sin
        scores = q @ q.transpose(-1, -2) / h.shape[-1] ** 0.5  # one head, bidirectional
        return h + torch.softmax(scores, dim=-1) @ h


class DreamModel(DreamGenerationMixin, DreamPreTrainedModel):
    def __init__(self, config):
        super().__init__(config)
        self.model = DreamBaseModel(config)
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        self.post_init()

    def forward(self, input_ids, attention_mask=None, position_ids=None, **kwargs):
        return CausalLMOutputWithPast(logits=self.lm_head(self.model(input_ids)))
"""


def _write_files(directory: Path, files: dict[str, str]) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (directory / name).write_text(textwrap.dedent(text))


def fake_remote_llada(directory: Path):
    _write_files(
        directory, {"configuration_llada.py": FAKE_LLADA_CONFIG, "modeling_llada.py": FAKE_LLADA_MODELING}
    )
    cfg = {
        "model_type": "llada",
        "architectures": ["LLaDAModelLM"],
        "auto_map": LLADA_AUTO_MAP,
        "d_model": 16,
        "vocab_size": 40,
        "mask_token_id": 39,
        "eos_token_id": 38,
        "pad_token_id": 38,
        "use_cache": False,
    }
    gen = torch.Generator().manual_seed(0)
    sd = {
        "wte.weight": torch.randn(40, 16, generator=gen),
        "ff_out.weight": torch.randn(40, 16, generator=gen),
    }
    write_checkpoint(directory, cfg, sd)
    return sd


def fake_remote_dream(directory: Path):
    _write_files(
        directory,
        {
            "configuration_dream.py": FAKE_DREAM_CONFIG,
            "generation_utils.py": FAKE_DREAM_GENERATION,
            "modeling_dream.py": FAKE_DREAM_MODELING,
        },
    )
    cfg = {
        "model_type": "Dream",
        "architectures": ["DreamModel"],
        "auto_map": DREAM_AUTO_MAP,
        "vocab_size": 40,
        "hidden_size": 16,
        "num_attention_heads": 1,
        "rope_theta": 100.0,
        "mask_token_id": 39,
        "eos_token_id": 38,
        "pad_token_id": 38,
        "bos_token_id": 38,
    }
    gen = torch.Generator().manual_seed(0)
    sd = {
        "model.embed_tokens.weight": torch.randn(40, 16, generator=gen),
        "lm_head.weight": torch.randn(40, 16, generator=gen),
    }
    write_checkpoint(directory, cfg, sd)
    return sd


def _fake_dream_reference(sd, ids, theta=100.0):
    h = sd["model.embed_tokens.weight"].double()[ids]
    d = h.shape[-1]
    inv_freq = 1.0 / theta ** (torch.arange(0, d, 2, dtype=torch.float64) / d)
    freqs = torch.arange(ids.shape[1], dtype=torch.float64)[:, None] * inv_freq
    emb = torch.cat([freqs, freqs], dim=-1)
    a, b = h.chunk(2, dim=-1)
    q = h * emb.cos() + torch.cat([-b, a], dim=-1) * emb.sin()
    out = h + torch.softmax(q @ q.transpose(-1, -2) / d**0.5, dim=-1) @ h
    return out @ sd["lm_head.weight"].double().T


def test_fake_remote_llada_reproduces_the_breakage_and_loads_with_the_shims(tmp_path):
    from transformers import AutoModel

    directory = tmp_path / "remote_llada"
    sd = fake_remote_llada(directory)
    ids = _ids(38, (2, 7))
    raw = AutoModel.from_pretrained(directory, trust_remote_code=True)
    with pytest.raises(AttributeError, match="use_cache"):
        raw(ids)

    model = load_model(directory, trust_remote_code=True)
    assert model.config.use_cache is False
    with torch.no_grad():
        logits = model(ids).logits
    h = sd["wte.weight"][ids]
    expected = (h + h.mean(1, keepdim=True)) @ sd["ff_out.weight"].T
    torch.testing.assert_close(logits, expected, rtol=1e-5, atol=1e-5)
    assert callable(model.diffusion_generate)
    out = model.diffusion_generate(ids[:1], steps=2, gen_length=4, block_length=4)
    out = out if isinstance(out, torch.Tensor) else out.sequences
    assert out.shape == (1, 11) and not (out == 39).any()


def test_fake_remote_dream_reproduces_the_breakages_and_loads_with_the_shims(tmp_path):
    import transformers.modeling_rope_utils as rope_utils
    from transformers import AutoModel

    directory = tmp_path / "remote_dream"
    sd = fake_remote_dream(directory)
    with pytest.raises(KeyError, match="default"):
        AutoModel.from_pretrained(directory, trust_remote_code=True)

    model = load_model(directory, trust_remote_code=True)
    assert "default" not in rope_utils.ROPE_INIT_FUNCTIONS  # transformers' own table is untouched
    ids = _ids(38, (1, 9))
    with torch.no_grad():
        logits = model(ids).logits
    # the rotary buffer holds real frequencies, not the uninitialised memory transformers 5 leaves
    torch.testing.assert_close(logits.double(), _fake_dream_reference(sd, ids), rtol=1e-4, atol=1e-4)

    config_cls = sys.modules[type(model).__module__].DreamGenerationConfig
    gen_config = config_cls.from_model_config(model.config)
    assert isinstance(gen_config, config_cls)
    assert (gen_config.eps, gen_config.steps, gen_config.alg, gen_config.mask_token_id) == (
        1e-3,
        512,
        "origin",
        39,
    )
    gen_config.update(steps=3)  # validate(user_set_attributes=...) no longer raises
    assert gen_config.steps == 3
    assert isinstance(model.generation_config, config_cls)

    # the remote loop runs without an explicit generation config (the documented 'eps' failure is gone),
    # and the patched entry point is the remote loop itself when no watermark is given
    remote_out = type(model).diffusion_generate(model, ids, max_new_tokens=4, steps=4)
    out = model.diffusion_generate(ids, max_new_tokens=4, steps=4)
    out = out if isinstance(out, torch.Tensor) else out.sequences
    assert out.shape == (1, 13) and torch.equal(out[:, :9], ids) and torch.equal(out, remote_out)
    marked = model.diffusion_generate(
        ids, max_new_tokens=4, steps=4, watermark=LRDWMConfig(key="k", delta=4.0)
    )
    marked = marked if isinstance(marked, torch.Tensor) else marked.sequences
    assert marked.shape == (1, 13)


def test_without_the_buffer_shim_the_rotary_frequencies_are_garbage(tmp_path):
    from transformers.dynamic_module_utils import get_class_from_dynamic_module

    directory = tmp_path / "remote_dream_buffers"
    fake_remote_dream(directory)
    model_class = get_class_from_dynamic_module(DREAM_AUTO_MAP["AutoModel"], str(directory))
    remote_shims.apply_class_shims(model_class)
    model = model_class.from_pretrained(directory)
    expected, _ = remote_shims.default_rope_init(model.config)
    assert not torch.allclose(model.model.rotary_emb.inv_freq, expected)
    assert remote_shims.fix_rotary_buffers(model)
    torch.testing.assert_close(model.model.rotary_emb.inv_freq, expected)


def test_shims_are_idempotent_and_narrow():
    from transformers import GenerationConfig

    class Config:
        pass

    cfg = Config()
    assert remote_shims.fix_use_cache(cfg) and cfg.use_cache is False
    assert not remote_shims.fix_use_cache(cfg)

    class WithKwargs(GenerationConfig):
        def validate(self, *args, **kwargs):
            return None

    assert not remote_shims.fix_generation_config_validate(WithKwargs)  # nothing to fix
    assert remote_shims.fix_generation_config_from_model_config(WithKwargs)
    assert not remote_shims.fix_generation_config_from_model_config(WithKwargs)
    inv_freq, scale = remote_shims.default_rope_init(None, base=10000.0, dim=8)
    torch.testing.assert_close(inv_freq, torch.tensor([1.0, 0.1, 0.01, 0.001]))
    assert scale == 1.0
