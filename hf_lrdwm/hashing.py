"""The keyed green-list function of LR-DWM: one definition for generation and detection.

Scheme ``lrdwm-splitmix64-v1`` (specified in ``docs/hashing.md``; changing it is a breaking change):

All arithmetic is on unsigned 64-bit integers modulo 2**64; ``>>`` is a logical shift.

* ``fmix(z)``: the SplitMix64 finaliser::

      z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9
      z = (z ^ (z >> 27)) * 0x94D049BB133111EB
      z =  z ^ (z >> 31)

* ``ctx_word(c)  = fmix((c + 1) * 0x9E3779B97F4A7C15)``   (context token ``c``)
* ``cand_word(v) = fmix((v + 1) * 0xD1B54A32D192ED03)``   (candidate token ``v``)
* ``seed(k, c)   = fmix(k ^ ctx_word(c))``                 (per key and context: one scalar)
* ``green(k, c, v) = (fmix(seed(k, c) ^ cand_word(v)) >> 11) < round(gamma * 2**53)``

So ``P(green) = round(gamma * 2**53) / 2**53`` for every context and key. Keys are 64-bit integers
(see :func:`derive_key` for how a user secret becomes the two keys ``k_L`` and ``k_R``).

Torch has no unsigned 64-bit arithmetic on every device, so the torch functions hold the same bits
in ``int64`` (two's complement): xor, wrapping multiplication and masked shifts give identical bits on
CPU and CUDA, for any batch shape. :func:`green_reference` is a plain-Python version used to pin the
golden vectors.
"""

from __future__ import annotations

import hashlib

import torch

__all__ = [
    "HASH_SCHEME",
    "derive_key",
    "green_threshold",
    "green_probability",
    "context_seeds",
    "candidate_words",
    "green_pairs",
    "green_rows",
    "green_block",
    "green_from_seeds",
    "green_reference",
    "hash_value_reference",
]

HASH_SCHEME = "lrdwm-splitmix64-v1"

_MASK64 = (1 << 64) - 1
_M1 = 0xBF58476D1CE4E5B9
_M2 = 0x94D049BB133111EB
_CTX_MUL = 0x9E3779B97F4A7C15
_CAND_MUL = 0xD1B54A32D192ED03
_SHIFT = 11  # keep the top 53 bits
_KEY_DOMAIN = b"hf-lrdwm/key-derivation/v1"


def _signed(x: int) -> int:
    """The int64 with the same bits as the unsigned 64-bit integer ``x``."""
    x &= _MASK64
    return x - (1 << 64) if x >= (1 << 63) else x


_M1_S = _signed(_M1)
_M2_S = _signed(_M2)
_CTX_MUL_S = _signed(_CTX_MUL)
_CAND_MUL_S = _signed(_CAND_MUL)


# ----------------------------------------------------------------------------------------------
# Keys
# ----------------------------------------------------------------------------------------------
def derive_key(secret: str | int, side: str) -> int:
    """Derive a 64-bit key for one side (``"left"`` or ``"right"``) from a user secret.

    ``key = first 8 bytes (little-endian) of SHA-256(b"hf-lrdwm/key-derivation/v1" 0x00 side 0x00
    secret)``, where an ``int`` secret is written as its decimal string, so ``123`` and ``"123"``
    give the same keys (the CLI reads keys as strings). SHA-256 makes keys from low-entropy or
    related secrets (``"a"``, ``"b"``, ``1``, ``2``) unrelated bit patterns; the secret itself must
    still be hard to guess for the watermark to stay private.

    >>> derive_key("my secret", "left") != derive_key("my secret", "right")
    True
    """
    if isinstance(secret, bool) or not isinstance(secret, (str, int)):
        raise TypeError(f"the watermark secret must be a str or an int, got {type(secret).__name__}")
    if side not in ("left", "right"):
        raise ValueError(f"side must be 'left' or 'right', got {side!r}")
    text = str(secret) if isinstance(secret, int) else secret
    if text == "":
        raise ValueError("the watermark secret must not be empty")
    digest = hashlib.sha256(_KEY_DOMAIN + b"\x00" + side.encode() + b"\x00" + text.encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "little")


def green_threshold(gamma: float) -> int:
    """The integer threshold ``round(gamma * 2**53)`` that the top 53 hash bits are compared with."""
    if not (0.0 < float(gamma) < 1.0):
        raise ValueError(f"gamma must be in (0, 1), got {gamma!r}")
    return int(round(float(gamma) * (1 << 53)))


