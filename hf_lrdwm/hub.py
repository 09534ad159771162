"""Detector repos: an :class:`~hf_lrdwm.LRDWMDetector` saved, loaded and pushed like a model.

A detector repo is a directory (or a Hub model repo) holding:

* ``config.json``: an :class:`LRDWMDetectorConfig` (``model_type: "lrdwm-detector"``) with the watermark
  keys (hex strings), ``gamma``, ``sides``, ``hash_scheme``, the detector settings (``fpr``,
  ``statistic``, ``min_tokens``, ``ignore_repeated_pairs``, ``ignore_token_ids``, ``vocab_size``) and an
  optional calibration. It holds the keys: it is written with mode ``0o600`` and the repo must stay private.
* ``model.safetensors``: one unused scalar. ``transformers.Pipeline`` reads ``model.device`` from the
  model's first parameter, so the detector model has one (a model without parameters fails there).
* the tokenizer files, when the detector has a tokenizer (text input needs one; token ids do not).
* ``README.md``: a model card (settings, calibration, false-positive rate; never the keys).

:class:`LRDWMDetectorConfig` and :class:`LRDWMDetectorModel` are registered with ``AutoConfig`` and
``AutoModel`` by ``import hf_lrdwm`` (see :mod:`hf_lrdwm.pipelines`), so ``AutoConfig.from_pretrained``,
``AutoModel.from_pretrained`` and ``pipeline("watermark-detection", model=...)`` load a detector repo
without ``trust_remote_code``.

This module imports ``transformers`` only when one of its classes or functions is first used; the two
classes are built then (``hf_lrdwm.hub.LRDWMDetectorConfig`` works as a normal attribute).
"""

import contextlib
import logging
import math
import os
import tempfile
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    import torch

    from .detection import LRDWMDetector

__all__ = [
    "MODEL_TYPE",
    "LRDWMDetectorConfig",  # noqa: F822 - built on first use (module __getattr__)
    "LRDWMDetectorModel",  # noqa: F822
    "save_detector",
    "load_detector",
    "push_detector",
    "model_card",
]

logger = logging.getLogger(__name__)

MODEL_TYPE = "lrdwm-detector"
CONFIG_FILE = "config.json"
CARD_FILE = "README.md"
# What `load_detector` fetches from a Hub repo: the config and any tokenizer files, never weights.
_DOWNLOAD_PATTERNS = ["*.json", "*.txt", "*.model", "*.tiktoken"]
_TOKENIZER_FILES = ("tokenizer_config.json", "tokenizer.json")
_PUSH_HINT = (
    "a detector repo holds the watermark keys: push it with push_to_hub() (private by default), not "
    "save_pretrained(push_to_hub=True)"
)

# Watermark settings of the detector config besides the keys (which are never shown).
_WATERMARK_FIELDS = ("hash_scheme", "delta", "gamma", "sides", "confidence_sees_watermark")
_SECRET_FIELDS = ("key_left", "key_right")


