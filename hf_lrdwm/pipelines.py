"""The ``"watermark-detection"`` pipeline, and the registration of hf_lrdwm's classes with transformers.

``import hf_lrdwm`` makes these work with no ``trust_remote_code``::

    pipeline("watermark-detection", model=<detector repo dir or Hub id>)
    AutoConfig.from_pretrained(<detector repo>)   # -> hf_lrdwm.hub.LRDWMDetectorConfig
    AutoModel.from_pretrained(<detector repo>)    # -> hf_lrdwm.hub.LRDWMDetectorModel

Registering needs ``transformers.pipelines`` (and so most of transformers), which would make ``import
hf_lrdwm`` seconds slower. So the registration runs when transformers loads the module it extends: a
post-import hook (a ``sys.meta_path`` finder) registers the task right after ``transformers.pipelines``
has been executed, the config right after ``transformers.models.auto.configuration_auto``, and the model
right after ``transformers.models.auto.modeling_auto`` (or at once, for modules already imported). No
code can see a transformers registry before hf_lrdwm's entries are in it. :func:`register` does it all
eagerly.

:class:`WatermarkDetectionPipeline` is built on first use (it subclasses ``transformers.Pipeline``);
``hf_lrdwm.pipelines.WatermarkDetectionPipeline`` works as a normal attribute.
"""

from __future__ import annotations

import logging
import sys
import threading
from collections.abc import Callable
from types import ModuleType
from typing import Any

__all__ = ["TASK", "WatermarkDetectionPipeline", "register"]  # noqa: F822 - the class is built on first use

logger = logging.getLogger(__name__)

TASK = "watermark-detection"
_LABELS = ("human", "watermarked")
_DEFAULT_BATCH_SIZE = 64


