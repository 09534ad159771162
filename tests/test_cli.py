"""The ``hf-lrdwm`` command line: ``detect`` on texts and ids, ordering, secrets, one-line errors."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch
from tiny_tokenizers import fast_tokenizer
from watermarked import greedy_watermarked_ids

from hf_lrdwm import LRDWMConfig, LRDWMDetector
from hf_lrdwm.cli import KEY_ENV, build_parser, main

KEY = "cli-test-SECRET-key-8c1f"
SENTENCES = [
    "the quick brown fox jumps over the lazy dog",
    "a watermark for diffusion language models hides in the choice of tokens",
    "hello world, this is a small test of the command line",
    "left and right neighbours both vote for the colour of a token",
]


@pytest.fixture(autouse=True)
def _offline(monkeypatch, tmp_path_factory):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path_factory.mktemp("hf_home")))
    monkeypatch.delenv(KEY_ENV, raising=False)


@pytest.fixture(scope="module")
def tok_dir(tmp_path_factory):
    """A tiny byte-level BPE tokenizer, trained offline and saved as a transformers tokenizer."""
    fast = fast_tokenizer(SENTENCES * 3, vocab_size=400)
    path = tmp_path_factory.mktemp("tok")
    fast.save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def tokenizer(tok_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(tok_dir))


def _run(capsys, argv):
    rc = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    assert KEY not in out and KEY not in err
    return rc, out, err


def _rows(out):
    return [json.loads(line) for line in out.splitlines()]


def _write_jsonl(path, records):
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


def _long_text(i):
    return " ".join(SENTENCES[(i + k) % len(SENTENCES)] for k in range(3))


# ----------------------------------------------------------------------------------------------
# detect: inputs and outputs
# ----------------------------------------------------------------------------------------------
def test_detect_text_jsonl_matches_library(tmp_path, capsys, tok_dir, tokenizer):
    texts = [_long_text(i) for i in range(5)]
    inp = _write_jsonl(tmp_path / "in.jsonl", [{"text": t, "id": i} for i, t in enumerate(texts)])
    rc, out, err = _run(capsys, ["detect", "--key", KEY, "--tokenizer", tok_dir, "--input", inp])
    assert rc == 0, err
    rows = _rows(out)
    assert len(rows) == 5
    expected = LRDWMDetector(LRDWMConfig(key=KEY), tokenizer)(texts).to_list(with_token_scores=False)
    for n, (row, exp) in enumerate(zip(rows, expected, strict=True)):
        for name in ("z_score", "p_value", "prediction", "num_tokens_scored", "num_events", "reason"):
            assert row[name] == exp[name]
        assert {"green_fraction_left", "green_fraction_right"} <= row.keys()
        assert "token_scores" not in row
        assert row["line"] == n + 1


def test_detect_order_is_kept_across_batches(tmp_path, capsys, tok_dir, tokenizer):
    texts = [_long_text(i)[: 40 + 17 * i] for i in range(9)]
    inp = _write_jsonl(tmp_path / "in.jsonl", [{"body": t} for t in texts])
    argv = ["detect", "--key", KEY, "--tokenizer", tok_dir, "--input", inp, "--text-field", "body"]
    rc, out, err = _run(capsys, [*argv, "--batch-size", "2", "--min-tokens", "1"])
    assert rc == 0, err
    rows = _rows(out)
    det = LRDWMDetector(LRDWMConfig(key=KEY), tokenizer, min_tokens=1)
    expected = det(texts)
    assert [r["line"] for r in rows] == list(range(1, 10))
    assert [r["num_events"] for r in rows] == expected.num_events.tolist()
    assert [r["z_score"] for r in rows] == pytest.approx(expected.z_score.tolist())
    rc, out_one_batch, _ = _run(capsys, [*argv, "--batch-size", "100", "--min-tokens", "1"])
    assert rc == 0 and out_one_batch == out


def test_detect_txt_lines_and_nan_as_null(tmp_path, capsys, tok_dir):
    inp = tmp_path / "in.txt"
    inp.write_text(f"{_long_text(0)}\n\n{_long_text(1)}\n", encoding="utf-8")
    rc, out, err = _run(capsys, ["detect", "--key", KEY, "--tokenizer", tok_dir, "--input", inp])
    assert rc == 0, err
    rows = _rows(out)
    assert [r["line"] for r in rows] == [1, 2, 3]
    assert rows[1]["z_score"] is None and rows[1]["prediction"] is False
    assert rows[1]["reason"].startswith("empty input")
    assert rows[0]["num_tokens_scored"] > 16 and rows[0]["reason"] is None
    assert "NaN" not in out


def test_detect_ids_field_without_tokenizer_and_env_key(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv(KEY_ENV, KEY)
    cfg = LRDWMConfig(key=KEY)
    vocab = 1000
    marked = [greedy_watermarked_ids(cfg, vocab, 80, seed) for seed in range(3)]
    gen = torch.Generator().manual_seed(0)
    plain = torch.randint(0, vocab, (3, 80), generator=gen).tolist()
    seqs = [marked[0], plain[0], marked[1], plain[1], marked[2], plain[2]]
    inp = _write_jsonl(tmp_path / "ids.jsonl", [{"input_ids": s} for s in seqs])
    argv = ["detect", "--ids-field", "input_ids", "--input", inp, "--vocab-size", vocab, "--batch-size", 4]
    rc, out, err = _run(capsys, argv)
    assert rc == 0, err
    rows = _rows(out)
    assert [r["prediction"] for r in rows] == [True, False] * 3
    assert all(rows[i]["p_value"] < 1e-20 for i in (0, 2, 4))
    assert all(rows[i]["green_fraction_left"] == 1.0 == rows[i]["green_fraction_right"] for i in (0, 2, 4))
    # the wrong key sees nothing
    monkeypatch.setenv(KEY_ENV, "another key")
    rc, out, err = _run(capsys, argv)
    assert rc == 0 and not any(r["prediction"] for r in _rows(out))


def test_detect_ids_with_tokenizer_ignores_special_ids(tmp_path, capsys, tok_dir, tokenizer):
    cfg = LRDWMConfig(key=KEY, sides="left")
    ids = greedy_watermarked_ids(cfg, len(tokenizer), 50, seed=5) + [tokenizer.eos_token_id] * 10
    inp = _write_jsonl(tmp_path / "ids.jsonl", [{"ids": ids}])
    argv = ["detect", "--key", KEY, "--sides", "left", "--tokenizer", tok_dir, "--ids-field", "ids"]
    rc, out, err = _run(capsys, [*argv, "--input", inp])
    assert rc == 0, err
    (row,) = _rows(out)
    assert row["prediction"] is True and row["num_tokens_scored"] == 49
    assert row["green_fraction_left"] == 1.0 and row["green_fraction_right"] is None


def test_detect_stdin_output_file_and_paper_statistic(tmp_path, capsys, monkeypatch, tok_dir):
    import io

    texts = [_long_text(i) for i in range(3)]
    monkeypatch.setattr(sys, "stdin", io.StringIO("".join(json.dumps({"text": t}) + "\n" for t in texts)))
    dest = tmp_path / "out.jsonl"
    argv = ["detect", "--key", KEY, "--tokenizer", tok_dir, "--input", "-", "--output", dest]
    rc, out, err = _run(capsys, [*argv, "--statistic", "paper", "--fpr", "0.05", "--no-progress"])
    assert rc == 0, err
    assert out == ""
    rows = _rows(dest.read_text(encoding="utf-8"))
    assert len(rows) == 3 and all(r["statistic"] == "paper" and r["fpr"] == 0.05 for r in rows)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.jsonl"]  # no temporary file left


def test_detect_with_a_saved_calibrated_detector_repo(tmp_path, capsys, tok_dir, tokenizer, monkeypatch):
    """--detector DIR uses the repo's keys, calibration, settings and tokenizer (no --key needed)."""
    human = [_long_text(i) + f" record {i}" for i in range(40)]
    detector = LRDWMDetector(LRDWMConfig(key=KEY), tokenizer, min_tokens=4, fpr=0.05)
    detector.calibrate(human)
    repo = tmp_path / "repo"
    detector.save_pretrained(repo)
    texts = [_long_text(i) for i in range(3)]
    inp = _write_jsonl(tmp_path / "in.jsonl", [{"text": t} for t in texts])
    monkeypatch.delenv("HF_LRDWM_KEY", raising=False)
    rc, out, err = _run(capsys, ["detect", "--detector", repo, "--input", inp])
    assert rc == 0, err
    expected = detector(texts).to_list(with_token_scores=False)
    rows = _rows(out)
    assert [r["z_score"] for r in rows] == [e["z_score"] for e in expected]
    assert all(r["statistic"] == "calibrated-binomial" and r["fpr"] == 0.05 for r in rows)
    rc, out, _ = _run(capsys, ["detect", "--detector", repo, "--input", inp, "--fpr", "0.2"])
    assert rc == 0 and all(r["fpr"] == 0.2 for r in _rows(out))
    rc, out, err = _run(capsys, ["detect", "--detector", repo, "--key", KEY, "--input", inp])
    assert rc == 2 and out == "" and "--detector holds its own keys" in err and len(err.splitlines()) == 1