# ----------------------------------------------------------------------------------------------
# The config and model classes (built on first use: they subclass transformers classes)
# ----------------------------------------------------------------------------------------------
def _build_config_class() -> type:
    from transformers.configuration_utils import PreTrainedConfig

    from .hashing import HASH_SCHEME

    class LRDWMDetectorConfig(PreTrainedConfig):
        """Configuration of an LR-DWM detector repo (``model_type="lrdwm-detector"``).

        Holds everything :class:`~hf_lrdwm.LRDWMDetector` needs to score token ids: the watermark's keys
        (``key_left``, ``key_right`` as ``0x``-hex strings, secret), ``delta``, ``gamma``, ``sides``,
        ``hash_scheme`` and ``confidence_sees_watermark`` (as in :class:`~hf_lrdwm.LRDWMConfig`), the
        detector settings ``fpr``, ``statistic``, ``min_tokens``, ``ignore_repeated_pairs``,
        ``ignore_token_ids`` and ``vocab_size``, and ``calibration`` (a
        :meth:`~hf_lrdwm.Calibration.to_dict`, or ``None``).

        Build it with :meth:`from_detector`; turn it back into a detector with :meth:`to_detector`. Its
        ``repr`` hides the keys; ``to_dict``/``to_json_string``/``config.json`` hold them.
        """

        model_type = MODEL_TYPE

        hash_scheme: str = HASH_SCHEME
        key_left: str | None = None
        key_right: str | None = None
        delta: float | int = 2.0
        gamma: float | int = 0.5
        sides: str = "both"
        confidence_sees_watermark: bool = True
        fpr: float | int = 0.01
        statistic: str = "binomial"
        min_tokens: int = 16
        ignore_repeated_pairs: bool = True
        ignore_token_ids: list[int] | None = None
        vocab_size: int | None = None
        calibration: dict | None = None
        hf_lrdwm_version: str | None = None

        @classmethod
        def from_detector(cls, detector: "LRDWMDetector") -> "LRDWMDetectorConfig":
            """The config of ``detector`` (keys, settings and calibration; not its tokenizer)."""
            from . import __version__
            from .detection import LRDWMDetector

            if not isinstance(detector, LRDWMDetector):
                raise TypeError(f"expected an LRDWMDetector, got {type(detector).__name__}")
            wm = detector.config.to_dict()
            cal = detector.calibration
            return cls(
                **{name: wm[name] for name in (*_SECRET_FIELDS, *_WATERMARK_FIELDS)},
                fpr=detector.fpr,
                statistic=detector.statistic,
                min_tokens=detector.min_tokens,
                ignore_repeated_pairs=detector.ignore_repeated_pairs,
                ignore_token_ids=list(detector.ignore_token_ids),
                vocab_size=detector.vocab_size,
                calibration=cal.to_dict() if cal is not None else None,
                hf_lrdwm_version=__version__,
                id2label={0: "human", 1: "watermarked"},
                label2id={"human": 0, "watermarked": 1},
                architectures=["LRDWMDetectorModel"],
            )

        def to_watermark_config(self) -> Any:
            """The :class:`~hf_lrdwm.LRDWMConfig` (keys and watermark settings) held by this config."""
            from .config import LRDWMConfig

            if self.key_left is None or self.key_right is None:
                raise ValueError("this detector config holds no keys (`key_left`/`key_right` are missing)")
            return LRDWMConfig(
                key_left=self.key_left,
                key_right=self.key_right,
                **{name: getattr(self, name) for name in _WATERMARK_FIELDS},
            )

        def to_detector(
            self,
            tokenizer: Any = None,
            *,
            device: "torch.device | str | None" = None,
            detector_class: type | None = None,
        ) -> "LRDWMDetector":
            """An :class:`~hf_lrdwm.LRDWMDetector` with these keys and settings.

            Args:
                tokenizer: for text input (optional; ``ignore_token_ids`` and ``vocab_size`` come from
                    the config either way, so a detector scores ids the same with or without it).
                device: where the hashing runs (default CPU).
                detector_class: ``LRDWMDetector`` or a subclass.
            """
            from .detection import Calibration, LRDWMDetector

            cls = LRDWMDetector if detector_class is None else detector_class
            cal = Calibration.from_dict(self.calibration) if self.calibration else None
            return cls(
                self.to_watermark_config(),
                tokenizer,
                fpr=self.fpr,
                statistic=self.statistic,
                min_tokens=self.min_tokens,
                ignore_repeated_pairs=self.ignore_repeated_pairs,
                ignore_token_ids=list(self.ignore_token_ids or []),
                vocab_size=self.vocab_size,
                calibration=cal,
                device=device,
            )

        def save_pretrained(
            self, save_directory: str | os.PathLike, push_to_hub: bool = False, **kwargs: Any
        ):
            """Write ``config.json`` (it holds the keys: created with mode ``0o600``)."""
            if push_to_hub:
                raise ValueError(_PUSH_HINT)
            path = Path(save_directory)
            if not path.exists() or path.is_dir():
                path.mkdir(parents=True, exist_ok=True)
                _private_file(path / CONFIG_FILE)
            out = super().save_pretrained(save_directory, **kwargs)
            _restrict(path / CONFIG_FILE)
            return out

        def push_to_hub(
            self,
            repo_id: str,
            *,
            private: bool = True,
            token: str | bool | None = None,
            commit_message: str = "Upload LR-DWM watermark detector",
        ) -> str:
            """Push a detector repo (without tokenizer) made from this config; private by default."""
            return push_detector(
                self.to_detector(), repo_id, private=private, token=token, commit_message=commit_message
            )

        def __repr__(self) -> str:
            data = self.to_diff_dict()
            for name in _SECRET_FIELDS:
                if data.get(name) is not None:
                    data[name] = "<hidden>"
            shown = ", ".join(f"{k}={data[k]!r}" for k in sorted(data) if k not in ("id2label", "label2id"))
            return f"{type(self).__name__}({shown})"

        __str__ = __repr__

    return LRDWMDetectorConfig


