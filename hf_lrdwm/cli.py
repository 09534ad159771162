"""The ``hf-lrdwm`` command line.

``hf-lrdwm detect``: score texts or token ids from a JSON-lines / text file (or stdin) and write one JSON
line of results per input, in order.

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
import json
import os
import re
import sys
import tempfile
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import IO, Any, NoReturn, TypeVar

__all__ = ["main", "build_parser", "cmd_detect", "CLIError", "KEY_ENV"]

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
def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text!r}")
    return value


def _open_unit_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number in (0, 1), got {text!r}") from None
    if not 0.0 < value < 1.0:
        raise argparse.ArgumentTypeError(f"must be a number in (0, 1), got {text!r}")
    return value


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
        "--fpr", type=_open_unit_float, default=0.01, help="false-positive rate of `prediction` (0.01)"
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


# Subcommand adders, in the order they appear in --help.
_SUBCOMMANDS: list[Callable[[Any], None]] = [_add_detect_parser]


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

    config = _make_config(args)
    fmt = args.format
    if fmt == "auto":
        fmt = "txt" if args.input != "-" and Path(args.input).suffix.lower() in _TEXT_SUFFIXES else "jsonl"
    ids_mode = args.ids_field is not None
    if ids_mode and fmt == "txt":
        raise CLIError("--ids-field needs JSON lines input (use --format jsonl)")
    if fmt == "txt" and args.text_field is not None:
        raise CLIError("--text-field needs JSON lines input (a .txt file holds one text per line)")
    field = args.ids_field if ids_mode else (args.text_field or "text")
    if not ids_mode and args.tokenizer is None:
        raise CLIError("text input needs --tokenizer (or give token ids with --ids-field)")

    stream = _open_input(args.input)  # before the (slow) tokenizer: a missing file fails fast
    try:
        tokenizer = _load_tokenizer(args.tokenizer) if args.tokenizer is not None else None
        detector = LRDWMDetector(
            config,
            tokenizer,
            fpr=args.fpr,
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
                    bar.update(len(batch))
            ok = True
        finally:
            out.close(ok)
    finally:
        if stream is not sys.stdin:
            stream.close()
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
