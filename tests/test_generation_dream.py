"""Dream sampler: fidelity to the official loop, the watermark's place and effect, and patch()."""

from __future__ import annotations

import copy
import inspect
import math
import sys
import types
from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F
import transformers

import hf_lrdwm
from hf_lrdwm import LRDWMConfig, LRDWMDetector, LRDWMLogitsProcessor
from hf_lrdwm.generation import DiffusionGenerationOutput, attach_diffusion_generate, patch
from hf_lrdwm.generation.dream import DreamSamplingConfig, dream_generate
from hf_lrdwm.hashing import green_rows

V = 200  # small vocabulary for the fidelity tests
MASK, EOS = V - 1, V - 2


def tiny_qwen2(
    vocab=V, *, layers=2, hidden=32, dtype=torch.float32, attn="sdpa", seed=0, init=0.02, logit_std=None
):
    """A random bidirectional Qwen2 (Dream's architecture); ``logit_std`` rescales the LM head so the
    next-token logits have about that spread (a peakier, more trained-looking distribution)."""
    torch.manual_seed(seed)
    cfg = transformers.Qwen2Config(
        vocab_size=vocab,
        hidden_size=hidden,
        intermediate_size=64,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
        is_causal=False,
        attn_implementation=attn,
        mask_token_id=vocab - 1,
        eos_token_id=vocab - 2,
        pad_token_id=vocab - 2,
        initializer_range=init,
    )
    model = transformers.Qwen2ForCausalLM(cfg).eval()
    if logit_std is not None:
        with torch.no_grad():
            probe = torch.randint(0, vocab - 2, (4, 32), generator=torch.Generator().manual_seed(seed))
            model.lm_head.weight.mul_(logit_std / model(probe).logits.std())
    return model.to(dtype)


ONE_THREAD = True  # conftest.py runs this module on one torch thread (tiny tensors)


@pytest.fixture(scope="module")
def model():
    return tiny_qwen2()


def random_prompts(batch, length, vocab=V, seed=0, pad_lengths=None):
    """Random prompt ids avoiding the special ids; left-padded with EOS where ``pad_lengths`` says."""
    gen = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, vocab - 2, (batch, length), generator=gen)
    mask = torch.ones(batch, length, dtype=torch.long)
    for row, pad in enumerate(pad_lengths or []):
        ids[row, :pad] = vocab - 2
        mask[row, :pad] = 0
    return ids, mask


class SpyProcessor(LRDWMLogitsProcessor):
    """Records (canvas, logits in, logits out) of every call."""

    def __init__(self, *args, log=None, **kwargs):
        super().__init__(*args, **kwargs)
        self.calls = []
        self.log = log

    def __call__(self, input_ids, scores):
        before = scores.clone()
        out = super().__call__(input_ids, scores)
        self.calls.append((input_ids.clone(), before, out.clone()))
        if self.log is not None:
            self.log.append("watermark")
        return out


# ----------------------------------------------------------------------------------------------
# An independent, straightforward reading of the official Dream loop (docs/samplers.md)
# ----------------------------------------------------------------------------------------------
def ref_probs(logits, temperature, top_p, top_k):
    if temperature > 0:
        logits = logits / temperature
    if top_p is not None and top_p < 1:
        values, order = torch.sort(logits, descending=True)
        cum = torch.cumsum(torch.softmax(values, dim=-1), dim=-1)
        remove = cum > top_p
        remove = torch.cat([torch.zeros_like(remove[..., :1]), remove[..., :-1]], dim=-1)  # shift right
        remove_full = torch.zeros_like(remove).scatter(-1, order, remove)
        logits = torch.where(remove_full, torch.full_like(logits, torch.finfo(logits.dtype).min), logits)
    if top_k is not None:
        kth = torch.sort(logits, descending=True).values[
            ..., min(top_k, logits.shape[-1]) - 1 : min(top_k, logits.shape[-1])
        ]
        logits = torch.where(logits < kth, torch.full_like(logits, torch.finfo(logits.dtype).min), logits)
    return torch.softmax(logits, dim=-1)


def ref_sample(logits, temperature, top_p, top_k, mode):
    probs = ref_probs(logits, temperature, top_p, top_k)
    tokens = None
    if temperature > 0:
        try:
            tokens = torch.distributions.Categorical(probs=probs).sample()
            conf = probs.gather(1, tokens[:, None])[:, 0]
        except (ValueError, RuntimeError):
            tokens = None
    if tokens is None:
        conf, tokens = probs.max(dim=-1)
    if mode == "topk_margin":
        top = torch.sort(probs, dim=-1, descending=True).values
        conf = top[:, 0] - top[:, 1]
    elif mode == "entropy":
        conf = (probs * torch.log(probs + 1e-10)).sum(-1)
    return conf, tokens


