"""``hf-lrdwm calibrate``: local files and ``datasets`` input, the summary, --save, one-line errors.

Human text: English Wikipedia summaries from the offline corpus of ``tests/corpora.py``; the tokenizer is
a small byte-level BPE trained on them here (no downloads).
"""

from __future__ import annotations

import json

import pytest
from corpora import wiki_summaries
from tiny_tokenizers import fast_tokenizer

from hf_lrdwm import Calibration, LRDWMConfig, LRDWMDetector
from hf_lrdwm.cli import KEY_ENV, main

KEY = "calibrate-test-SECRET-key-51d2"
NUM = 120  # human texts in the fixture files
LENGTH = 64
MIN_TOKENS = 32


@pytest.fixture(autouse=True)
def _offline(monkeypatch, tmp_path_factory):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "1")
    monkeypatch.delenv(KEY_ENV, raising=False)


@pytest.fixture(scope="module")
def human_texts():
    texts = [d["extract"] for d in wiki_summaries()[:NUM]]
    texts[5] = "Too short."  # fewer than MIN_TOKENS tokens: skipped
    texts[17] = ""
    return texts


@pytest.fixture(scope="module")
def tok_dir(tmp_path_factory, human_texts):
    """A byte-level BPE trained offline on the human texts, saved as a transformers tokenizer."""
    path = tmp_path_factory.mktemp("tok")
    fast_tokenizer(human_texts, vocab_size=1500).save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def tokenizer(tok_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(tok_dir))


@pytest.fixture(scope="module")
def human_jsonl(tmp_path_factory, human_texts):
    path = tmp_path_factory.mktemp("data") / "human.jsonl"
    path.write_text("".join(json.dumps({"body": t, "n": i}) + "\n" for i, t in enumerate(human_texts)))
    return path


def _run(capsys, argv):
    rc = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    assert KEY not in out and KEY not in err
    return rc, out, err


def _expected(tokenizer, texts, *, fpr, num_texts=None, statistic="binomial"):
    """What the command must compute: first LENGTH ids of texts with >= MIN_TOKENS ids, then the library."""
    ids = [tokenizer(t, add_special_tokens=False)["input_ids"] for t in texts]
    kept = [x[:LENGTH] for x in ids if len(x) >= MIN_TOKENS][:num_texts]
    det = LRDWMDetector(LRDWMConfig(key=KEY), tokenizer, min_tokens=MIN_TOKENS, statistic=statistic)
    return det.calibrate(kept, fpr=fpr), det.key_health(kept, fpr=fpr), kept


def _base(tok_dir):
    return ["calibrate", "--key", KEY, "--tokenizer", tok_dir, "--length", LENGTH, "--min-tokens", MIN_TOKENS]


def test_calibrate_jsonl_matches_library(capsys, tok_dir, tokenizer, human_jsonl, human_texts):
    argv = [*_base(tok_dir), "--input", human_jsonl, "--text-field", "body", "--fpr", "0.05"]
    rc, out, err = _run(capsys, [*argv, "--no-progress"])
    assert rc == 0, err
    summary = json.loads(out)
    cal, health, kept = _expected(tokenizer, human_texts, fpr=0.05)
    for name, value in cal.to_dict().items():
        assert summary[name] == pytest.approx(value), name
    assert summary["num_texts"] == len(kept) == NUM - 2
    assert summary["texts_read"] == NUM and summary["texts_skipped"] == 2
    assert summary["tokens_per_text"]["max"] == LENGTH
    assert summary["tokens_per_text"]["min"] >= MIN_TOKENS
    kh = summary["key_health"]
    assert kh["observed_fpr"] == health.observed_fpr and kh["num_flagged"] == health.num_flagged
    assert kh["fpr_ci"] == pytest.approx(list(health.fpr_ci))
    assert kh["healthy"] is health.healthy and isinstance(kh["healthy"], bool)
    assert summary["source"] == {"input": str(human_jsonl), "format": "jsonl", "text_field": "body"}
    assert summary["saved"] is None and summary["warnings"] == []
    assert err == ""


