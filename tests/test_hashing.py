"""The keyed green-list function: golden vectors, torch == reference, and its statistics.

Statistical bounds: a count X ~ Binomial(n, p) is accepted when |X - n p| <= Z * sqrt(n p (1 - p)) with
Z = 5 (two-sided normal tail ~5.7e-7 per check), or Z = 6 where many checks are made at once
(tail ~2e-9 each), so a correct hash fails any of these tests with probability < 1e-4 overall while a
biased or correlated hash (bias >= ~1%) fails them with near certainty at the sample sizes used.
"""

from __future__ import annotations

import math

import pytest
import torch

from hf_lrdwm.hashing import (
    HASH_SCHEME,
    candidate_words,
    context_seeds,
    derive_key,
    green_block,
    green_from_seeds,
    green_pairs,
    green_probability,
    green_reference,
    green_rows,
    green_threshold,
    hash_value_reference,
)

V_LLADA = 126_464

# (key, context, candidate, 53-bit hash value, green at gamma 0.25, green at gamma 0.5).
# These pin the scheme "lrdwm-splitmix64-v1" (docs/hashing.md); changing them breaks every watermark.
GOLDEN = [
    (0x0000000000000000, 0, 0, 0x14330FCF753B1D, False, False),
    (0x0000000000000000, 1, 0, 0x1C3DC0A561BE5B, False, False),
    (0x0000000000000000, 42, 1000, 0x09F8447A7CBA62, False, True),
    (0x0000000000000000, 126335, 126463, 0x0A742682323516, False, True),
    (0x0000000000000000, 151665, 151643, 0x1722C61D7DC1A1, False, False),
    (0x0123456789ABCDEF, 0, 0, 0x1499E5956CEF4A, False, False),
    (0x0123456789ABCDEF, 1, 0, 0x1D1B738F322B5B, False, False),
    (0x0123456789ABCDEF, 42, 1000, 0x112E3BD9A342BE, False, False),
    (0x0123456789ABCDEF, 126335, 126463, 0x0AB3C8B9357A03, False, True),
    (0x0123456789ABCDEF, 151665, 151643, 0x1BB3C45DB1AC48, False, False),
    (0xFFFFFFFFFFFFFFFF, 0, 0, 0x15DF94DCB0C1E3, False, False),
    (0xFFFFFFFFFFFFFFFF, 1, 0, 0x0BD03B8D3C1838, False, True),
    (0xFFFFFFFFFFFFFFFF, 42, 1000, 0x15AB7E12ED3E99, False, False),
    (0xFFFFFFFFFFFFFFFF, 126335, 126463, 0x06F50A6BCFCB8F, True, True),
    (0xFFFFFFFFFFFFFFFF, 151665, 151643, 0x17B9947D78EC3C, False, False),
    (0xB7FBE49D6C0F66C1, 0, 0, 0x01A59A254B1C88, True, True),
    (0xB7FBE49D6C0F66C1, 1, 0, 0x04422EB709347D, True, True),
    (0xB7FBE49D6C0F66C1, 42, 1000, 0x15A978975E43E8, False, False),
    (0xB7FBE49D6C0F66C1, 126335, 126463, 0x07A727F6278BAB, True, True),
    (0xB7FBE49D6C0F66C1, 151665, 151643, 0x15D671FA9F99A4, False, False),
    (0x1B8F5F4E37143DD9, 0, 0, 0x0F9B89C064F761, False, True),
    (0x1B8F5F4E37143DD9, 1, 0, 0x0DF0C7BF1A5432, False, True),
    (0x1B8F5F4E37143DD9, 42, 1000, 0x062B0528D9E87B, True, True),
    (0x1B8F5F4E37143DD9, 126335, 126463, 0x1579AF00B45D2A, False, False),
    (0x1B8F5F4E37143DD9, 151665, 151643, 0x10ABC9861FD434, False, False),
]


def _within(count: float, n: int, p: float, z: float = 5.0) -> bool:
    return abs(count - n * p) <= z * math.sqrt(n * p * (1 - p))


def test_scheme_name_is_versioned():
    assert HASH_SCHEME == "lrdwm-splitmix64-v1"


def test_key_derivation_golden():
    assert derive_key("my secret", "left") == 0xB7FBE49D6C0F66C1
    assert derive_key("my secret", "right") == 0x1B8F5F4E37143DD9
    assert derive_key(123, "left") == derive_key("123", "left") == 0xC4D9AE39FA092975


@pytest.mark.parametrize("key,context,candidate,value,g25,g50", GOLDEN)
def test_golden_vectors(key, context, candidate, value, g25, g50):
    assert hash_value_reference(key, context, candidate) == value
    assert green_reference(key, context, candidate, 0.25) is g25
    assert green_reference(key, context, candidate, 0.5) is g50
    t = green_pairs(key, torch.tensor([context]), torch.tensor([candidate]), 0.25)
    assert t.tolist() == [g25]
    t = green_pairs(key, torch.tensor([context]), torch.tensor([candidate]), 0.5)
    assert t.tolist() == [g50]
    row = green_rows(key, torch.tensor([context]), 0.5, vocab_size=max(candidate + 1, 2))
    assert bool(row[0, candidate]) is g50


