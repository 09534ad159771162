"""The ``hf-lrdwm`` command line.

``hf-lrdwm generate``: generate from prompts with a LLaDA or Dream checkpoint, watermarked, and write one
JSON line per prompt (text, ids and the detector's verdict), in order.

``hf-lrdwm detect``: score texts or token ids from a JSON-lines / text file (or stdin) and write one JSON
line of results per input, in order.

``hf-lrdwm calibrate``: estimate a key's null statistics and z threshold on human text (a local file or a
``datasets`` dataset), check the key's false-positive rate, print a JSON summary and optionally save the
calibrated detector as a detector repo (``LRDWMDetector.save_pretrained``).

Adding a subcommand: write ``_add_NAME_parser(subparsers)`` that creates the sub-parser and sets
``func=cmd_NAME`` with ``set_defaults``, write ``cmd_NAME(args) -> int``, and list the adder in
``_SUBCOMMANDS``. User errors are raised as :class:`CLIError` (or the library's ``ValueError`` /
``TypeError`` / ``OSError``); :func:`main` turns them into one ``hf-lrdwm: error: ...`` line on stderr
and exit status 2.

Secrets: the watermark key comes from ``--key`` or the ``HF_LRDWM_KEY`` environment variable (preferred:
command lines are visible to other users of the machine). It is never printed or logged, and it is
removed from any error message.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import sys
import tempfile
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import IO, Any, NoReturn, TypeVar

__all__ = [
    "main",
    "build_parser",
    "cmd_calibrate",
    "cmd_detect",
    "cmd_generate",
    "cmd_quickstart",
    "CLIError",
    "KEY_ENV",
]

PROG = "hf-lrdwm"
KEY_ENV = "HF_LRDWM_KEY"
EXIT_USAGE = 2
_TEXT_SUFFIXES = (".txt",)
_T = TypeVar("_T")
_SECRETS: list[str] = []  # key values to hide from messages while main() runs


class CLIError(Exception):
    """A user error: reported as one ``hf-lrdwm: error: <message>`` line, exit status 2."""


class _Parser(argparse.ArgumentParser):
    """An ArgumentParser whose usage errors are one line (``hf-lrdwm: error: ...``), exit status 2."""

    def error(self, message: str) -> NoReturn:
        hint = f" (see '{self.prog} --help')"
        self.exit(EXIT_USAGE, f"{PROG}: error: {_redact(_one_line(message), _SECRETS)}{hint}\n")


# ----------------------------------------------------------------------------------------------
# Argument types
# ----------------------------------------------------------------------------------------------
def _arg_type(convert: Callable[[str], Any], ok: Callable[[Any], bool], what: str) -> Callable[[str], Any]:
    """An argparse ``type=``: ``convert(text)`` if ``ok(value)``, else the error ``must be {what}``."""

    def parse(text: str) -> Any:
        try:
            value = convert(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be {what}, got {text!r}") from None
        if not ok(value):
            raise argparse.ArgumentTypeError(f"must be {what}, got {text!r}")
        return value

    return parse


_positive_int = _arg_type(int, lambda v: v >= 1, "a positive integer")
_non_negative_int = _arg_type(int, lambda v: v >= 0, "an integer >= 0")
_open_unit_float = _arg_type(float, lambda v: 0.0 < v < 1.0, "a number in (0, 1)")
_unit_float = _arg_type(float, lambda v: 0.0 < v <= 1.0, "a number in (0, 1]")  # top-p
_eps = _arg_type(float, lambda v: 0.0 <= v < 1.0, "a number in [0, 1)")  # Dream's last time step
_non_negative_float = _arg_type(float, lambda v: 0.0 <= v < float("inf"), "a finite number >= 0")


# ----------------------------------------------------------------------------------------------
# Parser
# ----------------------------------------------------------------------------------------------
def _add_key_arguments(parser: argparse.ArgumentParser) -> None:
    """``--key``, ``--gamma``, ``--sides``: the watermark settings shared by subcommands."""
    group = parser.add_argument_group("watermark")
    group.add_argument(
        "--key",
        default=None,
        metavar="KEY",
        help=f"the watermark secret (default: the {KEY_ENV} environment variable, which is safer: "
        "command lines are visible to other users)",
    )
    group.add_argument("--gamma", type=float, default=0.5, help="green fraction used at generation (0.5)")
    group.add_argument(
        "--sides",
        choices=("both", "left", "right"),
        default="both",
        help="neighbours the watermark used (both)",
    )


def _add_detect_parser(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "detect",
        help="score texts or token ids for the watermark",
        description="Score texts or token ids for the LR-DWM watermark. Reads JSON lines (one object per "
        "line) or, for .txt files, one text per line; writes one JSON object per input, in order.",
    )
    _add_key_arguments(p)
    p.add_argument(
        "--detector",
        default=None,
        metavar="DIR_OR_REPO",
        help="a saved detector repo (LRDWMDetector.save_pretrained or `hf-lrdwm calibrate --save`): its "
        "keys, settings, calibration and tokenizer are used, and --key, --gamma, --sides, --statistic "
        "and --min-tokens are not needed (--tokenizer still overrides its tokenizer)",
    )
    io_group = p.add_argument_group("input / output")
    io_group.add_argument("--input", "-i", required=True, metavar="FILE", help="input file, or '-' for stdin")
    io_group.add_argument(
        "--format",
        choices=("auto", "jsonl", "txt"),
        default="auto",
        help="input format: 'txt' (one text per line) for *.txt, else JSON lines (auto)",
    )
    fields = io_group.add_mutually_exclusive_group()
    fields.add_argument(
        "--text-field", default=None, metavar="NAME", help="JSON field holding the text (default: text)"
    )
    fields.add_argument(
        "--ids-field",
        default=None,
        metavar="NAME",
        help="JSON field holding a list of token ids (then --tokenizer is optional)",
    )
    io_group.add_argument(
        "--output", "-o", default=None, metavar="FILE", help="output file (default: stdout)"
    )
    io_group.add_argument(
        "--tokenizer",
        default=None,
        metavar="NAME_OR_DIR",
        help="tokenizer of the model (Hub id or local directory); needed for text input",
    )
    io_group.add_argument(
        "--vocab-size",
        type=_positive_int,
        default=None,
        metavar="N",
        help="reject ids >= N (default: the tokenizer's size)",
    )
    test = p.add_argument_group("test")
    test.add_argument(
        "--fpr",
        type=_open_unit_float,
        default=None,
        help="false-positive rate of `prediction` (0.01, or the --detector repo's)",
    )
    test.add_argument(
        "--statistic",
        choices=("binomial", "paper"),
        default="binomial",
        help="exact binomial test (default) or the paper's z-test",
    )
    test.add_argument(
        "--min-tokens",
        type=_positive_int,
        default=16,
        metavar="N",
        help="inputs with fewer scored tokens get prediction=false and a reason (16)",
    )
    run = p.add_argument_group("run")
    run.add_argument(
        "--batch-size", type=_positive_int, default=256, metavar="N", help="inputs scored at once (256)"
    )
    run.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    p.set_defaults(func=cmd_detect)


def _add_quickstart_parser(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "quickstart",
        help="generate with and without the watermark on built-in tiny models, then detect (offline)",
        description=(
            "Generate with the LLaDA and Dream samplers, with and without LR-DWM, on built-in tiny "
            "models with random weights (no downloads), and detect the watermark in each output."
        ),
    )
    p.add_argument("--gen-length", type=_positive_int, default=64, help="tokens per generation (default 64)")
    p.add_argument("--delta", type=float, default=2.0, help="watermark strength (default 2.0)")
    p.add_argument("--seed", type=int, default=0, help="seed of weights, prompts and sampling")
    p.add_argument(
        "--sampler", choices=["both", "llada", "dream"], default="both", help="which samplers to run"
    )
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(func=cmd_quickstart)


def cmd_quickstart(args: argparse.Namespace) -> int:
    """Run :func:`hf_lrdwm.quickstart.run_quickstart` and print its table."""
    from .quickstart import REAL_MODEL_COMMANDS, format_table, run_quickstart

    families = ("llada", "dream") if args.sampler == "both" else (args.sampler,)
    out = sys.stdout
    out.write(
        "hf-lrdwm quickstart: LR-DWM on built-in TINY models with RANDOM weights (real LLaDA / Dream\n"
        "vocabularies and special ids). Their text is gibberish; the mechanism is the point: the\n"
        "watermarked rows are detected, the vanilla rows are not.\n\n"
    )
    out.flush()
    rows = run_quickstart(
        delta=args.delta,
        gen_length=args.gen_length,
        seed=args.seed,
        families=families,
        progress=not args.no_progress and sys.stderr.isatty(),
    )
    out.write(format_table(rows) + "\n\n")
    out.write("On a GPU with the real models (set HF_LRDWM_KEY to your secret first):\n")
    for command in REAL_MODEL_COMMANDS:
        out.write(f"  {command}\n")
    out.flush()
    return 0


# Sampler options of `generate`: (dest, families it applies to). Their argparse default is None so that
# an option given for the other family is an error; the family defaults are in _GENERATE_DEFAULTS.
_SAMPLER_OPTIONS: dict[str, tuple[str, ...]] = {
    "steps": ("llada", "dream"),
    "temperature": ("llada", "dream"),
    "gen_length": ("llada",),
    "block_length": ("llada",),
    "cfg_scale": ("llada",),
    "remasking": ("llada",),
    "max_new_tokens": ("dream",),
    "top_p": ("dream",),
    "top_k": ("dream",),
    "alg": ("dream",),
    "alg_temp": ("dream",),
    "eps": ("dream",),
}
_GENERATE_DEFAULTS: dict[str, dict[str, Any]] = {
    # LLaDA's official generate() defaults; block_length None = gen_length (one block).
    "llada": {
        "steps": 128,
        "gen_length": 128,
        "block_length": None,
        "temperature": 0.0,
        "cfg_scale": 0.0,
        "remasking": "low_confidence",
    },
    # Dream's own defaults, except steps (Dream: 512) and max_new_tokens (Dream: none; it is required).
    "dream": {
        "steps": 128,
        "max_new_tokens": 128,
        "temperature": 0.0,
        "top_p": None,
        "top_k": None,
        "alg": "origin",
        "alg_temp": None,
        "eps": 1e-3,
    },
}
_FAMILY_NAMES = {"llada": "LLaDA", "dream": "Dream"}
_DTYPES = ("float32", "bfloat16", "float16", "auto")


def _add_generate_parser(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "generate",
        help="generate with a LLaDA or Dream checkpoint, with the watermark, and detect it",
        description=(
            "Generate text from prompts with a LLaDA or Dream checkpoint (Hub id or local directory), "
            "watermarked with LR-DWM unless --no-watermark, and score each output with the detector. "
            "Writes one JSON object per prompt, in input order: prompt, text (the generated part, "
            "special tokens removed), token_ids (all generated ids), watermarked, detection (null with "
            "--no-watermark and no key)."
        ),
        epilog=(
            "Sampler defaults: LLaDA --steps 128 --gen-length 128 --block-length = --gen-length "
            "--temperature 0 --cfg-scale 0 --remasking low_confidence (LLaDA's generate() defaults); "
            "Dream --steps 128 --max-new-tokens 128 --temperature 0 --alg origin --eps 0.001 (Dream's "
            "defaults, except steps: Dream's is 512). Options of the other family are refused. "
            "Batches (--batch-size > 1) are left-padded with an attention mask, which both samplers "
            "support (a deterministic setting gives the same tokens as one prompt at a time). With random "
            "draws (temperature > 0, or Dream's default --alg origin) an output then also depends on the "
            "other prompts of its batch, so keep --batch-size 1 (the default) for outputs that depend only "
            "on the prompt and --seed."
        ),
    )
    model = p.add_argument_group("model")
    model.add_argument(
        "--model",
        "-m",
        required=True,
        metavar="NAME_OR_DIR",
        help="LLaDA or Dream checkpoint (Hub id or dir)",
    )
    model.add_argument(
        "--tokenizer",
        default=None,
        metavar="NAME_OR_DIR",
        help="tokenizer to use instead of the checkpoint's own (needed when the checkpoint has none)",
    )
    model.add_argument(
        "--device",
        default=None,
        metavar="DEVICE",
        help="cpu, cuda, cuda:1, mps, ... (default: cuda if available, else cpu)",
    )
    model.add_argument(
        "--dtype", choices=_DTYPES, default=None, help="parameter dtype (default: the checkpoint's own)"
    )
    model.add_argument(
        "--trust-remote-code",
        action="store_true",
        help="run the checkpoint's own modeling code (default: transformers' Llama / Qwen2 classes)",
    )
    io_group = p.add_argument_group("input / output")
    prompts = io_group.add_mutually_exclusive_group(required=True)
    prompts.add_argument(
        "--prompt", "-p", action="append", default=None, metavar="TEXT", help="a prompt (repeatable)"
    )
    prompts.add_argument(
        "--input", "-i", default=None, metavar="FILE", help="JSON-lines file of prompts, or '-' for stdin"
    )
    io_group.add_argument(
        "--prompt-field", default="prompt", metavar="NAME", help="JSON field holding the prompt (prompt)"
    )
    io_group.add_argument(
        "--chat",
        action="store_true",
        help="wrap each prompt as a user turn with the tokenizer's chat template (for instruct models); "
        "without it the prompt is tokenized as is, with the tokenizer's usual special tokens",
    )
    io_group.add_argument(
        "--output", "-o", default=None, metavar="FILE", help="output file (default: stdout)"
    )
    _add_key_arguments(p)
    wm = p.add_argument_group("watermark (generation)")
    wm.add_argument("--delta", type=_non_negative_float, default=2.0, help="watermark strength (2.0)")
    wm.add_argument(
        "--no-watermark",
        action="store_true",
        help="generate without the watermark (still detected with the key, if one is given)",
    )
    wm.add_argument(
        "--fpr", type=_open_unit_float, default=0.01, help="false-positive rate of detection (0.01)"
    )
    both = p.add_argument_group("sampler (LLaDA and Dream)")
    both.add_argument("--steps", type=_positive_int, default=None, metavar="N", help="denoising steps (128)")
    both.add_argument(
        "--temperature", type=_non_negative_float, default=None, metavar="T", help="0 = greedy (0)"
    )
    llada = p.add_argument_group("sampler (LLaDA only)")
    llada.add_argument(
        "--gen-length", type=_positive_int, default=None, metavar="N", help="tokens to generate (128)"
    )
    llada.add_argument(
        "--block-length",
        type=_positive_int,
        default=None,
        metavar="N",
        help="semi-autoregressive block size; must divide --gen-length (default: --gen-length)",
    )
    llada.add_argument(
        "--cfg-scale",
        type=_non_negative_float,
        default=None,
        metavar="S",
        help="classifier-free guidance (0)",
    )
    llada.add_argument(
        "--remasking", choices=("low_confidence", "random"), default=None, help="(low_confidence)"
    )
    dream = p.add_argument_group("sampler (Dream only)")
    dream.add_argument(
        "--max-new-tokens", type=_positive_int, default=None, metavar="N", help="tokens to generate (128)"
    )
    dream.add_argument("--top-p", type=_unit_float, default=None, metavar="P", help="nucleus filter (off)")
    dream.add_argument(
        "--top-k", type=_non_negative_int, default=None, metavar="K", help="top-k filter (off; 0 = off)"
    )
    dream.add_argument(
        "--alg",
        choices=("origin", "maskgit_plus", "topk_margin", "entropy"),
        default=None,
        help="remasking order (origin)",
    )
    dream.add_argument(
        "--alg-temp",
        type=_non_negative_float,
        default=None,
        metavar="T",
        help="> 0: draw the revealed positions from softmax(confidence / T) (off)",
    )
    dream.add_argument(
        "--eps", type=_eps, default=None, metavar="E", help="last time step, in [0, 1) (0.001)"
    )
    run = p.add_argument_group("run")
    run.add_argument(
        "--seed", type=int, default=0, help="torch.manual_seed(SEED) before each generation call (0)"
    )
    run.add_argument(
        "--batch-size",
        type=_positive_int,
        default=1,
        metavar="N",
        help="prompts generated at once, left-padded (1)",
    )
    run.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    p.set_defaults(func=cmd_generate)


def _add_calibrate_parser(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "calibrate",
        help="calibrate a key on human text and check its false-positive rate",
        description=(
            "Estimate a key's null statistics (mean and variance of the green count per event, the paper's "
            "sigma^2) and the empirical z threshold at --fpr on human text, and measure the key's "
            "false-positive rate on the same texts without calibration (the key health check). Each text "
            "is tokenized without special tokens and cut to its first --length tokens; texts with fewer "
            "than --min-tokens tokens are skipped. Prints a JSON summary; --save writes the calibrated "
            "detector as a detector repo."
        ),
        epilog=(
            "Use human text like the text you will test (language, domain), at the length you will test: "
            "with --min-tokens equal to --length every text is scored at exactly --length tokens. A 1% "
            "threshold needs at least 99 texts and is only usable with a few thousand (see threshold_ci)."
        ),
    )
    _add_key_arguments(p)
    src = p.add_argument_group("human text (one of --input / --dataset)")
    which = src.add_mutually_exclusive_group(required=True)
    which.add_argument(
        "--input",
        "-i",
        default=None,
        metavar="FILE",
        help="JSON-lines file (or *.txt, one text per line), or '-' for stdin",
    )
    which.add_argument(
        "--dataset",
        default=None,
        metavar="NAME",
        help="a datasets.load_dataset() path: a Hub id, or a builder such as json / text / parquet with "
        "--data-files",
    )
    src.add_argument(
        "--format",
        choices=("auto", "jsonl", "txt"),
        default="auto",
        help="--input format: 'txt' (one text per line) for *.txt, else JSON lines (auto)",
    )
    src.add_argument(
        "--text-field", default=None, metavar="NAME", help="JSON field / dataset column of the text (text)"
    )
    src.add_argument("--config", default=None, metavar="NAME", help="--dataset configuration (subset)")
    src.add_argument("--split", default="train", metavar="SPLIT", help="--dataset split (train)")
    src.add_argument(
        "--data-files",
        nargs="+",
        default=None,
        metavar="FILE",
        help="--dataset data files (local paths or patterns), e.g. --dataset json --data-files a.jsonl",
    )
    src.add_argument(
        "--streaming",
        action="store_true",
        help="stream the --dataset instead of downloading it whole (stops after --num-texts)",
    )
    tok = p.add_argument_group("tokens")
    tok.add_argument(
        "--tokenizer",
        required=True,
        metavar="NAME_OR_DIR",
        help="tokenizer of the model you will detect for (Hub id or local directory)",
    )
    tok.add_argument(
        "--length",
        type=_positive_int,
        default=400,
        metavar="N",
        help="keep the first N tokens of each text (400)",
    )
    tok.add_argument(
        "--min-tokens",
        type=_positive_int,
        default=16,
        metavar="N",
        help="skip texts with fewer tokens; also the detector's min_tokens (16)",
    )
    tok.add_argument(
        "--num-texts",
        type=_positive_int,
        default=None,
        metavar="N",
        help="stop after N usable texts (default: all)",
    )
    test = p.add_argument_group("test")
    test.add_argument("--fpr", type=_open_unit_float, default=0.01, help="target false-positive rate (0.01)")
    test.add_argument(
        "--statistic",
        choices=("binomial", "paper"),
        default="binomial",
        help="uncalibrated test of the key health check, recorded with the calibration (binomial)",
    )
    io_group = p.add_argument_group("output")
    io_group.add_argument(
        "--output", "-o", default=None, metavar="FILE", help="JSON summary file (default: stdout)"
    )
    io_group.add_argument(
        "--save",
        default=None,
        metavar="DIR",
        help="write the calibrated detector (keys, settings, calibration, tokenizer) as a detector repo to "
        "DIR, loadable with LRDWMDetector.from_pretrained(DIR) (it holds the keys: keep it private)",
    )
    run = p.add_argument_group("run")
    run.add_argument(
        "--batch-size", type=_positive_int, default=256, metavar="N", help="texts tokenized at once (256)"
    )
    run.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    p.set_defaults(func=cmd_calibrate)


# Subcommand adders, in the order they appear in --help.
_SUBCOMMANDS: list[Callable[[Any], None]] = [
    _add_quickstart_parser,
    _add_generate_parser,
    _add_detect_parser,
    _add_calibrate_parser,
]


def build_parser() -> argparse.ArgumentParser:
    """The ``hf-lrdwm`` argument parser with all subcommands."""
    from . import __version__

    parser = _Parser(
        prog=PROG,
        description="LR-DWM watermarking for diffusion language models.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    subparsers.required = True
    for add in _SUBCOMMANDS:
        add(subparsers)
    return parser


# ----------------------------------------------------------------------------------------------
# Helpers
# ----------------------------------------------------------------------------------------------
def _one_line(message: str, limit: int = 500) -> str:
    text = " ".join(str(message).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _resolve_key(args: argparse.Namespace) -> str:
    key = args.key if args.key is not None else os.environ.get(KEY_ENV)
    if not key:
        raise CLIError(f"no watermark key: pass --key or set the {KEY_ENV} environment variable")
    return key


def _make_config(args: argparse.Namespace) -> Any:
    from .config import LRDWMConfig

    return LRDWMConfig(key=_resolve_key(args), gamma=args.gamma, sides=args.sides)


def _load_tokenizer(name: str) -> Any:
    path = Path(name).expanduser()
    if (name.startswith((".", "~", os.sep)) or name.count("/") > 1) and not path.is_dir():
        raise CLIError(f"tokenizer directory {name!r} not found")
    try:
        from transformers import AutoTokenizer

        return AutoTokenizer.from_pretrained(str(path) if path.is_dir() else name)
    except (OSError, ValueError, TypeError, KeyError, ImportError) as err:
        raise CLIError(f"could not load tokenizer {name!r}: {_one_line(str(err), 300)}") from None


def _batched(items: Iterable[_T], size: int) -> Iterator[list[_T]]:
    batch: list[_T] = []
    for item in items:
        batch.append(item)
        if len(batch) == size:
            yield batch
            batch = []
    if batch:
        yield batch


def _open_input(path: str) -> IO[str]:
    if path == "-":
        buffer = getattr(sys.stdin, "buffer", None)
        if buffer is None:  # a text stream without bytes underneath (tests, notebooks)
            return sys.stdin
        import io

        return io.TextIOWrapper(buffer, encoding="utf-8-sig", newline=None)
    file = Path(path)
    if file.is_dir():
        raise CLIError(f"input {path!r} is a directory, not a file")
    if not file.is_file():
        raise CLIError(f"input file {path!r} not found")
    return open(file, encoding="utf-8-sig", newline=None)  # closed by the caller


def _read_records(
    stream: IO[str], fmt: str, field: str, ids_mode: bool, vocab_size: int | None
) -> Iterator[tuple[int, Any]]:
    """Yield ``(line number, text or id list)`` one input at a time, validating each line."""
    for lineno, raw in enumerate(stream, start=1):
        line = raw.rstrip("\r\n")
        if fmt == "txt":
            yield lineno, line
            continue
        if not line.strip():
            continue  # blank lines in JSON lines are skipped
        try:
            record = json.loads(line)
        except json.JSONDecodeError as err:
            raise CLIError(f"line {lineno}: not valid JSON ({err.msg} at column {err.colno})") from None
        if not isinstance(record, dict):
            raise CLIError(f"line {lineno}: expected a JSON object, got {type(record).__name__}")
        if field not in record:
            raise CLIError(f"line {lineno}: missing field {field!r}")
        value = record[field]
        if ids_mode:
            if not isinstance(value, list) or not all(
                isinstance(x, int) and not isinstance(x, bool) for x in value
            ):
                raise CLIError(f"line {lineno}: field {field!r} must be a list of integer token ids")
            bad = next((x for x in value if x < 0 or (vocab_size is not None and x >= vocab_size)), None)
            if bad is not None:
                where = f"outside the vocabulary (size {vocab_size})" if bad >= 0 else "negative"
                raise CLIError(f"line {lineno}: token id {bad} in field {field!r} is {where}")
        elif not isinstance(value, str):
            raise CLIError(f"line {lineno}: field {field!r} must be a string, got {type(value).__name__}")
        yield lineno, value


class _Output:
    """stdout, or a file written next to its destination and moved there only on success."""

    def __init__(self, path: str | None) -> None:
        self.path = path
        self._tmp: str | None = None
        if path is None or path == "-":
            self.stream: IO[str] = sys.stdout
            return
        dest = Path(path)
        if dest.is_dir():
            raise CLIError(f"output {path!r} is a directory")
        if not dest.parent.is_dir():
            raise CLIError(f"output directory {str(dest.parent)!r} does not exist")
        fd, self._tmp = tempfile.mkstemp(prefix=f".{dest.name}.", suffix=".part", dir=dest.parent)
        self.stream = os.fdopen(fd, "w", encoding="utf-8", newline="\n")

    def write(self, text: str) -> None:
        self.stream.write(text)

    def close(self, ok: bool) -> None:
        if self._tmp is None:
            self.stream.flush()
            return
        self.stream.close()
        if ok:
            os.replace(self._tmp, self.path)  # type: ignore[arg-type]
        else:
            Path(self._tmp).unlink(missing_ok=True)


# ----------------------------------------------------------------------------------------------
# Subcommands
# ----------------------------------------------------------------------------------------------
def cmd_detect(args: argparse.Namespace) -> int:
    """``hf-lrdwm detect``: stream inputs in batches, write one JSON line of results per input."""
    from .detection import LRDWMDetector

    if args.detector is not None and (args.key is not None or os.environ.get(KEY_ENV)):
        raise CLIError(f"--detector holds its own keys: do not also give --key or {KEY_ENV}")
    config = _make_config(args) if args.detector is None else None
    fmt = args.format
    if fmt == "auto":
        fmt = "txt" if args.input != "-" and Path(args.input).suffix.lower() in _TEXT_SUFFIXES else "jsonl"
    ids_mode = args.ids_field is not None
    if ids_mode and fmt == "txt":
        raise CLIError("--ids-field needs JSON lines input (use --format jsonl)")
    if fmt == "txt" and args.text_field is not None:
        raise CLIError("--text-field needs JSON lines input (a .txt file holds one text per line)")
    field = args.ids_field if ids_mode else (args.text_field or "text")
    if not ids_mode and args.tokenizer is None and args.detector is None:
        raise CLIError("text input needs --tokenizer (or give token ids with --ids-field)")

    stream = _open_input(args.input)  # before the (slow) tokenizer: a missing file fails fast
    try:
        tokenizer = _load_tokenizer(args.tokenizer) if args.tokenizer is not None else None
        if args.detector is not None:
            detector = LRDWMDetector.from_pretrained(args.detector, tokenizer=tokenizer)
            if args.fpr is not None:
                detector.fpr = args.fpr
            if args.vocab_size is not None:
                detector.vocab_size = args.vocab_size
            if not ids_mode and detector.tokenizer is None:
                raise CLIError(f"the detector repo {args.detector!r} has no tokenizer: pass --tokenizer")
        else:
            detector = LRDWMDetector(
                config,
                tokenizer,
                fpr=0.01 if args.fpr is None else args.fpr,
                min_tokens=args.min_tokens,
                statistic=args.statistic,
                vocab_size=args.vocab_size,
            )
        records = _read_records(stream, fmt, field, ids_mode, detector.vocab_size)
        out = _Output(args.output)
        ok = False
        try:
            from tqdm import tqdm

            show = not args.no_progress and sys.stderr.isatty()
            with tqdm(total=None, unit=" inputs", disable=not show, file=sys.stderr, leave=False) as bar:
                for batch in _batched(records, args.batch_size):
                    result = detector([value for _lineno, value in batch])
                    rows = result.to_list(with_token_scores=False)
                    lines = []
                    for (lineno, _value), row in zip(batch, rows, strict=True):
                        row["line"] = lineno
                        lines.append(json.dumps(row, allow_nan=False) + "\n")
                    out.write("".join(lines))
                    out.stream.flush()  # results leave batch by batch (e.g. when reading a pipe)
                    bar.update(len(batch))
            ok = True
        finally:
            out.close(ok)
    finally:
        if stream is not sys.stdin:
            stream.close()
    return 0


def _family_from_config(name: str, trust_remote_code: bool) -> str | None:
    """The family named by a checkpoint's config.json, read before loading (None when unknown)."""
    from .models.loading import SUPPORTED_MODEL_TYPES

    path = Path(name).expanduser() / "config.json"
    if not path.is_file():
        return None  # a Hub id: load_model reads it (and reports what is wrong)
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(raw, dict):
        return None
    family = SUPPORTED_MODEL_TYPES.get(raw.get("model_type"))
    if family is None and not trust_remote_code and raw.get("diffusion_family") in ("llada", "dream"):
        family = raw["diffusion_family"]
    return family


