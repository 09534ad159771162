#!/usr/bin/env python
"""Plots for docs/benchmarks.md from the JSON written by bench_overhead.py and bench_scaling.py.

* ``overhead_scatter.png``: wall time versus peak memory, both relative to vanilla, one panel per
  sampler (in the spirit of Figure 1 of the LR-DWM paper);
* ``scaling.png``: LR-DWM / vanilla (wall time and peak RSS) against ``gen_length`` and against V;
* ``overhead_scatter_gpu_8b.png``, ``overhead_scatter_gpu_tiny.png``, ``scaling_gpu_8b.png``: the same
  from the GPU runs of ``scripts/gpu_benchmarks.sh`` (LR-DWM's points from the later run).

Usage:
    python scripts/plot_benchmarks.py                    # reads and writes under docs/benchmarks/
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import FuncFormatter, NullFormatter  # noqa: E402

STYLE = {
    "vanilla": ("black", "o"),
    "lrdwm": ("tab:green", "*"),
    "kgw-left": ("tab:blue", "s"),
    "dmark": ("tab:red", "D"),
    "wmdlm-left": ("tab:purple", "^"),
    "wmdlm-both": ("tab:orange", "v"),
    "wmdlm-both-fft": ("tab:brown", "P"),
    "lrdwm-before": ("tab:gray", "*"),
}
SHORT = {
    "vanilla": "vanilla",
    "lrdwm": "LR-DWM",
    "kgw-left": "KGW left-only",
    "dmark": "DMARK-style",
    "wmdlm-left": "WM-DLM-style 1-sided",
    "wmdlm-both": "WM-DLM-style 2-sided",
    "lrdwm-before": "LR-DWM, per-position path (before batching)",
    "wmdlm-both-fft": "WM-DLM-style 2-sided (FFT)",
}


def _gpu_leak_corrected(data: dict, row: dict) -> dict:
    """Peak GPU ratios of the second family of an in-process GPU run, without the first family's model.

    The GPU runs of 2026-11-26 (``--in-process``, LLaDA then Dream) kept the LLaDA backbone allocated
    while Dream ran (a reference cycle that only the garbage collector frees; the script now collects),
    so every Dream peak holds the LLaDA base allocation too. Subtracting it (LLaDA vanilla's peak minus
    its increment) gives Dream's own peaks; the increments, and LR-DWM's ratios, are unaffected.
    """
    row = dict(row)
    if "cuda" not in data.get("memory_metric", "") or data.get("gc_between_backbones"):
        return row
    families = list(dict.fromkeys(r["family"] for r in data["runs"]))
    if row["family"] == families[0]:
        return row
    first = next(r for r in data["summary"] if r["family"] == families[0] and r["method"] == "vanilla")
    van = next(
        r
        for r in data["summary"]
        if (r["family"], r["vocab_size"], r["method"]) == (row["family"], row["vocab_size"], "vanilla")
    )
    leak = first["base_mb_median"]
    row["peak_ratio"] = (row["peak_mb_median"] - leak) / (van["peak_mb_median"] - leak)
    return row


def plot_overhead(data: dict, out: Path, lrdwm: dict | None = None) -> None:
    """Scatter of every method; ``lrdwm`` (a later run's JSON) replaces LR-DWM's points, and the points
    of ``data``'s own LR-DWM rows are kept as hollow grey stars labelled as the earlier version."""
    summary = [dict(r) for r in data["summary"]]
    if lrdwm is not None:
        for r in summary:
            if r["method"] == "lrdwm":
                r["method"] = "lrdwm-before"
        summary += [_gpu_leak_corrected(lrdwm, r) for r in lrdwm["summary"] if r["method"] == "lrdwm"]
    summary = [_gpu_leak_corrected(data, r) if r["method"] != "lrdwm" else r for r in summary]
    families = sorted({r["family"] for r in summary}, key=lambda f: (f != "llada", f))
    fig, axes = plt.subplots(1, len(families), figsize=(6.2 * len(families), 4.8), squeeze=False)
    for ax, family in zip(axes[0], families, strict=True):
        rows = [r for r in summary if r["family"] == family]
        full_v = max(r["vocab_size"] for r in rows)
        for r in rows:
            if r["method"] == "vanilla" and r["vocab_size"] != full_v:
                continue
            color, marker = STYLE[r["method"]]
            reduced = r["vocab_size"] != full_v or r["method"] == "lrdwm-before"
            small_v = r["vocab_size"] != full_v
            label = SHORT[r["method"]] + (f" (V={r['vocab_size']:,})" if small_v else "")
            ax.scatter(
                r["wall_ratio"],
                r["peak_ratio"],
                s=160 if r["method"] in ("lrdwm", "lrdwm-before") else 70,
                c="none" if reduced else color,
                edgecolors=color,
                marker=marker,
                linewidths=1.5,
                label=label,
                zorder=3,
            )
        ax.axvline(1.0, color="grey", lw=0.8, ls=":")
        ax.axhline(1.0, color="grey", lw=0.8, ls=":")
        ax.set_xscale("log")
        if max(r["peak_ratio"] for r in rows) > 3:
            ax.set_yscale("log")
        shown = [r["wall_ratio"] for r in rows]
        lo, hi = min(0.95, min(shown) * 0.97), max(1.1, max(shown) * 1.12)
        ax.set_xlim(lo, hi)
        ax.set_xticks([t for t in (0.9, 1, 1.1, 1.25, 1.5, 2, 3, 4, 6, 8, 12, 16) if lo <= t <= hi])
        ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _: f"{x:g}x"))
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.yaxis.set_major_formatter(FuncFormatter(lambda y, _: f"{y:.2f}x"))
        ax.set_xlabel("wall time / vanilla (log scale)")
        ax.set_ylabel(f"peak {'GPU memory' if 'cuda' in data['memory_metric'] else 'RSS'} / vanilla")
        ax.yaxis.set_minor_formatter(NullFormatter())
        ax.set_title(
            f"{family}: V={full_v:,}, {data['settings']['gen_length']} tokens, "
            f"{data['settings']['steps']} steps"
        )
        ax.grid(alpha=0.3, which="both")
        ax.legend(fontsize=8, loc="best", framealpha=0.85)
    machine = data["machine"]
    where = machine.get("gpu") or f"{machine.get('nproc')}-core CPU"
    backbone = data["settings"].get("backbone", "tiny")
    backbone = "8B-class backbone, bf16" if backbone == "full" else "tiny backbone"
    fig.suptitle(f"Generation cost relative to vanilla ({backbone}, {where}; hollow markers: reduced V)")
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    plt.close(fig)


