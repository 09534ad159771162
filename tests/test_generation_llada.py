"""LLaDA sampler: fidelity to the official loop, watermark placement and detection, invariants, errors.

Tiny random Llama models with bidirectional attention (``is_causal=False``) stand in for LLaDA. The
reference loop below is a plain transcription of docs/samplers.md (section LLaDA), written
independently of ``hf_lrdwm.generation.llada``: full tensors, out-of-place arithmetic, no shortcuts.
"""

from __future__ import annotations

import gc
import weakref
from collections import Counter

import pytest
import torch
import transformers

from hf_lrdwm import LRDWMConfig, LRDWMDetector, LRDWMLogitsProcessor
from hf_lrdwm.generation import attach_diffusion_generate
from hf_lrdwm.generation.common import DiffusionGenerationOutput
from hf_lrdwm.generation.llada import llada_generate
from hf_lrdwm.hashing import green_rows

LLADA_VOCAB, LLADA_MASK, LLADA_EOS, LLADA_EOT = 126464, 126336, 126081, 126348


ONE_THREAD = True  # conftest.py runs this module on one torch thread (tiny tensors)


def make_model(vocab=256, hidden=32, layers=1, *, seed=0, dtype=torch.float32, ids=True, **extra):
    """A tiny bidirectional Llama with deterministic weights; special ids at the top of the vocabulary.

    ``initializer_range=0.5`` gives peaked, position-dependent logits (the default 0.02 gives nearly
    uniform logits with one dominant token) and a small ``rope_theta`` makes positions differ more.
    """
    torch.manual_seed(seed)
    kwargs = dict(
        vocab_size=vocab,
        hidden_size=hidden,
        intermediate_size=64,
        num_hidden_layers=layers,
        num_attention_heads=4,
        is_causal=False,
        initializer_range=0.5,
        rope_theta=10.0,
    )
    if ids:
        kwargs.update(mask_token_id=vocab - 1, eos_token_id=vocab - 2, eot_token_id=vocab - 3)
    else:
        kwargs.update(eos_token_id=None, bos_token_id=None)
    kwargs.update(extra)
    model = transformers.LlamaForCausalLM(transformers.LlamaConfig(**kwargs)).eval().to(dtype)
    # Like a trained LLaDA, never predict the mask token (a finite value keeps CFG free of NaNs).
    never = kwargs.get("mask_token_id", vocab - 1)
    model.lm_head.register_forward_hook(
        lambda module, args, out: out.index_fill_(-1, torch.tensor([never]), -1e4)
    )
    return model


def rand_prompts(batch, length, vocab, seed):
    return torch.randint(0, vocab - 3, (batch, length), generator=torch.Generator().manual_seed(seed))


