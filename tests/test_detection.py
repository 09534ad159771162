"""LRDWMDetector on token ids: scores against the definition, input handling, statistics, errors."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from scipy import stats

from hf_lrdwm import DetectionOutput, LRDWMConfig, LRDWMDetector
from hf_lrdwm.hashing import green_reference

V = 500
CFG = LRDWMConfig(key="detect-tests")


def _events_by_definition(ids, cfg, ignore=(), prompt_last=None, dedup=True):
    """(green count, event count, per-token scores) computed straight from the definition."""
    events = {} if dedup else []
    scores = []
    for i, t in enumerate(ids):
        if t in ignore:
            scores.append(math.nan)
            continue
        s, nb = 0.0, 0
        left = ids[i - 1] if i > 0 else prompt_last
        right = ids[i + 1] if i + 1 < len(ids) else None
        sides = []
        if cfg.use_left and left is not None and left not in ignore:
            sides.append(("L", left, cfg.key_left))
        if cfg.use_right and right is not None and right not in ignore:
            sides.append(("R", right, cfg.key_right))
        for name, ctx, key in sides:
            g = green_reference(key, ctx, t, cfg.gamma)
            s += g - cfg.gamma
            nb += 1
            if dedup:
                events[(name, ctx, t)] = g
            else:
                events.append(g)
        scores.append(s if nb else math.nan)
    values = list(events.values()) if dedup else events
    return sum(values), len(values), np.array(scores)


def _random_ids(n, seed, vocab=V):
    return torch.randint(0, vocab, (n,), generator=torch.Generator().manual_seed(seed)).tolist()


@pytest.mark.parametrize("dedup", [True, False])
@pytest.mark.parametrize("sides", ["both", "left", "right"])
def test_counts_and_token_scores_match_definition(dedup, sides):
    cfg = LRDWMConfig(key="def", sides=sides, gamma=0.25)
    det = LRDWMDetector(cfg, vocab_size=V, ignore_repeated_pairs=dedup, ignore_token_ids=[7], min_tokens=1)
    seqs = [_random_ids(60, 1, vocab=20), _random_ids(3, 2), [7, 7, 3, 4, 7, 5], _random_ids(40, 3)]
    seqs[0][10:13] = [7, 7, 7]
    out = det(seqs)
    assert isinstance(out, DetectionOutput) and len(out) == 4
    for b, ids in enumerate(seqs):
        g, n, scores = _events_by_definition(ids, cfg, ignore={7}, dedup=dedup)
        assert out.num_green[b] == g and out.num_events[b] == n
        np.testing.assert_array_equal(np.isnan(out.token_scores[b]), np.isnan(scores))
        np.testing.assert_allclose(out.token_scores[b], scores, equal_nan=True)
        assert out.num_tokens_scored[b] == int((~np.isnan(scores)).sum())
        z = (g - 0.25 * n) / math.sqrt(n * 0.25 * 0.75)
        assert out.z_score[b] == pytest.approx(z)
        assert out.p_value[b] == pytest.approx(stats.binom.sf(g - 1, n, 0.25))


def test_interior_token_score_is_mL_plus_mR_minus_one_at_gamma_half():
    det = LRDWMDetector(CFG, vocab_size=V, min_tokens=1)
    ids = _random_ids(30, 4)
    out = det(ids)
    for i in range(1, 29):
        ml = green_reference(CFG.key_left, ids[i - 1], ids[i], 0.5)
        mr = green_reference(CFG.key_right, ids[i + 1], ids[i], 0.5)
        assert out.token_scores[0][i] == ml + mr - 1
    assert len(out.token_scores[0]) == 30


def test_repeated_pairs_counted_once():
    det = LRDWMDetector(CFG, vocab_size=V, min_tokens=1)
    raw = LRDWMDetector(CFG, vocab_size=V, min_tokens=1, ignore_repeated_pairs=False)
    ids = [5, 6] * 50
    # Distinct events: left (ctx 5, tok 6), (ctx 6, tok 5); right (ctx 6, tok 5), (ctx 5, tok 6).
    assert det(ids).num_events[0] == 4
    assert raw(ids).num_events[0] == 2 * 100 - 2


def test_prompt_ids_give_left_context_of_first_token():
    det = LRDWMDetector(CFG, vocab_size=V, min_tokens=1)
    ids = _random_ids(20, 5)
    prompt = [9, 8, 42]
    with_prompt = det(ids, prompt_ids=prompt)
    without = det(ids)
    g, n, scores = _events_by_definition(ids, CFG, prompt_last=42)
    assert with_prompt.num_events[0] == n == without.num_events[0] + 1
    assert with_prompt.num_green[0] == g
    assert len(with_prompt.token_scores[0]) == 20
    np.testing.assert_allclose(with_prompt.token_scores[0], scores)
    per_input = det([ids, ids], prompt_ids=[[42], []])
    assert per_input.num_events.tolist() == [n, n - 1]
    with pytest.raises(ValueError, match="2 prompts for 1 inputs"):
        det([ids], prompt_ids=[[1], [2]])


def test_input_forms_agree():
    det = LRDWMDetector(CFG, vocab_size=V)
    a, b = _random_ids(50, 6), _random_ids(50, 7)
    ref = det([a, b])
    for form in (torch.tensor([a, b]), np.array([a, b]), [torch.tensor(a), torch.tensor(b)], (a, b)):
        out = det(form)
        np.testing.assert_array_equal(out.z_score, ref.z_score)
    single = det(torch.tensor(a))
    assert len(single) == 1 and single.z_score[0] == ref.z_score[0]
    assert det(a).z_score[0] == ref.z_score[0]
    assert len(det([])) == 0


def test_text_input_uses_tokenizer():
    class CharTokenizer:
        all_special_ids = [0]

        def __len__(self):
            return 256

        def __call__(self, texts, add_special_tokens=False):
            return {"input_ids": [[ord(c) % 256 for c in t] for t in texts]}

    det = LRDWMDetector(CFG, tokenizer=CharTokenizer(), min_tokens=1)
    text = "hello watermark world"
    assert det(text).num_events[0] == det([ord(c) for c in text]).num_events[0]
    assert det.ignore_token_ids == [0] and det.vocab_size == 256
    out = det(["abc", "   ", ""])
    assert out.reason[2] == "empty input: nothing to score"
    assert not out.prediction.any()


def test_short_and_empty_inputs_have_reasons_not_crashes():
    det = LRDWMDetector(CFG, vocab_size=V, min_tokens=16)
    out = det([[], [1], _random_ids(10, 8), _random_ids(100, 9)])
    assert out.reason[0] == "empty input: nothing to score"
    assert out.reason[1].startswith("too few tokens scored (0 < min_tokens=16)")
    assert out.reason[2] == "too few tokens scored (10 < min_tokens=16)"
    assert out.reason[3] is None
    assert out.prediction[:3].tolist() == [False, False, False]
    assert math.isnan(out.z_score[0]) and out.p_value[0] == 1.0
    row = out[0]
    assert row["z_score"] is None and row["prediction"] is False


def test_text_without_tokenizer_is_a_clear_error():
    with pytest.raises(ValueError, match="text input needs a tokenizer"):
        LRDWMDetector(CFG)("some text")


@pytest.mark.parametrize(
    "bad,exc,match",
    [
        (3.5, TypeError, "got float"),
        ({"ids": [1]}, TypeError, "got dict"),
        (torch.zeros(3), TypeError, "integer tensor"),
        (torch.zeros(2, 2, 2, dtype=torch.long), ValueError, "1-D or 2-D"),
        ([[1, 2], "text"], TypeError, "input 1 is a str"),
        ([[1, 2.5]], TypeError, "input 0 is a list"),
        ([[1, V]], ValueError, "token id 500 is outside the vocabulary"),
        ([[-1, 2]], ValueError, "must be >= 0"),
    ],
)
def test_bad_inputs(bad, exc, match):
    with pytest.raises(exc, match=match):
        LRDWMDetector(CFG, vocab_size=V)(bad)


@pytest.mark.parametrize(
    "kwargs,match",
    [
        ({"fpr": 0}, "fpr"),
        ({"fpr": 1.5}, "fpr"),
        ({"statistic": "kgw"}, "statistic"),
        ({"min_tokens": 0}, "min_tokens"),
    ],
)
def test_bad_settings(kwargs, match):
    with pytest.raises(ValueError, match=match):
        LRDWMDetector(CFG, **kwargs)


def test_paper_statistic_formula():
    det = LRDWMDetector(CFG, vocab_size=V, statistic="paper", ignore_repeated_pairs=False, min_tokens=1)
    ids = _random_ids(200, 10)
    out = det(ids)
    _, _, scores = _events_by_definition(ids, CFG, dedup=False)
    n_events = 2 * 200 - 2
    # sum(s_i) / sqrt(sigma2 * E): sigma^2 = 1/2 per interior token = 1/4 per event.
    z = np.nansum(scores) / math.sqrt(0.25 * n_events)
    assert out.z_score[0] == pytest.approx(z)
    assert out.p_value[0] == pytest.approx(stats.norm.sf(z))
    assert out.threshold == pytest.approx(stats.norm.isf(0.01))


def test_watermarked_sequence_is_detected_and_fpr_call_option():
    """A sequence whose tokens are all green for their left neighbour: z ~ sqrt(n) >> threshold."""
    cfg = LRDWMConfig(key="wm", sides="left")
    ids = [3]
    gen = torch.Generator().manual_seed(0)
    while len(ids) < 120:
        cand = int(torch.randint(0, V, (1,), generator=gen))
        if green_reference(cfg.key_left, ids[-1], cand, 0.5):
            ids.append(cand)
    det = LRDWMDetector(cfg, vocab_size=V)
    out = det(ids)
    assert out.prediction[0] and out.z_score[0] > 8 and out.green_fraction_left[0] == 1.0
    assert math.isnan(out.green_fraction_right[0])
    assert det(ids, fpr=1e-30).prediction[0] == bool(out.p_value[0] <= 1e-30)


def test_random_ids_null_distribution():
    """400 random sequences: flagged count at fpr 0.05 is Binomial(400, <=0.05); bound sf >= 1e-4."""
    det = LRDWMDetector(CFG, vocab_size=50_000, fpr=0.05)
    ids = torch.randint(0, 50_000, (400, 300), generator=torch.Generator().manual_seed(12))
    out = det(ids)
    k = int(out.prediction.sum())
    assert stats.binom.sf(k - 1, 400, 0.05) >= 1e-4
    assert abs(float(np.mean(out.z_score))) < 5 / math.sqrt(400)  # mean of 400 ~N(0,1) values


def test_calibration_is_used_and_serialisable():
    det = LRDWMDetector(CFG, vocab_size=50_000)
    human = torch.randint(0, 50_000, (300, 200), generator=torch.Generator().manual_seed(13))
    cal = det.calibrate(human)
    assert det.calibration is cal and cal.num_texts == 300
    # Null mean of random ids: pooled green rate, Binomial(E, 1/2) with E ~ 300 * 398; Z = 5.
    events = 300 * 398
    assert abs(cal.null_mean - 0.5) <= 5 * math.sqrt(0.25 / events) + 1e-3
    assert cal.threshold_ci[0] <= cal.threshold <= cal.threshold_ci[1]
    out = det(human[:5])
    assert out.statistic == "calibrated-binomial" and out.threshold == cal.threshold
    assert type(cal).from_dict(cal.to_dict()) == cal
    with pytest.raises(ValueError, match="at least 10 human texts"):
        det.calibrate(human[:3])


def test_key_health_reports_counts():
    det = LRDWMDetector(CFG, vocab_size=50_000)
    human = torch.randint(0, 50_000, (200, 100), generator=torch.Generator().manual_seed(14))
    health = det.key_health(human)
    assert health.num_texts == 200 and 0 <= health.observed_fpr <= 1
    assert health.fpr_ci[0] <= health.observed_fpr <= health.fpr_ci[1]
    assert health.healthy == (health.p_excess >= 0.01)