def _in_run(data: dict, sweep: str, row: dict) -> float:
    """Median of wall / (wall - seconds in the processor) over the LR-DWM runs of a point."""
    if "in_run_ratio" in row:
        return row["in_run_ratio"]
    vals = sorted(
        r["implied_wall_ratio"]
        for r in data["runs"]
        if r["sweep"] == sweep and r["value"] == row["value"] and r["method"] == "lrdwm"
    )
    return vals[len(vals) // 2]


def plot_scaling(data: dict, out: Path) -> None:
    summary = data["summary"]
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    for ax, sweep, xlabel in (
        (axes[0], "gen_length", "gen_length (tokens)"),
        (axes[1], "vocab_size", "vocabulary size V"),
    ):
        rows = sorted((r for r in summary if r["sweep"] == sweep), key=lambda r: r["value"])
        xs = [r["value"] for r in rows]
        ax.plot(xs, [r["wall_ratio"] for r in rows], "o-", color="tab:green", label="wall time")
        cuda = "cuda" in data.get("memory_metric", "")
        mem_label = "peak GPU memory" if cuda else "peak RSS"
        ax.plot(xs, [r["peak_ratio"] for r in rows], "s--", color="tab:blue", label=mem_label)
        if not cuda:  # on a GPU the processor's time includes waiting for the forward pass: not shown
            in_run = [_in_run(data, sweep, r) for r in rows]
            ax.plot(xs, in_run, "^:", color="tab:purple", label="in-run (time in processor)")
        ax.axhline(1.0, color="grey", lw=0.8, ls=":")
        ax.axhline(1.03, color="tab:red", lw=0.8, ls="--", label="1.03 (time target)")
        ax.set_xscale("log", base=2)
        ax.set_xticks(xs)
        ax.set_xticklabels([f"{x:,}" for x in xs])
        ax.set_xlabel(xlabel)
        ax.set_ylabel("LR-DWM / vanilla")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    s = data["settings"]
    v_fixed = next(r["vocab_size"] for r in data["runs"] if r["sweep"] == "gen_length")
    g_fixed = next(r["gen_length"] for r in data["runs"] if r["sweep"] == "vocab_size")
    where = data["machine"].get("gpu") or "CPU"
    backbone = "8B-shaped" if s.get("backbone") == "full" else "tiny"
    axes[0].set_title(f"LLaDA ({backbone}, {where}), V={v_fixed:,}, {s['steps']} steps")
    axes[1].set_title(f"LLaDA ({backbone}, {where}), gen_length {g_fixed}, {s['steps']} steps")
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--overhead", default="docs/benchmarks/overhead.json")
    parser.add_argument("--scaling", default="docs/benchmarks/scaling.json")
    parser.add_argument("--gpu-dir", default="docs/benchmarks/gpu", help="scripts/gpu_benchmarks.sh output")
    parser.add_argument(
        "--gpu-lrdwm-dir",
        default="docs/benchmarks/gpu/run3",
        help="a later GPU run whose lrdwm_*.json give LR-DWM's points (the batched path)",
    )
    parser.add_argument("--out-dir", default="docs/benchmarks")
    args = parser.parse_args(argv)
    out_dir = Path(args.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)

    def load(path: str | Path) -> dict | None:
        return json.loads(Path(path).read_text()) if Path(path).is_file() else None

    jobs = [
        (plot_overhead, (args.overhead,), "overhead_scatter.png"),
        (plot_scaling, (args.scaling,), "scaling.png"),
        (
            plot_overhead,
            (Path(args.gpu_dir) / "overhead_full.json", Path(args.gpu_lrdwm_dir) / "lrdwm_full.json"),
            "overhead_scatter_gpu_8b.png",
        ),
        (
            plot_overhead,
            (Path(args.gpu_dir) / "overhead_tiny.json", Path(args.gpu_lrdwm_dir) / "lrdwm_tiny.json"),
            "overhead_scatter_gpu_tiny.png",
        ),
        (plot_scaling, (Path(args.gpu_dir) / "scaling_full.json",), "scaling_gpu_8b.png"),
    ]
    for fn, paths, name in jobs:
        data = [load(p) for p in paths]
        if data[0] is None:
            print(f"skipped {name}: no {paths[0]}")
            continue
        fn(data[0], out_dir / name, *[d for d in data[1:] if d is not None])
        print(f"wrote {out_dir / name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
