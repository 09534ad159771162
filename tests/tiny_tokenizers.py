"""Tiny byte-level BPE tokenizers trained offline in a test (< 0.1 s); no test functions here."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any


def train_byte_bpe(texts: Iterable[str], *, vocab_size: int, special_tokens: Sequence[str] = ()) -> Any:
    """A ``tokenizers.Tokenizer``: byte-level BPE with ``vocab_size`` tokens trained on ``texts``."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(special_tokens),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer)
    return tok


def fast_tokenizer(texts: Iterable[str], *, vocab_size: int, **kwargs: Any) -> Any:
    """A transformers ``PreTrainedTokenizerFast`` with ``<eos>`` and ``<pad>`` special tokens."""
    from transformers import PreTrainedTokenizerFast

    tok = train_byte_bpe(texts, vocab_size=vocab_size, special_tokens=("<eos>", "<pad>"))
    return PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<eos>", pad_token="<pad>", **kwargs)
