"""The README's main job, `hf-lrdwm quickstart`, end to end (built-in tiny models, real vocabularies)."""

from __future__ import annotations

import pytest

from hf_lrdwm.cli import main
from hf_lrdwm.quickstart import format_table, run_quickstart


def test_quickstart_command_prints_table_and_detects(capsys):
    assert main(["quickstart", "--gen-length", "32", "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "RANDOM weights" in out and "gibberish" in out
    assert "GSAI-ML/LLaDA-8B-Instruct" in out and "Dream-org/Dream-v0-Instruct-7B" in out
    rows = [line.split() for line in out.splitlines() if line.startswith(("llada ", "dream "))]
    assert [(r[0], r[1]) for r in rows] == [
        ("llada", "no"),
        ("llada", "yes"),
        ("dream", "no"),
        ("dream", "yes"),
    ]
    for sampler, watermark, tokens, z, _p, *verdict in rows:
        assert int(tokens) >= 30  # 32 generated tokens, all scored (prompt gives the first left context)
        if watermark == "yes":
            assert verdict[0] == "watermarked" and float(z) > 2.33, (sampler, z)
        else:
            assert verdict[:2] == ["not", "detected"], (sampler, z)


def test_quickstart_rows_and_validation():
    rows = run_quickstart(gen_length=16, families=("llada",), progress=False, seed=1)
    assert [r.watermark for r in rows] == [False, True]
    assert all(r.sampler == "llada" and r.seconds > 0 for r in rows)
    table = format_table(rows)
    assert table.splitlines()[0].split() == ["sampler", "watermark", "tokens", "z", "p", "verdict", "seconds"]
    with pytest.raises(ValueError, match="gen_length must be an even number"):
        run_quickstart(gen_length=5)
