"""``patch(model)``: the ``watermark=`` argument on models loaded with ``trust_remote_code=True``.

- Dream family (``config.model_type == "Dream"``: Dream-v0, DiffuCoder, Dream-Coder): the model already
  has ``diffusion_generate`` from its remote ``DreamGenerationMixin``. It is wrapped so that it accepts
  ``watermark=``; the watermark goes in through Dream's ``generation_logits_hook_func`` (after the
  logits shift), composed with the user's own hook, which runs first. Everything else is passed to the
  remote method unchanged, and ``watermark=None`` is a plain pass-through.
- LLaDA family (``config.model_type == "llada"``): the remote model has no generation method; our
  faithful LLaDA sampler is attached as ``diffusion_generate`` (arguments of LLaDA's official
  ``generate()``), with the mask / EOS ids taken from the model's config.
- Models that already carry our ``diffusion_generate`` (``hf_lrdwm.load_model`` / an earlier
  ``patch``) are returned unchanged.

Limitation (Dream remote code): the remote loop computes its remasking confidence from what the logits
hook returns, so ``LRDWMConfig(confidence_sees_watermark=False)`` cannot be honoured there (except with
``alg="origin"``, which has no confidence) and raises ``ValueError``; the native path
(``hf_lrdwm.load_model``) supports it.
"""

from __future__ import annotations

import functools
import logging
import types
from typing import Any

from ..config import LRDWMConfig
from ..processor import LRDWMLogitsProcessor
from .common import resolve_watermark

logger = logging.getLogger(__name__)

__all__ = ["patch", "is_patched"]

_MARK = "_hf_lrdwm_patched"
_FAMILY = "_hf_lrdwm_family"


def _model_type(model: Any) -> str | None:
    config = getattr(model, "config", None)
    value = getattr(config, "model_type", None)
    return value if isinstance(value, str) else None


def is_patched(model: Any) -> bool:
    """Whether ``model.diffusion_generate`` already comes from hf_lrdwm (native or patched)."""
    return bool(getattr(model, _MARK, False)) or getattr(model, _FAMILY, None) is not None


def patch(model: Any) -> Any:
    """Give a remote-code LLaDA / Dream model a ``diffusion_generate(..., watermark=...)`` and return it.

    Idempotent: patching twice changes nothing. Raises ``TypeError`` for a model it does not know
    (the message names its ``model_type``) and ``ValueError`` for a known family missing what it needs.

    Example (``trust_remote_code`` models need the Hub; shown, not run)::

        from transformers import AutoModel
        model = AutoModel.from_pretrained("Dream-org/Dream-v0-Instruct-7B", trust_remote_code=True)
        model = hf_lrdwm.patch(model)
        out = model.diffusion_generate(ids, max_new_tokens=300, steps=300, temperature=0.2, top_p=0.95,
                                       alg="entropy", alg_temp=0.0, watermark=LRDWMConfig(key="secret"))
    """
    if is_patched(model):
        return model
    model_type = _model_type(model)
    family = model_type.lower() if model_type is not None else None
    if family in ("dream", "llada") and callable(getattr(model, "modules", None)):
        # A model loaded with plain AutoModel(trust_remote_code=True) on transformers 5 misses these
        # fixes (e.g. rotary buffers left uninitialised: the model runs but produces noise).
        from ..models.remote import apply_model_shims

        applied = apply_model_shims(model)
        if applied:
            logger.info("hf_lrdwm.patch applied transformers 5 fixes: %s", ", ".join(applied))
    if family == "dream":
        return _patch_dream(model)
    if family == "llada":
        return _patch_llada(model)
    raise TypeError(
        f"hf_lrdwm.patch() does not know models of type {model_type!r} "
        f"({type(model).__name__}); supported: Dream-family remote code (model_type 'Dream') and "
        "LLaDA remote code (model_type 'llada'). For other checkpoints try hf_lrdwm.load_model()."
    )


# ----------------------------------------------------------------------------------------------
# Dream
# ----------------------------------------------------------------------------------------------
def _first_set(*values: Any) -> Any:
    for value in values:
        if value is not None:
            return value
    return None