def test_help_and_parser(capsys):
    assert main(["--help"]) == 0
    assert "detect" in capsys.readouterr().out
    assert main(["detect", "--help"]) == 0
    assert "--ids-field" in capsys.readouterr().out
    parser = build_parser()
    args = parser.parse_args(["detect", "--input", "x.jsonl", "--ids-field", "ids"])
    # --fpr defaults to None on the parser: 0.01, or the --detector repo's own FPR.
    assert args.func.__name__ == "cmd_detect" and args.batch_size == 256 and args.fpr is None


# ----------------------------------------------------------------------------------------------
# errors: one line, exit status 2, no traceback, no key
# ----------------------------------------------------------------------------------------------
def _error_cases(tmp_path, tok_dir):
    good = _write_jsonl(tmp_path / "good.jsonl", [{"text": "hello world", "ids": [3, 4, 5]}])
    bad_json = tmp_path / "bad.jsonl"
    bad_json.write_text('{"text": "ok"}\n{"text": nope}\n', encoding="utf-8")
    no_field = _write_jsonl(tmp_path / "nofield.jsonl", [{"text": "ok"}, {"body": "x"}])
    not_obj = _write_jsonl(tmp_path / "notobj.jsonl", [[1, 2]])
    not_str = _write_jsonl(tmp_path / "notstr.jsonl", [{"text": 3}])
    big_id = _write_jsonl(tmp_path / "bigid.jsonl", [{"ids": [3]}, {"ids": [3, 10**6]}])
    neg_id = _write_jsonl(tmp_path / "negid.jsonl", [{"ids": [3, -1]}])
    not_ids = _write_jsonl(tmp_path / "notids.jsonl", [{"ids": "3 4 5"}])
    txt = tmp_path / "in.txt"
    txt.write_text("hello\n", encoding="utf-8")
    k = ["--key", KEY]
    t = ["--tokenizer", tok_dir]
    return {
        "missing key": (["detect", *t, "--input", good], "no watermark key"),
        "missing file": (["detect", *k, *t, "--input", tmp_path / "nope.jsonl"], "not found"),
        "bad json": (["detect", *k, *t, "--input", bad_json], "line 2: not valid JSON"),
        "missing field": (["detect", *k, *t, "--input", no_field], "line 2: missing field 'text'"),
        "not an object": (["detect", *k, *t, "--input", not_obj], "line 1: expected a JSON object"),
        "text not str": (["detect", *k, *t, "--input", not_str], "line 1: field 'text' must be a string"),
        "fpr too big": (["detect", *k, *t, "--input", good, "--fpr", "1.5"], "argument --fpr"),
        "fpr not number": (["detect", *k, *t, "--input", good, "--fpr", "abc"], "argument --fpr"),
        "bad gamma": (["detect", *k, *t, "--input", good, "--gamma", "1.5"], "`gamma` must be in (0, 1)"),
        "tokenizer dir": (["detect", *k, "--tokenizer", tmp_path / "no_tok", "--input", good], "tokenizer"),
        "tokenizer hub": (["detect", *k, "--tokenizer", "no-such-org/no-tok", "--input", good], "tokenizer"),
        "no tokenizer": (["detect", *k, "--input", good], "needs --tokenizer"),
        "id too big": (
            ["detect", *k, *t, "--ids-field", "ids", "--input", big_id],
            "line 2: token id 1000000",
        ),
        "id negative": (["detect", *k, "--ids-field", "ids", "--input", neg_id], "line 1: token id -1"),
        "ids not list": (
            ["detect", *k, "--ids-field", "ids", "--input", not_ids],
            "list of integer token ids",
        ),
        "ids from txt": (["detect", *k, "--ids-field", "ids", "--input", txt], "needs JSON lines"),
        "batch size": (["detect", *k, *t, "--input", good, "--batch-size", "0"], "--batch-size"),
        "no command": ([], "required"),
        "bad command": (["detekt"], "invalid choice"),
        "key in message": (["detect", *k, *t, "--input", good, "--fpr", KEY], "<hidden>"),
    }


