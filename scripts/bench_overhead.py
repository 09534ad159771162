#!/usr/bin/env python
"""Generation overhead: vanilla vs LR-DWM vs the peer re-implementations (hf_lrdwm.baselines).

Every configuration runs in its own fresh process (so peak RSS is its own), the configurations
alternate within each repetition, and the median over repetitions is kept. All of them use the same
tiny random-weight backbone (``hf_lrdwm.models.tiny_model``: hidden 64, 2 layers) with the family's
real vocabulary, the same prompts and the same sampler settings:

* LLaDA (V = 126,464): prompt 32, 128 tokens, 128 steps, block 32, temperature 0, low-confidence.
* Dream (V = 152,064): prompt 32, 128 tokens, 128 steps, alg entropy, temperature 0.2, top_p 0.95.

DMARK-style needs the V x V table (16 GB at LLaDA's V), so it is measured at a reduced vocabulary
(``--dmark-vocab``, default 16,384) next to vanilla and LR-DWM at that same V; its analytic table size at
full V and its build time extrapolated (O(V^2), fitted on builds at several reduced V) are reported.

Memory: on CPU the process's peak RSS (``ru_maxrss``) at the end, and its increment over the peak RSS
right after the model was built; on GPU ``torch.cuda.max_memory_allocated`` (and its increment over the
allocation after the model was built).

Usage:
    python scripts/bench_overhead.py                       # full run, ~15 minutes on 2 CPU cores
    python scripts/bench_overhead.py --quick               # small sizes, ~1 minute (debugging)
    python scripts/bench_overhead.py --reps 3 --threads 2 --out docs/benchmarks/overhead.json
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

FULL_V = {"llada": 126_464, "dream": 152_064}
METHODS = ("vanilla", "lrdwm", "kgw-left", "dmark", "wmdlm-left", "wmdlm-both", "wmdlm-both-fft")
LABELS = {
    "vanilla": "vanilla",
    "lrdwm": "LR-DWM (hf_lrdwm)",
    "kgw-left": "left-only KGW (randperm)",
    "dmark": "DMARK-style (V x V table)",
    "wmdlm-left": "WM-DLM-style, one-sided",
    "wmdlm-both": "WM-DLM-style, two-sided (top-k pairs)",
    "wmdlm-both-fft": "WM-DLM-style, two-sided (FFT)",
}
# Watermark strength: the same for every method (cost does not depend on it).
DELTA, GAMMA, KEY = 2.0, 0.5, "bench-overhead"


# ----------------------------------------------------------------------------------------------
# Worker: one configuration in this process
# ----------------------------------------------------------------------------------------------
def _rss_mb() -> float:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # KiB on Linux


def _timed(processor):
    """Make ``processor`` accumulate the seconds spent in its calls (``processor.seconds_in_calls``)."""
    cls = type(processor)

    def __call__(self, input_ids, scores):
        t0 = time.perf_counter()
        try:
            return cls.__call__(self, input_ids, scores)
        finally:
            self.seconds_in_calls += time.perf_counter() - t0
            self.calls += 1

    processor.__class__ = type("Timed" + cls.__name__, (cls,), {"__call__": __call__})
    processor.seconds_in_calls = 0.0
    processor.calls = 0
    return processor


# Published shapes of the 8B-class checkpoints (config.json of GSAI-ML/LLaDA-8B-Instruct and
# Dream-org/Dream-v0-Instruct-7B): the "full" backbone has their size and random weights, so a step costs
# what a real checkpoint's step costs (the watermark's cost does not depend on the weights' values).
FULL_SHAPES = {
    "llada": dict(hidden_size=4096, num_layers=32, heads=32, kv_heads=32, intermediate=12288),
    "dream": dict(hidden_size=3584, num_layers=28, heads=28, kv_heads=4, intermediate=18944),
}


def full_size_model(family: str, vocab_size: int, device):
    """A random-weight bf16 model with the 8B-class checkpoint's shape, built directly on ``device``."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

    from hf_lrdwm.generation import attach_diffusion_generate
    from hf_lrdwm.models.tiny import _special_ids

    shape = FULL_SHAPES[family]
    common = dict(
        hidden_size=shape["hidden_size"],
        num_hidden_layers=shape["num_layers"],
        num_attention_heads=shape["heads"],
        num_key_value_heads=shape["kv_heads"],
        intermediate_size=shape["intermediate"],
        max_position_embeddings=4096,
        tie_word_embeddings=False,
        use_cache=False,
        is_causal=False,
        **_special_ids(family, vocab_size),
    )
    if family == "llada":
        rope = {"rope_type": "default", "rope_theta": 500000.0}
        config = LlamaConfig(rms_norm_eps=1e-5, rope_parameters=rope, **common)
        cls = LlamaForCausalLM
    else:
        config = Qwen2Config(
            rms_norm_eps=1e-6,
            rope_parameters={"rope_type": "default", "rope_theta": 1000000.0},
            use_sliding_window=False,
            **common,
        )
        cls = Qwen2ForCausalLM
    config.diffusion_family = family
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.bfloat16)
    try:
        with torch.device(device):
            torch.manual_seed(0)
            model = cls(config)
    finally:
        torch.set_default_dtype(previous)
    with torch.no_grad():
        model.lm_head.weight[config.mask_token_id].zero_()
    model = model.to(torch.bfloat16).eval()
    attach_diffusion_generate(model, family)
    return model


