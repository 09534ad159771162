"""Peer re-implementations (hf_lrdwm.baselines): interface, exact semantics on small V, samplers."""

from __future__ import annotations

import pytest
import torch

from hf_lrdwm import LRDWMConfig, LRDWMLogitsProcessor
from hf_lrdwm.baselines import (
    DMarkStyleProcessor,
    KGWLeftProcessor,
    WMDLMStyleProcessor,
    build_dmark_table,
    dmark_table_nbytes,
)
from hf_lrdwm.hashing import green_pairs, green_rows

V = 61
MASK = 60


def _canvas(B: int = 2, L: int = 13, seed: int = 0) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, MASK, (B, L), generator=gen)
    masked = torch.rand(B, L, generator=gen) < 0.5
    return torch.where(masked, torch.full_like(ids, MASK), ids)


def _scores(B: int = 2, L: int = 13, seed: int = 1) -> torch.Tensor:
    return torch.randn(B, L, V, generator=torch.Generator().manual_seed(seed))


CFG = LRDWMConfig(key="baselines", delta=1.5, gamma=0.25)
ALL = [
    lambda **kw: KGWLeftProcessor(config=CFG, vocab_size=V, mask_token_id=MASK, **kw),
    lambda **kw: KGWLeftProcessor(config=CFG, vocab_size=V, mask_token_id=MASK, green="lrdwm", **kw),
    lambda **kw: DMarkStyleProcessor(config=CFG, vocab_size=V, mask_token_id=MASK, **kw),
    lambda **kw: WMDLMStyleProcessor(config=CFG, vocab_size=V, mask_token_id=MASK, **kw),
    lambda **kw: WMDLMStyleProcessor(config=CFG, vocab_size=V, mask_token_id=MASK, context="both", **kw),
    lambda **kw: WMDLMStyleProcessor(
        config=CFG, vocab_size=V, mask_token_id=MASK, context="both", conv="fft", **kw
    ),
]


@pytest.mark.parametrize("make", ALL)
def test_interface_in_place_and_revealed_untouched(make):
    canvas, scores = _canvas(), _scores()
    proc = make()
    assert isinstance(proc, LRDWMLogitsProcessor)  # accepted by every sampler's `watermark=`
    assert proc.vocab_size == V and proc.mask_token_id == MASK and proc.config.confidence_sees_watermark
    out = proc(canvas, scores)
    assert out is not scores and out.shape == scores.shape
    revealed = canvas != MASK
    assert torch.equal(out[revealed], scores[revealed])
    assert not torch.equal(out, scores)
    proc_ip = make(in_place=True)
    work = scores.clone()
    assert proc_ip(canvas, work) is work
    assert torch.allclose(work, out)
    proc_ip.reset()
    with pytest.raises(ValueError):
        proc(canvas, scores[..., :-1])


def test_kgw_left_with_our_hash_equals_lrdwm_left_only():
    canvas, scores = _canvas(), _scores()
    ours = CFG.copy(sides="left").construct_processor(vocab_size=V, mask_token_id=MASK)
    kgw = KGWLeftProcessor(config=CFG, vocab_size=V, mask_token_id=MASK, green="lrdwm")
    assert torch.equal(kgw(canvas, scores), ours(canvas, scores))


def test_kgw_left_randperm_semantics():
    canvas = torch.tensor([[5, MASK, MASK, 7, MASK, 0, MASK]])
    scores = _scores(1, 7)
    proc = KGWLeftProcessor(config=CFG, vocab_size=V, mask_token_id=MASK, hashing_key=15485863)
    out = proc(canvas, scores)
    diff = out - scores
    expected = torch.zeros_like(diff)
    for pos, ctx in ((1, 5), (4, 7), (6, 0)):  # a mask after a revealed token; (2) follows a mask
        gen = torch.Generator().manual_seed(15485863 * ctx)
        expected[0, pos, torch.randperm(V, generator=gen)[: int(V * CFG.gamma)]] = CFG.delta
    assert torch.allclose(diff, expected)
    # KGW's seeding: context 0 gets the same green list for every key.
    other = KGWLeftProcessor(config=CFG, vocab_size=V, mask_token_id=MASK, hashing_key=99)
    assert torch.equal(proc.greenlist(0), other.greenlist(0))
    assert not torch.equal(proc.greenlist(5), other.greenlist(5))


@pytest.mark.parametrize("source", ["rng", "hash"])
@pytest.mark.parametrize("bidirectional", [True, False])
def test_dmark_bias_is_row_plus_column(source, bidirectional):
    canvas, scores = _canvas(), _scores()
    proc = DMarkStyleProcessor(
        config=CFG, vocab_size=V, mask_token_id=MASK, table_source=source, bidirectional=bidirectional
    )
    G = proc.table
    assert G.shape == (V, V) and G.dtype == torch.bool and proc.build_seconds >= 0
    assert abs(G.float().mean().item() - CFG.gamma) < 0.05
    out = proc(canvas, scores)
    expected = scores.clone()
    B, L = canvas.shape
    for b in range(B):
        for i in range(L):
            if canvas[b, i] != MASK:
                continue
            if i > 0 and canvas[b, i - 1] != MASK:
                expected[b, i] += CFG.delta * G[canvas[b, i - 1]].float()
            if bidirectional and i < L - 1 and canvas[b, i + 1] != MASK:
                expected[b, i] += CFG.delta * G[:, canvas[b, i + 1]].float()
    assert torch.allclose(out, expected)


