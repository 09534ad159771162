"""`LRDWMConfig`: the watermark's keys and parameters, validated, serialisable and secret-safe."""

from __future__ import annotations

import copy
import json
import logging
import math
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from .hashing import HASH_SCHEME, derive_key

if TYPE_CHECKING:  # pragma: no cover
    import torch

    from .processor import LRDWMLogitsProcessor

__all__ = ["LRDWMConfig", "CONFIG_NAME", "SUPPORTED_HASH_SCHEMES"]

logger = logging.getLogger(__name__)

CONFIG_NAME = "watermark_config.json"
SUPPORTED_HASH_SCHEMES = (HASH_SCHEME,)
_SIDES = ("both", "left", "right")
_MAX_KEY = (1 << 64) - 1


def _parse_key(value: Any, field: str) -> int:
    """A 64-bit key from an int or a decimal / ``0x`` hexadecimal string (as written in JSON)."""
    if isinstance(value, bool):
        raise TypeError(f"`{field}` must be an int in [0, 2**64), got a bool")
    if isinstance(value, str):
        try:
            value = int(value, 0)
        except ValueError:
            raise ValueError(f"`{field}` must be an integer or a hex string like '0x1f'") from None
    if not isinstance(value, int):
        raise TypeError(f"`{field}` must be an int in [0, 2**64), got {type(value).__name__}")
    if not 0 <= value <= _MAX_KEY:
        raise ValueError(f"`{field}` must be in [0, 2**64)")
    return value