# ----------------------------------------------------------------------------------------------
# The pipeline class (built on first use)
# ----------------------------------------------------------------------------------------------
def _build_pipeline_class() -> type:
    import collections.abc
    import math

    import numpy as np
    import torch
    from torch.utils.data import DataLoader
    from transformers.pipelines import Pipeline
    from transformers.pipelines.pt_utils import PipelineDataset, PipelineIterator

    from .detection import _check_fpr
    from .hub import _model_class

    model_class = _model_class()

    def _as_ids(item: Any, n: int | None = None) -> np.ndarray:
        """One input's token ids as a 1-D int64 array (or a TypeError naming the input)."""
        where = "" if n is None else f" {n}"
        if isinstance(item, torch.Tensor):
            item = item.detach().cpu().numpy()
        if isinstance(item, np.ndarray):
            if item.ndim != 1 or item.dtype.kind not in "iu":
                raise TypeError(f"input{where} must be a 1-D integer array of token ids")
            if item.dtype.kind == "u" and item.size and int(item.max()) >= 1 << 63:
                raise ValueError(f"token id {int(item.max())} is too large to be a token id")
            return item.astype(np.int64, copy=False)
        if isinstance(item, (list, tuple)) and all(
            isinstance(x, (int, np.integer)) and not isinstance(x, bool) for x in item
        ):
            try:
                return np.fromiter((int(x) for x in item), dtype=np.int64, count=len(item))
            except OverflowError:
                raise ValueError("token ids must fit in int64") from None
        raise TypeError(
            f"input{where} is a {type(item).__name__}; the watermark-detection pipeline takes a str, a list "
            "of token ids, or a list of those"
        )

    def _list_collate(items: list[dict[str, Any]]) -> dict[str, list[Any]]:
        return {key: [item[key] for item in items] for key in items[0]}

    def _single_collate(items: list[dict[str, Any]]) -> dict[str, Any]:
        return items[0]

    class WatermarkDetectionPipeline(Pipeline):
        """Detect the LR-DWM watermark (task ``"watermark-detection"``) with a detector repo.

        Load it with ``pipeline("watermark-detection", model=<detector repo dir or Hub id>)`` after
        ``import hf_lrdwm`` (no ``trust_remote_code``); a repo is written by
        :meth:`hf_lrdwm.LRDWMDetector.save_pretrained`. An in-memory detector works too::

            model = hf_lrdwm.hub.LRDWMDetectorModel.from_detector(det)
            pipeline("watermark-detection", model=model, tokenizer=det.tokenizer)

        Inputs:
            a ``str``; a list of ids (``list[int]`` or a 1-D integer tensor/array); or a list of those (a
            batch: ``list[str]``, ``list[list[int]]``, a 2-D integer tensor/array, or a generator or
            dataset, streamed). Text needs the repo's tokenizer; it is tokenized without special tokens,
            as :class:`~hf_lrdwm.LRDWMDetector` does.

        Output:
            for one input a dict, for a list a list of dicts (like ``text-classification``):

            - ``label``: ``"watermarked"`` or ``"human"`` (at the false-positive rate ``fpr``);
            - ``score``: ``1 - p_value``, the confidence that the input is watermarked (whatever the label);
            - ``z_score`` (``None`` when nothing could be scored), ``p_value``, ``num_tokens_scored``;
            - ``reason``: only when the input could not be judged (empty, fewer than ``min_tokens`` scored
              tokens); its label is then ``"human"``;
            - ``token_scores`` (with ``return_token_scores=True``): a list of ``(token, score)`` pairs, one
              per token, for highlighting; ``score`` is ``m_L + m_R - gamma * neighbours`` (positive:
              green) or ``None`` for unscored tokens. Tokens are ``tokenizer.convert_ids_to_tokens`` strings,
              or ``str(id)`` without a tokenizer.

        Options (at construction or per call):
            fpr: false-positive rate of ``label`` (default: the detector's, from the repo).
            return_token_scores: add ``token_scores`` (default ``False``).
            batch_size: inputs scored together (default 64; there is no padding, so any size is safe).

        Long inputs:
            an input is always scored whole: detection has no length limit, so text longer than the
            tokenizer's ``model_max_length`` is neither truncated nor split (and raises no length
            warning). To score a part, pass that part.
        """

        _load_tokenizer = None  # optional: a repo without tokenizer takes token ids
        _load_processor = False
        _load_image_processor = False
        _load_feature_extractor = False
        _load_video_processor = False

        def __init__(self, model: Any, tokenizer: Any = None, **kwargs: Any) -> None:
            if not isinstance(model, model_class):
                raise TypeError(
                    "the watermark-detection pipeline needs an hf_lrdwm detector model (a repo saved with "
                    f"LRDWMDetector.save_pretrained), got {type(model).__name__}"
                )
            if kwargs.get("batch_size") is None:
                kwargs["batch_size"] = _DEFAULT_BATCH_SIZE
            super().__init__(model, tokenizer=tokenizer, **kwargs)
            self.detector = model.config.to_detector(self.tokenizer, device=self.device)

        # -- Saving: a detector repo, never custom pipeline code ---------------------------------
        def save_pretrained(self, save_directory: Any, **kwargs: Any) -> Any:
            """Write the detector repo (as :meth:`hf_lrdwm.LRDWMDetector.save_pretrained`).

            Unlike ``Pipeline.save_pretrained`` this writes no ``custom_pipelines`` entry nor code, which
            would make loading the repo ask for ``trust_remote_code``. Other keyword arguments are ignored.
            """
            from .hub import save_detector

            return save_detector(self.detector, save_directory)

        def push_to_hub(
            self,
            repo_id: str,
            *,
            private: bool = True,
            token: str | bool | None = None,
            commit_message: str = "Upload LR-DWM watermark detector",
        ) -> str:
            """Push the detector repo, private by default (see :meth:`hf_lrdwm.LRDWMDetector.push_to_hub`)."""
            from .hub import push_detector

            return push_detector(
                self.detector, repo_id, private=private, token=token, commit_message=commit_message
            )

        # -- Pipeline API ---------------------------------------------------------------------
        def _sanitize_parameters(
            self, fpr: float | None = None, return_token_scores: bool | None = None, **kwargs: Any
        ) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
            if kwargs:
                raise TypeError(
                    f"unknown watermark-detection options {sorted(kwargs)}; supported: fpr, "
                    "return_token_scores, batch_size"
                )
            forward: dict[str, Any] = {}
            post: dict[str, Any] = {}
            if fpr is not None:
                forward["fpr"] = _check_fpr(fpr)
            if return_token_scores is not None:
                post["return_token_scores"] = bool(return_token_scores)
            return {}, forward, post

        def __call__(self, inputs: Any, **kwargs: Any) -> Any:
            """Score one input (returns a dict) or a batch (returns a list of dicts); see the class doc."""
            if isinstance(inputs, str):
                return super().__call__(inputs, **kwargs)
            if isinstance(inputs, (torch.Tensor, np.ndarray)):
                if inputs.ndim == 1:
                    return super().__call__(_as_ids(inputs), **kwargs)
                if inputs.ndim == 2:
                    return super().__call__([_as_ids(row, n) for n, row in enumerate(inputs)], **kwargs)
                raise ValueError(f"a tensor of token ids must be 1-D or 2-D, got shape {tuple(inputs.shape)}")
            if isinstance(inputs, (list, tuple)):
                if len(inputs) == 0:
                    return []
                if all(isinstance(x, (int, np.integer)) and not isinstance(x, bool) for x in inputs):
                    return super().__call__(_as_ids(inputs), **kwargs)  # one sequence of ids
                return super().__call__(list(inputs), **kwargs)
            return super().__call__(inputs, **kwargs)  # a generator or a dataset: streamed

        def preprocess(self, inputs: Any) -> dict[str, Any]:
            if isinstance(inputs, str):
                if self.tokenizer is None:
                    raise ValueError(
                        "text input needs a tokenizer: this detector repo has none (pass token ids, or "
                        "`tokenizer=` to pipeline())"
                    )
                # Whole text, no special tokens (as LRDWMDetector tokenizes); verbose=False: no warning
                # for texts longer than model_max_length, which are scored whole.
                ids = self.tokenizer(inputs, add_special_tokens=False, verbose=False)["input_ids"]
                return {"input_ids": np.asarray(ids, dtype=np.int64).reshape(-1)}
            return {"input_ids": _as_ids(inputs)}

        def _forward(self, model_inputs: dict[str, Any], fpr: float | None = None) -> dict[str, Any]:
            ids = model_inputs["input_ids"]
            batched = isinstance(ids, list)
            seqs = ids if batched else [ids]
            out = self.detector([s.tolist() for s in seqs], fpr=fpr)
            rows = [
                {
                    "prediction": bool(out.prediction[i]),
                    "z_score": float(out.z_score[i]),
                    "p_value": float(out.p_value[i]),
                    "num_tokens_scored": int(out.num_tokens_scored[i]),
                    "reason": out.reason[i],
                    "token_scores": out.token_scores[i],
                }
                for i in range(len(out))
            ]
            return {"row": rows if batched else rows[0], "input_ids": ids}

        def postprocess(
            self, model_outputs: dict[str, Any], return_token_scores: bool = False
        ) -> dict[str, Any]:
            row = model_outputs["row"]
            z = row["z_score"]
            result: dict[str, Any] = {
                "label": _LABELS[int(row["prediction"])],
                "score": 1.0 - row["p_value"],
                "z_score": None if math.isnan(z) else z,
                "p_value": row["p_value"],
                "num_tokens_scored": row["num_tokens_scored"],
            }
            if row["reason"] is not None:
                result["reason"] = row["reason"]
            if return_token_scores:
                ids = np.asarray(model_outputs["input_ids"]).reshape(-1).tolist()
                if self.tokenizer is not None:
                    tokens = self.tokenizer.convert_ids_to_tokens(ids)
                else:
                    tokens = [str(i) for i in ids]
                result["token_scores"] = [
                    (tok, None if math.isnan(s) else float(s))
                    for tok, s in zip(tokens, row["token_scores"].tolist(), strict=True)
                ]
            return result

        def get_iterator(
            self,
            inputs: Any,
            num_workers: int,
            batch_size: int,
            preprocess_params: dict[str, Any],
            forward_params: dict[str, Any],
            postprocess_params: dict[str, Any],
        ) -> Any:
            # As Pipeline.get_iterator, but a batch is a list of id arrays scored in one detector call
            # (no padding, so no pad token is needed).
            if isinstance(inputs, collections.abc.Sized):
                dataset = PipelineDataset(inputs, self.preprocess, preprocess_params)
            else:
                if num_workers > 1:
                    logger.warning("an iterable input is read with num_workers=1")
                    num_workers = 1
                dataset = PipelineIterator(inputs, self.preprocess, preprocess_params)
            collate = _single_collate if batch_size == 1 else _list_collate
            loader = DataLoader(dataset, num_workers=num_workers, batch_size=batch_size, collate_fn=collate)
            model_iterator = PipelineIterator(
                loader, self.forward, forward_params, loader_batch_size=batch_size
            )
            return PipelineIterator(model_iterator, self.postprocess, postprocess_params)

    return WatermarkDetectionPipeline


