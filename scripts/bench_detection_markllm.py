#!/usr/bin/env python
"""Detection throughput, third point: MarkLLM's KGW detector next to LR-DWM on the same random ids.

MarkLLM pins Pillow 9.4.0 and ``openai==0.28``, so it lives in its own virtual environment; this script
runs there with ``hf_lrdwm`` taken from the source tree (``PYTHONPATH=.``) and times both detectors
in the same process, on the ids ``scripts/bench_detection.py`` uses (same seed, V = 126,464).

MarkLLM's detection entry point, ``KGW.detect_watermark(text)``, tokenizes text and then calls
``KGW.utils.score_sequence(ids)``; there is no tokenizer for random ids, so the ids go to
``score_sequence`` directly (the tokenizer's cost is left out, which favours MarkLLM). Its settings are
its shipped ``config/KGW.json``: gamma 0.5, prefix length 1, ``f_scheme="time"``, ``window_scheme="left"``
(one ``torch.randperm(V)`` per scored token).

Usage (separate venv, about 5 minutes with the installs):
    python -m venv /tmp/mkvenv && /tmp/mkvenv/bin/pip install torch==2.13.0
    /tmp/mkvenv/bin/pip install markllm==0.1.5
    PYTHONPATH=. /tmp/mkvenv/bin/python scripts/bench_detection_markllm.py --threads 1
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from importlib.metadata import version
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_detection import KGW_BOS, V, _row, _time, machine_info  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="docs/benchmarks/detection_markllm.json")
    parser.add_argument("--rows", type=int, default=16, help="sequences of 400 tokens MarkLLM scores")
    parser.add_argument("--repeats", type=int, default=5, help="timed runs per LR-DWM case (median kept)")
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)

    from markllm.utils.transformers_config import TransformersConfig
    from markllm.watermark.kgw.kgw import KGW

    from hf_lrdwm import LRDWMConfig, LRDWMDetector

    gen = torch.Generator().manual_seed(args.seed)  # the same draws as bench_detection.py
    main_ids = torch.randint(0, V, (256, 400), generator=gen)
    main_ids[main_ids[:, 0] == KGW_BOS, 0] = KGW_BOS + 1
    subset = main_ids[: args.rows]

    ours = LRDWMDetector(LRDWMConfig(key="bench"), vocab_size=V)
    ours_name = "LR-DWM (hf_lrdwm.LRDWMDetector)"
    subset_name = f"{args.rows} x 400 (MarkLLM subset), tensor"
    t_main = _time(lambda: ours(main_ids), args.repeats)
    t_subset = _time(lambda: ours(subset), args.repeats)
    rows = [
        _row("256 x 400, tensor", ours_name, "tensor", (256, 400), t_main),
        _row(subset_name, ours_name, "tensor", tuple(subset.shape), t_subset),
    ]
    kgw = KGW(None, TransformersConfig(model=None, tokenizer=None, vocab_size=V, device="cpu"))
    kgw.utils.score_sequence(subset[0, :20])  # warm-up
    t0 = time.perf_counter()
    z = [kgw.utils.score_sequence(row)[0] for row in subset]
    seconds = time.perf_counter() - t0
    mk_name = "KGW (MarkLLM KGW.utils.score_sequence)"
    rows.append(_row(subset_name, mk_name, "tensor", tuple(subset.shape), [seconds]))
    for r in rows:
        cells = f"{r['tokens']:,} | {r['seconds_median']:.4f} | {r['tokens_per_s']:,.0f}"
        print(f"| {r['detector']} | {r['name']} | {cells} |")
    mk = rows[-1]["tokens_per_s"]
    summary = {
        "lrdwm_tokens_per_s_256x400_tensor": rows[0]["tokens_per_s"],
        "lrdwm_tokens_per_s_subset": rows[1]["tokens_per_s"],
        "markllm_kgw_tokens_per_s": mk,
        "speedup_256x400_vs_markllm": rows[0]["tokens_per_s"] / mk,
        "speedup_same_subset": rows[1]["tokens_per_s"] / mk,
        "markllm_z_scores_mean": sum(z) / len(z),
    }
    print(
        f"LR-DWM / MarkLLM KGW: {summary['speedup_256x400_vs_markllm']:,.0f}x (256 x 400 batch), "
        f"{summary['speedup_same_subset']:,.0f}x (same {args.rows} x 400 ids)"
    )
    result = {
        "benchmark": "detection throughput, random ids, MarkLLM's KGW as a third point",
        "vocab_size": V,
        "command": "PYTHONPATH=. python scripts/bench_detection_markllm.py "
        + " ".join(sys.argv[1:] if argv is None else argv),
        "machine": {
            **machine_info(),
            "markllm": version("markllm"),
            "transformers": version("transformers"),
        },
        "markllm_settings": "markllm/config/KGW.json as shipped (gamma 0.5, prefix_length 1, left window)",
        "results": rows,
        "summary": summary,
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    print(f"written: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