def green_probability(gamma: float) -> float:
    """The exact probability of green under the hash, ``green_threshold(gamma) / 2**53``."""
    return green_threshold(gamma) / float(1 << 53)


# ----------------------------------------------------------------------------------------------
# Torch implementation (int64 holding uint64 bits)
# ----------------------------------------------------------------------------------------------
def _lsr(z: torch.Tensor, r: int) -> torch.Tensor:
    """Logical right shift of int64 ``z`` by ``r`` bits (torch's ``>>`` is arithmetic)."""
    return torch.bitwise_and(torch.bitwise_right_shift(z, r), (1 << (64 - r)) - 1)


def _xorshift_(z: torch.Tensor, r: int, tmp: torch.Tensor) -> None:
    """``z ^= z >> r`` (logical shift), in place, using the scratch tensor ``tmp``."""
    torch.bitwise_right_shift(z, r, out=tmp)
    tmp.bitwise_and_((1 << (64 - r)) - 1)
    z.bitwise_xor_(tmp)


def _fmix_(z: torch.Tensor, tmp: torch.Tensor | None = None) -> torch.Tensor:
    """SplitMix64 finaliser, in place on an int64 tensor that the caller owns."""
    if tmp is None:
        tmp = torch.empty_like(z)
    _xorshift_(z, 30, tmp)
    z.mul_(_M1_S)
    _xorshift_(z, 27, tmp)
    z.mul_(_M2_S)
    _xorshift_(z, 31, tmp)
    return z


def _as_int64(t: torch.Tensor | int, device: torch.device | None = None) -> torch.Tensor:
    if isinstance(t, torch.Tensor):
        if t.dtype not in (torch.int64, torch.int32, torch.int16, torch.uint8, torch.int8):
            raise TypeError(f"token ids must be an integer tensor, got dtype {t.dtype}")
        return t.to(device=device if device is not None else t.device, dtype=torch.int64)
    return torch.tensor(int(t), dtype=torch.int64, device=device)


def _word(tokens: torch.Tensor, mul: int) -> torch.Tensor:
    z = (tokens + 1) * mul  # new tensor; wraps modulo 2**64
    return _fmix_(z)


def context_seeds(key: int, contexts: torch.Tensor) -> torch.Tensor:
    """``seed(key, c)`` for every context token id in ``contexts`` (any shape) -> int64 tensor."""
    c = _as_int64(contexts)
    z = _word(c, _CTX_MUL_S)
    z.bitwise_xor_(_signed(key))
    return _fmix_(z)


def candidate_words(vocab_size: int, device: torch.device | str | None = None) -> torch.Tensor:
    """``cand_word(v)`` for ``v = 0 .. vocab_size - 1``: int64 tensor of shape [vocab_size].

    Independent of the key; a processor computes it once per vocabulary size and device.
    """
    if vocab_size <= 0:
        raise ValueError(f"vocab_size must be positive, got {vocab_size}")
    return _word(torch.arange(vocab_size, dtype=torch.int64, device=device), _CAND_MUL_S)


def _is_green_(z: torch.Tensor, threshold: int, tmp: torch.Tensor | None = None) -> torch.Tensor:
    """Finish the hash in place on ``z`` and compare: returns the bool tensor ``green``."""
    _fmix_(z, tmp)
    z.bitwise_xor_(-(1 << 63))  # flip the sign bit: unsigned order becomes signed order
    return z < _signed((threshold << _SHIFT) ^ (1 << 63))


def green_pairs(key: int, contexts: torch.Tensor, candidates: torch.Tensor, gamma: float) -> torch.Tensor:
    """Element-wise green membership (detection path).

    Args:
        key: the 64-bit key of the side (``k_L`` or ``k_R``).
        contexts: context token ids, any shape (broadcast with ``candidates``).
        candidates: candidate token ids, broadcastable with ``contexts``.
        gamma: green fraction.

    Returns:
        Bool tensor of the broadcast shape: ``green(key, contexts[i], candidates[i])``.

    >>> import torch
    >>> green_pairs(7, torch.tensor([3, 3]), torch.tensor([5, 5]), 0.5).tolist()[0] in (True, False)
    True
    """
    threshold = green_threshold(gamma)
    seeds = context_seeds(key, contexts)
    cand = _word(_as_int64(candidates, seeds.device), _CAND_MUL_S)
    z = torch.bitwise_xor(seeds, cand)
    return _is_green_(z, threshold)


