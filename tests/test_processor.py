"""LRDWMLogitsProcessor: exact semantics (contract 3), dtypes, in/out of place, the row cache."""

from __future__ import annotations

import pytest
import torch
from transformers import LogitsProcessorList

from hf_lrdwm import LRDWMConfig, LRDWMLogitsProcessor
from hf_lrdwm.hashing import green_reference

V = 97
MASK = 96


def _expected_counts(canvas: torch.Tensor, cfg: LRDWMConfig, vocab: int, mask: int) -> torch.Tensor:
    """m_L + m_R for every (b, i, v), written position by position from the definition."""
    B, L = canvas.shape
    m = torch.zeros(B, L, vocab, dtype=torch.int64)
    for b in range(B):
        for i in range(L):
            if canvas[b, i] != mask:
                continue
            if cfg.use_left and i > 0 and canvas[b, i - 1] != mask:
                c = int(canvas[b, i - 1])
                m[b, i] += torch.tensor(
                    [green_reference(cfg.key_left, c, v, cfg.gamma) for v in range(vocab)]
                )
            if cfg.use_right and i < L - 1 and canvas[b, i + 1] != mask:
                c = int(canvas[b, i + 1])
                m[b, i] += torch.tensor(
                    [green_reference(cfg.key_right, c, v, cfg.gamma) for v in range(vocab)]
                )
    return m


def _random_canvas(B: int, L: int, p_mask: float, seed: int) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, MASK, (B, L), generator=gen)
    masked = torch.rand(B, L, generator=gen) < p_mask
    return torch.where(masked, torch.full_like(ids, MASK), ids)


@pytest.mark.parametrize("sides", ["both", "left", "right"])
@pytest.mark.parametrize("gamma", [0.25, 0.5])
def test_exact_difference_fp32(sides, gamma):
    cfg = LRDWMConfig(key="exact", delta=2.5, gamma=gamma, sides=sides)
    canvas = _random_canvas(3, 17, 0.6, seed=1)
    canvas[0, :] = MASK  # a row with no revealed token: nothing changes
    canvas[1, 0] = MASK  # edge positions have one possible neighbour
    canvas[1, -1] = MASK
    scores = torch.randn(3, 17, V, generator=torch.Generator().manual_seed(2))
    proc = cfg.construct_processor(vocab_size=V, mask_token_id=MASK)
    out = proc(canvas, scores)
    m = _expected_counts(canvas, cfg, V, MASK)
    assert torch.equal(out, scores + cfg.delta * m.float())
    revealed = canvas != MASK
    assert torch.equal(out[revealed], scores[revealed])
    assert torch.equal(out[0], scores[0])
    assert int(m.sum()) > 0  # the test exercised some bias


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_exact_difference_low_precision(dtype):
    """In bf16/fp16 the bias is one addition of delta * (m_L + m_R) in the logits' dtype."""
    cfg = LRDWMConfig(key="lowp", delta=3.0)
    canvas = _random_canvas(2, 25, 0.5, seed=3)
    scores = (torch.randn(2, 25, V, generator=torch.Generator().manual_seed(4)) * 8).to(dtype)
    out = cfg.construct_processor(vocab_size=V, mask_token_id=MASK)(canvas, scores)
    assert out.dtype == dtype and out.shape == scores.shape
    m = _expected_counts(canvas, cfg, V, MASK)
    expected = scores + (cfg.delta * m).to(dtype)
    assert torch.equal(out, expected)


def test_out_of_place_leaves_input_and_in_place_reuses_it():
    cfg = LRDWMConfig(key="inplace")
    canvas = _random_canvas(2, 12, 0.5, seed=5)
    scores = torch.randn(2, 12, V)
    keep = scores.clone()
    out = LRDWMLogitsProcessor(config=cfg, vocab_size=V, mask_token_id=MASK)(canvas, scores)
    assert torch.equal(scores, keep) and out.data_ptr() != scores.data_ptr()
    out2 = LRDWMLogitsProcessor(config=cfg, vocab_size=V, mask_token_id=MASK, in_place=True)(canvas, scores)
    assert out2.data_ptr() == scores.data_ptr()
    assert torch.equal(out2, out)


