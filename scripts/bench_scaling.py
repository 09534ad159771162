#!/usr/bin/env python
"""How LR-DWM's overhead over vanilla scales with the generation length and the vocabulary size.

LLaDA sampler on the tiny random-weight backbone (``hf_lrdwm.models.tiny_model``, hidden 64, 2 layers),
prompt 32, block 32, temperature 0, low-confidence remasking, and a fixed number of steps (``--steps``,
default 64) so that the longest runs stay affordable on a CPU. Two sweeps:

* ``gen_length`` in 64, 128, 256, 512 at LLaDA's V = 126,464;
* vocabulary size V in 32,768, 65,536, 131,072, 262,144 at ``gen_length`` 128.

Each (point, method) runs in a fresh process (``scripts/bench_overhead.py``'s worker) that generates
``--prompts`` prompts after a warm-up; vanilla and LR-DWM alternate, point after point, and the
sweep is repeated ``--reps`` times. Reported: median seconds per generation and peak RSS, and the
ratios LR-DWM / vanilla.

Usage:
    python scripts/bench_scaling.py                              # ~5 minutes on 2 CPU cores
    python scripts/bench_scaling.py --quick                      # debugging sizes
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_overhead import _machine, _spawn, add_backbone_arguments, run_worker  # noqa: E402

LLADA_V = 126_464


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="docs/benchmarks/scaling.json")
    parser.add_argument("--gen-lengths", default="64,128,256,512")
    parser.add_argument("--vocabs", default="32768,65536,131072,262144")
    parser.add_argument("--vocab-gen-length", type=int, default=128)
    parser.add_argument("--steps", type=int, default=64)
    parser.add_argument("--prompts", type=int, default=3, help="generations per process (median kept)")
    parser.add_argument("--reps", type=int, default=1, help="repetitions of the whole sweep")
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--timeout", type=float, default=1800.0)
    parser.add_argument("--device", default="cpu")
    add_backbone_arguments(parser)
    args = parser.parse_args(argv)
    cuda = args.device.startswith("cuda")
    if (args.in_process or args.backbone == "full") and not cuda:
        parser.error("--in-process and --backbone full need --device cuda")
    if args.quick:
        args.gen_lengths, args.vocabs, args.vocab_gen_length, args.steps = "32,64", "4096,8192", 32, 16
        args.prompts = 2

    base = dict(
        family="llada",
        block_length=32 if not args.quick else 16,
        prompt_length=32 if not args.quick else 8,
        prompts=args.prompts,
        steps=args.steps,
        hidden_size=64,
        num_layers=2,
        threads=args.threads,
        device=args.device,
        backbone=args.backbone,
    )
    points = [
        ("gen_length", int(g), dict(gen_length=int(g), vocab_size=LLADA_V if not args.quick else 8192))
        for g in args.gen_lengths.split(",")
        if g
    ]
    points += [
        ("vocab_size", int(v), dict(gen_length=args.vocab_gen_length, vocab_size=int(v)))
        for v in args.vocabs.split(",")
        if v
    ]
    machine = _machine(args.threads, args.device)
    mem_key, inc_key = ("peak_gpu_mb", "gpu_increment_mb") if cuda else ("peak_rss_mb", "rss_increment_mb")
    model_cache: dict = {}
    print(f"machine: {machine}", flush=True)
    t_start = time.perf_counter()
    runs = []
    for rep in range(args.reps):
        for sweep, value, over in points:
            for method in ("vanilla", "lrdwm") if rep % 2 == 0 else ("lrdwm", "vanilla"):
                spec = dict(base, **over, method=method)
                load_before = os.getloadavg()[0]
                res = run_worker(spec, model_cache) if args.in_process else _spawn(spec, args.timeout)
                res["load_1min_before"] = load_before
                per_gen = statistics.median(res["wall_s_per_prompt"])
                runs.append({"sweep": sweep, "value": value, "rep": rep, **spec, **res, "s_per_gen": per_gen})
                print(
                    f"rep {rep} {sweep}={value:>7} {method:8s} {per_gen:7.2f} s/gen  "
                    f"peak {mem_key} {res[mem_key]:6.0f} MB  load {os.getloadavg()[0]:.2f}",
                    flush=True,
                )
    summary = []
    for sweep, value, _ in points:
        sel = {
            m: [r for r in runs if r["sweep"] == sweep and r["value"] == value and r["method"] == m]
            for m in ("vanilla", "lrdwm")
        }
        t = {m: statistics.median(x for r in rs for x in r["wall_s_per_prompt"]) for m, rs in sel.items()}
        mem = {m: statistics.median(r[mem_key] for r in rs) for m, rs in sel.items()}
        inc = {m: statistics.median(r[inc_key] for r in rs) for m, rs in sel.items()}
        summary.append(
            {
                "sweep": sweep,
                "value": value,
                "vanilla_s": t["vanilla"],
                "lrdwm_s": t["lrdwm"],
                "wall_ratio": t["lrdwm"] / t["vanilla"],
                "vanilla_peak_rss_mb": mem["vanilla"],
                "lrdwm_peak_rss_mb": mem["lrdwm"],
                "peak_ratio": mem["lrdwm"] / mem["vanilla"],
                "vanilla_increment_mb": inc["vanilla"],
                "lrdwm_increment_mb": inc["lrdwm"],
                # wall / (wall - time inside the processor), same run: robust to load from other jobs
                "in_run_ratio": statistics.median(r["implied_wall_ratio"] for r in sel["lrdwm"]),
            }
        )
    result = {
        "benchmark": "LR-DWM overhead scaling (LLaDA sampler)",
        "command": "python scripts/bench_scaling.py " + " ".join(sys.argv[1:] if argv is None else argv),
        "machine": machine,
        "load_avg_at_end": os.getloadavg(),
        "total_s": time.perf_counter() - t_start,
        "settings": base,
        "memory_metric": "torch.cuda.max_memory_allocated" if cuda else "peak RSS (ru_maxrss)",
        "summary": summary,
        "runs": runs,
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print("\n| sweep | value | vanilla s | LR-DWM s | x vanilla | vanilla RSS MB | LR-DWM RSS MB | x |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for s in summary:
        print(
            f"| {s['sweep']} | {s['value']:,} | {s['vanilla_s']:.2f} | {s['lrdwm_s']:.2f} "
            f"| {s['wall_ratio']:.3f} | {s['vanilla_peak_rss_mb']:.0f} | {s['lrdwm_peak_rss_mb']:.0f} "
            f"| {s['peak_ratio']:.3f} |"
        )
    print(f"wrote {out} ({result['total_s']:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