def test_torch_matches_reference_on_random_triples():
    gen = torch.Generator().manual_seed(1)
    keys = [0, 1, 2**63, 2**64 - 1, derive_key("k", "left")] + torch.randint(
        0, 2**62, (5,), generator=gen
    ).tolist()
    ctx = torch.randint(0, 300_000, (400,), generator=gen)
    cand = torch.randint(0, 300_000, (400,), generator=gen)
    for key in keys:
        for gamma in (0.1, 0.25, 0.5, 0.9):
            got = green_pairs(key, ctx, cand, gamma).tolist()
            want = [
                green_reference(key, c, v, gamma) for c, v in zip(ctx.tolist(), cand.tolist(), strict=True)
            ]
            assert got == want


def test_rows_equal_pairs_and_any_batch_shape():
    key = derive_key("shape", "right")
    ctx = torch.tensor([0, 5, 77, V_LLADA - 1])
    rows = green_rows(key, ctx, 0.5, vocab_size=V_LLADA)
    assert rows.shape == (4, V_LLADA) and rows.dtype == torch.bool
    cand = torch.arange(V_LLADA)
    for u, c in enumerate(ctx.tolist()):
        assert torch.equal(rows[u], green_pairs(key, torch.full((V_LLADA,), c), cand, 0.5))
    # Broadcasting and reshaping do not change results; int32 ids give the same bits as int64.
    c2 = torch.randint(0, V_LLADA, (6, 7), generator=torch.Generator().manual_seed(3))
    v2 = torch.randint(0, V_LLADA, (6, 7), generator=torch.Generator().manual_seed(4))
    flat = green_pairs(key, c2.reshape(-1), v2.reshape(-1), 0.5)
    assert torch.equal(green_pairs(key, c2, v2, 0.5).reshape(-1), flat)
    assert torch.equal(green_pairs(key, c2.int(), v2.int(), 0.5).reshape(-1), flat)
    words = candidate_words(V_LLADA)
    assert torch.equal(green_rows(key, ctx, 0.5, cand_words=words), rows)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_matches_cpu():  # pragma: no cover - runs on GPU machines
    key = derive_key("cuda", "left")
    ctx = torch.randint(0, V_LLADA, (64,))
    cpu = green_rows(key, ctx, 0.5, vocab_size=V_LLADA)
    gpu = green_rows(key, ctx.cuda(), 0.5, vocab_size=V_LLADA).cpu()
    assert torch.equal(cpu, gpu)


def test_threshold_and_probability():
    assert green_threshold(0.5) == 2**52
    assert green_probability(0.25) == 0.25
    for bad in (0.0, 1.0, -0.1, 1.5):
        with pytest.raises(ValueError, match="gamma"):
            green_threshold(bad)


@pytest.mark.parametrize("gamma", [0.25, 0.5])
def test_green_fraction_per_context(gamma):
    """Each context's row holds ~gamma * V green tokens: Binomial(V, gamma) bound, Z = 6 (many rows)."""
    key = derive_key("per-context", "left")
    gen = torch.Generator().manual_seed(11)
    # Random contexts plus the ones most likely to be special: 0, 1 and the largest ids.
    ctx = torch.cat(
        [
            torch.tensor([0, 1, V_LLADA - 2, V_LLADA - 1, 2**31 - 1]),
            torch.randint(0, V_LLADA, (195,), generator=gen),
        ]
    )
    rows = green_rows(key, ctx, gamma, vocab_size=V_LLADA)
    counts = rows.sum(1).tolist()
    bad = [(c, n) for c, n in zip(ctx.tolist(), counts, strict=True) if not _within(n, V_LLADA, gamma, z=6.0)]
    assert not bad, f"rows with a green count outside the binomial bound: {bad[:5]}"
    # Pooled over all rows: a tighter test of the mean (Z = 5).
    assert _within(sum(counts), V_LLADA * len(counts), gamma)


def test_candidate_columns_not_special():
    """Token 0 and the largest ids are green for ~gamma of contexts: Binomial(n_ctx, gamma), Z = 5."""
    key = derive_key("columns", "right")
    n_ctx = 20_000
    ctx = torch.arange(n_ctx)
    for cand in (0, 1, V_LLADA - 1, 151_665):
        col = green_pairs(key, ctx, torch.full((n_ctx,), cand), 0.5)
        assert _within(int(col.sum()), n_ctx, 0.5), cand


def test_left_and_right_memberships_independent():
    """For the same (context, candidate) pairs, m_L and m_R are independent: P(both) = gamma^2.

    With N pairs, the number green on both sides is Binomial(N, gamma^2) when independent; Z = 5.
    """
    kl, kr = derive_key("independence", "left"), derive_key("independence", "right")
    gen = torch.Generator().manual_seed(5)
    n = 400_000
    ctx = torch.randint(0, V_LLADA, (n,), generator=gen)
    cand = torch.randint(0, V_LLADA, (n,), generator=gen)
    for gamma in (0.25, 0.5):
        ml = green_pairs(kl, ctx, cand, gamma)
        mr = green_pairs(kr, ctx, cand, gamma)
        assert _within(int(ml.sum()), n, gamma)
        assert _within(int(mr.sum()), n, gamma)
        assert _within(int((ml & mr).sum()), n, gamma * gamma)