@torch.no_grad()
def reference_dream(
    model,
    input_ids,
    attention_mask=None,
    *,
    max_new_tokens,
    steps,
    temperature=0.0,
    top_p=None,
    top_k=None,
    eps=1e-3,
    alg="origin",
    alg_temp=None,
    mask_id=MASK,
    num_return_sequences=1,
    tokens_hook=None,
    logits_hook=None,
):
    if num_return_sequences > 1:
        input_ids = input_ids.repeat_interleave(num_return_sequences, dim=0)
        if attention_mask is not None:
            attention_mask = attention_mask.repeat_interleave(num_return_sequences, dim=0)
    tokens_hook = tokens_hook or (lambda step, x, logits: x)
    logits_hook = logits_hook or (lambda step, x, logits: logits)
    B, P = input_ids.shape
    N = P + max_new_tokens
    x = torch.cat([input_ids, torch.full((B, N - P), mask_id, dtype=input_ids.dtype)], dim=1)
    if attention_mask is not None and (attention_mask == 0).any():
        am = torch.cat([attention_mask, torch.ones(B, N - P, dtype=attention_mask.dtype)], dim=1)
        pos = am.long().cumsum(-1) - 1
        pos[am == 0] = 1
        keep = am.bool()
        attn = keep[:, None, :, None] & keep[:, None, None, :]
    else:
        pos, attn = None, None
    times = torch.linspace(1, eps, steps + 1)
    history = []
    x = tokens_hook(None, x, None)
    for i in range(steps):
        masked = x == mask_id
        logits = model(input_ids=x, attention_mask=attn, position_ids=pos).logits
        logits = torch.cat([logits[:, :1], logits[:, :-1]], dim=1)
        logits = logits_hook(i, x, logits)
        rows = logits[masked]
        t, s = times[i], times[i + 1]
        last = i == steps - 1
        if alg == "origin":
            new = torch.full((int(masked.sum()),), mask_id, dtype=torch.long)
            chosen = torch.rand(new.shape) < (1 if last else 1 - s / t)
            new[chosen] = ref_sample(rows[chosen], temperature, top_p, top_k, alg)[1]
            x[masked] = new
        else:
            conf, cand = ref_sample(rows, temperature, top_p, top_k, alg)
            per_row = masked.sum() / B
            k = int(per_row) if last else int(per_row * (1 - s / t))
            score = torch.full(x.shape, -math.inf, dtype=logits.dtype)
            score[masked] = conf
            if k > 0:
                if not alg_temp:
                    idx = torch.topk(score, k).indices
                else:
                    idx = torch.multinomial(torch.softmax(score / alg_temp, dim=-1), k)
                proposal = torch.full_like(x, mask_id)
                proposal[masked] = cand
                for b in range(B):
                    x[b, idx[b]] = proposal[b, idx[b]]
        x = tokens_hook(i, x, logits)
        history.append(x.clone())
    return x, history


# ----------------------------------------------------------------------------------------------
# 1. Fidelity
# ----------------------------------------------------------------------------------------------
FIDELITY_CASES = [
    # alg, temperature, top_p, top_k, alg_temp, padded, num_return_sequences
    ("origin", 0.0, None, None, None, False, 1),
    ("origin", 0.5, 0.95, None, None, True, 2),
    ("maskgit_plus", 0.0, None, None, None, True, 1),
    ("maskgit_plus", 0.5, None, 20, 0.5, False, 1),
    ("maskgit_plus", 0.5, 0.95, 50, 0.0, True, 2),
    ("topk_margin", 0.0, None, None, 0.0, False, 1),
    ("topk_margin", 0.5, 0.95, None, 1.0, True, 1),
    ("entropy", 0.0, None, None, 0.0, True, 1),
    ("entropy", 0.5, 0.95, 50, None, False, 2),
    ("entropy", 0.2, 0.95, None, 0.0, True, 1),  # the LR-DWM paper's setting
    ("entropy", 0.5, None, None, 0.3, True, 1),
]


def _case_kwargs(alg, temperature, top_p, top_k, alg_temp):
    return dict(alg=alg, temperature=temperature, top_p=top_p, top_k=top_k, alg_temp=alg_temp)


@pytest.mark.parametrize("alg,temperature,top_p,top_k,alg_temp,padded,n_ret", FIDELITY_CASES)
def test_matches_reference_loop(model, alg, temperature, top_p, top_k, alg_temp, padded, n_ret):
    ids, am = random_prompts(3, 6, seed=1, pad_lengths=[2, 0, 4] if padded else None)
    sampling = _case_kwargs(alg, temperature, top_p, top_k, alg_temp)
    torch.manual_seed(123)
    expected, ref_history = reference_dream(
        model, ids, am, max_new_tokens=20, steps=7, num_return_sequences=n_ret, **sampling
    )
    torch.manual_seed(123)
    out = dream_generate(
        model,
        ids,
        attention_mask=am,
        max_new_tokens=20,
        steps=7,
        num_return_sequences=n_ret,
        output_history=True,
        return_dict_in_generate=True,
        **sampling,
    )
    assert isinstance(out, DiffusionGenerationOutput)
    assert out.sequences.shape == (3 * n_ret, 26)
    assert torch.equal(out.sequences, expected)
    assert len(out.history) == 7 and all(
        torch.equal(a, b) for a, b in zip(out.history, ref_history, strict=True)
    )
    assert torch.equal(out.sequences[:, :6], ids.repeat_interleave(n_ret, 0))
    # The same draws again: tensors only, and vanilla with a delta-0 watermark.
    torch.manual_seed(123)
    plain = dream_generate(
        model, ids, attention_mask=am, max_new_tokens=20, steps=7, num_return_sequences=n_ret, **sampling
    )
    assert torch.equal(plain, expected)
    for sees in (True, False):
        torch.manual_seed(123)
        zero = dream_generate(
            model,
            ids,
            attention_mask=am,
            max_new_tokens=20,
            steps=7,
            num_return_sequences=n_ret,
            watermark=LRDWMConfig(key="zero", delta=0.0, confidence_sees_watermark=sees),
            **sampling,
        )
        assert torch.equal(zero, expected)


