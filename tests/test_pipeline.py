"""The "watermark-detection" pipeline: registration on `import hf_lrdwm`, inputs, options and outputs."""

from __future__ import annotations

import json
import logging
import math
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch
from tiny_tokenizers import fast_tokenizer

import hf_lrdwm
from hf_lrdwm import LRDWMConfig, LRDWMDetector
from hf_lrdwm.hashing import green_reference

SECRET = "pipeline test secret"
MAX_LEN = 32  # the tiny tokenizer's model_max_length, to test long inputs
TEXTS = [
    "The river wound through the valley, past farms and old stone bridges, toward the distant sea.",
    "A library is a collection of books and other media kept for reading, study and reference.",
    "Diffusion language models unmask many tokens at once, in any order, over a few steps.",
    "She planted tomatoes, beans and basil in the small garden behind the kitchen every spring.",
    "The committee met on Tuesday to review the budget and approve the new schedule of works.",
]


def tiny_tokenizer(model_max_length: int = MAX_LEN):
    """A byte-level BPE tokenizer (about 300 tokens) trained offline on TEXTS."""
    return fast_tokenizer(TEXTS * 3, vocab_size=300, model_max_length=model_max_length)


def watermarked_ids(cfg: LRDWMConfig, n: int, vocab: int, seed: int = 0, avoid=()) -> list[int]:
    """Ids whose every (side, context, token) event is green: each new token is green after its left
    neighbour (k_L) and makes that neighbour green before it (k_R), built greedily."""
    gen = torch.Generator().manual_seed(seed)
    avoid = set(avoid)
    ids: list[int] = []
    while len(ids) < n:
        cand = int(torch.randint(0, vocab, (1,), generator=gen))
        if cand in avoid:
            continue
        if (
            not ids
            or green_reference(cfg.key_left, ids[-1], cand, cfg.gamma)
            and green_reference(cfg.key_right, cand, ids[-1], cfg.gamma)
        ):
            ids.append(cand)
    return ids


def random_ids(n: int, vocab: int, seed: int, low: int = 2) -> list[int]:
    gen = torch.Generator().manual_seed(seed)
    return torch.randint(low, vocab, (n,), generator=gen).tolist()


@pytest.fixture(scope="module")
def tokenizer():
    return tiny_tokenizer()


@pytest.fixture(scope="module")
def detector(tokenizer):
    return LRDWMDetector(LRDWMConfig(key=SECRET), tokenizer)


@pytest.fixture(scope="module")
def repo(detector, tmp_path_factory):
    return detector.save_pretrained(tmp_path_factory.mktemp("detector_repo"))


@pytest.fixture(scope="module")
def pipe(repo):
    from transformers import pipeline

    return pipeline("watermark-detection", model=str(repo), device="cpu")


@pytest.fixture(scope="module")
def wm_ids(detector):
    return watermarked_ids(detector.config, 80, detector.vocab_size, avoid=detector.ignore_token_ids)


def _expected(detector, inputs, fpr=None):
    out = detector(inputs, fpr=fpr)
    rows = []
    for i in range(len(out)):
        z = float(out.z_score[i])
        row = {
            "label": "watermarked" if out.prediction[i] else "human",
            "score": 1.0 - float(out.p_value[i]),
            "z_score": None if math.isnan(z) else z,
            "p_value": float(out.p_value[i]),
            "num_tokens_scored": int(out.num_tokens_scored[i]),
        }
        if out.reason[i] is not None:
            row["reason"] = out.reason[i]
        rows.append(row)
    return rows


def _run_python(code: str) -> dict:
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert SECRET not in proc.stdout + proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