def test_batch_rows_independent_and_non_contiguous_scores():
    cfg = LRDWMConfig(key="batch")
    canvas = _random_canvas(4, 20, 0.5, seed=6)
    scores = torch.randn(20, 4, V).transpose(0, 1)  # non-contiguous [4, 20, V]
    proc = cfg.construct_processor(vocab_size=V, mask_token_id=MASK)
    out = proc(canvas, scores)
    for b in range(4):
        single = proc(canvas[b : b + 1], scores[b : b + 1].contiguous())
        assert torch.equal(out[b : b + 1], single)


def test_works_inside_logits_processor_list():
    cfg = LRDWMConfig(key="list", delta=1.0)
    canvas = _random_canvas(1, 10, 0.5, seed=7)
    scores = torch.randn(1, 10, V)
    proc = cfg.construct_processor(vocab_size=V, mask_token_id=MASK)
    via_list = LogitsProcessorList([proc])(canvas, scores)
    assert torch.equal(via_list, proc(canvas, scores))


def test_delta_zero_is_identity():
    cfg = LRDWMConfig(key="zero", delta=0.0)
    canvas = _random_canvas(2, 10, 0.5, seed=8)
    scores = torch.randn(2, 10, V)
    assert torch.equal(cfg.construct_processor(vocab_size=V, mask_token_id=MASK)(canvas, scores), scores)


def test_rows_are_hashed_once_while_on_the_frontier_and_cache_is_bounded():
    cfg = LRDWMConfig(key="cache")
    proc = cfg.construct_processor(vocab_size=V, mask_token_id=MASK)
    canvas = torch.tensor([[3, MASK, MASK, 9, MASK, 4]])
    scores = torch.zeros(1, 6, V)
    proc(canvas, scores)
    first = proc.rows_hashed
    assert first == 4  # left rows of 3, 9 and right rows of 9, 4
    proc(canvas, scores)
    assert proc.rows_hashed == first  # nothing recomputed on the next step
    canvas2 = canvas.clone()
    canvas2[0, 1] = 5  # 5 revealed: position 2 now has left context 5 (new) and right context 9 (cached)
    proc(canvas2, scores)
    assert proc.rows_hashed == first + 1
    assert proc.cache_nbytes == len(proc._cache) * V
    proc.reset()
    assert proc.cache_nbytes == 0
    small = cfg.construct_processor(vocab_size=V, mask_token_id=MASK, max_cached_rows=1)
    small(canvas, scores)
    assert len(small._cache) == 1


def test_cache_is_correct_across_unrelated_calls():
    """The cache is keyed by content, so canvases of different requests never mix."""
    cfg = LRDWMConfig(key="content")
    proc = cfg.construct_processor(vocab_size=V, mask_token_id=MASK, in_place=False)
    fresh = cfg.construct_processor(vocab_size=V, mask_token_id=MASK)
    for seed in range(5):
        canvas = _random_canvas(2, 15, 0.5, seed=100 + seed)
        scores = torch.randn(2, 15, V)
        fresh.reset()
        assert torch.equal(proc(canvas, scores), fresh(canvas, scores))


@pytest.mark.parametrize(
    "ids,scores,match",
    [
        (torch.zeros(2, 5, dtype=torch.long), torch.zeros(2, 5), "must be logits for every canvas position"),
        (torch.zeros(5, dtype=torch.long), torch.zeros(1, 5, V), "canvas"),
        (torch.zeros(2, 5, dtype=torch.long), torch.zeros(2, 6, V), "does not match"),
        (torch.zeros(2, 5, dtype=torch.long), torch.zeros(2, 5, V + 1), "vocab_size=97"),
        (torch.zeros(2, 5), torch.zeros(2, 5, V), "integer token ids"),
        (torch.zeros(2, 5, dtype=torch.long), torch.zeros(2, 5, V, dtype=torch.long), "floating point"),
        ([[1, 2]], torch.zeros(1, 2, V), "expects tensors"),
    ],
)
def test_bad_input_errors(ids, scores, match):
    proc = LRDWMConfig(key="err").construct_processor(vocab_size=V, mask_token_id=MASK)
    with pytest.raises((ValueError, TypeError), match=match):
        proc(ids, scores)