def test_dmark_table_sources_and_size():
    key = CFG.key_left & 0xFFFFFFFF
    table = build_dmark_table(V, key, 0.5, source="hash")
    assert torch.equal(table, green_rows(key, torch.arange(V), 0.5, vocab_size=V))
    rng = build_dmark_table(V, key, 0.5, source="rng")
    gen = torch.Generator().manual_seed(3 * key)
    assert torch.equal(rng[3], torch.empty(V).uniform_(0, 1, generator=gen) < 0.5)
    assert torch.equal(rng[0], build_dmark_table(V, key + 1, 0.5)[0])  # DMARK: row 0 ignores the key
    assert dmark_table_nbytes(126464) == 126464**2
    assert dmark_table_nbytes(152064, packed=True) == -(-(152064**2) // 8)
    with pytest.raises(MemoryError, match="GB"):
        DMarkStyleProcessor(config=CFG, vocab_size=126464, mask_token_id=0)


def _green_matrix(n_ctx: int) -> torch.Tensor:
    ctx = torch.arange(n_ctx)[:, None]
    return green_pairs(CFG.key_left, ctx, torch.arange(V)[None, :], CFG.gamma).double()


def test_wmdlm_left_gradient_closed_form():
    """top_k = V: J = sum_t q_{t-1}^T G q_t, so dJ/dq_t = G^T q_{t-1} + G q_{t+1}."""
    proc = WMDLMStyleProcessor(config=CFG, vocab_size=V, mask_token_id=MASK, top_k=V)
    canvas = torch.tensor([[3, MASK, MASK, 9, MASK, MASK]])
    scores = _scores(1, 6)
    q = proc.distributions(canvas, scores).double()
    assert torch.allclose(q.sum(-1), torch.ones(1, 6, dtype=torch.float64))
    assert q[0, 0, 3] == 1 and q[0, 3, 9] == 1
    G = _green_matrix(V)
    expected = torch.zeros_like(q)
    expected[:, 1:] += q[:, :-1] @ G
    expected[:, :-1] += q[:, 1:] @ G.T
    grad = proc.gradient(canvas, scores)
    assert torch.allclose(grad.double(), expected, atol=1e-5)
    out = proc(canvas, scores)
    masked = (canvas == MASK)[..., None]
    assert torch.allclose(out, scores + CFG.delta * grad * masked)


@pytest.mark.parametrize("conv", ["outer", "fft"])
def test_wmdlm_both_gradient_matches_finite_differences(conv):
    proc = WMDLMStyleProcessor(
        config=CFG, vocab_size=V, mask_token_id=MASK, context="both", conv=conv, top_k=6
    )
    canvas = torch.tensor([[3, MASK, MASK, 9, MASK]])
    q = proc.distributions(canvas, _scores(1, 5) * 3).double().requires_grad_(True)
    (grad,) = torch.autograd.grad(proc.energy(q), q)
    eps = 1e-6
    vals, idx = q.detach().topk(3, dim=-1)
    checked = 0
    for t in (1, 2, 4):  # masked positions' top entries: the truncation is locally constant there
        for v in idx[0, t].tolist():
            bump = torch.zeros_like(q)
            bump[0, t, v] = eps
            with torch.no_grad():
                fd = (proc.energy(q + bump) - proc.energy(q - bump)) / (2 * eps)
            assert abs(fd.item() - grad[0, t, v].item()) < 1e-6
            checked += 1
    assert checked == 9 and grad.abs().sum() > 0


@pytest.mark.parametrize("family", ["llada", "dream"])
def test_samplers_run_with_every_baseline(family):
    from hf_lrdwm.generation.dream import dream_generate
    from hf_lrdwm.generation.llada import llada_generate
    from hf_lrdwm.models import tiny_model

    vocab = 256
    model = tiny_model(family, vocab_size=vocab, hidden_size=32, num_layers=1)
    mask = model.config.mask_token_id
    prompt = torch.randint(0, vocab - 8, (2, 6), generator=torch.Generator().manual_seed(0))
    cfg = LRDWMConfig(key="samplers", delta=30.0, gamma=0.5)
    procs = [
        KGWLeftProcessor(config=cfg, vocab_size=vocab, mask_token_id=mask),
        DMarkStyleProcessor(config=cfg, vocab_size=vocab, mask_token_id=mask),
        WMDLMStyleProcessor(config=cfg, vocab_size=vocab, mask_token_id=mask, context="both"),
    ]

    def run(wm):
        torch.manual_seed(0)
        if family == "llada":
            return llada_generate(model, prompt, steps=8, gen_length=8, block_length=8, watermark=wm)
        return dream_generate(model, prompt, max_new_tokens=8, steps=8, alg="entropy", watermark=wm)

    vanilla = run(None)
    for proc in procs:
        out = run(proc)
        assert out.shape == vanilla.shape == (2, 14)
        assert torch.equal(out[:, :6], prompt) and not (out == mask).any()
        assert not torch.equal(out, vanilla), type(proc).__name__  # the bias changed the text
