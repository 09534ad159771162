"""``hf-lrdwm generate``: tiny LLaDA / Dream checkpoints in their published layouts, offline, on CPU.

Each checkpoint has the architecture and special ids of a 1-layer, width-32
:func:`hf_lrdwm.models.tiny_model`, written as the original checkpoints are (LLaDA's config.json fields
and weight names; Dream's ``model_type "Dream"`` with Qwen2 names) next to a byte-level BPE tokenizer
whose ids fit under the special ids at the top of the 300-token vocabulary. The weights are drawn here
with std 0.5 (peaked, position-dependent logits: at transformers' 0.02 the outputs are near-uniform runs
of one token), and the special tokens' rows of the output layer are zero (logit 0, below the maximum of
the others: never predicted, like a trained model).

Detection settings: delta 4, 128 generated tokens, LLaDA at temperature 0 (its default), Dream at
temperature 1. Over 24 random prompts the watermarked z-scores range over 5.7-8.5 (LLaDA) and 6.0-8.8
(Dream), the vanilla ones over -2.2-3.3. With 64 tokens the watermarked minimum falls to 4.5 (LLaDA)
and 3.5 (Dream): a 296-token vocabulary gives repetitive outputs, whose repeated (context, token)
pairs are counted once. So the test uses 128 tokens and asserts z > 4 and ``prediction`` for every
watermarked output, and z < 4 and no ``prediction`` for every vanilla one (P(z > 4) is about 3e-5 per
null text).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file
from tiny_tokenizers import train_byte_bpe

from hf_lrdwm import LRDWMConfig, LRDWMDetector
from hf_lrdwm.cli import KEY_ENV, main
from hf_lrdwm.models import load_model, tiny_model

KEY = "cli-generate-SECRET-key-5d2e"
VOCAB = 300
HIDDEN = 32
# Added after the 296 BPE tokens, so they take the reduced ids of tiny_model: V-4, V-3, V-2, V-1.
SPECIALS = {
    "llada": ["<|startoftext|>", "<|endoftext|>", "<|eot_id|>", "<|mdm_mask|>"],  # BOS, EOS=PAD, EoT, mask
    "dream": ["<|im_start|>", "<|endoftext|>", "<|im_end|>", "<|mask|>"],  # -, BOS=EOS=PAD, EoT, mask
}
CHAT_TEMPLATES = {
    "llada": "<|startoftext|>{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}<|eot_id|>"
    "{% endfor %}{% if add_generation_prompt %}assistant: {% endif %}",
    "dream": "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}",
}
CORPUS = [
    "the quick brown fox jumps over the lazy dog",
    "a watermark for diffusion language models hides in the choice of tokens",
    "left and right neighbours both vote for the colour of a token",
    "write a short story about a lighthouse keeper and the sea",
]
PROMPTS = ["the quick brown fox", "write a short story about the sea", "hi"]  # three lengths
DETECT_ARGS = {  # 128 tokens, 64 steps
    "llada": ["--gen-length", "128", "--steps", "64", "--block-length", "64"],
    "dream": ["--max-new-tokens", "128", "--steps", "64", "--temperature", "1"],
}
SHORT_ARGS = {  # 16 tokens, for tests about everything but detection
    "llada": ["--gen-length", "16", "--steps", "16"],
    "dream": ["--max-new-tokens", "16", "--steps", "8"],
}
# transformers' Llama names -> LLaDA's (the reverse of hf_lrdwm.models.LLADA_KEY_MAPPING, written out)
_LLADA_NAMES = [
    ("model.layers.", "model.transformer.blocks."),
    ("model.embed_tokens.", "model.transformer.wte."),
    ("model.norm.", "model.transformer.ln_f."),
    ("lm_head.", "model.transformer.ff_out."),
    ("input_layernorm.", "attn_norm."),
    ("self_attn.q_proj.", "q_proj."),
    ("self_attn.k_proj.", "k_proj."),
    ("self_attn.v_proj.", "v_proj."),
    ("self_attn.o_proj.", "attn_out."),
    ("post_attention_layernorm.", "ff_norm."),
    ("mlp.gate_proj.", "ff_proj."),
    ("mlp.up_proj.", "up_proj."),
    ("mlp.down_proj.", "ff_out."),
]


# ----------------------------------------------------------------------------------------------
# checkpoints
# ----------------------------------------------------------------------------------------------
def write_tokenizer(directory: Path, family: str, *, chat: bool = True) -> None:
    from transformers import PreTrainedTokenizerFast

    tok = train_byte_bpe(CORPUS * 4, vocab_size=VOCAB - 4)
    assert tok.get_vocab_size() == VOCAB - 4
    tok.add_special_tokens(SPECIALS[family])
    bos, eos = SPECIALS[family][:2]
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token=bos if family == "llada" else eos, eos_token=eos, pad_token=eos
    )
    if chat:
        fast.chat_template = CHAT_TEMPLATES[family]
    fast.save_pretrained(directory)


def write_checkpoint(directory: Path, family: str, *, tokenizer: bool = True) -> Path:
    """A tiny checkpoint in the published layout of ``family`` (see the module docstring)."""
    directory.mkdir(parents=True)
    model = tiny_model(family, vocab_size=VOCAB, hidden_size=HIDDEN, num_layers=1)  # names, shapes, ids
    c = model.config
    special_rows = [c.mask_token_id, c.eos_token_id, c.eot_token_id, c.bos_token_id]
    generator = torch.Generator().manual_seed(0)
    weights = {}
    for name, param in model.named_parameters():
        if name.endswith("norm.weight"):
            value = torch.ones(param.shape)
        else:
            value = torch.randn(param.shape, generator=generator) * 0.5
        if name == "lm_head.weight":
            value[special_rows] = 0
        weights[name] = value
    ids = {n: getattr(c, n) for n in ("mask_token_id", "eos_token_id", "pad_token_id", "bos_token_id")}
    if family == "llada":
        renamed = {}
        for name, value in weights.items():
            for old, new in _LLADA_NAMES:
                name = name.replace(old, new)
            renamed[name] = value
        weights = renamed
        config = {
            "model_type": "llada",
            "architectures": ["LLaDAModelLM"],
            "d_model": HIDDEN,
            "n_heads": c.num_attention_heads,
            "n_kv_heads": c.num_key_value_heads,
            "n_layers": 1,
            "mlp_ratio": 4,  # ignored: mlp_hidden_size is set (the published config's trap)
            "mlp_hidden_size": c.intermediate_size,
            "vocab_size": VOCAB,
            "embedding_size": VOCAB,
            "rope_theta": 10.0,
            "rms_norm_eps": c.rms_norm_eps,
            "max_sequence_length": 4096,
            "block_type": "llama",
            "layer_norm_type": "rms",
            "activation_type": "silu",
            "include_bias": False,
            "include_qkv_bias": False,
            "weight_tying": False,
            "use_cache": False,
            **ids,
        }
    else:
        config = {
            "model_type": "Dream",
            "architectures": ["DreamModel"],
            "vocab_size": VOCAB,
            "hidden_size": HIDDEN,
            "intermediate_size": c.intermediate_size,
            "num_hidden_layers": 1,
            "num_attention_heads": c.num_attention_heads,
            "num_key_value_heads": c.num_key_value_heads,
            "hidden_act": "silu",
            "max_position_embeddings": 4096,
            "rms_norm_eps": c.rms_norm_eps,
            "rope_theta": 10.0,
            "tie_word_embeddings": False,
            "use_sliding_window": False,
            "torch_dtype": "float32",
            **ids,
        }
    (directory / "config.json").write_text(json.dumps(config, indent=2))
    save_file(weights, str(directory / "model.safetensors"), {"format": "pt"})
    if tokenizer:
        write_tokenizer(directory, family)
    return directory


ONE_THREAD = True  # conftest.py runs this module on one torch thread (tiny tensors)


@pytest.fixture(autouse=True)
def _offline(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "1")
    monkeypatch.delenv(KEY_ENV, raising=False)


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    root = tmp_path_factory.mktemp("ckpt")
    return {family: write_checkpoint(root / family, family) for family in ("llada", "dream")}


@pytest.fixture(scope="module")
def bare_llada(tmp_path_factory):
    """The LLaDA checkpoint without a tokenizer, and a tokenizer directory without a chat template."""
    root = tmp_path_factory.mktemp("bare")
    write_tokenizer(root / "plain_tok", "llada", chat=False)
    return write_checkpoint(root / "llada", "llada", tokenizer=False), root / "plain_tok"


def _run(capsys, argv):
    rc = main(["generate", *(str(a) for a in argv)])
    out, err = capsys.readouterr()
    assert KEY not in out and KEY not in err
    return rc, out, err


def _rows(text):
    lines = text.split("\n")
    assert lines[-1] == ""  # one object per line, newline-terminated
    return [json.loads(line) for line in lines[:-1]]


def _prompt_args(prompts):
    return [arg for p in prompts for arg in ("--prompt", p)]


def _tokenizer(directory):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(directory))


# ----------------------------------------------------------------------------------------------
# generation, output, detection
# ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("family", ["llada", "dream"])
def test_watermarked_output_is_detected_and_vanilla_is_not(family, ckpt, tmp_path, capsys, monkeypatch):
    directory = ckpt[family]
    inp = tmp_path / "prompts.jsonl"
    records = [{"id": n, "prompt": p} for n, p in enumerate(PROMPTS)]
    inp.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    common = ["--model", directory, "--input", inp, "--delta", "4", "--batch-size", "2", *DETECT_ARGS[family]]

    rc, out, err = _run(capsys, [*common, "--key", KEY])
    assert rc == 0, err
    marked = _rows(out)
    monkeypatch.setenv(KEY_ENV, KEY)  # the key from the environment; output to a file
    dest = tmp_path / "vanilla.jsonl"
    rc, out, err = _run(capsys, [*common, "--no-watermark", "--output", dest])
    assert rc == 0 and out == "", err
    vanilla = _rows(dest.read_text(encoding="utf-8"))

    tok = _tokenizer(directory)
    ignore = [VOCAB - 1, VOCAB - 2, VOCAB - 3]  # mask, EoT, EOS = PAD
    detector = LRDWMDetector(LRDWMConfig(key=KEY, delta=4.0), vocab_size=VOCAB, ignore_token_ids=ignore)
    for rows, watermarked in ((marked, True), (vanilla, False)):
        assert [r["prompt"] for r in rows] == PROMPTS  # input order, across batches of 2
        for row in rows:
            assert set(row) == {"prompt", "text", "token_ids", "watermarked", "detection"}
            assert row["watermarked"] is watermarked
            ids = row["token_ids"]
            assert len(ids) == 128 and all(0 <= i < VOCAB - 1 for i in ids)  # no mask left
            assert row["text"] == tok.decode(ids, skip_special_tokens=True)
            expected = detector(ids, prompt_ids=tok(row["prompt"]).input_ids).to_list(with_token_scores=False)
            assert row["detection"] == expected[0]
            assert "token_scores" not in row["detection"]
    for m, v in zip(marked, vanilla, strict=True):
        assert m["detection"]["prediction"] and m["detection"]["z_score"] > 4, m["detection"]
        assert not v["detection"]["prediction"] and v["detection"]["z_score"] < 4, v["detection"]


@pytest.mark.parametrize("family", ["llada", "dream"])
def test_left_padded_batches_match_single_prompts(family, ckpt, capsys):
    """Deterministic samplers (LLaDA at temperature 0; Dream's entropy order at temperature 0: its
    default 'origin' order draws per masked position, so a batch changes the draws)."""
    argv = ["--model", ckpt[family], "--key", KEY, *_prompt_args(PROMPTS), *SHORT_ARGS[family]]
    if family == "dream":
        argv += ["--alg", "entropy"]
    outputs = []
    for batch_size in ("3", "1"):
        rc, out, err = _run(capsys, [*argv, "--batch-size", batch_size])
        assert rc == 0, err
        outputs.append([r["token_ids"] for r in _rows(out)])
    assert outputs[0] == outputs[1]


@pytest.mark.parametrize(
    "family,chat,options,library_kwargs",
    [
        (
            "llada",
            True,
            ["--gen-length", "32", "--steps", "32", "--block-length", "16", "--temperature", "0.5"],
            dict(gen_length=32, steps=32, block_length=16, temperature=0.5),
        ),
        (
            "dream",
            False,
            "--max-new-tokens 16 --steps 8 --temperature 0.7 --top-p 0.9 --top-k 50 --alg maskgit_plus "
            "--alg-temp 0.5 --eps 0.01".split(),
            dict(
                max_new_tokens=16,
                steps=8,
                temperature=0.7,
                top_p=0.9,
                top_k=50,
                alg="maskgit_plus",
                alg_temp=0.5,
                eps=0.01,
                return_dict_in_generate=True,
            ),
        ),
    ],
    ids=["llada-chat", "dream-plain"],
)
def test_same_tokens_as_the_library(family, chat, options, library_kwargs, ckpt, capsys):
    """Prompt encoding (chat template or plain), sampler options and seeding are those of the library."""
    prompt = "write a short story"
    argv = ["--model", ckpt[family], "--key", KEY, "--prompt", prompt, "--seed", "3", *options]
    rc, out, err = _run(capsys, [*argv, *(["--chat"] if chat else [])])
    assert rc == 0, err
    (row,) = _rows(out)

    model = load_model(ckpt[family])
    tok = model.hf_lrdwm_tokenizer
    if chat:
        text = tok.apply_chat_template(
            [{"role": "user", "content": prompt}], add_generation_prompt=True, tokenize=False
        )
        assert text.startswith("<|startoftext|>user: write")
        ids = tok(text, add_special_tokens=False).input_ids
    else:
        ids = tok(prompt).input_ids
    torch.manual_seed(3)
    output = model.diffusion_generate(
        torch.tensor([ids]), watermark=LRDWMConfig(key=KEY, delta=2.0), **library_kwargs
    )
    sequences = output if isinstance(output, torch.Tensor) else output.sequences
    assert row["token_ids"] == sequences[0, len(ids) :].tolist()


def test_seed_and_no_key_without_watermark(ckpt, capsys):
    argv = ["--model", ckpt["dream"], "--prompt", "hi", *SHORT_ARGS["dream"], "--temperature", "1"]
    runs = {}
    for seed in ("0", "0", "1"):
        rc, out, err = _run(capsys, [*argv, "--key", KEY, "--seed", seed])
        assert rc == 0, err
        runs.setdefault(seed, []).append(_rows(out)[0]["token_ids"])
    assert runs["0"][0] == runs["0"][1] and runs["0"][0] != runs["1"][0]
    rc, out, err = _run(capsys, [*argv, "--no-watermark"])  # no key needed: no detection
    assert rc == 0, err
    (row,) = _rows(out)
    assert row["watermarked"] is False and row["detection"] is None


def test_tokenizer_option(bare_llada, ckpt, capsys):
    bare, _plain_tok = bare_llada
    argv = ["--key", KEY, "--prompt", "the fox", *SHORT_ARGS["llada"]]
    rc, out, err = _run(capsys, ["--model", bare, "--tokenizer", ckpt["llada"], *argv])
    assert rc == 0, err
    rc, reference, err = _run(capsys, ["--model", ckpt["llada"], *argv])
    assert rc == 0, err
    assert _rows(out) == _rows(reference)  # same weights, same tokenizer


def test_help(capsys):
    assert main(["--help"]) == 0
    assert "generate" in capsys.readouterr().out
    assert main(["generate", "--help"]) == 0
    text = capsys.readouterr().out
    for option in (
        "--max-new-tokens",
        "--gen-length",
        "--chat",
        "--no-watermark",
        "--batch-size",
        "--tokenizer",
    ):
        assert option in text


# ----------------------------------------------------------------------------------------------
# errors: one line, exit status 2, nothing on stdout, no output file, no key
# ----------------------------------------------------------------------------------------------
def _error_cases(tmp_path, ckpt, bare_llada):
    bare, plain_tok = bare_llada
    llada = ["--model", ckpt["llada"], "--key", KEY]
    dream = ["--model", ckpt["dream"], "--key", KEY]
    p = ["--prompt", "hi"]
    no_field = tmp_path / "nofield.jsonl"
    no_field.write_text('{"prompt": "ok"}\n{"text": "x"}\n', encoding="utf-8")
    empty_dir = tmp_path / "empty"
    empty_dir.mkdir()
    gpt2 = tmp_path / "gpt2"
    gpt2.mkdir()
    (gpt2 / "config.json").write_text(json.dumps({"model_type": "gpt2"}))
    alibi = tmp_path / "alibi"
    alibi.mkdir()
    config = json.loads((ckpt["llada"] / "config.json").read_text())
    (alibi / "config.json").write_text(json.dumps({**config, "alibi": True}))
    cases = {
        "missing key": (["--model", ckpt["llada"], *p], "no watermark key"),
        "model dir not found": (["--model", tmp_path / "nope", "--key", KEY, *p], "model directory"),
        "no config.json": (["--model", empty_dir, "--key", KEY, *p], "has no config.json"),
        "unsupported type": (["--model", gpt2, "--key", KEY, *p], "unsupported model_type 'gpt2'"),
        "unsupported layout": (["--model", alibi, "--key", KEY, *p], "ALiBi"),
        "dream option": ([*llada, *p, "--top-p", "0.9", "--alg", "entropy"], "--top-p, --alg apply to Dream"),
        "llada option": ([*dream, *p, "--gen-length", "64"], "--gen-length applies to LLaDA models only"),
        "block length": ([*llada, *p, "--gen-length", "64", "--block-length", "48"], "multiple of"),
        "steps per block": (
            [*llada, *p, "--gen-length", "64", "--block-length", "16", "--steps", "6"],
            "--steps",
        ),
        "missing field": ([*llada, "--input", no_field], "line 2: missing field 'prompt'"),
        "other field": ([*llada, "--input", no_field, "--prompt-field", "q"], "line 1: missing field 'q'"),
        "field without input": ([*llada, *p, "--prompt-field", "q"], "--prompt-field needs --input"),
        "missing input": ([*llada, "--input", tmp_path / "nope.jsonl"], "not found"),
        "prompt and input": ([*llada, *p, "--input", no_field], "not allowed with argument"),
        "no prompt": (llada, "one of the arguments"),
        "bad steps": ([*llada, *p, "--steps", "0"], "argument --steps"),
        "bad top-p": ([*dream, *p, "--top-p", "1.5"], "argument --top-p"),
        "bad dtype": ([*llada, *p, "--dtype", "int8"], "argument --dtype"),
        "bad device": ([*llada, *p, "--device", "nonsense"], "not a torch device"),
        "no tokenizer": (["--model", bare, "--key", KEY, *p], "has no tokenizer: pass --tokenizer"),
        "no chat template": (
            ["--model", bare, "--tokenizer", plain_tok, "--key", KEY, *p, "--chat"],
            "no chat",
        ),
        "key in message": ([*llada, *p, "--steps", KEY], "<hidden>"),
    }
    if not torch.cuda.is_available():
        cases["no cuda"] = ([*llada, *p, "--device", "cuda"], "CUDA is not available")
    return cases


ERROR_CASES = [
    "missing key",
    "model dir not found",
    "no config.json",
    "unsupported type",
    "unsupported layout",
    "dream option",
    "llada option",
    "block length",
    "steps per block",
    "missing field",
    "other field",
    "field without input",
    "missing input",
    "prompt and input",
    "no prompt",
    "bad steps",
    "bad top-p",
    "bad dtype",
    "bad device",
    "no tokenizer",
    "no chat template",
    "key in message",
    "no cuda",
]


@pytest.mark.parametrize("case", ERROR_CASES)
def test_user_errors_are_one_line(case, tmp_path, ckpt, bare_llada, capsys):
    cases = _error_cases(tmp_path, ckpt, bare_llada)
    if case not in cases:
        pytest.skip("CUDA is available here")
    argv, fragment = cases[case]
    dest = tmp_path / "out.jsonl"
    rc, out, err = _run(capsys, [*argv, "--output", dest])
    assert rc == 2
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("hf-lrdwm: error:") and fragment in lines[0], lines[0]
    assert "Traceback" not in err and out == ""
    assert not dest.exists() and not list(tmp_path.glob(".out.jsonl.*"))