_CLASS_LOCK = threading.RLock()


def _pipeline_class() -> type:
    with _CLASS_LOCK:
        cls = globals().get("WatermarkDetectionPipeline")
        if cls is None:
            cls = _build_pipeline_class()
            cls.__module__ = __name__
            cls.__qualname__ = "WatermarkDetectionPipeline"
            globals()["WatermarkDetectionPipeline"] = cls
        return cls


def __getattr__(name: str) -> Any:
    if name == "WatermarkDetectionPipeline":
        return _pipeline_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


# ----------------------------------------------------------------------------------------------
# Registration
# ----------------------------------------------------------------------------------------------
def _register_config(module: ModuleType) -> None:
    from .hub import MODEL_TYPE, _config_class

    module.AutoConfig.register(MODEL_TYPE, _config_class(), exist_ok=True)


def _register_model(module: ModuleType) -> None:
    from .hub import _config_class, _model_class

    module.AutoModel.register(_config_class(), _model_class(), exist_ok=True)


def _register_pipeline(module: ModuleType) -> None:
    from .hub import _model_class

    cls = _pipeline_class()
    current = module.PIPELINE_REGISTRY.supported_tasks.get(TASK)
    if current is None or current.get("impl") is not cls:
        module.PIPELINE_REGISTRY.register_pipeline(
            TASK, pipeline_class=cls, pt_model=_model_class(), type="text"
        )