# ----------------------------------------------------------------------------------------------
# Fresh processes: the task, AutoConfig and AutoModel work after `import hf_lrdwm`, no remote code
# ----------------------------------------------------------------------------------------------
def test_fresh_process_pipeline_from_saved_repo(repo, detector, wm_ids):
    rnd = random_ids(120, detector.vocab_size, seed=1)
    got = _run_python(
        f"""
        import json, sys
        import hf_lrdwm
        light = "transformers" not in sys.modules  # registration does not import transformers
        from transformers import AutoConfig, AutoModel, pipeline

        detect = pipeline("watermark-detection", model={str(repo)!r}, device="cpu")
        out = {{
            "light": light,
            "text": detect({TEXTS[0]!r}),
            "ids": detect([{wm_ids!r}, {rnd!r}]),
            "config": type(AutoConfig.from_pretrained({str(repo)!r})).__name__,
            "model": type(AutoModel.from_pretrained({str(repo)!r})).__name__,
            "pipeline": type(detect).__name__,
        }}
        print(json.dumps(out))
        """
    )
    assert got["light"]
    assert got["config"] == "LRDWMDetectorConfig" and got["model"] == "LRDWMDetectorModel"
    assert got["pipeline"] == "WatermarkDetectionPipeline"
    assert got["text"] == _expected(detector, TEXTS[0])[0]
    assert got["ids"] == _expected(detector, [wm_ids, rnd])
    assert [r["label"] for r in got["ids"]] == ["watermarked", "human"]


def test_fresh_process_transformers_imported_first(repo, detector):
    """transformers' registries already loaded when hf_lrdwm is imported: registered at once."""
    got = _run_python(
        f"""
        import json
        import transformers.pipelines
        from transformers import AutoModel
        import hf_lrdwm
        from transformers import pipeline

        detect = pipeline("watermark-detection", model={str(repo)!r}, device="cpu")
        model = AutoModel.from_pretrained({str(repo)!r})
        print(json.dumps({{"text": detect({TEXTS[1]!r}), "model": type(model).__name__}}))
        """
    )
    assert got == {"text": _expected(detector, TEXTS[1])[0], "model": "LRDWMDetectorModel"}


def test_registration_is_idempotent(caplog):
    from transformers import AutoConfig
    from transformers.pipelines import PIPELINE_REGISTRY

    with caplog.at_level(logging.WARNING):
        hf_lrdwm.pipelines.register()
        hf_lrdwm.pipelines.register()
    entry = PIPELINE_REGISTRY.supported_tasks["watermark-detection"]
    assert entry["impl"] is hf_lrdwm.pipelines.WatermarkDetectionPipeline
    assert entry["pt"] == (hf_lrdwm.hub.LRDWMDetectorModel,)
    assert "already registered" not in caplog.text
    assert AutoConfig.for_model("lrdwm-detector").__class__ is hf_lrdwm.hub.LRDWMDetectorConfig


# ----------------------------------------------------------------------------------------------
# Inputs and outputs
# ----------------------------------------------------------------------------------------------
def test_single_text_returns_a_dict_list_returns_a_list(pipe, detector):
    one = pipe(TEXTS[0])
    assert isinstance(one, dict)
    assert set(one) == {"label", "score", "z_score", "p_value", "num_tokens_scored"}
    assert one == _expected(detector, TEXTS[0])[0]
    many = pipe(TEXTS)
    assert isinstance(many, list) and len(many) == len(TEXTS)
    assert many == _expected(detector, TEXTS)
    assert pipe(tuple(TEXTS[:2])) == many[:2]
    assert pipe([]) == []


def test_id_inputs_in_every_form(pipe, detector, wm_ids):
    rnd = random_ids(60, detector.vocab_size, seed=2)
    expected = _expected(detector, [wm_ids, rnd])
    assert pipe(wm_ids) == expected[0]  # a list of ints is one input
    assert pipe(tuple(wm_ids)) == expected[0]
    assert pipe(torch.tensor(wm_ids)) == expected[0]
    assert pipe(np.array(wm_ids, dtype=np.int32)) == expected[0]
    assert pipe([wm_ids, rnd]) == expected  # a list of id lists is a batch
    assert pipe([torch.tensor(wm_ids), np.array(rnd)]) == expected
    assert pipe(torch.tensor([wm_ids[:60], rnd])) == _expected(detector, [wm_ids[:60], rnd])