def _patch_dream(model: Any) -> Any:
    original = getattr(model, "diffusion_generate", None)
    if not callable(original):
        raise ValueError(
            f"{type(model).__name__} has model_type 'Dream' but no `diffusion_generate` method: load it "
            "with trust_remote_code=True (its DreamGenerationMixin provides the method) or use "
            "hf_lrdwm.load_model()"
        )

    # Bound to the model (types.MethodType) so that copy.deepcopy(model) rebinds it to the copy; the
    # remote method is reached through its class function when it is an ordinary bound method.
    func = getattr(original, "__func__", None) if getattr(original, "__self__", None) is model else None

    def diffusion_generate(
        self: Any,
        inputs: Any = None,
        generation_config: Any = None,
        *,
        watermark: LRDWMConfig | LRDWMLogitsProcessor | None = None,
        **kwargs: Any,
    ) -> Any:
        """Dream's remote ``diffusion_generate`` (same arguments) plus ``watermark=``.

        ``watermark``: ``None`` (the remote method, called unchanged), an ``LRDWMConfig`` or an
        ``LRDWMLogitsProcessor``; it is applied inside ``generation_logits_hook_func`` after the user's
        own hook. The remote method stays reachable as ``model._hf_lrdwm_original_diffusion_generate``.
        """
        remote = functools.partial(func, self) if func is not None else original
        if watermark is None:
            return remote(inputs, generation_config, **kwargs)
        if not isinstance(watermark, (LRDWMConfig, LRDWMLogitsProcessor)):
            raise TypeError(
                "`watermark` must be an LRDWMConfig, an LRDWMLogitsProcessor or None, "
                f"got {type(watermark).__name__}"
            )
        wm_config = watermark.config if isinstance(watermark, LRDWMLogitsProcessor) else watermark
        model_gen = getattr(self, "generation_config", None)
        model_cfg = getattr(self, "config", None)
        alg = _first_set(
            kwargs.get("alg"), getattr(generation_config, "alg", None), getattr(model_gen, "alg", None)
        )
        if not wm_config.confidence_sees_watermark and (alg or "origin") != "origin":
            raise ValueError(
                "confidence_sees_watermark=False cannot be honoured by Dream's remote-code sampler (its "
                "confidence is computed from the hooked logits); load the model with "
                "hf_lrdwm.load_model() to use it, or keep confidence_sees_watermark=True"
            )
        mask_id = _first_set(
            kwargs.get("mask_token_id"),
            getattr(generation_config, "mask_token_id", None),
            getattr(model_gen, "mask_token_id", None),
            getattr(model_cfg, "mask_token_id", None),
        )
        if mask_id is None:
            raise ValueError(
                "cannot watermark: no `mask_token_id` in the arguments, the generation config or the "
                "model's config (Dream-7B uses 151666)"
            )
        user_hook = kwargs.pop("generation_logits_hook_func", None)
        state: dict[str, LRDWMLogitsProcessor] = {}

        def logits_hook(step: int, x: Any, logits: Any) -> Any:
            if user_hook is not None:
                logits = user_hook(step, x, logits)
            proc = state.get("proc")
            if proc is None:
                proc = resolve_watermark(
                    watermark, vocab_size=logits.shape[-1], mask_token_id=int(mask_id), device=logits.device
                )
                state["proc"] = proc
            return proc(x, logits)

        try:
            return remote(inputs, generation_config, generation_logits_hook_func=logits_hook, **kwargs)
        finally:
            if "proc" in state:
                state["proc"].reset()

    model._hf_lrdwm_original_diffusion_generate = original
    model.diffusion_generate = types.MethodType(diffusion_generate, model)
    setattr(model, _MARK, "dream-remote")
    setattr(model, _FAMILY, "dream")
    return model


# ----------------------------------------------------------------------------------------------
# LLaDA
# ----------------------------------------------------------------------------------------------
def _patch_llada(model: Any) -> Any:
    from . import attach_diffusion_generate

    config = getattr(model, "config", None)
    mask_id = getattr(config, "mask_token_id", None)
    if mask_id is None:
        raise ValueError(
            f"{type(model).__name__} (model_type 'llada') has no `mask_token_id` in its config; set "
            "model.config.mask_token_id (126336 for LLaDA-8B) and patch again"
        )
    if config is not None and not hasattr(config, "use_cache"):
        # LLaDA's remote config class drops `use_cache` under transformers 5.x and its forward then fails
        # with AttributeError; the diffusion loop never uses a cache.
        config.use_cache = False
    # The sampler reads `mask_token_id` / `eos_token_id` (and `eot_token_id`) from `model.config`
    # whenever the call does not pass them.
    attach_diffusion_generate(model, "llada")
    setattr(model, _MARK, "llada-remote")
    return model