_HOOKS: dict[str, Callable[[ModuleType], None]] = {
    "transformers.models.auto.configuration_auto": _register_config,
    "transformers.models.auto.modeling_auto": _register_model,
    "transformers.pipelines": _register_pipeline,
}


def register() -> None:
    """Register the task, ``AutoConfig`` and ``AutoModel`` entries now (idempotent; imports transformers).

    ``import hf_lrdwm`` already arranges this; call it only to do the work eagerly.
    """
    import importlib

    for name, hook in _HOOKS.items():
        hook(importlib.import_module(name))


class _CallbackLoader:
    """Wraps a module's loader: runs ``callback(module)`` right after the module has been executed."""

    def __init__(self, loader: Any, callback: Callable[[ModuleType], None]) -> None:
        self.loader = loader
        self.callback = callback

    def __getattr__(self, name: str) -> Any:
        return getattr(self.loader, name)

    def create_module(self, spec: Any) -> ModuleType | None:
        return self.loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        # Put the real loader back first: nothing outside this import sees the wrapper.
        if getattr(module, "__spec__", None) is not None:
            module.__spec__.loader = self.loader
        module.__loader__ = self.loader
        self.loader.exec_module(module)
        self.callback(module)


class _PostImportFinder:
    """A ``sys.meta_path`` finder that only wraps the loaders of the watched modules."""

    def __init__(self) -> None:
        self.callbacks: dict[str, Callable[[ModuleType], None]] = {}
        self.lock = threading.RLock()

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        if fullname not in self.callbacks:
            return None
        for finder in sys.meta_path:
            if finder is self or isinstance(finder, _PostImportFinder):
                continue
            find_spec = getattr(finder, "find_spec", None)
            if find_spec is None:
                continue
            spec = find_spec(fullname, path, target)
            if spec is not None:
                break
        else:
            return None
        if spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        spec.loader = _CallbackLoader(spec.loader, lambda module: self.fire(fullname, module))
        return spec

    def fire(self, fullname: str, module: ModuleType) -> None:
        with self.lock:
            callback = self.callbacks.pop(fullname, None)
            if not self.callbacks and self in sys.meta_path:
                sys.meta_path.remove(self)
        if callback is not None:
            _run_hook(callback, module)


def _run_hook(callback: Callable[[ModuleType], None], module: ModuleType) -> None:
    try:
        callback(module)
    except Exception:  # never break the user's import of transformers
        logger.warning(
            "hf_lrdwm could not register its transformers classes with %s (call "
            "hf_lrdwm.pipelines.register() to see the error)",
            module.__name__,
            exc_info=True,
        )


def _install_hooks() -> None:
    finder = next((f for f in sys.meta_path if isinstance(f, _PostImportFinder)), None)
    for name, hook in _HOOKS.items():
        module = sys.modules.get(name)
        if module is not None:
            if not getattr(getattr(module, "__spec__", None), "_initializing", False):
                _run_hook(hook, module)
            # else: it is being imported right now and imports hf_lrdwm; register() is then needed
            continue
        if finder is None:
            finder = _PostImportFinder()
            sys.meta_path.insert(0, finder)
        with finder.lock:
            finder.callbacks[name] = hook
    if finder is not None and not finder.callbacks and finder in sys.meta_path:
        sys.meta_path.remove(finder)


_install_hooks()