def _build_model_class() -> type:
    import torch
    from transformers.modeling_utils import PreTrainedModel

    detector_config_class = _config_class()

    class LRDWMDetectorModel(PreTrainedModel):
        """The model side of a detector repo: an :class:`LRDWMDetectorConfig` and one unused parameter.

        ``transformers.Pipeline`` needs a ``PreTrainedModel`` with a device; the detection itself is
        :class:`~hf_lrdwm.LRDWMDetector`'s. ``model(input_ids, attention_mask)`` scores a padded batch
        (the positions where ``attention_mask`` is 0 are dropped) and returns a
        :class:`~hf_lrdwm.DetectionOutput`.
        """

        config_class = detector_config_class
        base_model_prefix = "lrdwm_detector"
        main_input_name = "input_ids"
        _no_split_modules: list[str] = []

        def __init__(self, config: Any) -> None:
            super().__init__(config)
            # `Pipeline.__init__` reads `model.device` from the first parameter.
            self.device_anchor = torch.nn.Parameter(torch.zeros(1), requires_grad=False)
            self._detector = None
            self.post_init()

        def _init_weights(self, module: Any) -> None:
            if module is self:
                with torch.no_grad():
                    self.device_anchor.zero_()

        @classmethod
        def from_pretrained(cls, *args: Any, **kwargs: Any) -> "LRDWMDetectorModel":
            """``PreTrainedModel.from_pretrained`` without progress bars (the weights are one scalar)."""
            with _no_progress_bars():
                return super().from_pretrained(*args, **kwargs)

        def save_pretrained(self, save_directory: str | os.PathLike, *args: Any, **kwargs: Any) -> Any:
            """``PreTrainedModel.save_pretrained`` without progress bars; ``config.json`` (the keys) gets
            mode ``0o600``. :meth:`hf_lrdwm.LRDWMDetector.save_pretrained` adds the tokenizer and card."""
            if kwargs.get("push_to_hub"):
                raise ValueError(_PUSH_HINT)
            with _no_progress_bars():
                return super().save_pretrained(save_directory, *args, **kwargs)

        def push_to_hub(
            self,
            repo_id: str,
            *,
            private: bool = True,
            token: str | bool | None = None,
            commit_message: str = "Upload LR-DWM watermark detector",
        ) -> str:
            """Push the detector repo (without tokenizer) of this model; private by default."""
            return push_detector(
                self.config.to_detector(),
                repo_id,
                private=private,
                token=token,
                commit_message=commit_message,
            )

        @classmethod
        def from_detector(cls, detector: "LRDWMDetector") -> "LRDWMDetectorModel":
            """The model of a detector repo for ``detector`` (its tokenizer is not part of the model)."""
            return cls(cls.config_class.from_detector(detector))

        @property
        def detector(self) -> "LRDWMDetector":
            """An id-only :class:`~hf_lrdwm.LRDWMDetector` built from the config (cached)."""
            if self._detector is None:
                self._detector = self.config.to_detector()
            return self._detector

        def forward(
            self,
            input_ids: torch.Tensor,
            attention_mask: torch.Tensor | None = None,
            *,
            fpr: float | None = None,
        ) -> Any:
            """Score a batch of token ids.

            Args:
                input_ids: ``[B, T]`` (or ``[T]``) integer tensor.
                attention_mask: ``[B, T]``; positions with 0 (padding) are not part of the input.
                fpr: false-positive rate of the predictions (default: the config's).

            Returns:
                :class:`~hf_lrdwm.DetectionOutput` with B entries.
            """
            ids = input_ids.detach().cpu()
            if ids.dim() == 1:
                ids = ids.unsqueeze(0)
            if attention_mask is None:
                return self.detector(ids, fpr=fpr)
            mask = attention_mask.detach().cpu().reshape(ids.shape).bool()
            return self.detector([row[m].tolist() for row, m in zip(ids, mask, strict=True)], fpr=fpr)

    return LRDWMDetectorModel