def test_bad_construction_errors():
    cfg = LRDWMConfig(key="err")
    with pytest.raises(ValueError, match="vocab_size"):
        cfg.construct_processor(vocab_size=0, mask_token_id=1)
    with pytest.raises(ValueError, match="mask_token_id"):
        cfg.construct_processor(vocab_size=10, mask_token_id=-1)
    with pytest.raises(TypeError, match="LRDWMConfig"):
        LRDWMLogitsProcessor(config={"key": "x"}, vocab_size=10, mask_token_id=1)


def test_repr_hides_keys():
    cfg = LRDWMConfig(key="super-secret-passphrase")
    text = repr(cfg.construct_processor(vocab_size=V, mask_token_id=MASK))
    assert "super-secret" not in text
    assert f"{cfg.key_left:x}" not in text and str(cfg.key_left) not in text


def test_real_vocabulary_sizes():
    """Real LLaDA / Dream logit sizes: bias rows agree with the reference at sampled candidates."""
    for vocab, mask in ((126_464, 126_336), (152_064, 151_666)):
        cfg = LRDWMConfig(key="real-v", delta=2.0)
        canvas = torch.tensor([[11, mask, mask, 2024]])
        scores = torch.zeros(1, 4, vocab)
        out = cfg.construct_processor(vocab_size=vocab, mask_token_id=mask)(canvas, scores)
        sample = torch.randint(0, vocab, (300,), generator=torch.Generator().manual_seed(vocab)).tolist()
        for v in sample:
            assert out[0, 1, v].item() == 2.0 * green_reference(cfg.key_left, 11, v, 0.5)
            assert out[0, 2, v].item() == 2.0 * green_reference(cfg.key_right, 2024, v, 0.5)
        frac = (out[0, 1] > 0).float().mean().item()
        assert abs(frac - 0.5) < 0.01


# ----------------------------------------------------------------------------------------------
# Strategies: "batched" (the GPU path, also runnable on a CPU) gives the same bits as "cached"
# ----------------------------------------------------------------------------------------------
DTYPES = [torch.float32, torch.bfloat16, torch.float16]


@pytest.mark.parametrize("sides", ["both", "left", "right"])
@pytest.mark.parametrize("dtype", DTYPES, ids=["fp32", "bf16", "fp16"])
@pytest.mark.parametrize("delta", [2.0, 1.3])
def test_batched_strategy_is_bit_identical_to_cached(sides, dtype, delta):
    # 3 rows x 40 positions, ~60% masks: more than one batch of 8 positions, both neighbour kinds.
    canvas = _random_canvas(3, 40, 0.6, seed=5)
    scores = torch.randn(3, 40, V, generator=torch.Generator().manual_seed(6)).to(dtype)
    cfg = LRDWMConfig(key="strategies", delta=delta, sides=sides, gamma=0.3)
    cached = cfg.construct_processor(vocab_size=V, mask_token_id=MASK, strategy="cached")
    batched = cfg.construct_processor(vocab_size=V, mask_token_id=MASK, strategy="batched")
    expected = cached(canvas, scores)
    assert torch.equal(batched(canvas, scores), expected)
    # Non-contiguous logits and in-place use go through the same path.
    strided = scores.transpose(0, 1).contiguous().transpose(0, 1)
    assert torch.equal(batched(canvas, strided), expected)
    work = scores.clone()
    in_place = cfg.construct_processor(vocab_size=V, mask_token_id=MASK, strategy="batched", in_place=True)
    assert in_place(canvas, work).data_ptr() == work.data_ptr() and torch.equal(work, expected)
    # And both match the definition (m_L + m_R from the plain-Python reference).
    m = _expected_counts(canvas, cfg, V, MASK)
    assert torch.equal(expected.float() - scores.float() != 0, m != 0)
    assert batched._cache == {} and batched.rows_hashed > 0