def test_calibrate_txt_num_texts_output_file_env_key(capsys, tmp_path, monkeypatch, tok_dir, tokenizer):
    texts = [d["extract"].replace("\n", " ") for d in wiki_summaries()[NUM : NUM + 60]]
    inp = tmp_path / "human.txt"
    inp.write_text("\n".join(texts) + "\n", encoding="utf-8")
    dest = tmp_path / "summary.json"
    monkeypatch.setenv(KEY_ENV, KEY)
    argv = ["calibrate", "--tokenizer", tok_dir, "--length", LENGTH, "--min-tokens", MIN_TOKENS]
    rc, out, err = _run(capsys, [*argv, "--input", inp, "--num-texts", 40, "--fpr", "0.1", "-o", dest])
    assert rc == 0, err
    assert out == ""
    summary = json.loads(dest.read_text(encoding="utf-8"))
    cal, _, kept = _expected(tokenizer, texts, fpr=0.1, num_texts=40)
    assert summary["num_texts"] == 40 == len(kept)
    assert summary["threshold"] == pytest.approx(cal.threshold)
    assert summary["texts_read"] <= 60 and summary["source"]["format"] == "txt"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["human.txt", "summary.json"]


@pytest.mark.parametrize("streaming", [False, True], ids=["dataset", "streaming"])
def test_calibrate_from_datasets_offline(capsys, tok_dir, tokenizer, human_jsonl, human_texts, streaming):
    """The ``datasets.load_dataset`` path, with the local json builder (no network)."""
    argv = [*_base(tok_dir), "--dataset", "json", "--data-files", human_jsonl, "--split", "train"]
    argv += ["--text-field", "body", "--num-texts", 100, "--fpr", "0.05", "--batch-size", 16]
    rc, out, err = _run(capsys, [*argv, "--streaming"] if streaming else argv)
    assert rc == 0, err
    summary = json.loads(out)
    cal, health, kept = _expected(tokenizer, human_texts, fpr=0.05, num_texts=100)
    assert summary["num_texts"] == 100 == len(kept)
    assert summary["texts_read"] == 102  # the two short texts among the first 102 rows are skipped
    assert summary["threshold"] == pytest.approx(cal.threshold)
    assert summary["null_var"] == pytest.approx(cal.null_var)
    assert summary["key_health"]["num_flagged"] == health.num_flagged
    assert summary["source"]["dataset"] == "json" and summary["source"]["streaming"] is streaming


def test_calibrate_save(capsys, tmp_path, tok_dir, tokenizer, human_jsonl, human_texts):
    save = tmp_path / "detector"
    argv = [*_base(tok_dir), "--input", human_jsonl, "--text-field", "body", "--fpr", "0.05", "--save", save]
    rc, out, err = _run(capsys, argv)
    assert rc == 0, err
    summary = json.loads(out)
    assert summary["saved"]["directory"] == str(save)
    for file in save.iterdir():
        assert KEY not in file.read_text(encoding="utf-8", errors="replace")
    cal, _, _ = _expected(tokenizer, human_texts, fpr=0.05)
    assert "config.json" in summary["saved"]["files"]
    loaded = LRDWMDetector.from_pretrained(save)  # a detector repo, with the tokenizer
    assert loaded.config == LRDWMConfig(key=KEY)
    assert loaded.fpr == 0.05 and loaded.min_tokens == MIN_TOKENS and loaded.statistic == "binomial"
    assert Calibration.from_dict(loaded.calibration.to_dict()) == loaded.calibration
    assert loaded.calibration.threshold == pytest.approx(cal.threshold)
    assert loaded.calibration.threshold_ci == pytest.approx(cal.threshold_ci)
    assert loaded.calibration.num_texts == cal.num_texts
    texts = human_texts[:8]
    direct = LRDWMDetector(LRDWMConfig(key=KEY), tokenizer, fpr=0.05, min_tokens=MIN_TOKENS, calibration=cal)
    assert loaded(texts).z_score.tolist() == pytest.approx(direct(texts).z_score.tolist(), nan_ok=True)


def test_unhealthy_key_and_too_few_texts_warn(capsys, tmp_path, tok_dir, tokenizer, human_texts):
    """Half the corpus is one text repeated: a key that flags it flags half the texts (unhealthy)."""
    repeated = human_texts[0]
    ids = tokenizer(repeated, add_special_tokens=False)["input_ids"][:LENGTH]
    key = next(
        f"{KEY}-{n}"
        for n in range(2000)
        if LRDWMDetector(LRDWMConfig(key=f"{KEY}-{n}"), tokenizer, fpr=0.01)(ids).prediction[0]
    )
    texts = [repeated] * 20 + human_texts[20:40]
    inp = tmp_path / "human.jsonl"
    inp.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts), encoding="utf-8")
    argv = ["calibrate", "--key", key, "--tokenizer", tok_dir, "--length", LENGTH, "--min-tokens", MIN_TOKENS]
    rc = main([str(a) for a in [*argv, "--input", inp, "--fpr", "0.01"]])
    out, err = capsys.readouterr()
    assert rc == 0, err
    summary = json.loads(out)
    assert summary["key_health"]["healthy"] is False
    assert summary["key_health"]["num_flagged"] >= 20
    assert len(summary["warnings"]) == 2  # 40 texts are too few for 1%, and the key is unhealthy
    lines = err.splitlines()
    assert len(lines) == 2 and all(line.startswith("hf-lrdwm: warning:") for line in lines)
    assert "too few" in lines[0] and "flags" in lines[1]
    assert key not in out and key not in err