@pytest.mark.parametrize(
    "case",
    [
        "missing key",
        "missing file",
        "bad json",
        "missing field",
        "not an object",
        "text not str",
        "fpr too big",
        "fpr not number",
        "bad gamma",
        "tokenizer dir",
        "tokenizer hub",
        "no tokenizer",
        "id too big",
        "id negative",
        "ids not list",
        "ids from txt",
        "batch size",
        "no command",
        "bad command",
        "key in message",
    ],
)
def test_user_errors_are_one_line(case, tmp_path, capsys, tok_dir):
    argv, fragment = _error_cases(tmp_path, tok_dir)[case]
    dest = tmp_path / "out.jsonl"
    rc, out, err = _run(capsys, [*argv, "--output", dest] if argv and argv[0] == "detect" else argv)
    assert rc == 2
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("hf-lrdwm: error:")
    assert fragment in lines[0]
    assert "Traceback" not in err and out == ""
    assert not dest.exists()


def test_empty_env_key_is_missing(tmp_path, capsys, monkeypatch, tok_dir):
    monkeypatch.setenv(KEY_ENV, "")
    inp = _write_jsonl(tmp_path / "in.jsonl", [{"text": "hi"}])
    rc, _, err = _run(capsys, ["detect", "--tokenizer", tok_dir, "--input", inp])
    assert rc == 2 and "no watermark key" in err