def _sampler_kwargs(args: argparse.Namespace, family: str) -> dict[str, Any]:
    """The sampler's keyword arguments: given options over the family's defaults, checked."""
    other = "dream" if family == "llada" else "llada"
    wrong = [
        "--" + dest.replace("_", "-")
        for dest, families in _SAMPLER_OPTIONS.items()
        if family not in families and getattr(args, dest) is not None
    ]
    if wrong:
        raise CLIError(
            f"{', '.join(wrong)} {'applies' if len(wrong) == 1 else 'apply'} to {_FAMILY_NAMES[other]} "
            f"models only; this model is a {_FAMILY_NAMES[family]} model (see 'hf-lrdwm generate --help')"
        )
    kwargs = dict(_GENERATE_DEFAULTS[family])
    for dest in kwargs:
        if getattr(args, dest) is not None:
            kwargs[dest] = getattr(args, dest)
    if family == "llada":
        if kwargs["block_length"] is None:
            kwargs["block_length"] = kwargs["gen_length"]
        gen, block, steps = kwargs["gen_length"], kwargs["block_length"], kwargs["steps"]
        if gen % block:
            raise CLIError(f"--gen-length ({gen}) must be a multiple of --block-length ({block})")
        if steps % (gen // block):
            raise CLIError(
                f"--steps ({steps}) must be a multiple of the number of blocks "
                f"(--gen-length / --block-length = {gen // block})"
            )
    else:
        from .generation.dream import DreamSamplingConfig

        try:
            DreamSamplingConfig(**kwargs)
        except (ValueError, TypeError) as err:
            raise CLIError(f"invalid Dream sampler option: {err}") from None
        kwargs["return_dict_in_generate"] = True
    return kwargs


def _generation_device(text: str | None) -> str:
    import torch

    if text is None:
        return "cuda" if torch.cuda.is_available() else "cpu"
    try:
        device = torch.device(text)
    except (RuntimeError, ValueError):
        raise CLIError(f"--device {text!r} is not a torch device (cpu, cuda, cuda:1, mps, ...)") from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise CLIError(f"--device {text!r}: CUDA is not available on this machine")
    if device.type == "mps" and not torch.backends.mps.is_available():
        raise CLIError(f"--device {text!r}: MPS is not available on this machine")
    return text


def _generation_tokenizer(name: str, trust_remote_code: bool) -> Any:
    path = Path(name).expanduser()
    if (name.startswith((".", "~", os.sep)) or name.count("/") > 1) and not path.is_dir():
        raise CLIError(f"tokenizer directory {name!r} not found")
    try:
        from transformers import AutoTokenizer

        return AutoTokenizer.from_pretrained(
            str(path) if path.is_dir() else name, trust_remote_code=trust_remote_code
        )
    except (OSError, ValueError, TypeError, KeyError, ImportError) as err:
        raise CLIError(f"could not load tokenizer {name!r}: {_one_line(str(err), 300)}") from None


def _read_prompts(args: argparse.Namespace) -> list[tuple[str, str]]:
    """``(where, prompt)`` pairs: ``where`` names the prompt in messages (``line N`` / ``prompt N``)."""
    if args.prompt is not None:
        return [(f"prompt {n}", prompt) for n, prompt in enumerate(args.prompt, start=1)]
    stream = _open_input(args.input)
    try:
        records = _read_records(stream, "jsonl", args.prompt_field, False, None)
        prompts = [(f"line {lineno}", value) for lineno, value in records]
    finally:
        if stream is not sys.stdin:
            stream.close()
    if not prompts:
        raise CLIError(f"input {args.input!r} holds no prompts")
    return prompts


def _encode_prompts(tokenizer: Any, prompts: list[tuple[str, str]], chat: bool) -> list[list[int]]:
    """Token ids of each prompt: the chat template's text tokenized without adding special tokens
    (the template holds them, as ``apply_chat_template(tokenize=True)`` does), else the prompt with
    the tokenizer's usual special tokens."""
    if chat and not getattr(tokenizer, "chat_template", None):
        raise CLIError("--chat: the tokenizer has no chat template (drop --chat for a base model)")
    encoded = []
    for where, prompt in prompts:
        if chat:
            text = tokenizer.apply_chat_template(
                [{"role": "user", "content": prompt}], add_generation_prompt=True, tokenize=False
            )
            ids = tokenizer(text, add_special_tokens=False)["input_ids"]
        else:
            ids = tokenizer(prompt)["input_ids"]
        if not ids:
            raise CLIError(f"{where}: the prompt is empty (no tokens)")
        encoded.append([int(i) for i in ids])
    return encoded


def _first_id(value: Any) -> int | None:
    """An id, the first of a list of ids, or None."""
    if isinstance(value, (list, tuple)):
        value = value[0] if value else None
    return None if value is None else int(value)


def _logits_size(model: Any) -> int:
    try:
        head = model.get_output_embeddings()
        weight = getattr(head, "weight", None)
        if weight is not None and weight.dim() == 2:
            return int(weight.shape[0])
    except (AttributeError, NotImplementedError, TypeError):
        pass
    config = model.config
    return int(getattr(config, "embedding_size", None) or config.vocab_size)


@contextlib.contextmanager
def _quiet_transformers(progress: bool) -> Iterator[None]:
    """Silence transformers' info / warning logs (e.g. the harmless "model of type llada to instantiate a
    model of type llama" of native loading) and, unless ``progress``, its weight-loading bar."""
    from transformers.utils import logging as hf_logging

    verbosity = hf_logging.get_verbosity()
    bars = hf_logging.is_progress_bar_enabled()
    hf_logging.set_verbosity_error()
    if not progress:
        hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        hf_logging.set_verbosity(verbosity)
        if bars:
            hf_logging.enable_progress_bar()


def _model_path(name: str) -> str:
    """``name`` as a local directory when it is one; a path-like name that is not a directory fails."""
    path = Path(name).expanduser()
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise CLIError(f"model directory {name!r} has no config.json")
        return str(path)
    if name.startswith((".", "~", os.sep)) or name.count("/") > 1:
        raise CLIError(f"model directory {name!r} not found")
    return name  # a Hub id


def _load_generation_model(
    args: argparse.Namespace, name: str, device: str, tokenizer: Any, show: bool
) -> Any:
    import torch

    from .models import CheckpointMismatchError, load_model

    dtype: Any = args.dtype
    if dtype is not None and dtype != "auto":
        dtype = getattr(torch, dtype)
    try:
        with _quiet_transformers(progress=show):
            return load_model(
                name,
                dtype=dtype,
                device=device,
                trust_remote_code=args.trust_remote_code,
                load_tokenizer=tokenizer is None,
            )
    except (OSError, ValueError, TypeError, NotImplementedError, CheckpointMismatchError, ImportError) as err:
        raise CLIError(f"could not load {args.model!r}: {err}") from None


def _ids_of(config: Any, names: tuple[str, ...]) -> list[int]:
    ids: set[int] = set()
    for name in names:
        value = getattr(config, name, None)
        for item in value if isinstance(value, (list, tuple)) else [value]:
            if item is not None:
                ids.add(int(item))
    return sorted(ids)


def cmd_generate(args: argparse.Namespace) -> int:
    """``hf-lrdwm generate``: generate (watermarked) from prompts, detect, write one JSON line each."""
    import torch
    from tqdm import tqdm

    from .config import LRDWMConfig
    from .detection import LRDWMDetector

    # -- everything that can fail without the model comes first ------------------------------------
    if args.prompt_field != "prompt" and args.input is None:
        raise CLIError("--prompt-field needs --input")
    key = args.key if args.key is not None else os.environ.get(KEY_ENV)
    if not key and not args.no_watermark:
        raise CLIError(
            f"no watermark key: pass --key or set the {KEY_ENV} environment variable (or --no-watermark)"
        )
    config = LRDWMConfig(key=key, delta=args.delta, gamma=args.gamma, sides=args.sides) if key else None
    device = _generation_device(args.device)
    name = _model_path(args.model)
    family = _family_from_config(name, args.trust_remote_code)
    if family is not None:
        _sampler_kwargs(args, family)  # option errors before the (slow) model load
    prompts = _read_prompts(args)
    show = not args.no_progress and sys.stderr.isatty()
    out = _Output(args.output)  # a bad output path fails before the model loads
    ok = False
    try:
        tokenizer = _generation_tokenizer(args.tokenizer, args.trust_remote_code) if args.tokenizer else None
        model = _load_generation_model(args, name, device, tokenizer, show)
        family = getattr(model, "_hf_lrdwm_family", None)
        if family not in _GENERATE_DEFAULTS:
            raise CLIError(f"{args.model!r} is not a LLaDA or Dream model (no supported diffusion sampler)")
        sampler_kwargs = _sampler_kwargs(args, family)
        tokenizer = tokenizer if tokenizer is not None else getattr(model, "hf_lrdwm_tokenizer", None)
        if tokenizer is None:
            raise CLIError(f"{args.model!r} has no tokenizer: pass --tokenizer NAME_OR_DIR")

        # -- special ids, prompts, detector ---------------------------------------------------------
        mask_ids = _ids_of(model.config, ("mask_token_id",))
        if len(mask_ids) != 1:
            raise CLIError(f"{args.model!r} names no mask token (mask_token_id in config.json)")
        mask_id = mask_ids[0]
        candidates = (
            _first_id(getattr(model.config, "pad_token_id", None)),
            _first_id(getattr(tokenizer, "pad_token_id", None)),
            _first_id(getattr(model.config, "eos_token_id", None)),
        )
        # Left pads are never attended to; any id but the mask's (LLaDA treats masks as generated) works.
        pad_id = next((i for i in candidates if i is not None and i != mask_id), 1 if mask_id == 0 else 0)
        ignore = _ids_of(model.config, ("mask_token_id", "eos_token_id", "eot_token_id", "pad_token_id"))
        vocab_size = _logits_size(model)
        encoded = _encode_prompts(tokenizer, prompts, args.chat)
        for (where, _prompt), ids in zip(prompts, encoded, strict=True):
            bad = next((i for i in ids if i < 0 or i >= vocab_size or i == mask_id), None)
            if bad is not None:
                what = (
                    "is the mask token" if bad == mask_id else f"is outside the model's {vocab_size} logits"
                )
                raise CLIError(f"{where}: token id {bad} of the tokenized prompt {what} (wrong --tokenizer?)")
        detector = None
        if config is not None:
            detector = LRDWMDetector(config, vocab_size=vocab_size, ignore_token_ids=ignore, fpr=args.fpr)
        watermark = None if args.no_watermark else config

        # -- generate, batch by batch ----------------------------------------------------------------
        items = [(prompt, ids) for (_where, prompt), ids in zip(prompts, encoded, strict=True)]
        with tqdm(total=len(items), unit=" prompts", disable=not show, file=sys.stderr, leave=False) as bar:
            for batch in _batched(items, args.batch_size):
                width = max(len(ids) for _prompt, ids in batch)
                pads = [width - len(ids) for _prompt, ids in batch]
                attention_mask = None
                if any(pads):  # left padding; the pads are never attended to
                    attention_mask = torch.tensor([[0] * n + [1] * (width - n) for n in pads])
                input_ids = torch.tensor(
                    [[pad_id] * n + ids for n, (_prompt, ids) in zip(pads, batch, strict=True)]
                )
                torch.manual_seed(args.seed)
                output = model.diffusion_generate(
                    input_ids, attention_mask=attention_mask, watermark=watermark, **sampler_kwargs
                )
                sequences = output if isinstance(output, torch.Tensor) else output.sequences
                generated = sequences[:, width:].cpu()
                detections: list[Any] = [None] * len(batch)
                if detector is not None:
                    result = detector(generated, prompt_ids=[ids for _prompt, ids in batch])
                    detections = result.to_list(with_token_scores=False)
                lines = []
                for (prompt, _ids), gen_ids, det in zip(batch, generated.tolist(), detections, strict=True):
                    row = {
                        "prompt": prompt,
                        "text": tokenizer.decode(gen_ids, skip_special_tokens=True),
                        "token_ids": gen_ids,
                        "watermarked": watermark is not None,
                        "detection": det,
                    }
                    lines.append(json.dumps(row, allow_nan=False) + "\n")
                out.write("".join(lines))
                out.stream.flush()
                bar.update(len(batch))
        ok = True
    finally:
        out.close(ok)
    return 0


# ----------------------------------------------------------------------------------------------
# calibrate
# ----------------------------------------------------------------------------------------------
_DATASET_ONLY = ("config", "data_files", "streaming")


def _check_calibrate_options(args: argparse.Namespace) -> str:
    """Option combinations; returns the input format (``jsonl`` / ``txt`` / ``dataset``)."""
    if args.input is not None:
        given = [
            "--" + name.replace("_", "-")
            for name in _DATASET_ONLY
            if getattr(args, name) not in (None, False)
        ]
        if args.split != "train":
            given.append("--split")
        if given:
            raise CLIError(f"{', '.join(given)} {'needs' if len(given) == 1 else 'need'} --dataset")
        fmt = args.format
        if fmt == "auto":
            txt = args.input != "-" and Path(args.input).suffix.lower() in _TEXT_SUFFIXES
            fmt = "txt" if txt else "jsonl"
        if fmt == "txt" and args.text_field is not None:
            raise CLIError("--text-field needs JSON lines input (a .txt file holds one text per line)")
    else:
        if args.format != "auto":
            raise CLIError("--format applies to --input; a --dataset is read by datasets.load_dataset")
        fmt = "dataset"
    if args.min_tokens > args.length:
        raise CLIError(f"--min-tokens ({args.min_tokens}) must be <= --length ({args.length})")
    if args.save is not None and Path(args.save).exists() and not Path(args.save).is_dir():
        raise CLIError(f"--save {args.save!r} exists and is not a directory")
    return fmt


def _load_hf_dataset(args: argparse.Namespace, field: str, show: bool) -> Any:
    """``datasets.load_dataset(NAME, CONFIG, split=SPLIT, streaming=..., data_files=...)``, one column."""
    try:
        import datasets
    except ImportError:
        raise CLIError("--dataset needs the datasets package (pip install datasets)") from None
    kwargs: dict[str, Any] = {"split": args.split, "streaming": args.streaming}
    if args.data_files:
        kwargs["data_files"] = list(args.data_files)
    bars = not datasets.are_progress_bars_disabled()
    if not show:
        datasets.disable_progress_bars()
    try:
        ds = datasets.load_dataset(args.dataset, args.config, **kwargs)
    except Exception as err:  # datasets raises many kinds (not found, offline, bad split, ...)
        raise CLIError(f"could not load dataset {args.dataset!r}: {_one_line(str(err), 300)}") from None
    finally:
        if bars:
            datasets.enable_progress_bars()
    if not isinstance(ds, (datasets.Dataset, datasets.IterableDataset)):
        raise CLIError(f"dataset {args.dataset!r}: --split {args.split!r} did not give one split")
    names = ds.column_names
    if names is not None:
        if field not in names:
            raise CLIError(f"dataset {args.dataset!r} has no column {field!r} (columns: {', '.join(names)})")
        ds = ds.select_columns([field])
    return ds


def _dataset_texts(ds: Any, field: str, batch_size: int) -> Iterator[tuple[str, str | None]]:
    """``(row N, text)`` for each row of a (streamed) dataset, read in batches."""
    row = 0
    for batch in ds.iter(batch_size=batch_size):
        if field not in batch:
            raise CLIError(f"row {row + 1}: missing column {field!r}")
        for value in batch[field]:
            row += 1
            if value is not None and not isinstance(value, str):
                raise CLIError(f"row {row}: column {field!r} must be a string, got {type(value).__name__}")
            yield f"row {row}", value


def _collect_human_ids(
    texts: Iterable[tuple[str, str | None]], tokenizer: Any, args: argparse.Namespace, show: bool
) -> tuple[list[list[int]], dict[str, int]]:
    """Tokenize (no special tokens), keep the first ``--length`` ids of texts with ``--min-tokens`` ids."""
    from tqdm import tqdm

    kept: list[list[int]] = []
    counts = {"read": 0, "skipped": 0}
    with tqdm(
        total=args.num_texts, unit=" texts", desc="reading", disable=not show, file=sys.stderr, leave=False
    ) as bar:
        for batch in _batched(texts, args.batch_size):
            values = [value or "" for _where, value in batch]
            encoded = tokenizer(values, add_special_tokens=False)["input_ids"]
            for ids in encoded:
                counts["read"] += 1
                if len(ids) < args.min_tokens:
                    counts["skipped"] += 1
                    continue
                kept.append([int(i) for i in ids[: args.length]])
                if args.num_texts is not None and len(kept) >= args.num_texts:
                    break
            bar.update(len(kept) - bar.n)
            if args.num_texts is not None and len(kept) >= args.num_texts:
                break
    return kept, counts


def _finite(value: Any) -> Any:
    """NaN / inf as None, in nested lists and dicts (JSON has no NaN)."""
    if isinstance(value, float):
        return value if value == value and value not in (float("inf"), float("-inf")) else None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


def _save_calibration(detector: Any, directory: str) -> list[str]:
    """Write the calibrated detector as a detector repo (``LRDWMDetector.save_pretrained``: keys, settings,
    calibration, tokenizer, model card); returns the files written."""
    path = Path(directory)
    detector.save_pretrained(path)
    return sorted(str(f.relative_to(path)) for f in path.rglob("*") if f.is_file())


def cmd_calibrate(args: argparse.Namespace) -> int:
    """``hf-lrdwm calibrate``: calibrate a key on human text, check its health, print a JSON summary."""
    import logging
    import math

    from .detection import LRDWMDetector

    config = _make_config(args)
    fmt = _check_calibrate_options(args)
    field = args.text_field or "text"
    show = not args.no_progress and sys.stderr.isatty()
    stream = _open_input(args.input) if args.input is not None else None  # a missing file fails fast
    try:
        tokenizer = _load_tokenizer(args.tokenizer)
        if stream is not None:
            texts: Iterable[tuple[str, str | None]] = (
                (f"line {lineno}", value) for lineno, value in _read_records(stream, fmt, field, False, None)
            )
            source: dict[str, Any] = {"input": args.input, "format": fmt}
        else:
            ds = _load_hf_dataset(args, field, show)
            texts = _dataset_texts(ds, field, args.batch_size)
            source = {
                "dataset": args.dataset,
                "config": args.config,
                "split": args.split,
                "data_files": args.data_files,
                "streaming": args.streaming,
            }
        source["text_field"] = None if fmt == "txt" else field
        human, counts = _collect_human_ids(texts, tokenizer, args, show)
    finally:
        if stream is not None and stream is not sys.stdin:
            stream.close()

    if len(human) < 10:
        raise CLIError(
            f"only {len(human)} usable human texts ({counts['read']} read, {counts['skipped']} with fewer "
            f"than --min-tokens {args.min_tokens} tokens): calibration needs at least 10"
        )
    detector = LRDWMDetector(
        config, tokenizer, fpr=args.fpr, min_tokens=args.min_tokens, statistic=args.statistic
    )
    warnings = []
    m = len(human)
    if math.ceil((1 - args.fpr) * (m + 1)) > m:
        warnings.append(
            f"{m} texts are too few for --fpr {args.fpr:g} (at least {math.ceil(1 / args.fpr) - 1} needed): "
            "the threshold is the largest null z and the achieved FPR may exceed the target"
        )
    library_logger = logging.getLogger("hf_lrdwm.detection")
    level = library_logger.level
    library_logger.setLevel(logging.ERROR)  # its too-few-texts warning is reported below, once
    try:
        cal = detector.calibrate(human, fpr=args.fpr, batch_size=args.batch_size)
        health = detector.key_health(human, fpr=args.fpr, batch_size=args.batch_size)
    finally:
        library_logger.setLevel(level)
    if not health.healthy:
        warnings.append(
            f"this key flags {health.num_flagged} of {health.num_texts} human texts "
            f"({health.observed_fpr:.2%}) at the nominal --fpr {args.fpr:g} (p = {health.p_excess:.2g}): "
            "use the calibrated threshold, or another key"
        )
    lengths = [len(ids) for ids in human]
    summary: dict[str, Any] = {
        **cal.to_dict(),
        "gamma": config.gamma,
        "sides": config.sides,
        "length": args.length,
        "min_tokens": args.min_tokens,
        "texts_read": counts["read"],
        "texts_skipped": counts["skipped"],
        "tokens_per_text": {
            "mean": sum(lengths) / len(lengths),
            "min": min(lengths),
            "max": max(lengths),
        },
        "key_health": {
            "observed_fpr": health.observed_fpr,
            "fpr_ci": list(health.fpr_ci),
            "num_flagged": health.num_flagged,
            "num_texts": health.num_texts,
            "fpr": health.fpr,
            "p_excess": health.p_excess,
            "healthy": health.healthy,
            "mean_z": health.mean_z,
            "std_z": health.std_z,
            "statistic": args.statistic,
        },
        "tokenizer": args.tokenizer,
        "source": source,
        "saved": None,
        "warnings": warnings,
    }
    out = _Output(args.output)
    ok = False
    try:
        if args.save is not None:
            summary["saved"] = {"directory": args.save, "files": _save_calibration(detector, args.save)}
        out.write(json.dumps(_finite(summary), indent=2, allow_nan=False) + "\n")
        ok = True
    finally:
        out.close(ok)
    for warning in warnings:
        sys.stderr.write(f"{PROG}: warning: {warning}\n")
    return 0


# ----------------------------------------------------------------------------------------------
# Entry point
# ----------------------------------------------------------------------------------------------
def _secrets(argv: list[str]) -> list[str]:
    """Key values that must not appear in messages: ``--key`` values and ``$HF_LRDWM_KEY``."""
    found = []
    for i, arg in enumerate(argv):
        if arg == "--key" and i + 1 < len(argv):
            found.append(argv[i + 1])
        elif arg.startswith("--key="):
            found.append(arg.split("=", 1)[1])
    env = os.environ.get(KEY_ENV)
    if env:
        found.append(env)
    return sorted({s for s in found if s}, key=len, reverse=True)


def _redact(message: str, secrets: list[str]) -> str:
    """Replace each secret where it stands as a whole word (a key "k" leaves "token" alone)."""
    for secret in secrets:
        message = re.sub(rf"(?<!\w){re.escape(secret)}(?!\w)", "<hidden>", message)
    return message


def _fail(message: str, secrets: list[str]) -> int:
    sys.stderr.write(f"{PROG}: error: {_redact(_one_line(message), secrets)}\n")
    sys.stderr.flush()
    return EXIT_USAGE


def main(argv: list[str] | None = None) -> int:
    """Run the ``hf-lrdwm`` command line; returns the exit status (0 on success, 2 on user errors)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    secrets = _secrets(argv)
    _SECRETS[:] = secrets
    try:
        parser = build_parser()
        try:
            args = parser.parse_args(argv)
        except SystemExit as exc:  # --help, --version, usage errors (already reported in one line)
            return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else EXIT_USAGE)
        try:
            return int(args.func(args))
        except CLIError as err:
            return _fail(str(err), secrets)
        except BrokenPipeError:  # e.g. `hf-lrdwm detect ... | head`: stop quietly
            _silence_stdout()
            return 1
        except (ValueError, TypeError, FileNotFoundError, OSError) as err:
            return _fail(str(err) or type(err).__name__, secrets)
        except KeyboardInterrupt:
            sys.stderr.write(f"{PROG}: interrupted\n")
            return 130
    finally:
        _SECRETS.clear()


def _silence_stdout() -> None:
    """Point stdout at /dev/null so the interpreter's final flush does not raise again."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):
        pass


if __name__ == "__main__":
    sys.exit(main())