def _error_cases(tmp_path, tok_dir, human_jsonl):
    k = ["--key", KEY]
    t = ["--tokenizer", tok_dir]
    i = ["--input", human_jsonl, "--text-field", "body"]
    few = tmp_path / "few.jsonl"
    few.write_text("".join(json.dumps({"text": d["extract"]}) + "\n" for d in wiki_summaries()[:5]))
    a_file = tmp_path / "a_file"
    a_file.write_text("x")
    txt = tmp_path / "h.txt"
    txt.write_text("hello\n")
    dj = ["--dataset", "json", "--data-files", human_jsonl]
    return {
        "missing key": (["calibrate", *t, *i], "no watermark key"),
        "no source": (["calibrate", *k, *t], "--dataset is required"),
        "both sources": (["calibrate", *k, *t, *i, "--dataset", "x"], "not allowed with argument"),
        "no tokenizer": (["calibrate", *k, *i], "--tokenizer"),
        "missing file": (["calibrate", *k, *t, "--input", tmp_path / "nope.jsonl"], "not found"),
        "missing field": (["calibrate", *k, *t, "--input", human_jsonl], "line 1: missing field 'text'"),
        "dataset option": (["calibrate", *k, *t, *i, "--streaming"], "--streaming needs --dataset"),
        "split option": (["calibrate", *k, *t, *i, "--split", "test"], "--split needs --dataset"),
        "format option": (["calibrate", *k, *t, *dj, "--format", "txt"], "--format applies to --input"),
        "txt text field": (["calibrate", *k, *t, "--input", txt, "--text-field", "x"], "--text-field needs"),
        "too few": (["calibrate", *k, *t, "--input", few], "only 5 usable human texts"),
        "min > length": (["calibrate", *k, *t, *i, "--length", "8"], "--min-tokens (16) must be <="),
        "save is a file": (["calibrate", *k, *t, *i, "--save", a_file], "is not a directory"),
        "no column": (["calibrate", *k, *t, *dj, "--text-field", "nope"], "has no column 'nope'"),
        "bad split": (
            ["calibrate", *k, *t, *dj, "--text-field", "body", "--split", "test"],
            "could not load",
        ),
        "no dataset": (["calibrate", *k, *t, "--dataset", "no-such-org/no-such-set"], "could not load"),
        "bad fpr": (["calibrate", *k, *t, *i, "--fpr", "0"], "argument --fpr"),
        "key in message": (["calibrate", *k, *t, *i, "--length", KEY], "<hidden>"),
    }


@pytest.mark.parametrize(
    "case",
    [
        "missing key",
        "no source",
        "both sources",
        "no tokenizer",
        "missing file",
        "missing field",
        "dataset option",
        "split option",
        "format option",
        "txt text field",
        "too few",
        "min > length",
        "save is a file",
        "no column",
        "bad split",
        "no dataset",
        "bad fpr",
        "key in message",
    ],
)
def test_user_errors_are_one_line(case, capsys, tmp_path, tok_dir, human_jsonl):
    argv, fragment = _error_cases(tmp_path, tok_dir, human_jsonl)[case]
    dest = tmp_path / "summary.json"
    save = tmp_path / "saved"
    rc, out, err = _run(capsys, [*argv, "--output", dest] + ([] if "--save" in argv else ["--save", save]))
    assert rc == 2
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("hf-lrdwm: error:") and fragment in lines[0], lines[0]
    assert "Traceback" not in err and out == ""
    assert not dest.exists() and not save.exists()


def test_help_lists_calibrate(capsys):
    assert main(["--help"]) == 0
    assert "calibrate" in capsys.readouterr().out
    assert main(["calibrate", "--help"]) == 0
    text = capsys.readouterr().out
    for option in ("--dataset", "--data-files", "--streaming", "--length", "--num-texts", "--save"):
        assert option in text
