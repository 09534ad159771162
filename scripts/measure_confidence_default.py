"""Which default for ``LRDWMConfig.confidence_sees_watermark`` is better? (LLaDA sampler, tiny model)

For each delta, generates the same prompts three ways with LLaDA's loop: vanilla, watermarked with the
low-confidence score computed from the watermarked logits (``True``, the current default), and
watermarked with the score computed from the un-watermarked logits (``False``). Reports:

- detection: mean z and detection rate at 1% FPR (``LRDWMDetector``, exact binomial test);
- reveal order vs vanilla: share of generated positions revealed at the same step as in the vanilla
  run, and share of steps whose set of revealed positions equals the vanilla run's set;
- token agreement with vanilla (share of generated tokens identical to the vanilla output).

The model is a tiny random bidirectional Llama (offline, CPU, seconds). Its numbers say how the two
settings trade detectability against departure from the vanilla decoding order; they are not a text
quality measurement.

Usage:
    python scripts/measure_confidence_default.py [--vocab 1000] [--prompts 20] [--gen 64] [--steps 64]
        [--block 32] [--temperature 0] [--deltas 2 4] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import time

import torch
import transformers

from hf_lrdwm import LRDWMConfig, LRDWMDetector
from hf_lrdwm.generation.llada import llada_generate


def build_model(vocab: int, hidden: int, layers: int, seed: int) -> transformers.LlamaForCausalLM:
    """Tiny LLaDA stand-in: random bidirectional Llama; never predicts the mask token (like LLaDA)."""
    torch.manual_seed(seed)
    config = transformers.LlamaConfig(
        vocab_size=vocab,
        hidden_size=hidden,
        intermediate_size=64,
        num_hidden_layers=layers,
        num_attention_heads=4,
        is_causal=False,
        initializer_range=0.5,  # peaked, position-dependent logits (0.02 gives near-uniform ones)
        rope_theta=10.0,
        mask_token_id=vocab - 1,
        eos_token_id=vocab - 2,
        eot_token_id=vocab - 3,
    )
    model = transformers.LlamaForCausalLM(config).eval()
    mask = torch.tensor([vocab - 1])
    model.lm_head.register_forward_hook(lambda module, args, out: out.index_fill_(-1, mask, -1e4))
    return model


def reveal_steps(history: list[torch.Tensor], mask_id: int, prompt_len: int) -> torch.Tensor:
    """[B, gen] index of the step at which each generated position was revealed (-1: never)."""
    canvases = torch.stack(history)[:, :, prompt_len:]  # [S, B, gen]
    revealed = canvases != mask_id
    first = revealed.int().argmax(dim=0)
    return torch.where(revealed.any(dim=0), first, torch.full_like(first, -1))


def run(model, prompts, seed: int, **kw):
    torch.manual_seed(seed)
    out = llada_generate(model, prompts, return_dict_in_generate=True, output_history=True, **kw)
    return out.sequences, out.history


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--vocab", type=int, default=1000)
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--layers", type=int, default=1)
    parser.add_argument("--prompts", type=int, default=20)
    parser.add_argument("--prompt-len", type=int, default=8)
    parser.add_argument("--gen", type=int, default=64)
    parser.add_argument("--steps", type=int, default=64)
    parser.add_argument("--block", type=int, default=32)
    parser.add_argument("--temperature", type=float, default=0.0)
    parser.add_argument("--deltas", type=float, nargs="+", default=[2.0, 4.0])
    parser.add_argument("--key", default="measure-confidence-default")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--fpr", type=float, default=0.01)
    parser.add_argument("--json", default=None, help="also write the results here")
    args = parser.parse_args()

    torch.set_num_threads(1)
    started = time.time()
    vocab = args.vocab
    mask_id = vocab - 1
    model = build_model(vocab, args.hidden, args.layers, args.seed)
    prompts = torch.cat(
        [
            torch.randint(
                0, vocab - 3, (1, args.prompt_len), generator=torch.Generator().manual_seed(1000 + i)
            )
            for i in range(args.prompts)
        ]
    )
    kw = dict(steps=args.steps, gen_length=args.gen, block_length=args.block, temperature=args.temperature)
    P = args.prompt_len
    van_seq, van_hist = run(model, prompts, args.seed, **kw)
    van_steps = reveal_steps(van_hist, mask_id, P)
    van_sets = [(h != mask_id)[:, P:] for h in van_hist]

    results = []
    for delta in args.deltas:
        for sees in (True, False):
            cfg = LRDWMConfig(key=args.key, delta=delta, confidence_sees_watermark=sees)
            detector = LRDWMDetector(
                cfg, vocab_size=vocab, ignore_token_ids=[mask_id, vocab - 2, vocab - 3], min_tokens=16
            )
            seq, hist = run(model, prompts, args.seed, watermark=cfg, **kw)
            det = detector(seq[:, P:], prompt_ids=prompts.tolist(), fpr=args.fpr)
            steps = reveal_steps(hist, mask_id, P)
            same_step = (steps == van_steps).float().mean().item()
            same_set = sum(
                bool(torch.equal((h != mask_id)[row, P:], v[row]))
                for h, v in zip(hist, van_sets, strict=True)
                for row in range(seq.shape[0])
            ) / (len(hist) * seq.shape[0])
            results.append(
                {
                    "delta": delta,
                    "confidence_sees_watermark": sees,
                    "mean_z": float(det.z_score.mean()),
                    "min_z": float(det.z_score.min()),
                    "detection_rate": float(det.prediction.mean()),
                    "reveal_step_agreement": same_step,
                    "same_reveal_set_steps": same_set,
                    "token_agreement": (seq[:, P:] == van_seq[:, P:]).float().mean().item(),
                }
            )
    van_det = LRDWMDetector(
        LRDWMConfig(key=args.key), vocab_size=vocab, ignore_token_ids=[mask_id, vocab - 2, vocab - 3]
    )(van_seq[:, P:], prompt_ids=prompts.tolist(), fpr=args.fpr)

    print(
        f"LLaDA loop, tiny Llama (V={vocab}, hidden={args.hidden}, layers={args.layers}), "
        f"{args.prompts} prompts of {P} tokens, gen {args.gen}, steps {args.steps}, block {args.block}, "
        f"T={args.temperature}, FPR {args.fpr}"
    )
    print(
        f"vanilla: mean z {van_det.z_score.mean():.2f}, detection rate {van_det.prediction.mean():.2f} "
        "(false positives)"
    )
    header = (
        "| delta | confidence_sees_watermark | mean z | min z | detected @1% FPR | "
        "reveal step = vanilla | steps with same reveal set | tokens = vanilla |"
    )
    print(header)
    print("|" + "---|" * 8)
    for r in results:
        print(
            f"| {r['delta']:g} | {r['confidence_sees_watermark']} | {r['mean_z']:.2f} | {r['min_z']:.2f} | "
            f"{r['detection_rate']:.2f} | {r['reveal_step_agreement']:.3f} | "
            f"{r['same_reveal_set_steps']:.3f} | {r['token_agreement']:.3f} |"
        )
    print(f"({time.time() - started:.1f} s)")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump(
                {"args": vars(args), "vanilla_mean_z": float(van_det.z_score.mean()), "results": results},
                fh,
                indent=2,
            )


if __name__ == "__main__":
    main()