# ----------------------------------------------------------------------------------------------
# as a program
# ----------------------------------------------------------------------------------------------
def test_module_entry_point_subprocess(tmp_path):
    cfg = LRDWMConfig(key=KEY)
    marked = greedy_watermarked_ids(cfg, 500, 60, seed=9)
    plain = torch.randint(0, 500, (60,), generator=torch.Generator().manual_seed(9)).tolist()
    stdin = "".join(json.dumps({"input_ids": s}) + "\n" for s in (marked, plain))
    env = {**os.environ, KEY_ENV: KEY, "HF_HUB_OFFLINE": "1"}
    cmd = [sys.executable, "-m", "hf_lrdwm.cli", "detect", "--ids-field", "input_ids", "--input", "-"]
    proc = subprocess.run(cmd, input=stdin, capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert [r["prediction"] for r in _rows(proc.stdout)] == [True, False]
    assert KEY not in proc.stdout and KEY not in proc.stderr
    bad = subprocess.run(
        [*cmd[:-1], str(tmp_path / "missing.jsonl")], capture_output=True, text=True, env=env, timeout=120
    )
    assert bad.returncode == 2 and bad.stdout == ""
    assert bad.stderr.splitlines() == [
        f"hf-lrdwm: error: input file {str(tmp_path / 'missing.jsonl')!r} not found"
    ]
