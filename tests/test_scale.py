"""Detection at scale: ``detect_dataset`` (``datasets.map``, also with ``num_proc=2``), pickling the
detector, and ``hf-lrdwm detect`` reading its input batch by batch."""

from __future__ import annotations

import inspect
import json
import os
import pickle
import queue
import subprocess
import sys
import threading

import datasets
import numpy as np
import pytest
import torch
from tiny_tokenizers import fast_tokenizer
from watermarked import greedy_watermarked_ids

from hf_lrdwm import LRDWMConfig, LRDWMDetector
from hf_lrdwm.cli import KEY_ENV, _read_records, main
from hf_lrdwm.scale import AVAILABLE_COLUMNS, detect_dataset

KEY = "scale-test-SECRET-key-0b7e"
WORDS = (
    "the of and a to in is was for on as with by he at from his an were are which this be or has had first "
    "one their its new after who they have her she two been other when there all during into school time "
    "may years more most only over city some world would where later up such used many can state about "
    "national out known university united then made"
).split()


@pytest.fixture(autouse=True)
def _quiet(monkeypatch):
    monkeypatch.delenv(KEY_ENV, raising=False)
    datasets.disable_progress_bars()
    yield
    datasets.enable_progress_bars()


def _texts(n, seed=0):
    rng = np.random.default_rng(seed)
    return [" ".join(rng.choice(WORDS, size=int(rng.integers(5, 60)))) for _ in range(n)]


@pytest.fixture(scope="module")
def tokenizer():
    return fast_tokenizer(_texts(200, seed=1), vocab_size=500)


def _assert_same(scored, direct, prefix="wm_"):
    z = [None if np.isnan(x) else x for x in direct.z_score.tolist()]
    assert scored[prefix + "z_score"] == pytest.approx(z, nan_ok=False)
    assert scored[prefix + "p_value"] == pytest.approx(direct.p_value.tolist())
    assert scored[prefix + "prediction"] == direct.prediction.tolist()
    assert scored[prefix + "num_tokens_scored"] == direct.num_tokens_scored.tolist()


# ----------------------------------------------------------------------------------------------
# detect_dataset
# ----------------------------------------------------------------------------------------------
def test_detector_with_tokenizer_and_calibration_pickles(tokenizer):
    det = LRDWMDetector(LRDWMConfig(key=KEY, sides="left"), tokenizer, fpr=0.05, min_tokens=4)
    det.calibrate(_texts(40, seed=2), fpr=0.05)
    copy = pickle.loads(pickle.dumps(det))
    assert copy.config == det.config and copy.calibration == det.calibration
    texts = _texts(10, seed=3)
    a, b = det(texts), copy(texts)
    assert a.z_score.tolist() == b.z_score.tolist() and a.prediction.tolist() == b.prediction.tolist()


def test_num_proc_2_text_column_matches_direct_call(tokenizer):
    texts = _texts(40, seed=4)
    texts[7] = ""  # nothing scored: z is null
    ds = datasets.Dataset.from_dict({"text": texts, "id": list(range(40))})
    det = LRDWMDetector(LRDWMConfig(key=KEY), tokenizer, min_tokens=8)
    scored = detect_dataset(ds, det, num_proc=2, batch_size=7)
    assert scored.column_names == [
        "text",
        "id",
        "wm_z_score",
        "wm_p_value",
        "wm_prediction",
        "wm_num_tokens_scored",
    ]
    assert scored["id"] == list(range(40))  # order kept across the two workers
    assert scored.features["wm_z_score"] == datasets.Value("float64")
    assert scored.features["wm_prediction"] == datasets.Value("bool")
    direct = det(texts)
    _assert_same(scored, direct)
    assert scored[7]["wm_z_score"] is None and scored[7]["wm_prediction"] is False


def test_num_proc_2_ids_column_finds_the_watermark_calibrated():
    cfg = LRDWMConfig(key=KEY)
    vocab = 1000
    gen = torch.Generator().manual_seed(5)
    human = torch.randint(0, vocab, (30, 80), generator=gen).tolist()
    marked = [greedy_watermarked_ids(cfg, vocab, 80, seed) for seed in range(4)]
    rows = [*marked, *human[:12]]
    ds = datasets.Dataset.from_dict({"input_ids": rows})
    det = LRDWMDetector(cfg, vocab_size=vocab, fpr=0.05)
    det.calibrate(human, fpr=0.05)
    columns = AVAILABLE_COLUMNS
    scored = detect_dataset(ds, det, ids_field="input_ids", num_proc=2, prefix="lr_", columns=columns)
    assert scored["lr_prediction"][:4] == [True] * 4
    direct = det(rows)
    _assert_same(scored, direct, prefix="lr_")
    assert scored["lr_num_green"] == direct.num_green.tolist()
    assert scored["lr_reason"] == direct.reason
    assert scored.features["lr_reason"] == datasets.Value("string")