def make_processor(method: str, vocab_size: int, mask_id: int, device):
    """The ``watermark=`` object of a method (``None`` for vanilla)."""
    from hf_lrdwm import LRDWMConfig

    cfg = LRDWMConfig(key=KEY, delta=DELTA, gamma=GAMMA)
    if method == "vanilla":
        return None
    if method == "lrdwm":
        return cfg  # what users pass: the sampler builds the in-place processor
    from hf_lrdwm.baselines import DMarkStyleProcessor, KGWLeftProcessor, WMDLMStyleProcessor

    common = dict(config=cfg, vocab_size=vocab_size, mask_token_id=mask_id, device=device, in_place=True)
    if method == "kgw-left":
        return KGWLeftProcessor(**common)
    if method == "dmark":  # the table's size is the point: no cap (the caller picks V)
        return DMarkStyleProcessor(max_table_bytes=2**62, **common)
    if method == "wmdlm-left":
        return WMDLMStyleProcessor(context="left", **common)
    if method == "wmdlm-both":
        return WMDLMStyleProcessor(context="both", conv="outer", **common)
    if method == "wmdlm-both-fft":
        return WMDLMStyleProcessor(context="both", conv="fft", **common)
    raise ValueError(f"unknown method {method!r}")


def generate(model, family: str, prompt, watermark, s: dict):
    from hf_lrdwm.generation.dream import dream_generate
    from hf_lrdwm.generation.llada import llada_generate

    if family == "llada":
        return llada_generate(
            model,
            prompt,
            steps=s["steps"],
            gen_length=s["gen_length"],
            block_length=s["block_length"],
            temperature=0.0,
            remasking="low_confidence",
            watermark=watermark,
        )
    return dream_generate(
        model,
        prompt,
        max_new_tokens=s["gen_length"],
        steps=s["steps"],
        alg="entropy",
        alg_temp=0.0,
        temperature=0.2,
        top_p=0.95,
        watermark=watermark,
    )