class LRDWMConfig:
    """Settings of an LR-DWM watermark.

    Args:
        key: the secret (``str`` or ``int``) from which the two 64-bit keys ``k_L`` and ``k_R`` are
            derived with SHA-256 and domain separation (see :func:`hf_lrdwm.hashing.derive_key`).
            The secret itself is not stored: only the derived keys are kept and saved.
        key_left, key_right: explicit 64-bit keys instead of ``key`` (both, or neither).
        delta: logit bias added per revealed neighbour (``>= 0``). Default 2.0.
        gamma: green fraction of the vocabulary, ``0 < gamma < 1``. Default 0.5.
        sides: ``"both"`` (LR-DWM), ``"left"`` (the naive left-only KGW adaptation, for ablations)
            or ``"right"``. Detection scores the same sides.
        hash_scheme: name and version of the green-list function; only ``"lrdwm-splitmix64-v1"``
            exists today.
        confidence_sees_watermark: whether a sampler's remasking confidence is computed from the
            watermarked logits (default ``True``; see ``docs/generation.md``).

    Keys are secrets: they never appear in ``repr``/``str``, logs or error messages.

    Example:
        >>> from hf_lrdwm import LRDWMConfig
        >>> cfg = LRDWMConfig(key="my secret", delta=2.0, gamma=0.5)
        >>> cfg
        LRDWMConfig(key=<hidden>, delta=2.0, gamma=0.5, sides='both', hash_scheme='lrdwm-splitmix64-v1', \
confidence_sees_watermark=True)
        >>> LRDWMConfig.from_dict(cfg.to_dict()) == cfg
        True
    """

    def __init__(
        self,
        key: str | int | None = None,
        *,
        key_left: int | str | None = None,
        key_right: int | str | None = None,
        delta: float = 2.0,
        gamma: float = 0.5,
        sides: Literal["both", "left", "right"] = "both",
        hash_scheme: str = HASH_SCHEME,
        confidence_sees_watermark: bool = True,
    ) -> None:
        if key is not None and (key_left is not None or key_right is not None):
            raise ValueError("give either `key` (a secret) or `key_left` and `key_right`, not both")
        if key is None:
            if key_left is None or key_right is None:
                raise ValueError("a watermark needs `key` (a secret) or both `key_left` and `key_right`")
            self._key_left = _parse_key(key_left, "key_left")
            self._key_right = _parse_key(key_right, "key_right")
        else:
            self._key_left = derive_key(key, "left")
            self._key_right = derive_key(key, "right")
        self.delta = delta
        self.gamma = gamma
        self.sides = sides
        self.hash_scheme = hash_scheme
        self.confidence_sees_watermark = confidence_sees_watermark
        self.validate()

    # -- keys (read-only; never printed) --------------------------------------------------------
    @property
    def key_left(self) -> int:
        """The 64-bit key ``k_L`` (secret)."""
        return self._key_left

    @property
    def key_right(self) -> int:
        """The 64-bit key ``k_R`` (secret)."""
        return self._key_right

    @property
    def use_left(self) -> bool:
        return self.sides in ("both", "left")

    @property
    def use_right(self) -> bool:
        return self.sides in ("both", "right")

    # -- validation -----------------------------------------------------------------------------
    def validate(self) -> None:
        """Check every field; raise ``ValueError``/``TypeError`` naming the field and the bad value."""
        for name in ("delta", "gamma"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise TypeError(f"`{name}` must be a number, got {type(value).__name__}")
            if not math.isfinite(float(value)):
                raise ValueError(f"`{name}` must be finite, got {value!r}")
        self.delta = float(self.delta)
        self.gamma = float(self.gamma)
        if self.delta < 0:
            raise ValueError(f"`delta` must be >= 0, got {self.delta!r}")
        if not 0.0 < self.gamma < 1.0:
            raise ValueError(f"`gamma` must be in (0, 1), got {self.gamma!r}")
        if self.sides not in _SIDES:
            raise ValueError(f"`sides` must be one of {_SIDES}, got {self.sides!r}")
        if self.hash_scheme not in SUPPORTED_HASH_SCHEMES:
            raise ValueError(
                f"`hash_scheme` {self.hash_scheme!r} is not supported by this version of hf_lrdwm "
                f"(supported: {SUPPORTED_HASH_SCHEMES})"
            )
        if not isinstance(self.confidence_sees_watermark, bool):
            raise TypeError(
                "`confidence_sees_watermark` must be a bool, got "
                f"{type(self.confidence_sees_watermark).__name__}"
            )

    # -- processor ------------------------------------------------------------------------------
    def construct_processor(
        self,
        vocab_size: int,
        mask_token_id: int,
        device: torch.device | str | None = None,
        **kwargs: Any,
    ) -> LRDWMLogitsProcessor:
        """Build the :class:`~hf_lrdwm.processor.LRDWMLogitsProcessor` for a model.

        Args:
            vocab_size: size of the model's logits axis (e.g. 126464 for LLaDA-8B).
            mask_token_id: id of the mask token in the diffusion canvas.
            device: device of the logits (green rows are computed there).
            **kwargs: passed to the processor (``in_place``, ``max_cached_rows``, ``strategy``).
        """
        from .processor import LRDWMLogitsProcessor

        return LRDWMLogitsProcessor(
            config=self, vocab_size=vocab_size, mask_token_id=mask_token_id, device=device, **kwargs
        )

    # -- serialisation --------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """All settings, keys included (as hex strings). Treat the result as a secret."""
        return {
            "hash_scheme": self.hash_scheme,
            "key_left": f"0x{self._key_left:016x}",
            "key_right": f"0x{self._key_right:016x}",
            "delta": self.delta,
            "gamma": self.gamma,
            "sides": self.sides,
            "confidence_sees_watermark": self.confidence_sees_watermark,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> LRDWMConfig:
        """Inverse of :meth:`to_dict`; unknown fields raise ``ValueError`` naming them."""
        if not isinstance(data, dict):
            raise TypeError(f"LRDWMConfig.from_dict needs a dict, got {type(data).__name__}")
        data = dict(data)
        allowed = {
            "key",
            "key_left",
            "key_right",
            "delta",
            "gamma",
            "sides",
            "hash_scheme",
            "confidence_sees_watermark",
        }
        unknown = sorted(set(data) - allowed - {"format", "hf_lrdwm_version"})
        if unknown:
            raise ValueError(f"unknown LRDWMConfig fields: {unknown}")
        data.pop("format", None)
        data.pop("hf_lrdwm_version", None)
        key = data.pop("key", None)
        return cls(key, **data)

    def to_json_string(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=True) + "\n"

    @classmethod
    def from_json_string(cls, text: str) -> LRDWMConfig:
        try:
            data = json.loads(text)
        except json.JSONDecodeError as err:
            raise ValueError(f"not a valid watermark config JSON: {err.msg} at line {err.lineno}") from None
        return cls.from_dict(data)

    def save_pretrained(self, save_directory: str | os.PathLike) -> Path:
        """Write ``watermark_config.json`` (it holds the keys: keep the directory private)."""
        path = Path(save_directory)
        if path.exists() and not path.is_dir():
            raise NotADirectoryError(f"{str(path)!r} exists and is not a directory")
        path.mkdir(parents=True, exist_ok=True)
        out = path / CONFIG_NAME
        data = self.to_dict()
        data["format"] = "hf_lrdwm.LRDWMConfig"
        from . import __version__

        data["hf_lrdwm_version"] = __version__
        out.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n", encoding="utf-8")
        try:
            os.chmod(out, 0o600)
        except OSError:  # pragma: no cover - e.g. some network file systems
            logger.debug("could not restrict permissions of %s", out)
        return out

    @classmethod
    def from_pretrained(
        cls,
        pretrained: str | os.PathLike,
        *,
        token: str | bool | None = None,
        revision: str | None = None,
        cache_dir: str | os.PathLike | None = None,
    ) -> LRDWMConfig:
        """Load from a directory holding ``watermark_config.json`` or from a Hub repo id."""
        path = Path(pretrained)
        if path.is_dir():
            file = path / CONFIG_NAME
            if not file.is_file():
                raise FileNotFoundError(f"no {CONFIG_NAME} in directory {str(path)!r}")
        elif path.is_file():
            file = path
        else:
            from huggingface_hub import hf_hub_download

            file = Path(
                hf_hub_download(
                    str(pretrained), CONFIG_NAME, token=token, revision=revision, cache_dir=cache_dir
                )
            )
        return cls.from_json_string(file.read_text(encoding="utf-8"))

    def push_to_hub(
        self,
        repo_id: str,
        *,
        private: bool = True,
        token: str | bool | None = None,
        commit_message: str = "Upload LR-DWM watermark config",
    ) -> str:
        """Upload ``watermark_config.json`` to a Hub repo, private by default (it holds the keys).

        Returns the URL of the commit.
        """
        import tempfile

        from huggingface_hub import HfApi

        if not private:
            logger.warning(
                "pushing a watermark config to a PUBLIC repo: anyone can read its keys and forge or "
                "strip the watermark"
            )
        api = HfApi(token=token)
        api.create_repo(repo_id, private=private, exist_ok=True)
        with tempfile.TemporaryDirectory() as tmp:
            file = self.save_pretrained(tmp)
            info = api.upload_file(
                path_or_fileobj=str(file),
                path_in_repo=CONFIG_NAME,
                repo_id=repo_id,
                commit_message=commit_message,
            )
        return str(getattr(info, "commit_url", info))

    # -- comparison / display -------------------------------------------------------------------
    def copy(self, **changes: Any) -> LRDWMConfig:
        """A copy with some public fields changed (keys are kept)."""
        new = copy.copy(self)
        for name, value in changes.items():
            if name not in ("delta", "gamma", "sides", "hash_scheme", "confidence_sees_watermark"):
                raise ValueError(f"cannot change {name!r} with copy()")
            setattr(new, name, value)
        new.validate()
        return new

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, LRDWMConfig):
            return NotImplemented
        return self.to_dict() == other.to_dict()

    def __hash__(self) -> int:
        return hash(self.to_json_string())

    def __repr__(self) -> str:
        return (
            f"LRDWMConfig(key=<hidden>, delta={self.delta!r}, gamma={self.gamma!r}, sides={self.sides!r}, "
            f"hash_scheme={self.hash_scheme!r}, confidence_sees_watermark={self.confidence_sees_watermark!r})"
        )

    __str__ = __repr__

    def __reduce__(self):  # pickling (e.g. datasets.map with num_proc) keeps the keys
        return (_rebuild_config, (self.to_dict(),))


def _rebuild_config(data: dict[str, Any]) -> LRDWMConfig:
    return LRDWMConfig.from_dict(data)
