#!/usr/bin/env python
"""Detection throughput: LR-DWM (`LRDWMDetector`) vs transformers' KGW `WatermarkDetector`.

Both detectors score the same random token ids at LLaDA's vocabulary size (V = 126,464) in the same
run. KGW's detector loops in Python over every n-gram and draws a ``torch.randperm(V)`` green list for
each one (~1-2k tokens/s on a CPU), so it scores only the first ``--kgw-rows`` sequences of the main
batch; LR-DWM is also timed on exactly that subset, and the ratio is reported both ways.

Random ids are the worst case for KGW's LRU cache (no n-gram repeats) and neutral for LR-DWM, whose
cost does not depend on the ids.

Usage:
    python scripts/bench_detection.py                       # ~1 minute on a 2-core CPU
    python scripts/bench_detection.py --out docs/benchmarks/detection.json --kgw-rows 32 --repeats 5
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import torch

V = 126_464  # LLaDA-8B vocabulary
KGW_BOS = 1


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def machine_info() -> dict:
    """Platform, CPU, threads, load and versions of Python and torch (shared with the MarkLLM script)."""
    return {
        "platform": platform.platform(),
        "processor": _cpu_model(),
        "nproc": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "load_average_1_5_15min": list(os.getloadavg()),
        "python": platform.python_version(),
        "torch": torch.__version__,
    }


def _time(fn, repeats: int) -> list[float]:
    fn()  # warm-up
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return times


def _row(name: str, detector: str, input_kind: str, shape: tuple[int, int], times: list[float]) -> dict:
    tokens = shape[0] * shape[1]
    median = statistics.median(times)
    return {
        "name": name,
        "detector": detector,
        "input": input_kind,
        "batch": shape[0],
        "length": shape[1],
        "tokens": tokens,
        "repeats": len(times),
        "seconds_median": median,
        "seconds_min": min(times),
        "tokens_per_s": tokens / median,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="docs/benchmarks/detection.json", help="JSON results file")
    parser.add_argument("--repeats", type=int, default=5, help="timed runs per LR-DWM case (median kept)")
    parser.add_argument("--kgw-rows", type=int, default=32, help="sequences of 400 tokens KGW scores")
    parser.add_argument("--kgw-repeats", type=int, default=1, help="timed runs of KGW")
    parser.add_argument(
        "--threads",
        type=int,
        default=None,
        help="torch threads (default: torch's). Use 1 on a busy machine: OpenMP threads that spin-wait "
        "for a descheduled peer make multi-threaded timings collapse when cores are oversubscribed",
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--device",
        default="cpu",
        help="where both detectors hash (LRDWMDetector(device=...), WatermarkDetector(device=...)); "
        "inputs start on the CPU, results come back to it",
    )
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)

    import transformers
    from transformers import LlamaConfig, WatermarkDetector, WatermarkingConfig

    import hf_lrdwm
    from hf_lrdwm import LRDWMConfig, LRDWMDetector

    gen = torch.Generator().manual_seed(args.seed)
    main_ids = torch.randint(0, V, (256, 400), generator=gen)
    main_ids[main_ids[:, 0] == KGW_BOS, 0] = KGW_BOS + 1  # KGW strips a leading BOS: keep it uniform
    big_ids = torch.randint(0, V, (1024, 400), generator=gen)
    long_ids = torch.randint(0, V, (64, 2000), generator=gen)
    kgw_ids = main_ids[: args.kgw_rows]

    ours = LRDWMDetector(LRDWMConfig(key="bench"), vocab_size=V, device=args.device)
    rows = []
    cases = [
        ("256 x 400, tensor", "tensor", main_ids),
        ("256 x 400, list of lists", "list", main_ids.tolist()),
        ("1024 x 400, tensor", "tensor", big_ids),
        ("64 x 2000, tensor", "tensor", long_ids),
        (f"{args.kgw_rows} x 400 (KGW subset), tensor", "tensor", kgw_ids),
    ]
    for name, kind, inputs in cases:
        shape = (len(inputs), len(inputs[0]))
        times = _time(lambda inputs=inputs: ours(inputs), args.repeats)
        rows.append(_row(name, "LR-DWM (hf_lrdwm.LRDWMDetector)", kind, shape, times))
        print(f"  LR-DWM {name}: {rows[-1]['tokens_per_s']:,.0f} tok/s", file=sys.stderr)

    model_config = LlamaConfig(
        vocab_size=V,
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        bos_token_id=KGW_BOS,
    )
    wm_config = WatermarkingConfig(greenlist_ratio=0.5, bias=2.0, seeding_scheme="lefthash", context_width=1)
    kgw = WatermarkDetector(model_config, args.device, wm_config)
    kgw_in = kgw_ids.to(args.device)  # KGW's detector wants its ids on its own device
    kgw(kgw_in[:1, :20])  # warm-up
    kgw_times = []
    for _ in range(args.kgw_repeats):
        t0 = time.perf_counter()
        kgw(kgw_in, return_dict=True)
        kgw_times.append(time.perf_counter() - t0)
    name = f"{args.kgw_rows} x 400 (KGW subset), tensor"
    rows.append(_row(name, "KGW (transformers.WatermarkDetector)", "tensor", tuple(kgw_ids.shape), kgw_times))
    print(f"  KGW {name}: {rows[-1]['tokens_per_s']:,.0f} tok/s", file=sys.stderr)

    ours_main = rows[0]["tokens_per_s"]
    ours_subset = rows[4]["tokens_per_s"]
    kgw_rate = rows[-1]["tokens_per_s"]
    result = {
        "benchmark": "detection throughput, random ids",
        "vocab_size": V,
        "command": "python scripts/bench_detection.py " + " ".join(sys.argv[1:] if argv is None else argv),
        "machine": {
            **machine_info(),
            "transformers": transformers.__version__,
            "hf_lrdwm": hf_lrdwm.__version__,
            "device": args.device,
            "gpu": torch.cuda.get_device_name(0) if args.device.startswith("cuda") else None,
        },
        "kgw_settings": {
            "seeding_scheme": "lefthash",
            "context_width": 1,
            "greenlist_ratio": 0.5,
            "ignore_repeated_ngrams": False,
            "rows": args.kgw_rows,
        },
        "lrdwm_settings": {"gamma": 0.5, "sides": "both", "ignore_repeated_pairs": True},
        "results": rows,
        "summary": {
            "lrdwm_tokens_per_s_256x400_tensor": ours_main,
            "lrdwm_tokens_per_s_kgw_subset": ours_subset,
            "kgw_tokens_per_s": kgw_rate,
            "speedup_256x400_vs_kgw": ours_main / kgw_rate,
            "speedup_same_subset": ours_subset / kgw_rate,
            "target_1M_tokens_per_s_met": ours_main >= 1e6,
            "target_100x_kgw_met": ours_main / kgw_rate >= 100 and ours_subset / kgw_rate >= 100,
        },
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")

    print("| detector | input | tokens | median s | tokens/s |")
    print("|---|---|---:|---:|---:|")
    for r in rows:
        print(
            f"| {r['detector']} | {r['name']} | {r['tokens']:,} | {r['seconds_median']:.4f} "
            f"| {r['tokens_per_s']:,.0f} |"
        )
    s = result["summary"]
    print()
    print(
        f"LR-DWM / KGW: {s['speedup_256x400_vs_kgw']:,.0f}x (256 x 400 batch vs KGW subset), "
        f"{s['speedup_same_subset']:,.0f}x (same {args.kgw_rows} x 400 subset)"
    )
    print(f"written: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