@contextlib.contextmanager
def _no_progress_bars() -> Iterator[None]:
    from transformers.utils import logging as hf_logging

    enabled = hf_logging.is_progress_bar_enabled()
    if enabled:
        hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if enabled:
            hf_logging.enable_progress_bar()


_BUILDERS: dict[str, Callable[[], type]] = {
    "LRDWMDetectorConfig": _build_config_class,
    "LRDWMDetectorModel": _build_model_class,
}
_BUILD_LOCK = threading.RLock()


def _build(name: str) -> type:
    with _BUILD_LOCK:
        cls = globals().get(name)
        if cls is None:
            cls = _BUILDERS[name]()
            cls.__module__ = __name__
            cls.__qualname__ = name
            globals()[name] = cls
        return cls


def _config_class() -> type:
    return _build("LRDWMDetectorConfig")


def _model_class() -> type:
    return _build("LRDWMDetectorModel")


def __getattr__(name: str) -> Any:
    if name in _BUILDERS:
        return _build(name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


# ----------------------------------------------------------------------------------------------
# Save / load / push
# ----------------------------------------------------------------------------------------------
def _private_file(path: Path) -> None:
    """Create ``path`` empty with mode 0o600 (writers that open it with "w" keep the mode)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.close(fd)
    _restrict(path)


def _restrict(path: Path) -> None:
    try:
        os.chmod(path, 0o600)
    except OSError:  # pragma: no cover - e.g. some network file systems
        logger.debug("could not restrict permissions of %s", path)


def save_detector(
    detector: "LRDWMDetector", save_directory: str | os.PathLike, *, repo_id: str | None = None
) -> Path:
    """Write ``detector`` as a detector repo (see the module docstring); returns the directory.

    ``config.json`` holds the keys: it is created with mode ``0o600``. Keep the directory private.
    ``repo_id`` names the repo in the model card's title and usage example.
    """
    path = Path(save_directory)
    if path.exists() and not path.is_dir():
        raise NotADirectoryError(f"{str(path)!r} exists and is not a directory")
    path.mkdir(parents=True, exist_ok=True)
    _model_class().from_detector(detector).save_pretrained(path)  # config.json is made with mode 0o600
    tokenizer = detector.tokenizer
    if tokenizer is not None:
        if hasattr(tokenizer, "save_pretrained"):
            tokenizer.save_pretrained(path)
        else:
            logger.warning(
                "the detector's tokenizer (%s) has no save_pretrained: the repo is saved without it, and "
                "text input will need a tokenizer passed at load time",
                type(tokenizer).__name__,
            )
    (path / CARD_FILE).write_text(model_card(detector, repo_id=repo_id), encoding="utf-8")
    return path


def _read_config(path: Path) -> Any:
    import json

    file = path / CONFIG_FILE
    if not file.is_file():
        raise FileNotFoundError(f"no {CONFIG_FILE} in {str(path)!r}: not a detector repo")
    try:
        model_type = json.loads(file.read_text(encoding="utf-8")).get("model_type")
    except (json.JSONDecodeError, AttributeError):
        raise ValueError(f"{str(file)!r} is not a valid config.json") from None
    if model_type != MODEL_TYPE:
        raise ValueError(
            f"{str(path)!r} is not an hf_lrdwm detector repo (config.json has model_type={model_type!r}, "
            f"expected {MODEL_TYPE!r})"
        )
    return _config_class().from_pretrained(str(path))


def load_detector(
    pretrained: str | os.PathLike,
    *,
    tokenizer: Any = None,
    token: str | bool | None = None,
    revision: str | None = None,
    cache_dir: str | os.PathLike | None = None,
    device: "torch.device | str | None" = None,
    detector_class: type | None = None,
) -> "LRDWMDetector":
    """Load a detector from a detector repo directory or a Hub repo id.

    Args:
        pretrained: a directory written by :func:`save_detector`, or a Hub repo id.
        tokenizer: use this tokenizer instead of the repo's (default: the repo's, if it has one).
        token, revision, cache_dir: Hub options (only the config and tokenizer files are downloaded).
        device: where the hashing runs (default CPU).
        detector_class: ``LRDWMDetector`` or a subclass.
    """
    path = Path(pretrained)
    if not path.is_dir():
        from huggingface_hub import snapshot_download

        path = Path(
            snapshot_download(
                str(pretrained),
                token=token,
                revision=revision,
                cache_dir=cache_dir,
                allow_patterns=_DOWNLOAD_PATTERNS,
            )
        )
    config = _read_config(path)
    if tokenizer is None and any((path / name).is_file() for name in _TOKENIZER_FILES):
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(str(path))
    return config.to_detector(tokenizer, device=device, detector_class=detector_class)


def push_detector(
    detector: "LRDWMDetector",
    repo_id: str,
    *,
    private: bool = True,
    token: str | bool | None = None,
    commit_message: str = "Upload LR-DWM watermark detector",
) -> str:
    """Upload ``detector`` as a detector repo to the Hub, private by default (it holds the keys).

    ``private=False`` logs a warning. An existing *public* repo is refused while ``private=True`` (the
    Hub keeps an existing repo's visibility). Returns the URL of the commit.
    """
    from huggingface_hub import HfApi

    if not private:
        logger.warning(
            "pushing a watermark detector to a PUBLIC repo: anyone can read its keys and forge or strip "
            "the watermark"
        )
    api = HfApi(token=token)
    api.create_repo(repo_id, private=private, exist_ok=True)
    if private:
        visibility = getattr(api.repo_info(repo_id), "private", None)
        if visibility is False:
            raise ValueError(
                f"the Hub repo {repo_id!r} exists and is public: refusing to upload the watermark keys to it "
                "(make it private first, or pass private=False if it must be public)"
            )
    with tempfile.TemporaryDirectory() as tmp:
        save_detector(detector, tmp, repo_id=repo_id)
        info = api.upload_folder(folder_path=tmp, repo_id=repo_id, commit_message=commit_message)
    return str(getattr(info, "commit_url", info))


# ----------------------------------------------------------------------------------------------
# Model card
# ----------------------------------------------------------------------------------------------
def _fmt(value: float) -> str:
    return "n/a" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{value:.6g}"


def model_card(detector: "LRDWMDetector", repo_id: str | None = None) -> str:
    """The README.md of a detector repo: what it detects, its settings, calibration and FPR (no keys)."""
    from . import __version__

    cfg = detector.config
    name = repo_id or "path/to/this/repo"
    cal = detector.calibration
    if detector.statistic == "paper":
        test = "the LR-DWM paper's z-score with a normal p-value"
    else:
        test = "an exact one-sided binomial test of the green events against Binomial(n, gamma)"
    if cal is None:
        calibration = (
            "Not calibrated: the false-positive rate is the nominal one, which holds when the green events "
            "of a human text are independent draws (`LRDWMDetector.key_health` checks a key on a corpus)."
        )
    else:
        from .detection import _calibrated_threshold

        same_fpr = math.isclose(detector.fpr, cal.fpr)
        used = cal.threshold if same_fpr else _calibrated_threshold(cal, detector.fpr)
        calibration = "\n".join(
            [
                f"Calibrated on {cal.num_texts} human texts (`{cal.statistic}`, ignore_repeated_pairs="
                f"{cal.ignore_repeated_pairs}):",
                "",
                f"- null mean green rate per event: {_fmt(cal.null_mean)}",
                f"- null variance per event: {_fmt(cal.null_var)} (sigma^2 per token: {_fmt(cal.sigma2)})",
                f"- z threshold at FPR {_fmt(cal.fpr)}: {_fmt(cal.threshold)} (95% interval "
                f"{_fmt(cal.threshold_ci[0])} .. {_fmt(cal.threshold_ci[1])})",
                f"- z threshold used at the detector's FPR {_fmt(detector.fpr)}: {_fmt(used)}"
                + ("" if same_fpr else " (the normal quantile of the calibrated z)"),
            ]
        )
    ignored = detector.ignore_token_ids
    ignored_text = ", ".join(map(str, ignored[:20])) + (" ..." if len(ignored) > 20 else "")
    if detector.tokenizer is not None:
        text_input, example = "text or token ids", 'detect(["some text", "another text"], fpr=0.001)'
    else:
        text_input, example = "token ids (no tokenizer saved)", "detect([[17, 402, 9, 311], [5, 77, 8]])"
    lines = [
        "---",
        "# PRIVATE: this repository holds the watermark keys. Keep it private; anyone who can read",
        "# config.json can detect, forge or strip the watermark.",
        "library_name: hf_lrdwm",
        "tags:",
        "- watermark-detection",
        "- hf_lrdwm",
        "- lr-dwm",
        "- diffusion-language-model",
        "---",
        "",
        f"# LR-DWM watermark detector{'' if repo_id is None else f': {repo_id}'}",
        "",
        "> **Private repository.** `config.json` holds the watermark's secret keys. Whoever can read it can "
        "detect, forge or remove the watermark: keep this repo private and share it only with the people "
        "allowed to detect.",
        "",
        "This repo detects the LR-DWM watermark (left-right watermarking for diffusion language models) "
        f"made by one key pair, in {text_input}. Each input gets a z-score, a p-value and a label "
        '("watermarked" / "human").',
        "",
        "## Usage",
        "",
        "```python",
        "import hf_lrdwm  # registers the task and the detector classes",
        "from transformers import pipeline",
        "",
        f'detect = pipeline("watermark-detection", model="{name}", device="cpu")',
        example,
        "# {'label': ..., 'score': ..., 'z_score': ..., 'p_value': ..., 'num_tokens_scored': ...}",
        "```",
        "",
        "or `hf_lrdwm.LRDWMDetector.from_pretrained(...)`. No `trust_remote_code` is needed.",
        "",
        "## Watermark",
        "",
        f"- hash scheme: `{cfg.hash_scheme}`",
        f"- sides: `{cfg.sides}`",
        f"- gamma (green fraction): {_fmt(cfg.gamma)}",
        f"- delta (generation bias): {_fmt(cfg.delta)}",
        "",
        "## Detector",
        "",
        f"- false-positive rate of the label: {_fmt(detector.fpr)} (can be changed per call with `fpr=`)",
        f"- test: {test} (`statistic={detector.statistic!r}`)",
        f"- repeated (context, token) pairs counted once: {detector.ignore_repeated_pairs}",
        f"- inputs with fewer than {detector.min_tokens} scored tokens are labelled human, with a reason",
        f"- vocabulary size: {detector.vocab_size if detector.vocab_size is not None else 'not set'}",
        f"- ignored token ids: {ignored_text or 'none'}",
        "",
        "## False-positive rate and calibration",
        "",
        calibration,
        "",
        "A text is labelled watermarked when its z-score exceeds the threshold (calibrated detectors, "
        "paper statistic) or its p-value is at most the FPR (binomial test). `score` is 1 - p-value.",
        "",
        f"Made with hf_lrdwm {__version__}.",
        "",
    ]
    return "\n".join(lines)