def test_hooks_called_with_documented_arguments(model):
    ids, am = random_prompts(3, 5, seed=2, pad_lengths=[0, 3, 1])
    banned = 7

    def make_hooks(log):
        def tokens_hook(step, x, logits):
            log.append(("tokens", step, x.clone(), None if logits is None else logits.clone()))
            if step == 2:  # an infilling-style edit: force a token into a still-masked position
                x = x.clone()
                x[:, -1] = 11
            return x

        def logits_hook(step, x, logits):
            log.append(("logits", step, x.clone(), logits.clone()))
            logits = logits.clone()
            logits[..., banned] = -1e4
            return logits

        return tokens_hook, logits_hook

    for alg in ("origin", "entropy"):
        ours, ref = [], []
        t_hook, l_hook = make_hooks(ours)
        torch.manual_seed(5)
        out = dream_generate(
            model,
            ids,
            attention_mask=am,
            max_new_tokens=12,
            steps=5,
            alg=alg,
            temperature=0.5,
            generation_tokens_hook_func=t_hook,
            generation_logits_hook_func=l_hook,
        )
        t_hook, l_hook = make_hooks(ref)
        torch.manual_seed(5)
        expected, _ = reference_dream(
            model,
            ids,
            am,
            max_new_tokens=12,
            steps=5,
            alg=alg,
            temperature=0.5,
            tokens_hook=t_hook,
            logits_hook=l_hook,
        )
        assert torch.equal(out, expected)
        assert [(kind, step) for kind, step, *_ in ours] == [("tokens", None)] + [
            (kind, i) for i in range(5) for kind in ("logits", "tokens")
        ]
        assert ours[0][3] is None
        for a, b in zip(ours, ref, strict=True):
            assert a[:2] == b[:2] and torch.equal(a[2], b[2])
            assert (a[3] is None and b[3] is None) or torch.equal(a[3], b[3])
        # The tokens hook gets its step's logits as the logits hook returned them; the forced token stays.
        hooked = ours[1][3].clone()
        hooked[..., banned] = -1e4
        assert torch.equal(ours[2][3], hooked)
        assert (out[:, -1] == 11).all() and not (out[:, 5:] == banned).any()


def test_config_objects_and_defaults(model):
    cfg = DreamSamplingConfig()
    assert (cfg.temperature, cfg.top_p, cfg.top_k, cfg.eps, cfg.steps, cfg.alg, cfg.alg_temp) == (
        0.0,
        None,
        None,
        1e-3,
        512,
        "origin",
        None,
    )
    assert (cfg.output_history, cfg.return_dict_in_generate, cfg.num_return_sequences) == (False, False, 1)
    ids, _ = random_prompts(2, 4, seed=3)
    expected_kwargs = dict(max_new_tokens=10, steps=4, alg="topk_margin", temperature=0.3, top_p=0.9)
    torch.manual_seed(0)
    expected = dream_generate(model, ids, **expected_kwargs)
    # A transformers GenerationConfig carrying Dream's fields, Dream-like objects and dicts are read.
    gc = transformers.GenerationConfig(**expected_kwargs)
    remote_like = SimpleNamespace(**expected_kwargs, eps=1e-3, max_length=20, mask_token_id=MASK, top_k=None)
    for given in (gc, remote_like, dict(expected_kwargs), DreamSamplingConfig(**expected_kwargs)):
        torch.manual_seed(0)
        assert torch.equal(dream_generate(model, ids, given), expected)
    # kwargs override the config object, like Dream's diffusion_generate.
    torch.manual_seed(0)
    over = dream_generate(model, ids, DreamSamplingConfig(steps=99, alg="entropy"), **expected_kwargs)
    assert torch.equal(over, expected)
    # Dream's length rule: default max_length (20) grows with the prompt; an explicit one is absolute.
    assert dream_generate(model, ids, steps=2).shape == (2, 24)
    assert dream_generate(model, ids, steps=2, max_length=9).shape == (2, 9)
    assert dream_generate(model, {"input_ids": ids}, steps=2, max_new_tokens=3).shape == (2, 7)
    with pytest.raises(ValueError, match="max_length"):
        dream_generate(model, ids, steps=2, max_length=4)