def run_worker(spec: dict, model_cache: dict | None = None) -> dict:
    """One configuration; ``model_cache`` (in-process mode) keeps the backbone between configurations."""
    import torch

    if spec.get("threads"):
        torch.set_num_threads(spec["threads"])
    from hf_lrdwm.models import tiny_model

    device = torch.device(spec.get("device", "cpu"))
    cuda = device.type == "cuda"
    family, method, vocab = spec["family"], spec["method"], spec["vocab_size"]
    backbone = spec.get("backbone", "tiny")
    cache_key = (family, vocab, backbone)
    if model_cache is not None and cache_key in model_cache:
        model = model_cache[cache_key]
    else:
        if model_cache is not None:
            model_cache.clear()  # one backbone on the device at a time
            # diffusion_generate is bound to the model (a reference cycle): only the collector frees it.
            gc.collect()
            if cuda:
                torch.cuda.empty_cache()
        if backbone == "tiny":
            model = tiny_model(
                family, vocab_size=vocab, hidden_size=spec["hidden_size"], num_layers=spec["num_layers"]
            ).to(device)
        else:
            model = full_size_model(family, vocab, device)
        if model_cache is not None:
            model_cache[cache_key] = model
    mask_id = model.config.mask_token_id
    gen = torch.Generator().manual_seed(1234)
    prompts = [
        torch.randint(0, min(vocab - 8, 100_000), (1, spec["prompt_length"]), generator=gen).to(device)
        for _ in range(spec["prompts"])
    ]
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base_mem = torch.cuda.memory_allocated() / 2**20
    base_rss = _rss_mb()

    t0 = time.perf_counter()
    watermark = make_processor(method, vocab, mask_id, device)
    if method == "lrdwm":  # the processor the sampler would build from the config (in place)
        watermark = watermark.construct_processor(
            vocab_size=vocab, mask_token_id=mask_id, device=device, in_place=True
        )
    setup_s = time.perf_counter() - t0
    if watermark is not None:
        _timed(watermark)
    build_s = getattr(watermark, "build_seconds", None)

    # Warm-up: a short generation with the same method (first-call costs, allocator).
    warm = dict(spec, gen_length=spec["block_length"], steps=spec["block_length"])
    torch.manual_seed(0)
    generate(model, family, prompts[0], watermark, warm)

    times = []
    outputs = []
    if watermark is not None:
        watermark.seconds_in_calls, watermark.calls = 0.0, 0
    for prompt in prompts:
        torch.manual_seed(0)
        if cuda:
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        out = generate(model, family, prompt, watermark, spec)
        if cuda:
            torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
        outputs.append(out[0, spec["prompt_length"] :].tolist())
    peak_rss = _rss_mb()
    result = {
        "wall_s": sum(times),
        "wall_s_per_prompt": times,
        "peak_rss_mb": peak_rss,
        "base_rss_mb": base_rss,
        "rss_increment_mb": peak_rss - base_rss,
        "setup_s": setup_s,
        "dmark_build_s": build_s,
        "tokens_digest": hash(str(outputs)) & 0xFFFFFFFF,
    }
    if watermark is not None:
        # In-run share of the watermark: robust to other load on the machine (same run, same load).
        result["processor_s"] = watermark.seconds_in_calls
        result["processor_calls"] = watermark.calls
        result["implied_wall_ratio"] = result["wall_s"] / (result["wall_s"] - watermark.seconds_in_calls)
    if cuda:
        peak = torch.cuda.max_memory_allocated() / 2**20
        result.update(peak_gpu_mb=peak, base_gpu_mb=base_mem, gpu_increment_mb=peak - base_mem)
        result["gpu"] = torch.cuda.get_device_name(device)
    if model_cache is not None:  # in-process: free this configuration's state before the next one
        del watermark, outputs, out
        if cuda:
            torch.cuda.empty_cache()
    return result


def run_dmark_builds(vocabs: list[int], threads: int | None) -> list[dict]:
    """Time DMARK's table construction at several reduced V (for the O(V^2) extrapolation)."""
    import torch

    if threads:
        torch.set_num_threads(threads)
    from hf_lrdwm import LRDWMConfig
    from hf_lrdwm.baselines import build_dmark_table, dmark_table_nbytes

    key = LRDWMConfig(key=KEY).key_left & 0xFFFFFFFF
    rows = []
    for v in vocabs:
        t0 = time.perf_counter()
        table = build_dmark_table(v, key, GAMMA, source="rng")
        rows.append({"vocab_size": v, "build_s": time.perf_counter() - t0, "nbytes": dmark_table_nbytes(v)})
        del table
    return rows


def run_per_call(spec: dict) -> list[dict]:
    """Seconds per processor call on one mid-generation canvas [1, prompt + gen, V] (no model)."""
    import torch

    if spec.get("threads"):
        torch.set_num_threads(spec["threads"])
    from hf_lrdwm.models.tiny import TINY_SPECIAL_IDS

    family, vocab = spec["family"], spec["vocab_size"]
    mask_id = TINY_SPECIAL_IDS[family]["mask_token_id"] if vocab >= FULL_V[family] else vocab - 1
    length = spec["prompt_length"] + spec["gen_length"]
    gen = torch.Generator().manual_seed(0)
    canvas = torch.randint(0, min(vocab - 8, 100_000), (1, length), generator=gen)
    # Prompt and first block revealed, half of the second block revealed at random, the rest masked.
    start = spec["prompt_length"] + spec["block_length"]
    canvas[0, start:] = mask_id
    block = torch.arange(start, start + spec["block_length"])
    hidden = block[torch.rand(len(block), generator=gen) < 0.5]
    canvas[0, block] = torch.randint(0, 1000, (len(block),), generator=gen)
    canvas[0, hidden] = mask_id
    logits = torch.randn(1, length, vocab, generator=gen)
    rows = []
    for method in spec["methods"]:
        proc = make_processor(method, vocab, mask_id, "cpu")
        if method == "lrdwm":
            proc = proc.construct_processor(vocab_size=vocab, mask_token_id=mask_id, in_place=True)
        times = []
        for rep in range(spec["reps"] + 1):
            work = logits.clone()
            t0 = time.perf_counter()
            proc(canvas, work)
            if rep:  # the first call is a warm-up (and fills LR-DWM's row cache, as in a loop)
                times.append(time.perf_counter() - t0)
        rows.append({"family": family, "vocab_size": vocab, "method": method, "s_per_call": times})
    return rows