def test_dataset_dict_iterable_and_fpr(tokenizer):
    texts = _texts(12, seed=6)
    ds = datasets.Dataset.from_dict({"body": texts})
    det = LRDWMDetector(LRDWMConfig(key=KEY), tokenizer, min_tokens=4)
    direct = det(texts, fpr=0.3)
    dd = detect_dataset(datasets.DatasetDict({"a": ds, "b": ds}), det, text_field="body", fpr=0.3)
    assert isinstance(dd, datasets.DatasetDict) and set(dd) == {"a", "b"}
    _assert_same(dd["b"], direct)
    lazy = detect_dataset(ds.to_iterable_dataset(), det, text_field="body", batch_size=5, fpr=0.3)
    assert isinstance(lazy, datasets.IterableDataset)
    rows = list(lazy)
    assert [r["wm_prediction"] for r in rows] == direct.prediction.tolist()
    assert [r["wm_num_tokens_scored"] for r in rows] == direct.num_tokens_scored.tolist()


def test_detect_dataset_errors(tokenizer):
    ds = datasets.Dataset.from_dict({"text": ["a b c"], "wm_z_score": [0.0]})
    det = LRDWMDetector(LRDWMConfig(key=KEY), tokenizer)
    with pytest.raises(ValueError, match="already has columns"):
        detect_dataset(ds, det)
    with pytest.raises(ValueError, match="no column 'body'"):
        detect_dataset(ds, det, text_field="body", prefix="x_")
    with pytest.raises(ValueError, match="subset of"):
        detect_dataset(ds, det, prefix="x_", columns=["z"])
    with pytest.raises(ValueError, match="num_proc"):
        detect_dataset(ds.to_iterable_dataset(), det, prefix="x_", num_proc=2)
    with pytest.raises(ValueError, match="tokenizer"):
        detect_dataset(ds, LRDWMDetector(LRDWMConfig(key=KEY), vocab_size=100), prefix="x_")
    with pytest.raises(TypeError, match="datasets.Dataset"):
        detect_dataset({"text": ["a"]}, det)


# ----------------------------------------------------------------------------------------------
# hf-lrdwm detect reads its input lazily
# ----------------------------------------------------------------------------------------------
def test_read_records_is_lazy():
    """``_read_records`` is a generator: it reads a line only when the next record is asked for."""
    assert inspect.isgeneratorfunction(_read_records)

    def lines():
        yield '{"text": "one"}\n'
        yield '{"text": "two"}\n'
        raise AssertionError("read past the records that were asked for")

    records = _read_records(lines(), "jsonl", "text", False, None)
    assert next(records) == (1, "one") and next(records) == (2, "two")


def test_detect_20k_lines(tmp_path, capsys):
    n = 20_000
    gen = np.random.default_rng(7)
    ids = gen.integers(0, 1000, size=(n, 24)).tolist()
    inp = tmp_path / "big.jsonl"
    inp.write_text("".join(json.dumps({"ids": row}) + "\n" for row in ids), encoding="utf-8")
    dest = tmp_path / "out.jsonl"
    argv = ["detect", "--key", KEY, "--ids-field", "ids", "--vocab-size", "1000", "--input", inp]
    rc = main([str(a) for a in [*argv, "--output", dest, "--min-tokens", "4", "--batch-size", "1000"]])
    _, err = capsys.readouterr()
    assert rc == 0, err
    with open(dest, encoding="utf-8") as f:
        rows = [json.loads(line) for line in f]
    assert [r["line"] for r in rows] == list(range(1, n + 1))
    sample = LRDWMDetector(LRDWMConfig(key=KEY), vocab_size=1000, min_tokens=4)(ids[-50:])
    assert [r["z_score"] for r in rows[-50:]] == pytest.approx(sample.z_score.tolist())
    assert 0.0 < np.mean([r["prediction"] for r in rows]) < 0.03  # random ids: ~1% at fpr 0.01


def test_detect_answers_before_its_input_ends():
    """Through a pipe, the results of the first batches come back while stdin is still open: the
    command reads, scores and writes (flushes) batch by batch instead of reading its whole input first."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}  # stdout block-buffered
    env.update({KEY_ENV: KEY, "HF_HUB_OFFLINE": "1"})
    cmd = [sys.executable, "-m", "hf_lrdwm.cli", "detect", "--ids-field", "ids", "--input", "-"]
    cmd += ["--vocab-size", "1000", "--batch-size", "4", "--min-tokens", "4"]
    proc = subprocess.Popen(
        cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
    )
    lines: queue.Queue[str] = queue.Queue()

    def read():
        for line in proc.stdout:
            lines.put(line)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        first = [{"ids": [1 + (i * 7 + j) % 997 for j in range(30)]} for i in range(8)]
        proc.stdin.write("".join(json.dumps(r) + "\n" for r in first))
        proc.stdin.flush()
        got = [json.loads(lines.get(timeout=180)) for _ in range(8)]  # stdin is still open
        assert [r["line"] for r in got] == list(range(1, 9))
        proc.stdin.write(json.dumps({"ids": list(range(2, 40))}) + "\n")
        proc.stdin.close()
        assert proc.wait(timeout=60) == 0, proc.stderr.read()
        reader.join(timeout=10)
        assert json.loads(lines.get(timeout=10))["line"] == 9
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