@pytest.mark.parametrize(
    "kwargs,match",
    [
        (dict(alg="greedy"), "alg"),
        (dict(steps=0), "steps"),
        (dict(temperature=-1.0), "temperature"),
        (dict(top_p=1.5), "top_p"),
        (dict(top_k=-2), "top_k"),
        (dict(eps=1.0), "eps"),
        (dict(alg_temp=-0.1), "alg_temp"),
        (dict(num_return_sequences=0), "num_return_sequences"),
        (dict(max_new_tokens=0), "max_new_tokens"),
    ],
)
def test_invalid_arguments(model, kwargs, match):
    ids, _ = random_prompts(1, 4)
    with pytest.raises(ValueError, match=match):
        dream_generate(model, ids, **kwargs)
    with pytest.raises(ValueError, match=match):
        DreamSamplingConfig(**kwargs)


def test_other_errors(model):
    ids, _ = random_prompts(1, 4)
    with pytest.raises(TypeError, match="unexpected keyword"):
        dream_generate(model, ids, steps=2, not_an_argument=1)
    with pytest.raises(TypeError, match="watermark"):
        dream_generate(model, ids, steps=2, watermark="secret")
    bare = tiny_qwen2(layers=1)
    del bare.config.mask_token_id
    with pytest.raises(ValueError, match="mask_token_id"):
        dream_generate(bare, ids, steps=2)
    wrong = LRDWMConfig(key="k").construct_processor(vocab_size=V + 1, mask_token_id=MASK)
    with pytest.raises(ValueError, match="vocab_size"):
        dream_generate(model, ids, steps=2, max_new_tokens=4, watermark=wrong)