# ----------------------------------------------------------------------------------------------
# Reference: the official loop as docs/samplers.md describes it
# ----------------------------------------------------------------------------------------------
def reference_generate(
    model,
    prompt,
    attention_mask=None,
    steps=128,
    gen_length=128,
    block_length=128,
    temperature=0.0,
    cfg_scale=0.0,
    remasking="low_confidence",
    mask_id=None,
    logits_eos_inf=False,
    confidence_eos_eot_inf=False,
    eos_id=None,
    eot_id=None,
    hook=None,
    confidence_from_clean=False,
):
    """Plain transcription of the LLaDA loop. ``hook(canvas, logits) -> logits`` is applied right after
    the (CFG) logits; with ``confidence_from_clean`` the low-confidence score uses the logits before it."""
    batch, plen = prompt.shape
    x = torch.full((batch, plen + gen_length), mask_id, dtype=torch.long)
    x[:, :plen] = prompt.clone()
    if attention_mask is not None:
        attention_mask = torch.cat(
            [attention_mask, torch.ones((batch, gen_length), dtype=attention_mask.dtype)], dim=-1
        )
    prompt_index = x != mask_id
    assert gen_length % block_length == 0
    num_blocks = gen_length // block_length
    assert steps % num_blocks == 0
    steps_per_block = steps // num_blocks
    with torch.no_grad():
        for nb in range(num_blocks):
            lo = plen + nb * block_length
            hi = lo + block_length
            block_masks = (x[:, lo:hi] == mask_id).sum(dim=1)
            k = (
                torch.zeros(batch, steps_per_block, dtype=torch.int64)
                + (block_masks // steps_per_block)[:, None]
            )
            for r in range(batch):
                k[r, : int(block_masks[r] % steps_per_block)] += 1
            for i in range(steps_per_block):
                mask_index = x == mask_id
                if cfg_scale > 0:
                    un_x = x.clone()
                    un_x[prompt_index] = mask_id
                    am = None if attention_mask is None else torch.cat([attention_mask, attention_mask])
                    out = model(torch.cat([x, un_x]), attention_mask=am).logits
                    cond, uncond = out[:batch], out[batch:]
                    logits = uncond + (cfg_scale + 1) * (cond - uncond)
                else:
                    logits = model(x, attention_mask=attention_mask).logits
                clean = logits.clone() if confidence_from_clean else None
                if hook is not None:
                    logits = hook(x, logits)
                if logits_eos_inf:
                    logits[:, :, eos_id] = -torch.inf
                    if clean is not None:
                        clean[:, :, eos_id] = -torch.inf
                if temperature == 0:
                    perturbed = logits
                else:
                    l64 = logits.to(torch.float64)
                    u = torch.rand_like(l64, dtype=torch.float64)
                    perturbed = l64.exp() / (-torch.log(u)) ** temperature
                x0 = torch.argmax(perturbed, dim=-1)
                if confidence_eos_eot_inf:
                    perturbed[:, :, eos_id] = -torch.inf
                    logits[:, :, eot_id] = -torch.inf
                    if clean is not None:
                        clean[:, :, eot_id] = -torch.inf
                        if temperature == 0:
                            clean[:, :, eos_id] = -torch.inf
                if remasking == "low_confidence":
                    probs = torch.softmax(clean if clean is not None else logits, dim=-1)
                    x0_p = torch.gather(probs, -1, x0.unsqueeze(-1)).squeeze(-1)
                else:
                    x0_p = torch.rand((x0.shape[0], x0.shape[1]))
                x0_p[:, hi:] = -torch.inf
                x0 = torch.where(mask_index, x0, x)
                confidence = torch.where(mask_index, x0_p, -torch.inf)
                transfer = torch.zeros_like(x0, dtype=torch.bool)
                for r in range(batch):
                    _, idx = torch.topk(confidence[r], k=int(k[r, i]))
                    transfer[r, idx] = True
                x[transfer] = x0[transfer]
    return x


def _padded_batch(vocab, seed=7):
    """Three prompts of lengths 6, 4 and 2, left-padded (pad id 0) with their attention mask."""
    prompts = rand_prompts(3, 6, vocab, seed)
    mask = torch.ones(3, 6, dtype=torch.long)
    mask[1, :2] = 0
    mask[2, :4] = 0
    prompts[mask == 0] = 0
    return prompts, mask


def _run_both(model, prompt, attention_mask, seed, ids, **kw):
    mask_id, eos_id, eot_id = ids
    torch.manual_seed(seed)
    ours = llada_generate(model, prompt, attention_mask, **kw)
    ref_kw = dict(kw)
    watermark = ref_kw.pop("watermark", None)
    ref_kw.pop("eos_token_id", None)
    ref_kw.pop("eot_token_id", None)
    hook = None
    if watermark is not None:
        hook = watermark.construct_processor(vocab_size=model.config.vocab_size, mask_token_id=mask_id)
    torch.manual_seed(seed)
    ref = reference_generate(
        model,
        prompt,
        attention_mask,
        mask_id=mask_id,
        eos_id=eos_id,
        eot_id=eot_id,
        hook=hook,
        confidence_from_clean=watermark is not None and not watermark.confidence_sees_watermark,
        **ref_kw,
    )
    return ours, ref


@pytest.fixture(scope="module")
def small_model():
    return make_model(vocab=256, hidden=32)


@pytest.fixture(scope="module")
def frequent_ids(small_model):
    """EOS / EoT ids the model often produces (the two most common tokens), so the EOS options bite."""
    out = llada_generate(small_model, rand_prompts(4, 6, 256, 3), steps=16, gen_length=32, block_length=32)
    (eos, _), (eot, _) = Counter(out[:, 6:].flatten().tolist()).most_common(2)
    return 255, eos, eot


FIDELITY_CASES = {
    "T0": dict(temperature=0.0),
    "T0.7": dict(temperature=0.7),
    "T0-random": dict(temperature=0.0, remasking="random"),
    "T0.7-random": dict(temperature=0.7, remasking="random"),
    "T0-cfg": dict(temperature=0.0, cfg_scale=1.5),
    "T0.7-cfg": dict(temperature=0.7, cfg_scale=1.5),
    "semi-ar": dict(temperature=0.7, gen_length=32, block_length=8, steps=16),
    "semi-ar-random-4-per-step": dict(temperature=0.0, remasking="random", block_length=8, steps=8),
    "more-steps-than-tokens": dict(temperature=0.7, gen_length=16, block_length=8, steps=24),
    "uneven-schedule": dict(temperature=0.7, gen_length=30, block_length=10, steps=12),
    "batch-padded": dict(temperature=0.0, batch=True),
    "batch-padded-T0.7-cfg": dict(temperature=0.7, cfg_scale=1.5, batch=True),
    "logits-eos-inf-T0": dict(temperature=0.0, logits_eos_inf=True),
    "logits-eos-inf-T0.7": dict(temperature=0.7, logits_eos_inf=True),
    "conf-eos-eot-inf-T0": dict(temperature=0.0, confidence_eos_eot_inf=True),
    "conf-eos-eot-inf-T0.7": dict(temperature=0.7, confidence_eos_eot_inf=True),
    "both-eos-options-batch-cfg": dict(
        temperature=0.7, logits_eos_inf=True, confidence_eos_eot_inf=True, cfg_scale=1.0, batch=True
    ),
}


@pytest.mark.parametrize("case", list(FIDELITY_CASES), ids=list(FIDELITY_CASES))
def test_matches_official_loop(small_model, frequent_ids, case):
    kw = dict(gen_length=32, block_length=32, steps=16)
    kw.update(FIDELITY_CASES[case])
    mask_id, eos_id, eot_id = frequent_ids
    if kw.pop("batch", False):
        prompt, attn = _padded_batch(256)
    else:
        prompt, attn = rand_prompts(1, 6, 256, 11), None
    ours, ref = _run_both(
        small_model, prompt, attn, 1234, frequent_ids, eos_token_id=eos_id, eot_token_id=eot_id, **kw
    )
    assert ours.dtype == torch.long and ours.shape == (prompt.shape[0], prompt.shape[1] + kw["gen_length"])
    assert torch.equal(ours, ref)
    assert torch.equal(ours[:, : prompt.shape[1]], prompt)


@pytest.mark.parametrize("temperature", [0.0, 0.7])
def test_matches_official_loop_bf16(temperature):
    model = make_model(vocab=256, hidden=32, dtype=torch.bfloat16)
    prompt, attn = _padded_batch(256, seed=5)
    ours, ref = _run_both(
        model,
        prompt,
        attn,
        99,
        (255, 254, 253),
        gen_length=16,
        block_length=8,
        steps=8,
        temperature=temperature,
    )
    assert torch.equal(ours, ref)


def test_eos_options_are_not_vacuous(small_model, frequent_ids):
    """The chosen EOS / EoT ids are frequent, so the options change the output; EOS is then banned."""
    mask_id, eos_id, eot_id = frequent_ids
    prompt = rand_prompts(1, 6, 256, 11)
    kw = dict(gen_length=32, block_length=32, steps=16, eos_token_id=eos_id, eot_token_id=eot_id)
    plain = llada_generate(small_model, prompt, **kw)
    no_eos = llada_generate(small_model, prompt, logits_eos_inf=True, **kw)
    late_eot = llada_generate(small_model, prompt, confidence_eos_eot_inf=True, **kw)
    assert (plain[:, 6:] == eos_id).any()
    assert not (no_eos[:, 6:] == eos_id).any()
    assert not torch.equal(plain, no_eos)
    assert not torch.equal(plain, late_eot)


@pytest.mark.parametrize("sees", [True, False], ids=["confidence-sees-wm", "confidence-from-clean"])
def test_watermark_placement_matches_reference_hook(small_model, frequent_ids, sees):
    """The bias acts right after the (CFG) logits, before the EOS options, the noise and the confidence."""
    mask_id, eos_id, eot_id = frequent_ids
    wm = LRDWMConfig(key="placement", delta=3.0, confidence_sees_watermark=sees)
    prompt, attn = _padded_batch(256, seed=8)
    kw = dict(gen_length=32, block_length=16, steps=16, eos_token_id=eos_id, eot_token_id=eot_id)
    for extra in (
        dict(temperature=0.7, cfg_scale=1.5, logits_eos_inf=True, confidence_eos_eot_inf=True),
        dict(temperature=0.0, confidence_eos_eot_inf=True),
    ):
        ours, ref = _run_both(small_model, prompt, attn, 77, frequent_ids, watermark=wm, **kw, **extra)
        assert torch.equal(ours, ref)
        plain = (
            llada_generate(small_model, prompt, attn, **kw, **extra) if extra["temperature"] == 0 else None
        )
        if plain is not None:
            assert not torch.equal(ours, plain)  # the watermark did something


def test_confidence_default_changes_order_only_through_confidence(small_model):
    """With random remasking the confidence never reads the logits: the option has no effect there."""
    prompt = rand_prompts(2, 6, 256, 4)
    outs = []
    for sees in (True, False):
        torch.manual_seed(5)
        wm = LRDWMConfig(key="k", delta=3.0, confidence_sees_watermark=sees)
        outs.append(
            llada_generate(
                small_model,
                prompt,
                steps=16,
                gen_length=32,
                block_length=16,
                temperature=0.5,
                remasking="random",
                watermark=wm,
            )
        )
    assert torch.equal(outs[0], outs[1])


@pytest.mark.parametrize(
    "kw",
    [
        dict(temperature=0.7),
        dict(temperature=0.7, remasking="random", cfg_scale=1.5),
        dict(temperature=0.0, logits_eos_inf=True, confidence_eos_eot_inf=True),
    ],
    ids=["T0.7", "random-cfg", "T0-eos-options"],
)
@pytest.mark.parametrize("sees", [True, False])
def test_delta_zero_is_vanilla(small_model, kw, sees):
    prompt, attn = _padded_batch(256, seed=9)
    common = dict(gen_length=32, block_length=16, steps=16, **kw)
    torch.manual_seed(21)
    vanilla = llada_generate(small_model, prompt, attn, **common)
    torch.manual_seed(21)
    wm0 = LRDWMConfig(key="zero", delta=0.0, confidence_sees_watermark=sees)
    marked = llada_generate(small_model, prompt, attn, watermark=wm0, **common)
    assert torch.equal(vanilla, marked)


# ----------------------------------------------------------------------------------------------
# Watermark detection
# ----------------------------------------------------------------------------------------------
DET_VOCAB, DET_PROMPT, DET_GEN, DET_STEPS, DET_BLOCK = 1000, 8, 128, 32, 32


@pytest.fixture(scope="module")
def det_model():
    return make_model(vocab=DET_VOCAB, hidden=64)


def _detector(cfg, vocab=DET_VOCAB, ids=None):
    ids = ids or [vocab - 1, vocab - 2, vocab - 3]
    return LRDWMDetector(cfg, vocab_size=vocab, ignore_token_ids=ids, min_tokens=16)


@pytest.mark.parametrize("temperature", [0.0, 0.7])
def test_watermark_detected_and_vanilla_not(det_model, temperature):
    """20 prompts (each drawn from its own seed, generated as one batch), delta 4, 128 tokens.

    Every watermarked output has z > 4. Vanilla outputs are null texts: under a random key P(z > 4) is
    about 3.2e-5 per text (normal tail), so P(any of 20 exceeds 4) < 20 * 3.2e-5 = 6.4e-4.
    """
    cfg = LRDWMConfig(key="detect me", delta=4.0)
    det = _detector(cfg)
    prompts = torch.cat([rand_prompts(1, DET_PROMPT, DET_VOCAB, 1000 + s) for s in range(20)])
    kw = dict(steps=DET_STEPS, gen_length=DET_GEN, block_length=DET_BLOCK, temperature=temperature)
    torch.manual_seed(0)
    marked = llada_generate(det_model, prompts, watermark=cfg, **kw)
    torch.manual_seed(0)
    vanilla = llada_generate(det_model, prompts, **kw)
    z_marked = det(marked[:, DET_PROMPT:], prompt_ids=prompts.tolist()).z_score
    z_vanilla = det(vanilla[:, DET_PROMPT:], prompt_ids=prompts.tolist()).z_score
    assert (z_marked > 4).all(), z_marked
    assert (z_vanilla < 4).all(), z_vanilla


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_dtypes_run_and_detect(dtype):
    model = make_model(vocab=DET_VOCAB, hidden=64, dtype=dtype)
    cfg = LRDWMConfig(key="dtype", delta=4.0)
    prompts = torch.cat([rand_prompts(1, DET_PROMPT, DET_VOCAB, 50 + s) for s in range(4)])
    out = llada_generate(
        model, prompts, steps=DET_STEPS, gen_length=DET_GEN, block_length=DET_BLOCK, watermark=cfg
    )
    assert out.shape == (4, DET_PROMPT + DET_GEN) and out.dtype == torch.long
    z = _detector(cfg)(out[:, DET_PROMPT:], prompt_ids=prompts.tolist()).z_score
    assert (z > 4).all(), (dtype, z)


def test_real_llada_vocabulary():
    """LLaDA-8B's vocabulary (126,464 logits) and special ids: runs, ids in range, bias applied."""
    model = make_model(
        vocab=LLADA_VOCAB,
        hidden=16,
        ids=False,
        mask_token_id=LLADA_MASK,
        eos_token_id=LLADA_EOS,
        eot_token_id=LLADA_EOT,
    )
    prompt = rand_prompts(2, 8, 120000, 2)
    kw = dict(steps=16, gen_length=16, block_length=16, logits_eos_inf=True, confidence_eos_eot_inf=True)
    cfg = LRDWMConfig(key="real vocab", delta=20.0)
    spy = SpyProcessor(config=cfg, vocab_size=LLADA_VOCAB, mask_token_id=LLADA_MASK)
    vanilla = llada_generate(model, prompt, **kw)
    marked = llada_generate(model, prompt, watermark=spy, **kw)
    for out in (vanilla, marked):
        assert out.shape == (2, 24)
        assert int(out.min()) >= 0 and int(out.max()) < LLADA_VOCAB
        assert not (out[:, 8:] == LLADA_MASK).any()
        assert not (out[:, 8:] == LLADA_EOS).any()  # logits_eos_inf
    assert not torch.equal(vanilla, marked)
    _, bias = spy.calls[0]
    for row in range(2):
        green = green_rows(cfg.key_left, prompt[row, -1:], cfg.gamma, vocab_size=LLADA_VOCAB)[0]
        assert torch.equal(bias[row, 8] > 10.0, green)
    # Every chosen token had a biased green candidate above it: check the event counts.
    det = _detector(cfg, vocab=LLADA_VOCAB, ids=[LLADA_MASK, LLADA_EOS, LLADA_EOT])
    z_marked = det(marked[:, 8:], prompt_ids=prompt.tolist()).z_score
    z_vanilla = det(vanilla[:, 8:], prompt_ids=prompt.tolist()).z_score
    assert z_marked.sum() > z_vanilla.sum() + 2, (z_marked, z_vanilla)


# ----------------------------------------------------------------------------------------------
# Invariants: what the processor sees, caches, outputs
# ----------------------------------------------------------------------------------------------
class SpyProcessor(LRDWMLogitsProcessor):
    """Records the canvas it is given and the bias it adds."""

    def __init__(self, **kw):
        super().__init__(**kw)
        self.calls = []

    def __call__(self, input_ids, scores):
        before = scores.clone()
        out = super().__call__(input_ids, scores)
        self.calls.append((input_ids.clone(), (out - before).float()))
        return out


@pytest.mark.parametrize("cfg_scale", [0.0, 1.5])
def test_processor_sees_canvas_before_each_reveal(small_model, cfg_scale):
    cfg = LRDWMConfig(key="spy", delta=2.0)
    spy = SpyProcessor(config=cfg, vocab_size=256, mask_token_id=255)
    prompt = rand_prompts(2, 6, 256, 12)
    # 4 tokens per step: several positions are revealed together in each step.
    out = llada_generate(
        small_model,
        prompt,
        steps=8,
        gen_length=32,
        block_length=16,
        watermark=spy,
        cfg_scale=cfg_scale,
        return_dict_in_generate=True,
        output_history=True,
    )
    assert len(spy.calls) == 8 == len(out.history)
    initial = torch.cat([prompt, torch.full((2, 32), 255)], dim=1)
    befores = [initial] + out.history[:-1]
    for (seen, _), before in zip(spy.calls, befores, strict=True):
        assert torch.equal(seen, before)  # conditional canvas, before this step's reveals
    # First step: the prompt counts as revealed, so the position right after it gets G_L(prompt[-1]).
    _, bias = spy.calls[0]
    for row in range(2):
        green = green_rows(cfg.key_left, prompt[row, -1:], cfg.gamma, vocab_size=256)[0]
        assert torch.equal(bias[row, 6] > 1.0, green)  # delta 2 on the green set (up to rounding)
        assert bias[row, 7:].abs().sum() == 0  # no other masked position has a revealed neighbour
        assert bias[row, :6].abs().sum() == 0  # revealed positions untouched
    # Tokens revealed in the same step did not see each other: a position whose left neighbour was
    # revealed in the same step got no left bias from it.
    checked = 0
    for step, (seen, bias) in enumerate(spy.calls):
        after = out.history[step]
        new = (seen == 255) & (after != 255)
        for row, pos in new.nonzero().tolist():
            if new[row, pos - 1] and pos + 1 < seen.shape[1] and seen[row, pos + 1] == 255:
                assert bias[row, pos].abs().sum() == 0
                checked += 1
    assert checked > 0


def test_caches_freed_and_nothing_kept_on_model(small_model, monkeypatch):
    cfg = LRDWMConfig(key="cache", delta=2.0)
    given = cfg.construct_processor(vocab_size=256, mask_token_id=255)
    before = dict(vars(small_model))
    prompt = rand_prompts(1, 6, 256, 13)
    llada_generate(small_model, prompt, steps=8, gen_length=16, block_length=16, watermark=given)
    assert given.cache_nbytes == 0 and len(given._cache) == 0 and given.rows_hashed > 0

    created = []
    original = LRDWMConfig.construct_processor

    def capture(self, *args, **kw):
        proc = original(self, *args, **kw)
        created.append(weakref.ref(proc))
        assert proc.in_place  # no [B, L, V] copy for configs
        return proc

    monkeypatch.setattr(LRDWMConfig, "construct_processor", capture)
    llada_generate(small_model, prompt, steps=8, gen_length=16, block_length=16, watermark=cfg)
    assert len(created) == 1
    gc.collect()
    assert created[0]() is None  # no reference survives the call
    assert vars(small_model).keys() == before.keys()
    assert all(vars(small_model)[k] is before[k] for k in before)


def test_cache_freed_when_the_model_fails(small_model):
    class Boom(torch.nn.Module):
        def __init__(self, inner):
            super().__init__()
            self.inner, self.config, self.calls = inner, inner.config, 0

        def forward(self, *args, **kw):
            self.calls += 1
            if self.calls == 3:
                raise RuntimeError("boom")
            return self.inner(*args, **kw)

    proc = LRDWMConfig(key="boom", delta=2.0).construct_processor(vocab_size=256, mask_token_id=255)
    with pytest.raises(RuntimeError, match="boom"):
        llada_generate(
            Boom(small_model),
            rand_prompts(1, 6, 256, 1),
            steps=8,
            gen_length=16,
            block_length=16,
            watermark=proc,
        )
    assert proc.rows_hashed > 0 and proc.cache_nbytes == 0


def test_outputs_and_history(small_model):
    prompt = rand_prompts(2, 6, 256, 14)
    kw = dict(steps=12, gen_length=24, block_length=8)
    plain = llada_generate(small_model, prompt, **kw)
    assert isinstance(plain, torch.Tensor) and plain.shape == (2, 30)
    assert isinstance(llada_generate(small_model, prompt, output_history=True, **kw), torch.Tensor)
    res = llada_generate(small_model, prompt, return_dict_in_generate=True, **kw)
    assert isinstance(res, DiffusionGenerationOutput) and res.history is None
    assert torch.equal(res.sequences, plain) and torch.equal(res["sequences"], plain)
    res = llada_generate(small_model, prompt, return_dict_in_generate=True, output_history=True, **kw)
    assert len(res.history) == 12 and all(h.shape == (2, 30) for h in res.history)
    assert torch.equal(res.history[-1], plain)
    masks = [int((h == 255).sum()) for h in res.history]
    assert masks == [2 * (24 - 2 * (s + 1)) for s in range(12)]  # 2 per row per step
    # Semi-autoregressive: after block b's 4 steps, block b is complete and later blocks untouched.
    for b in range(3):
        h = res.history[4 * b + 3]
        assert not (h[:, 6 : 6 + 8 * (b + 1)] == 255).any()
        assert (h[:, 6 + 8 * (b + 1) :] == 255).all()


def test_attached_method_and_ids_from_arguments(small_model):
    prompt = rand_prompts(1, 6, 256, 15)
    kw = dict(steps=8, gen_length=16, block_length=8, temperature=0.7)
    torch.manual_seed(3)
    direct = llada_generate(small_model, prompt, **kw)
    model = attach_diffusion_generate(make_model(vocab=256, hidden=32), "llada")
    torch.manual_seed(3)
    assert torch.equal(model.diffusion_generate(prompt, **kw), direct)
    bare = make_model(vocab=256, hidden=32, ids=False)
    torch.manual_seed(3)
    assert torch.equal(llada_generate(bare, prompt, mask_token_id=255, **kw), direct)


# ----------------------------------------------------------------------------------------------
# Errors
# ----------------------------------------------------------------------------------------------
def test_divisibility_errors_name_the_numbers(small_model):
    prompt = rand_prompts(1, 4, 256, 0)
    with pytest.raises(ValueError, match=r"gen_length.*30.*block_length.*8"):
        llada_generate(small_model, prompt, gen_length=30, block_length=8, steps=8)
    with pytest.raises(ValueError, match=r"steps.*10.*4"):
        llada_generate(small_model, prompt, gen_length=32, block_length=8, steps=10)


def test_unknown_ids(small_model):
    bare = make_model(vocab=64, hidden=32, ids=False)
    prompt = rand_prompts(1, 4, 64, 0)
    with pytest.raises(ValueError, match="mask token id"):
        llada_generate(bare, prompt, steps=4, gen_length=4, block_length=4)
    with pytest.raises(ValueError, match="logits_eos_inf.*EOS"):
        llada_generate(
            bare, prompt, steps=4, gen_length=4, block_length=4, mask_token_id=63, logits_eos_inf=True
        )
    bare.config.eos_token_id = 62
    with pytest.raises(ValueError, match="EoT"):
        llada_generate(
            bare, prompt, steps=4, gen_length=4, block_length=4, mask_token_id=63, confidence_eos_eot_inf=True
        )
    with pytest.raises(ValueError, match="outside the model's vocabulary"):
        llada_generate(bare, prompt, steps=4, gen_length=4, block_length=4, mask_token_id=64)


@pytest.mark.parametrize(
    "args, kw, exc, match",
    [
        ((), dict(remasking="top_k"), ValueError, "remasking"),
        ((), dict(temperature=-0.1), ValueError, "temperature"),
        ((), dict(temperature=float("nan")), ValueError, "temperature"),
        ((), dict(cfg_scale=-1.0), ValueError, "cfg_scale"),
        ((), dict(steps=0), ValueError, "steps"),
        ((), dict(gen_length=2.5), TypeError, "gen_length"),
        ((torch.ones(1, 3, dtype=torch.long),), {}, ValueError, "attention_mask"),
        ((), dict(watermark="key"), TypeError, "watermark"),
    ],
)
def test_bad_arguments(small_model, args, kw, exc, match):
    prompt = rand_prompts(1, 4, 256, 0)
    with pytest.raises(exc, match=match):
        llada_generate(small_model, prompt, *args, **{"steps": 4, "gen_length": 4, "block_length": 4, **kw})


def test_bad_input_ids_and_processor(small_model):
    kw = dict(steps=4, gen_length=4, block_length=4)
    with pytest.raises(ValueError, match=r"\[batch, prompt_len\]"):
        llada_generate(small_model, torch.arange(4), **kw)
    with pytest.raises(TypeError, match="integer"):
        llada_generate(small_model, torch.zeros(1, 4), **kw)
    wrong = LRDWMConfig(key="x").construct_processor(vocab_size=100, mask_token_id=99)
    with pytest.raises(ValueError, match="vocab_size=100"):
        llada_generate(small_model, rand_prompts(1, 4, 256, 0), watermark=wrong, **kw)