def green_rows(
    key: int,
    contexts: torch.Tensor,
    gamma: float,
    *,
    vocab_size: int | None = None,
    cand_words: torch.Tensor | None = None,
) -> torch.Tensor:
    """Green rows over the whole vocabulary (generation path).

    Args:
        key: the 64-bit key of the side.
        contexts: 1-D tensor of U context token ids.
        gamma: green fraction.
        vocab_size: V; needed when ``cand_words`` is not given.
        cand_words: precomputed :func:`candidate_words` of shape [V] on the wanted device.

    Returns:
        Bool tensor [U, V]: ``out[u, v] = green(key, contexts[u], v)``.
    """
    threshold = green_threshold(gamma)
    if cand_words is None:
        if vocab_size is None:
            raise ValueError("green_rows needs vocab_size or cand_words")
        cand_words = candidate_words(vocab_size, device=contexts.device)
    seeds = context_seeds(key, contexts.reshape(-1).to(cand_words.device))
    limit = _signed((threshold << _SHIFT) ^ (1 << 63))
    out = torch.empty((seeds.shape[0], cand_words.shape[0]), dtype=torch.bool, device=cand_words.device)
    # Row by row with two reused [V] scratch buffers: no [U, V] int64 temporaries.
    z = torch.empty_like(cand_words)
    tmp = torch.empty_like(cand_words)
    for u, seed in enumerate(seeds.tolist()):
        torch.bitwise_xor(cand_words, seed, out=z)
        _fmix_(z, tmp)
        z.bitwise_xor_(-(1 << 63))
        torch.lt(z, limit, out=out[u])
    return out


def green_block(
    key: int,
    contexts: torch.Tensor,
    gamma: float,
    *,
    cand_words: torch.Tensor,
) -> torch.Tensor:
    """Same rows as :func:`green_rows`, computed for all contexts at once (no host round trip).

    One [U, V] int64 scratch pair instead of a loop over rows: a fixed, small number of kernels and no
    device -> host copy of the seeds, which is what a GPU wants (``green_rows`` loops over the rows in
    Python to keep the scratch at [V], which is what a CPU wants). Callers bound U.

    Returns:
        Bool tensor [U, V] on ``cand_words.device``, equal to ``green_rows(key, contexts, gamma)``.
    """
    seeds = context_seeds(key, contexts.reshape(-1).to(cand_words.device))
    return green_from_seeds(seeds, gamma, cand_words=cand_words)


def green_from_seeds(seeds: torch.Tensor, gamma: float, *, cand_words: torch.Tensor) -> torch.Tensor:
    """Green rows [U, V] from context seeds [U] (:func:`context_seeds`, one key per row allowed).

    ``green_from_seeds(context_seeds(k, c), gamma, cand_words=w) == green_block(k, c, gamma, cand_words=w)``;
    seeds of rows with different keys can be stacked into one call.
    """
    threshold = green_threshold(gamma)
    z = torch.bitwise_xor(seeds.reshape(-1, 1), cand_words.unsqueeze(0))
    _fmix_(z)
    z.bitwise_xor_(-(1 << 63))
    return z < _signed((threshold << _SHIFT) ^ (1 << 63))


# ----------------------------------------------------------------------------------------------
# Plain-Python reference (specification, golden vectors)
# ----------------------------------------------------------------------------------------------
def _fmix_py(z: int) -> int:
    z &= _MASK64
    z = ((z ^ (z >> 30)) * _M1) & _MASK64
    z = ((z ^ (z >> 27)) * _M2) & _MASK64
    return z ^ (z >> 31)


def hash_value_reference(key: int, context: int, candidate: int) -> int:
    """Plain-Python 53-bit value ``fmix(seed(key, context) ^ cand_word(candidate)) >> 11``.

    ``green(key, c, v)`` is ``hash_value_reference(key, c, v) < round(gamma * 2**53)``.
    """
    seed = _fmix_py((key & _MASK64) ^ _fmix_py((context + 1) * _CTX_MUL))
    return _fmix_py(seed ^ _fmix_py((candidate + 1) * _CAND_MUL)) >> _SHIFT


def green_reference(key: int, context: int, candidate: int, gamma: float) -> bool:
    """Plain-Python ``green(key, context, candidate)``; the specification the torch code must match.

    >>> green_reference(0x0123456789ABCDEF, 42, 1000, 0.5) in (True, False)
    True
    """
    return hash_value_reference(key, context, candidate) < green_threshold(gamma)