@pytest.mark.parametrize("attn", ["sdpa", "eager"])
def test_padding_matches_unpadded_run(attn):
    """Left padding (Dream's 4-D mask and position ids) gives the unpadded sequence's logits."""
    model = tiny_qwen2(attn=attn, seed=1)
    short, _ = random_prompts(1, 5, seed=4)
    full, _ = random_prompts(1, 8, seed=5)
    ids = torch.cat([torch.cat([torch.full((1, 3), EOS), short], 1), full])
    am = torch.tensor([[0, 0, 0, 1, 1, 1, 1, 1], [1] * 8])

    def capture(store):
        def hook(step, x, logits):
            store.append(logits.clone())
            return logits

        return hook

    batched, alone_short, alone_full = [], [], []
    kw = dict(max_new_tokens=6, steps=3, alg="entropy")
    out = dream_generate(model, ids, attention_mask=am, generation_logits_hook_func=capture(batched), **kw)
    one = dream_generate(model, short, generation_logits_hook_func=capture(alone_short), **kw)
    two = dream_generate(model, full, generation_logits_hook_func=capture(alone_full), **kw)
    # Row 0 without its pads is the short prompt's run (the shifted logits from position 1 on).
    torch.testing.assert_close(batched[0][0, 4:], alone_short[0][0, 1:], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(batched[0][1], alone_full[0][0], rtol=1e-5, atol=1e-5)
    assert torch.equal(out[0, 3:], one[0]) and torch.equal(out[1], two[0])


# ----------------------------------------------------------------------------------------------
# 2. Watermark detection
# ----------------------------------------------------------------------------------------------
DET_V = 1000


def det_model(dtype=torch.float32):
    # initializer_range 0.2 lets attention matter (a 0.02 init is nearly a bigram model whose output
    # falls into short cycles, and repeated pairs are scored once); logits with a spread of ~1.
    return tiny_qwen2(DET_V, seed=2, init=0.2, logit_std=1.0, dtype=dtype)


def _detect(model, ids, cfg, wm, new, steps, sampling):
    det = LRDWMDetector(cfg, vocab_size=DET_V, ignore_token_ids=[DET_V - 1, DET_V - 2], min_tokens=16)
    torch.manual_seed(0)
    out = dream_generate(model, ids, max_new_tokens=new, steps=steps, watermark=wm, **sampling)
    return det(out[:, ids.shape[1] :], prompt_ids=ids.tolist())


@pytest.mark.parametrize(
    "sampling",
    [
        dict(temperature=0.0, alg="entropy", alg_temp=0.0),
        dict(temperature=0.2, top_p=0.95, alg="entropy", alg_temp=0.0),
    ],
    ids=["greedy", "t0.2-top_p0.95"],
)
def test_watermark_detected_vanilla_not(sampling):
    """20 random prompts, 96 new tokens in 48 steps: z > 4 with the watermark (delta 4), z < 4 without.

    Dream's confidence order makes generation mostly left to right here, so about half of the scored
    events carry the bias: the expected z is ~ 0.5 * E / sqrt(E / 4) ~ 6 for E ~ 150 (deduplicated)
    events; z > 4 leaves room for the spread between prompts. Without the watermark the green events
    are Bernoulli(1/2) draws independent of the text (the key is independent of the model), the
    binomial z is ~N(0, 1) and P(max of 20 > 4) < 20 * 3.2e-5 = 6.4e-4.
    """
    model = det_model()
    ids, _ = random_prompts(20, 8, vocab=DET_V, seed=11)
    cfg = LRDWMConfig(key="dream-detect", delta=4.0)
    marked = _detect(model, ids, cfg, cfg, 96, 48, sampling)
    vanilla = _detect(model, ids, cfg, None, 96, 48, sampling)
    assert (marked.num_tokens_scored >= 16).all() and (vanilla.num_tokens_scored >= 16).all()
    assert marked.z_score.min() > 4, marked.z_score
    assert vanilla.z_score.max() < 4, vanilla.z_score
    assert marked.prediction.all() and not vanilla.prediction.any()


def test_watermark_detected_bf16():
    """The same in bf16 (logits, bias and sampling in bf16), on 6 of the prompts (bf16 is slow on CPU)."""
    model = det_model(torch.bfloat16)
    ids, _ = random_prompts(20, 8, vocab=DET_V, seed=11)
    cfg = LRDWMConfig(key="dream-detect", delta=4.0)
    sampling = dict(temperature=0.2, top_p=0.95, alg="entropy", alg_temp=0.0)
    marked = _detect(model, ids[:6], cfg, cfg, 96, 48, sampling)
    assert marked.z_score.min() > 4, marked.z_score


# ----------------------------------------------------------------------------------------------
# 3. Real vocabulary size
# ----------------------------------------------------------------------------------------------
def test_real_dream_vocabulary():
    big_v = 152064
    model = tiny_qwen2(big_v, layers=1, hidden=32, seed=3)
    mask = big_v - 1
    ids, am = random_prompts(2, 5, vocab=big_v, seed=6, pad_lengths=[2, 0])
    kw = dict(max_new_tokens=8, steps=4, alg="entropy", temperature=0.2, top_p=0.95, alg_temp=0.0)
    torch.manual_seed(1)
    expected, _ = reference_dream(model, ids, am, mask_id=mask, **kw)
    torch.manual_seed(1)
    assert torch.equal(dream_generate(model, ids, attention_mask=am, **kw), expected)
    cfg = LRDWMConfig(key="big", delta=3.0)
    proc = SpyProcessor(config=cfg, vocab_size=big_v, mask_token_id=mask, in_place=True)
    torch.manual_seed(1)
    out = dream_generate(model, ids, attention_mask=am, watermark=proc, **kw)
    assert out.shape == expected.shape and not torch.equal(out, expected)
    canvas, before, after = proc.calls[0]
    green = green_rows(cfg.key_left, ids[:, -1], cfg.gamma, vocab_size=big_v)
    torch.testing.assert_close(after[:, 5] - before[:, 5], cfg.delta * green.float(), rtol=0, atol=1e-5)
    assert proc.cache_nbytes == 0


# ----------------------------------------------------------------------------------------------
# 5. Invariants
# ----------------------------------------------------------------------------------------------
def test_prompt_counts_as_revealed_and_same_step_tokens_are_blind(model):
    cfg = LRDWMConfig(key="inv", delta=2.0)
    proc = SpyProcessor(config=cfg, vocab_size=V, mask_token_id=MASK, in_place=True)
    ids, _ = random_prompts(2, 5, seed=7)
    steps = 4
    out = dream_generate(model, ids, max_new_tokens=16, steps=steps, alg="maskgit_plus", watermark=proc)
    assert len(proc.calls) == steps
    # Step 0: only the position right after the prompt has a revealed neighbour (the prompt's last token).
    canvas, before, after = proc.calls[0]
    diff = after - before
    expected = cfg.delta * green_rows(cfg.key_left, ids[:, -1], cfg.gamma, vocab_size=V).float()
    torch.testing.assert_close(diff[:, 5], expected, rtol=0, atol=1e-5)
    assert diff[:, :5].abs().sum() == 0 and diff[:, 6:].abs().sum() == 0
    # Every step sees the canvas from before the step: tokens revealed in the same step do not see each
    # other, so a position's bias comes only from neighbours revealed at earlier steps.
    found_pair = False
    for step, (canvas, before, after) in enumerate(proc.calls):
        nxt = proc.calls[step + 1][0] if step + 1 < steps else out
        new = (canvas == MASK) & (nxt != MASK)
        fresh = LRDWMLogitsProcessor(config=cfg, vocab_size=V, mask_token_id=MASK)
        assert torch.equal(after, fresh(canvas, before))
        for b in range(2):
            for j in range(5, 20):
                if new[b, j] and new[b, j + 1]:
                    found_pair = True
                    # j's bias has no right part keyed by the token placed at j + 1 in this step.
                    left = green_rows(cfg.key_left, canvas[b, j - 1 : j], cfg.gamma, vocab_size=V)[0].float()
                    want = cfg.delta * left if canvas[b, j - 1] != MASK else torch.zeros(V)
                    torch.testing.assert_close(after[b, j] - before[b, j], want, rtol=0, atol=1e-5)
    assert found_pair


def test_watermark_runs_after_user_logits_hook_and_caches_are_freed(model):
    order = []
    cfg = LRDWMConfig(key="order", delta=2.0)
    proc = SpyProcessor(config=cfg, vocab_size=V, mask_token_id=MASK, in_place=True, log=order)
    hooked = []

    def user_hook(step, x, logits):
        order.append("user")
        logits = logits + 0.5
        hooked.append(logits.clone())
        return logits

    ids, _ = random_prompts(1, 4, seed=8)
    dream_generate(
        model,
        ids,
        max_new_tokens=8,
        steps=3,
        alg="entropy",
        watermark=proc,
        generation_logits_hook_func=user_hook,
    )
    assert order == ["user", "watermark"] * 3
    assert all(torch.equal(h, before) for h, (_, before, _) in zip(hooked, proc.calls, strict=True))
    assert proc.cache_nbytes == 0 and len(proc._cache) == 0
    assert proc.rows_hashed > 0

    # Freed on errors too.
    def failing_hook(step, x, logits):
        if step == 1:
            raise RuntimeError("boom")
        return logits

    with pytest.raises(RuntimeError, match="boom"):
        dream_generate(
            model,
            ids,
            max_new_tokens=8,
            steps=3,
            alg="entropy",
            watermark=proc,
            generation_logits_hook_func=failing_hook,
        )
    assert proc.cache_nbytes == 0


def test_config_watermark_builds_a_fresh_processor_per_call(model, monkeypatch):
    import hf_lrdwm.generation.dream as dream_mod

    built = []
    real = dream_mod.resolve_watermark

    def spy(*args, **kwargs):
        proc = real(*args, **kwargs)
        built.append(proc)
        return proc

    monkeypatch.setattr(dream_mod, "resolve_watermark", spy)
    ids, _ = random_prompts(1, 4, seed=9)
    cfg = LRDWMConfig(key="fresh", delta=2.0)
    dream_generate(model, ids, max_new_tokens=6, steps=3, alg="entropy", watermark=cfg)
    dream_generate(model, ids, max_new_tokens=6, steps=3, alg="entropy", watermark=cfg)
    assert len(built) == 2 and built[0] is not built[1]
    assert all(p.in_place and p.cache_nbytes == 0 for p in built)


def test_watermark_none_takes_no_extra_draws(model):
    ids, _ = random_prompts(2, 4, seed=10)

    def no_mask(step, x, logits):  # the number of draws depends on how many masks remain
        logits[..., MASK] = -1e4
        return logits

    kw = dict(max_new_tokens=8, steps=4, alg="origin", temperature=0.7, generation_logits_hook_func=no_mask)
    torch.manual_seed(3)
    dream_generate(model, ids, **kw)
    after_vanilla = torch.rand(3)
    torch.manual_seed(3)
    dream_generate(model, ids, watermark=LRDWMConfig(key="x"), **kw)
    assert torch.equal(torch.rand(3), after_vanilla)  # the watermark draws nothing from the global RNG


def test_confidence_without_watermark(model):
    """confidence_sees_watermark=False: the remasking order comes from the clean logits, the tokens from
    the watermarked ones, with the same random draws."""
    ids, _ = random_prompts(3, 4, seed=12)
    kw = dict(max_new_tokens=12, steps=4, alg="entropy", alg_temp=0.0)
    vanilla = dream_generate(model, ids, return_dict_in_generate=True, output_history=True, **kw)
    strong = dict(key="conf", delta=8.0)
    blind = dream_generate(
        model,
        ids,
        return_dict_in_generate=True,
        output_history=True,
        watermark=LRDWMConfig(**strong, confidence_sees_watermark=False),
        **kw,
    )
    seeing = dream_generate(
        model, ids, return_dict_in_generate=True, output_history=True, watermark=LRDWMConfig(**strong), **kw
    )
    first = [(h.history[0] != MASK) for h in (vanilla, blind, seeing)]
    assert torch.equal(first[0], first[1])  # same positions revealed at step 0 as without watermark
    assert not torch.equal(first[0], first[2])  # while the seeing confidence moves them
    assert not torch.equal(blind.sequences, vanilla.sequences)  # tokens are watermarked
    # maskgit_plus at temperature > 0: same draws, so delta 0 stays vanilla; a real delta changes tokens.
    kw2 = dict(max_new_tokens=12, steps=4, alg="maskgit_plus", temperature=0.7, alg_temp=0.5)
    torch.manual_seed(4)
    base = dream_generate(model, ids, **kw2)
    torch.manual_seed(4)
    zero = dream_generate(
        model, ids, watermark=LRDWMConfig(key="c", delta=0.0, confidence_sees_watermark=False), **kw2
    )
    assert torch.equal(base, zero)


def test_bf16_matches_reference():
    model = tiny_qwen2(dtype=torch.bfloat16, seed=4)
    ids, am = random_prompts(3, 6, seed=13, pad_lengths=[0, 2, 0])
    for sampling in (
        dict(alg="entropy", temperature=0.0, alg_temp=0.0),
        dict(alg="maskgit_plus", temperature=0.5, top_p=0.95, alg_temp=0.5),
        dict(alg="origin", temperature=0.5, top_k=30),
    ):
        torch.manual_seed(7)
        expected, _ = reference_dream(model, ids, am, max_new_tokens=12, steps=5, **sampling)
        torch.manual_seed(7)
        out = dream_generate(model, ids, attention_mask=am, max_new_tokens=12, steps=5, **sampling)
        assert torch.equal(out, expected), sampling
        torch.manual_seed(7)
        wm = dream_generate(
            model,
            ids,
            attention_mask=am,
            max_new_tokens=12,
            steps=5,
            watermark=LRDWMConfig(key="b", delta=2.0),
            **sampling,
        )
        assert wm.shape == out.shape and wm.dtype == torch.long


# ----------------------------------------------------------------------------------------------
# 6. patch()
# ----------------------------------------------------------------------------------------------
class DreamGenerationMixin:
    """Stand-in for Dream's remote mixin: the documented hook calls in a minimal loop."""

    def diffusion_generate(self, inputs=None, generation_config=None, **kwargs):
        tokens_hook = kwargs.pop("generation_tokens_hook_func", lambda step, x, logits: x)
        logits_hook = kwargs.pop("generation_logits_hook_func", lambda step, x, logits: logits)
        self.received.append(dict(kwargs, generation_config=generation_config, logits_hook=logits_hook))
        steps = kwargs.get("steps", 4)
        new = kwargs.get("max_new_tokens", 8)
        mask = self.generation_config.mask_token_id
        x = F.pad(inputs, (0, new), value=mask)
        x = tokens_hook(None, x, None)
        per_step = math.ceil(new / steps)
        for i in range(steps):
            masked = x == mask
            logits = self(x, None, None).logits
            logits = torch.cat([logits[:, :1], logits[:, :-1]], dim=1)
            logits = logits_hook(i, x, logits)
            best = logits.argmax(-1)
            for b in range(x.shape[0]):  # reveal the leftmost masked positions, greedily
                pos = masked[b].nonzero()[:per_step, 0]
                x[b, pos] = best[b, pos]
            x = tokens_hook(i, x, logits)
        return x


class StandInDream(DreamGenerationMixin, torch.nn.Module):
    def __init__(self, vocab=DET_V):
        super().__init__()
        torch.manual_seed(0)
        self.config = SimpleNamespace(model_type="Dream", vocab_size=vocab, mask_token_id=vocab - 1)
        self.generation_config = SimpleNamespace(mask_token_id=vocab - 1, alg="origin")
        self.embed = torch.nn.Embedding(vocab, 16)
        self.head = torch.nn.Linear(16, vocab)
        self.received = []

    def forward(self, input_ids, attention_mask=None, position_ids=None):
        return SimpleNamespace(logits=self.head(self.embed(input_ids)))


class StandInLLaDA(torch.nn.Module):
    """Remote LLaDA: config fields of its own class (no `use_cache`), forward(input_ids, attention_mask)."""

    def __init__(self, vocab=DET_V):
        super().__init__()
        torch.manual_seed(0)
        self.config = SimpleNamespace(
            model_type="llada", vocab_size=vocab, mask_token_id=vocab - 1, eos_token_id=vocab - 2
        )
        # The network: a tiny bidirectional Llama (what LLaDA is), behind LLaDA's remote interface.
        self.net = transformers.LlamaForCausalLM(
            transformers.LlamaConfig(
                vocab_size=vocab,
                hidden_size=32,
                intermediate_size=64,
                num_hidden_layers=1,
                num_attention_heads=4,
                is_causal=False,
                initializer_range=0.2,
            )
        ).eval()

    def forward(self, input_ids, attention_mask=None, **kwargs):
        return SimpleNamespace(logits=self.net(input_ids=input_ids, attention_mask=attention_mask).logits)


def test_patch_dream_passthrough_and_watermark():
    model = StandInDream()
    ids, _ = random_prompts(6, 6, vocab=DET_V, seed=14)
    run = dict(steps=64, max_new_tokens=64)  # one token per step, left to right
    original = model.diffusion_generate(ids.clone(), **run)
    assert patch(model) is model
    wrapper = model.diffusion_generate
    assert patch(model) is model and model.diffusion_generate is wrapper  # idempotent

    user_log = []

    def user_hook(step, x, logits):
        user_log.append("user")
        return logits

    # watermark=None: everything passed through unchanged, the user's hook included.
    gc = SimpleNamespace(mask_token_id=DET_V - 1)
    out = model.diffusion_generate(ids.clone(), gc, **run, generation_logits_hook_func=user_hook, foo=1)
    assert model.received[-1]["logits_hook"] is user_hook and model.received[-1]["foo"] == 1
    assert model.received[-1]["generation_config"] is gc
    assert torch.equal(out, original)

    # With a watermark: injected through the logits hook, after the user's hook, once per step.
    cfg = LRDWMConfig(key="remote", delta=4.0)
    order = []
    proc = SpyProcessor(config=cfg, vocab_size=DET_V, mask_token_id=DET_V - 1, in_place=True, log=order)

    def ordered_user_hook(step, x, logits):
        order.append("user")
        return logits + 0.25

    wm = model.diffusion_generate(
        ids.clone(), **run, watermark=proc, generation_logits_hook_func=ordered_user_hook
    )
    assert order == ["user", "watermark"] * 64
    with torch.no_grad():
        raw = model(F.pad(ids, (0, 64), value=DET_V - 1)).logits
    shifted = torch.cat([raw[:, :1], raw[:, :-1]], dim=1)
    assert torch.equal(proc.calls[0][1], shifted + 0.25)  # the watermark got the user's hook output
    assert proc.cache_nbytes == 0
    det = LRDWMDetector(cfg, vocab_size=DET_V, ignore_token_ids=[DET_V - 1, DET_V - 2], min_tokens=16)
    assert det(wm[:, 6:], prompt_ids=ids.tolist()).z_score.min() > 4
    assert det(original[:, 6:], prompt_ids=ids.tolist()).z_score.max() < 4
    # A config works as well and gives the same tokens as the processor.
    wm2 = model.diffusion_generate(
        ids.clone(), **run, watermark=cfg, generation_logits_hook_func=lambda s, x, lg: lg + 0.25
    )
    assert torch.equal(wm, wm2)
    # The wrapper shows its own signature and follows the model through copy.deepcopy.
    assert "watermark" in inspect.signature(model.diffusion_generate).parameters
    twin = copy.deepcopy(model)
    n_before = len(model.received)
    twin_out = twin.diffusion_generate(
        ids.clone(), **run, watermark=cfg, generation_logits_hook_func=lambda s, x, lg: lg + 0.25
    )
    assert torch.equal(twin_out, wm) and len(model.received) == n_before and len(twin.received) > n_before
    with pytest.raises(ValueError, match="confidence_sees_watermark"):
        model.diffusion_generate(
            ids, steps=2, alg="entropy", watermark=cfg.copy(confidence_sees_watermark=False)
        )
    with pytest.raises(TypeError, match="watermark"):
        model.diffusion_generate(ids, steps=2, watermark=123)


def test_patch_native_and_unknown_models(model):
    native = attach_diffusion_generate(tiny_qwen2(layers=1), "dream")
    method = native.diffusion_generate
    assert patch(native) is native and native.diffusion_generate is method
    ids, _ = random_prompts(1, 4)
    assert native.diffusion_generate(ids, max_new_tokens=4, steps=2).shape == (1, 8)
    assert hf_lrdwm.generation.patch is patch
    with pytest.raises(TypeError, match="gpt2"):
        patch(SimpleNamespace(config=SimpleNamespace(model_type="gpt2")))
    with pytest.raises(TypeError, match="None"):
        patch(SimpleNamespace())
    with pytest.raises(ValueError, match="diffusion_generate"):
        patch(SimpleNamespace(config=SimpleNamespace(model_type="Dream")))
    with pytest.raises(ValueError, match="mask_token_id"):
        patch(SimpleNamespace(config=SimpleNamespace(model_type="llada")))


def test_patch_llada_attaches_sampler_with_config_ids(monkeypatch):
    calls = []

    def fake_llada_generate(model, input_ids, attention_mask=None, **kwargs):
        calls.append((model, kwargs))
        return input_ids

    fake = types.ModuleType("hf_lrdwm.generation.llada")
    fake.llada_generate = fake_llada_generate
    monkeypatch.setitem(sys.modules, "hf_lrdwm.generation.llada", fake)
    model = StandInLLaDA()
    assert not hasattr(model.config, "use_cache")
    assert patch(model) is model
    method = model.diffusion_generate
    assert patch(model) is model and model.diffusion_generate is method
    assert model.config.use_cache is False and model._hf_lrdwm_family == "llada"
    ids = torch.tensor([[1, 2, 3]])
    model.diffusion_generate(ids, steps=4, gen_length=8, block_length=8)
    assert calls[0][0] is model and calls[0][1] == dict(steps=4, gen_length=8, block_length=8)


def test_patch_llada_runs_real_sampler():
    pytest.importorskip("hf_lrdwm.generation.llada")
    model = patch(StandInLLaDA())
    ids, _ = random_prompts(2, 6, vocab=DET_V, seed=15)
    # A processor built for the config's mask id: the sampler would reject it if it used another one.
    proc = SpyProcessor(
        config=LRDWMConfig(key="llada-remote", delta=4.0), vocab_size=DET_V, mask_token_id=DET_V - 1
    )
    out = model.diffusion_generate(ids, steps=8, gen_length=16, block_length=16, watermark=proc)
    vanilla = model.diffusion_generate(ids, steps=8, gen_length=16, block_length=16)
    assert out.shape == vanilla.shape == (2, 22) and len(proc.calls) == 8
    assert torch.equal(out[:, :6], ids) and not torch.equal(out, vanilla)