def test_batched_strategy_edge_cases():
    cfg = LRDWMConfig(key="edges", delta=2.0)
    proc = cfg.construct_processor(vocab_size=V, mask_token_id=MASK, strategy="batched")
    all_masks = torch.full((2, 6), MASK)
    none_masked = torch.arange(12).reshape(2, 6)
    scores = torch.randn(2, 6, V)
    assert torch.equal(proc(all_masks, scores), scores)  # no revealed neighbour: nothing to add
    assert torch.equal(proc(none_masked, scores), scores)  # no mask: nothing to add
    assert proc.rows_hashed == 0


def test_strategy_argument_is_checked_and_shown():
    cfg = LRDWMConfig(key="err")
    with pytest.raises(ValueError, match="strategy"):
        cfg.construct_processor(vocab_size=V, mask_token_id=MASK, strategy="fast")
    assert "strategy='auto'" in repr(cfg.construct_processor(vocab_size=V, mask_token_id=MASK))


@pytest.mark.parametrize("family", ["llada", "dream"])
def test_samplers_give_the_same_tokens_with_either_strategy(family):
    """A whole generation with the "batched" processor (what CUDA logits get) equals the "cached" one."""
    from hf_lrdwm.generation.dream import dream_generate
    from hf_lrdwm.generation.llada import llada_generate
    from hf_lrdwm.models import tiny_model

    vocab = 500
    model = tiny_model(family, vocab_size=vocab)
    mask = model.config.mask_token_id
    cfg = LRDWMConfig(key=f"strategy-{family}", delta=3.0)
    prompts = torch.randint(0, vocab - 8, (2, 6), generator=torch.Generator().manual_seed(9))
    outs = {}
    for strategy in ("cached", "batched"):
        proc = cfg.construct_processor(vocab_size=vocab, mask_token_id=mask, strategy=strategy)
        torch.manual_seed(0)
        if family == "llada":
            outs[strategy] = llada_generate(
                model, prompts, steps=16, gen_length=32, block_length=16, watermark=proc
            )
        else:
            outs[strategy] = dream_generate(
                model, prompts, steps=16, max_new_tokens=32, temperature=0.5, alg="entropy", watermark=proc
            )
        assert proc.rows_hashed > 0
    torch.manual_seed(0)
    vanilla = (
        llada_generate(model, prompts, steps=16, gen_length=32, block_length=16)
        if family == "llada"
        else dream_generate(model, prompts, steps=16, max_new_tokens=32, temperature=0.5, alg="entropy")
    )
    assert torch.equal(outs["cached"], outs["batched"])
    assert not torch.equal(outs["cached"], vanilla)  # the watermark changed the output


def test_batched_strategy_with_ids_outside_the_vocabulary():
    """A revealed neighbour whose id is >= V (a prompt from a larger tokenizer) is hashed, not looked up."""
    cfg = LRDWMConfig(key="big-ids", delta=2.0)
    canvas = torch.tensor([[V + 5, MASK, MASK, 3], [1, MASK, 2 * V, MASK]])
    scores = torch.randn(2, 4, V, generator=torch.Generator().manual_seed(1))
    cached = cfg.construct_processor(vocab_size=V, mask_token_id=MASK, strategy="cached")(canvas, scores)
    batched = cfg.construct_processor(vocab_size=V, mask_token_id=MASK, strategy="batched")(canvas, scores)
    assert torch.equal(batched, cached)
    for v in (0, 17, V - 2):  # the bias at position 1 of row 0 comes from context V + 5
        added = float(cached[0, 1, v] - scores[0, 1, v])
        assert added == pytest.approx(2.0 * green_reference(cfg.key_left, V + 5, v, 0.5), abs=1e-5)