def test_batching_gives_the_same_results(pipe, detector, wm_ids):
    inputs = [wm_ids, *(random_ids(30 + 10 * k, detector.vocab_size, seed=10 + k) for k in range(4))]
    expected = _expected(detector, inputs)
    assert [pipe(x) for x in inputs] == expected
    for batch_size in (1, 2, 3, 64):  # 2 and 3 leave a smaller last batch
        assert pipe(inputs, batch_size=batch_size) == expected
    assert list(pipe(x for x in inputs)) == expected  # generators are streamed
    assert pipe(TEXTS, batch_size=2) == _expected(detector, TEXTS)


def test_watermarked_ids_are_watermarked_random_ids_human(pipe, detector, wm_ids):
    wm = pipe(wm_ids)
    assert wm["label"] == "watermarked" and wm["z_score"] > 8 and wm["score"] > 1 - 1e-12
    for seed in range(3):
        out = pipe(random_ids(200, detector.vocab_size, seed=100 + seed))
        assert out["label"] == "human" and out["p_value"] > 0.01
        assert out["score"] == pytest.approx(1 - out["p_value"])


def test_fpr_option_per_call_and_at_construction(pipe, repo, detector):
    ids = random_ids(200, detector.vocab_size, seed=5)
    base = pipe(ids)
    p = base["p_value"]
    assert 0.02 < p < 0.98 and base["label"] == "human"
    assert pipe(ids, fpr=min(0.99, p * 1.01 + 0.001))["label"] == "watermarked"
    assert pipe(ids, fpr=p / 2)["label"] == "human"
    assert pipe([ids, ids], fpr=0.99) == _expected(detector, [ids, ids], fpr=0.99)
    from transformers import pipeline

    loose = pipeline("watermark-detection", model=str(repo), device="cpu", fpr=0.99)
    assert loose(ids)["label"] == "watermarked"
    assert loose(ids, fpr=p / 2)["label"] == "human"  # the call option wins
    with pytest.raises(ValueError, match="fpr"):
        pipe(ids, fpr=1.5)


def test_return_token_scores(pipe, detector, tokenizer, wm_ids):
    out = pipe(TEXTS[2], return_token_scores=True)
    ids = tokenizer(TEXTS[2], add_special_tokens=False)["input_ids"]
    scores = detector(TEXTS[2]).token_scores[0]
    assert [t for t, _ in out["token_scores"]] == tokenizer.convert_ids_to_tokens(ids)
    assert [s for _, s in out["token_scores"]] == [None if math.isnan(s) else s for s in scores]
    assert all(isinstance(t, str) for t, _ in out["token_scores"])
    by_ids = pipe(wm_ids, return_token_scores=True)
    assert [t for t, _ in by_ids["token_scores"]] == tokenizer.convert_ids_to_tokens(wm_ids)
    assert all(s is not None and s > 0 for _, s in by_ids["token_scores"])  # every token green
    batch = pipe([wm_ids, TEXTS[2]], return_token_scores=True)
    assert batch == [by_ids, out]
    assert "token_scores" not in pipe(wm_ids)


def test_long_text_is_scored_whole_without_warning(repo, detector, caplog):
    """Inputs longer than the tokenizer's model_max_length are neither truncated nor warned about."""
    from transformers import pipeline
    from transformers.utils import logging as hf_logging

    detect = pipeline("watermark-detection", model=str(repo), device="cpu")  # a fresh tokenizer
    text = " ".join(TEXTS * 3)
    ids = detect.tokenizer(text, add_special_tokens=False, verbose=False)["input_ids"]
    assert len(ids) > 4 * detect.tokenizer.model_max_length
    hf_logging.enable_propagation()
    try:
        with caplog.at_level(logging.WARNING):
            out = detect(text)
    finally:
        hf_logging.disable_propagation()
    assert out == _expected(detector, text)[0]
    assert out["num_tokens_scored"] == len(ids)
    assert "longer than the specified maximum" not in caplog.text