# ----------------------------------------------------------------------------------------------
# Orchestrator
# ----------------------------------------------------------------------------------------------
def _spawn(payload: dict, timeout: float) -> dict:
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", json.dumps(payload)]
    env = dict(os.environ)
    env.setdefault("HF_HUB_OFFLINE", "1")
    env.setdefault("TRANSFORMERS_OFFLINE", "1")
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    if proc.returncode != 0:
        raise RuntimeError(f"worker failed for {payload}:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _machine(threads: int | None, device: str) -> dict:
    import torch
    import transformers

    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    info = {
        "cpu": cpu,
        "nproc": os.cpu_count(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "torch_threads": threads or torch.get_num_threads(),
        "device": device,
        "load_avg_at_start": os.getloadavg(),
    }
    if device.startswith("cuda"):
        info["gpu"] = torch.cuda.get_device_name(0)
    return info


def _fit_v2(builds: list[dict]) -> float:
    """Least-squares ``t = a * V^2`` through the origin; returns ``a``."""
    num = sum(b["build_s"] * b["vocab_size"] ** 2 for b in builds)
    den = sum(b["vocab_size"] ** 4 for b in builds)
    return num / den


def summarise(rows: list[dict], mem_key: str, inc_key: str) -> list[dict]:
    groups: dict[tuple, list[dict]] = {}
    for r in rows:
        groups.setdefault((r["family"], r["vocab_size"], r["method"]), []).append(r)
    table = []
    for (family, vocab, method), rs in groups.items():
        table.append(
            {
                "family": family,
                "vocab_size": vocab,
                "method": method,
                "label": LABELS[method],
                "reps": len(rs),
                "wall_s_median": statistics.median(r["wall_s"] for r in rs),
                "wall_s_all": [r["wall_s"] for r in rs],
                "peak_mb_median": statistics.median(r[mem_key] for r in rs),
                "increment_mb_median": statistics.median(r[inc_key] for r in rs),
                "base_mb_median": statistics.median(r[mem_key] - r[inc_key] for r in rs),
                "dmark_build_s": rs[0].get("dmark_build_s"),
                "processor_s_median": statistics.median(r.get("processor_s", 0.0) for r in rs),
                "in_run_ratio_median": statistics.median(r.get("implied_wall_ratio", 1.0) for r in rs),
                "load_1min_before": [r.get("load_1min_before") for r in rs],
            }
        )
    for row in table:
        van = next(
            t
            for t in table
            if t["family"] == row["family"]
            and t["vocab_size"] == row["vocab_size"]
            and t["method"] == "vanilla"
        )
        row["wall_ratio"] = row["wall_s_median"] / van["wall_s_median"]
        # Paired: this method's run over vanilla's run of the same repetition (adjacent in time).
        van_by_rep = {
            r["rep"]: r["wall_s"]
            for r in rows
            if (r["family"], r["vocab_size"], r["method"]) == (row["family"], row["vocab_size"], "vanilla")
        }
        paired = [
            r["wall_s"] / van_by_rep[r["rep"]]
            for r in groups[(row["family"], row["vocab_size"], row["method"])]
            if r["rep"] in van_by_rep
        ]
        row["paired_wall_ratios"] = paired
        row["paired_wall_ratio_median"] = statistics.median(paired) if paired else None
        row["peak_ratio"] = row["peak_mb_median"] / van["peak_mb_median"]
        row["increment_ratio"] = row["increment_mb_median"] / max(van["increment_mb_median"], 1e-9)
    order = {m: i for i, m in enumerate(METHODS)}
    table.sort(key=lambda t: (t["family"], -t["vocab_size"], order[t["method"]]))
    return table


def markdown(table: list[dict], mem_name: str) -> str:
    lines = [
        f"| sampler | V | method | wall s (median) | x vanilla | paired x | peak {mem_name} MB | x vanilla | "
        "increment MB | x vanilla | in-run x |",
        "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for t in table:
        lines.append(
            f"| {t['family']} | {t['vocab_size']:,} | {t['label']} | {t['wall_s_median']:.2f} | "
            f"{t['wall_ratio']:.3f} | {t['paired_wall_ratio_median'] or float('nan'):.3f} | "
            f"{t['peak_mb_median']:.0f} | {t['peak_ratio']:.3f} | "
            f"{t['increment_mb_median']:.0f} | {t['increment_ratio']:.2f} | {t['in_run_ratio_median']:.3f} |"
        )
    return "\n".join(lines)


def add_backbone_arguments(parser: argparse.ArgumentParser) -> None:
    """``--backbone`` and ``--in-process`` (shared with bench_scaling.py)."""
    parser.add_argument(
        "--backbone",
        choices=("tiny", "full"),
        default="tiny",
        help="tiny: hidden 64, 2 layers (fp32); full: the 8B-class checkpoint's shape in bf16 (GPU only)",
    )
    parser.add_argument(
        "--in-process",
        action="store_true",
        help="run every configuration in this process (CUDA only: peak memory is reset per configuration "
        "with torch.cuda.reset_peak_memory_stats; RSS cannot be separated)",
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--dmark-builds", help=argparse.SUPPRESS)
    parser.add_argument("--per-call-worker", help=argparse.SUPPRESS)
    parser.add_argument(
        "--per-call-methods",
        default="lrdwm,kgw-left,wmdlm-left,wmdlm-both,wmdlm-both-fft",
        help="processors also timed per call on one mid-generation canvas at full V ('' = skip)",
    )
    parser.add_argument("--per-call-reps", type=int, default=3)
    parser.add_argument("--out", default="docs/benchmarks/overhead.json")
    parser.add_argument("--reps", type=int, default=3, help="repetitions (fresh process each)")
    parser.add_argument(
        "--baseline-reps",
        type=int,
        default=None,
        help="repetitions of the peer baselines (default: --reps); vanilla and LR-DWM always get --reps",
    )
    parser.add_argument("--threads", type=int, default=None, help="torch threads per worker")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--samplers", default="llada,dream")
    parser.add_argument(
        "--methods",
        default="vanilla,lrdwm,kgw-left,wmdlm-left,wmdlm-both",
        help="methods at full V (DMARK-style runs at --dmark-vocab)",
    )
    parser.add_argument(
        "--dmark-vocab",
        default="16384",
        help="reduced V for DMARK (0 = skip; 'full': the family's full V, on a GPU with room for the table)",
    )
    add_backbone_arguments(parser)
    parser.add_argument("--dmark-build-vocabs", default="4096,8192,16384")
    parser.add_argument("--gen-length", type=int, default=128)
    parser.add_argument("--steps", type=int, default=128)
    parser.add_argument("--block-length", type=int, default=32)
    parser.add_argument("--prompt-length", type=int, default=32)
    parser.add_argument("--prompts", type=int, default=1, help="prompts generated (sequentially) per process")
    parser.add_argument("--vocab", type=int, default=None, help="override the full V (debugging)")
    parser.add_argument("--quick", action="store_true", help="tiny sizes to debug the script")
    parser.add_argument(
        "--append",
        action="store_true",
        help="keep the results of the samplers not run now from an existing --out file",
    )
    parser.add_argument("--timeout", type=float, default=1800.0, help="seconds per worker")
    args = parser.parse_args(argv)

    if args.worker:
        print(json.dumps(run_worker(json.loads(args.worker))))
        return 0
    if args.per_call_worker:
        print(json.dumps(run_per_call(json.loads(args.per_call_worker))))
        return 0
    if args.dmark_builds:
        spec = json.loads(args.dmark_builds)
        print(json.dumps(run_dmark_builds(spec["vocabs"], spec.get("threads"))))
        return 0

    if args.quick:
        args.gen_length, args.steps, args.block_length, args.prompt_length = 32, 16, 16, 8
        args.vocab, args.dmark_vocab, args.dmark_build_vocabs = 8192, 2048, "1024,2048"
        args.reps = min(args.reps, 2)
    if args.in_process and not args.device.startswith("cuda"):
        parser.error("--in-process needs --device cuda (peak RSS on CPU needs a process per configuration)")
    if args.backbone == "full" and not args.device.startswith("cuda"):
        parser.error("--backbone full needs --device cuda (an 8B-class model)")
    dmark_full_v = args.dmark_vocab == "full"
    if not dmark_full_v:
        try:
            args.dmark_vocab = int(args.dmark_vocab)
        except ValueError:
            parser.error(f"--dmark-vocab must be an int or 'full', got {args.dmark_vocab!r}")
    settings = dict(
        gen_length=args.gen_length,
        steps=args.steps,
        block_length=args.block_length,
        prompt_length=args.prompt_length,
        prompts=args.prompts,
        hidden_size=64,
        num_layers=2,
        threads=args.threads,
        device=args.device,
        backbone=args.backbone,
    )
    samplers = [s for s in args.samplers.split(",") if s]
    methods = [m for m in args.methods.split(",") if m]
    configs = []
    for family in samplers:
        full = args.vocab or FULL_V[family]
        configs += [dict(settings, family=family, method=m, vocab_size=full) for m in methods]
        if dmark_full_v:
            if "dmark" not in methods:
                configs.append(dict(settings, family=family, method="dmark", vocab_size=full))
        elif args.dmark_vocab:
            configs += [
                dict(settings, family=family, method=m, vocab_size=args.dmark_vocab)
                for m in ("vanilla", "lrdwm", "dmark")
            ]
    machine = _machine(args.threads, args.device)
    print(f"machine: {machine}", flush=True)
    baseline_reps = args.reps if args.baseline_reps is None else args.baseline_reps
    model_cache: dict = {}
    rows = []
    t_start = time.perf_counter()
    # Alternate: every repetition visits every configuration, in a rotated order. In-process, the
    # repetitions run inside each backbone (family, V) so that a backbone is built once; the methods
    # still rotate from one repetition to the next.
    schedule = []  # (rep, spec)
    if args.in_process:
        for key in dict.fromkeys((c["family"], c["vocab_size"]) for c in configs):
            group = [c for c in configs if (c["family"], c["vocab_size"]) == key]
            for rep in range(args.reps):
                shift = rep % len(group)
                schedule += [(rep, spec) for spec in group[shift:] + group[:shift]]
    else:
        for rep in range(args.reps):
            shift = rep % len(configs)
            schedule += [(rep, spec) for spec in configs[shift:] + configs[:shift]]
    for rep, spec in schedule:
        if spec["method"] not in ("vanilla", "lrdwm") and rep >= baseline_reps:
            continue
        load_before = os.getloadavg()[0]
        res = run_worker(spec, model_cache) if args.in_process else _spawn(spec, args.timeout)
        rows.append({**spec, "rep": rep, **res, "load_1min_before": load_before})
        mem = (
            f"peak GPU {res['peak_gpu_mb']:7.0f} MB (+{res['gpu_increment_mb']:.0f})"
            if "peak_gpu_mb" in res
            else f"peak RSS {res['peak_rss_mb']:7.0f} MB (+{res['rss_increment_mb']:.0f})"
        )
        print(
            f"rep {rep} {spec['family']:5s} V={spec['vocab_size']:>6} {spec['method']:15s} "
            f"{res['wall_s']:7.2f} s  {mem}  in-run x{res.get('implied_wall_ratio', 1.0):.3f}  "
            f"load {os.getloadavg()[0]:.2f}",
            flush=True,
        )
    builds = []
    if args.dmark_vocab and not dmark_full_v:
        vocabs = [int(v) for v in args.dmark_build_vocabs.split(",") if v]
        payload = json.dumps({"vocabs": vocabs, "threads": args.threads})
        cmd = [sys.executable, os.path.abspath(__file__), "--dmark-builds", payload]
        out = subprocess.run(cmd, capture_output=True, text=True, check=True, timeout=args.timeout)
        builds = json.loads(out.stdout.strip().splitlines()[-1])
    per_call = []
    pc_methods = [m for m in args.per_call_methods.split(",") if m]
    if pc_methods and not args.device.startswith("cuda"):
        for family in samplers:
            payload = dict(
                settings,
                family=family,
                vocab_size=args.vocab or FULL_V[family],
                methods=pc_methods,
                reps=args.per_call_reps,
            )
            cmd = [sys.executable, os.path.abspath(__file__), "--per-call-worker", json.dumps(payload)]
            out = subprocess.run(cmd, capture_output=True, text=True, check=True, timeout=args.timeout)
            per_call += json.loads(out.stdout.strip().splitlines()[-1])
    previous = None
    if args.append and Path(args.out).is_file():  # keep the other samplers' results of an earlier run
        previous = json.loads(Path(args.out).read_text())
        rows = [r for r in previous["runs"] if r["family"] not in samplers] + rows
        per_call = [r for r in previous.get("per_call", []) if r["family"] not in samplers] + per_call
        builds = builds or previous.get("dmark_builds", [])
    cuda = args.device.startswith("cuda")
    mem_key, inc_key = ("peak_gpu_mb", "gpu_increment_mb") if cuda else ("peak_rss_mb", "rss_increment_mb")
    table = summarise(rows, mem_key, inc_key)
    dmark_full = dict(previous.get("dmark_full_vocab", {})) if previous else {}
    if builds:
        from hf_lrdwm.baselines import dmark_table_nbytes

        a = _fit_v2(builds)
        for family in samplers:
            v = args.vocab or FULL_V[family]
            dmark_full[family] = {
                "vocab_size": v,
                "table_bytes_bool": dmark_table_nbytes(v),
                "table_bytes_packed": dmark_table_nbytes(v, packed=True),
                "build_s_extrapolated": a * v * v,
            }
    for row in per_call:
        row["s_per_call_median"] = statistics.median(row["s_per_call"])
        van = next(
            (
                t
                for t in table
                if t["family"] == row["family"]
                and t["vocab_size"] == row["vocab_size"]
                and t["method"] == "vanilla"
            ),
            None,
        )
        if van is not None:  # a vanilla step, and the ratio a generation would have at this per-call cost
            step = van["wall_s_median"] / args.steps
            row["vanilla_s_per_step"] = step
            row["implied_wall_ratio"] = 1.0 + row["s_per_call_median"] / step
    command = "python scripts/bench_overhead.py " + " ".join(sys.argv[1:] if argv is None else argv)
    commands = (previous.get("commands", [previous.get("command")]) if previous else []) + [command]
    result = {
        "benchmark": "generation overhead",
        "command": command,
        "commands": commands,
        "machine": machine,
        "machine_previous_runs": (previous.get("machine_previous_runs", []) + [previous["machine"]])
        if previous
        else [],
        "load_avg_at_end": os.getloadavg(),
        "total_s": time.perf_counter() - t_start,
        "settings": settings,
        "watermark": {"delta": DELTA, "gamma": GAMMA},
        "memory_metric": "torch.cuda.max_memory_allocated" if cuda else "peak RSS (ru_maxrss)",
        "gc_between_backbones": True,  # in-process: the previous backbone is collected before the next
        "summary": table,
        "dmark_builds": builds,
        "dmark_full_vocab": dmark_full,
        "per_call": per_call,
        "runs": rows,
    }
    out_path = Path(args.out)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    out_path.write_text(json.dumps(result, indent=2) + "\n")
    print()
    print(markdown(table, "GPU" if cuda else "RSS"))
    for family, d in dmark_full.items():
        print(
            f"DMARK table at full V ({family}, V={d['vocab_size']:,}): {d['table_bytes_bool'] / 1e9:.1f} GB "
            f"bool, {d['table_bytes_packed'] / 1e9:.2f} GB packed, build ~{d['build_s_extrapolated']:.0f} s "
            "(extrapolated)"
        )
    for row in per_call:
        implied = (
            f", implied x vanilla {row['implied_wall_ratio']:.2f}" if "implied_wall_ratio" in row else ""
        )
        print(
            f"per call {row['family']:5s} V={row['vocab_size']:,} {row['method']:15s} "
            f"{row['s_per_call_median'] * 1000:9.1f} ms{implied}"
        )
    print(f"wrote {out_path} ({result['total_s']:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