def test_neighbouring_contexts_uncorrelated():
    """Rows of contexts u and u + 1 agree on a fraction g^2 + (1 - g)^2 of candidates.

    Per pair the agreement count is Binomial(V, a) under independence (Z = 6 per pair, 100 pairs);
    pooled Z = 5. Also the rows of the same context under k_L and k_R.
    """
    gamma = 0.5
    agree_p = gamma**2 + (1 - gamma) ** 2
    key = derive_key("neighbours", "left")
    us = torch.cat(
        [
            torch.tensor([0, V_LLADA - 2]),
            torch.randint(0, V_LLADA - 1, (98,), generator=torch.Generator().manual_seed(8)),
        ]
    )
    a = green_rows(key, us, gamma, vocab_size=V_LLADA)
    b = green_rows(key, us + 1, gamma, vocab_size=V_LLADA)
    agree = (a == b).sum(1).tolist()
    assert all(_within(x, V_LLADA, agree_p, z=6.0) for x in agree)
    assert _within(sum(agree), V_LLADA * len(agree), agree_p)
    # Neighbouring candidates within a row (v, v + 1): both green with probability g^2.
    both = int((a[:, 1:] & a[:, :-1]).sum())
    # Overlapping pairs are 1-dependent; Z = 6 covers the variance inflation (< 3x).
    assert _within(both, a.shape[0] * (V_LLADA - 1), gamma * gamma, z=6.0 * math.sqrt(3))
    right = green_rows(derive_key("neighbours", "right"), us, gamma, vocab_size=V_LLADA)
    assert _within(int((a == right).sum()), a.numel(), agree_p)


def test_derived_keys_domain_separated_and_unstructured():
    """Keys of low-entropy secrets ("0".."1999") set each bit ~half the time: Binomial(2000, 1/2), Z = 6."""
    lefts = [derive_key(str(i), "left") for i in range(2000)]
    rights = [derive_key(i, "right") for i in range(2000)]
    assert len(set(lefts) | set(rights)) == 4000
    for keys in (lefts, rights):
        for bit in range(64):
            ones = sum((k >> bit) & 1 for k in keys)
            assert _within(ones, len(keys), 0.5, z=6.0), bit


@pytest.mark.parametrize("bad", [None, 1.5, b"bytes", True, ["x"]])
def test_derive_key_rejects_bad_secret_types(bad):
    with pytest.raises(TypeError, match="secret must be a str or an int"):
        derive_key(bad, "left")


def test_derive_key_rejects_empty_and_bad_side():
    with pytest.raises(ValueError, match="must not be empty"):
        derive_key("", "left")
    with pytest.raises(ValueError, match="side"):
        derive_key("x", "middle")


def test_no_global_rng_use():
    """Hashing neither reads nor advances torch's global RNG."""
    torch.manual_seed(123)
    before = torch.get_rng_state()
    green_rows(derive_key("rng", "left"), torch.tensor([1, 2, 3]), 0.5, vocab_size=1000)
    green_pairs(derive_key("rng", "left"), torch.tensor([1, 2]), torch.tensor([3, 4]), 0.5)
    assert torch.equal(before, torch.get_rng_state())


@pytest.mark.parametrize("gamma", [0.25, 0.5])
def test_green_block_equals_green_rows(gamma):
    """The all-rows-at-once kernel (the processor's "batched" path) equals the row-by-row one."""
    key = derive_key("block", "right")
    ctx = torch.tensor([0, 1, 7, 7, 126_000, V_LLADA - 1])
    words = candidate_words(V_LLADA)
    block = green_block(key, ctx, gamma, cand_words=words)
    assert block.shape == (6, V_LLADA) and block.dtype == torch.bool
    assert torch.equal(block, green_rows(key, ctx, gamma, cand_words=words))
    for c, v in [(7, 0), (126_000, 5), (V_LLADA - 1, V_LLADA - 1)]:
        row = ctx.tolist().index(c)
        assert bool(block[row, v]) == green_reference(key, c, v, gamma)


def test_green_from_seeds_mixes_keys_per_row():
    key_l, key_r = derive_key("mix", "left"), derive_key("mix", "right")
    ctx = torch.tensor([3, 99, 3])
    words = candidate_words(1000)
    seeds = torch.cat([context_seeds(key_l, ctx[:2]), context_seeds(key_r, ctx[2:])])
    rows = green_from_seeds(seeds, 0.5, cand_words=words)
    assert torch.equal(rows[:2], green_rows(key_l, ctx[:2], 0.5, cand_words=words))
    assert torch.equal(rows[2:], green_rows(key_r, ctx[2:], 0.5, cand_words=words))
    assert not torch.equal(rows[0], rows[2])  # same context, different key