def test_short_and_empty_inputs_have_a_reason(pipe):
    short = pipe([5, 6, 7])
    assert short["label"] == "human" and "min_tokens" in short["reason"]
    empty = pipe("")
    assert empty["label"] == "human" and empty["reason"].startswith("empty input")
    assert empty["z_score"] is None and empty["p_value"] == 1.0 and empty["score"] == 0.0
    assert "reason" not in pipe(TEXTS[0])


def test_repo_without_tokenizer_takes_ids(tmp_path, wm_ids):
    from transformers import pipeline

    det = LRDWMDetector(LRDWMConfig(key=SECRET), vocab_size=300, ignore_token_ids=[0, 1])
    det.save_pretrained(tmp_path)
    detect = pipeline("watermark-detection", model=str(tmp_path), device="cpu")
    assert detect.tokenizer is None
    out = detect(wm_ids, return_token_scores=True)
    assert out["label"] == "watermarked"
    assert [t for t, _ in out["token_scores"]] == [str(i) for i in wm_ids]
    with pytest.raises(ValueError, match="needs a tokenizer"):
        detect("some text")


def test_in_memory_detector_and_model_forward(detector, tokenizer, wm_ids):
    from transformers import pipeline

    from hf_lrdwm.hub import LRDWMDetectorModel

    model = LRDWMDetectorModel.from_detector(detector)
    detect = pipeline("watermark-detection", model=model, tokenizer=tokenizer, device="cpu")
    assert detect(TEXTS[3]) == _expected(detector, TEXTS[3])[0]
    rnd = random_ids(50, detector.vocab_size, seed=7)
    padded = torch.full((2, len(wm_ids)), tokenizer.pad_token_id)
    padded[0] = torch.tensor(wm_ids)
    padded[1, : len(rnd)] = torch.tensor(rnd)
    mask = (torch.arange(len(wm_ids)) < torch.tensor([[len(wm_ids)], [len(rnd)]])).long()
    out = model(padded, attention_mask=mask)
    ref = detector([wm_ids, rnd])
    assert np.array_equal(out.z_score, ref.z_score) and out.prediction.tolist() == [True, False]


def test_bad_inputs_and_options(pipe):
    from hf_lrdwm.pipelines import WatermarkDetectionPipeline

    assert pipe(["text", [2, 3, 4]]) == [pipe("text"), pipe([2, 3, 4])]  # each item is one input
    with pytest.raises(TypeError, match="takes a str"):
        pipe([3.5, 2.5])
    with pytest.raises(TypeError, match="takes a str"):
        pipe([[1, 2], "text", [1.5]])
    with pytest.raises(ValueError, match="1-D or 2-D"):
        pipe(torch.zeros(2, 2, 2, dtype=torch.long))
    with pytest.raises(TypeError, match="unknown watermark-detection options"):
        pipe("text", truncation=True)
    with pytest.raises(ValueError, match="outside the vocabulary"):
        pipe([1, 2, 10**6])
    with pytest.raises(TypeError, match="detector model"):
        WatermarkDetectionPipeline(model=torch.nn.Linear(2, 2))


def test_pipeline_save_pretrained_writes_a_loadable_detector_repo(pipe, detector, tmp_path, wm_ids):
    """Pipeline.save_pretrained would write `custom_pipelines` (needing trust_remote_code): not here."""
    from transformers import pipeline

    pipe.save_pretrained(tmp_path)
    data = json.loads((tmp_path / "config.json").read_text())
    assert "custom_pipelines" not in data and data["model_type"] == "lrdwm-detector"
    assert (tmp_path / "tokenizer.json").is_file() and (tmp_path / "README.md").is_file()
    again = pipeline("watermark-detection", model=str(tmp_path), device="cpu")
    assert again([TEXTS[0], wm_ids]) == [_expected(detector, TEXTS[0])[0], _expected(detector, wm_ids)[0]]
