"""Dream's official diffusion sampling loop, reproduced faithfully, with the LR-DWM watermark.

:func:`dream_generate` behaves like ``model.diffusion_generate`` of Dream's remote code (the
``DreamGenerationMixin`` shared by Dream-v0, DiffuCoder and Dream-Coder): same arguments, same defaults,
same random draws in the same order. With ``watermark=None`` it *is* that loop; with a watermark the
LR-DWM bias is added to the logits after Dream's one-position shift and after the user's logits hook,
before temperature, top-p / top-k, sampling and the remasking confidence.

See :func:`dream_generate` for an example.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, fields
from typing import Any

import torch
import torch.nn.functional as F

from ..config import LRDWMConfig
from ..processor import LRDWMLogitsProcessor
from .common import DiffusionGenerationOutput, resolve_watermark

__all__ = ["DreamSamplingConfig", "dream_generate", "DREAM_ALGS"]

logger = logging.getLogger(__name__)

DREAM_ALGS = ("origin", "maskgit_plus", "topk_margin", "entropy")
_DEFAULT_MAX_LENGTH = 20  # Dream's DreamGenerationConfig default (extended by the prompt length)
_TOKEN_FIELDS = ("mask_token_id", "pad_token_id", "bos_token_id", "eos_token_id")


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(float(value))


@dataclass
class DreamSamplingConfig:
    """The generation arguments of Dream's ``diffusion_generate``, with Dream's defaults.

    Attributes:
        temperature: ``0`` is greedy; ``> 0`` divides the logits and samples from the categorical.
        top_p: nucleus filter (``None`` or ``1`` = off).
        top_k: top-k filter (``None`` = off; ``0`` is accepted as off, where Dream's code would fail).
        eps: last time step; the schedule is ``linspace(1, eps, steps + 1)``.
        steps: number of denoising steps (one model forward each).
        alg: ``"origin"`` (random reveal with probability ``1 - s/t``), ``"maskgit_plus"`` (probability of
            the chosen token), ``"topk_margin"`` (top-1 minus top-2 probability) or ``"entropy"``
            (negative entropy).
        alg_temp: ``None`` or ``0``: reveal the most confident positions (``topk``); ``> 0``: draw them
            with ``multinomial(softmax(confidence / alg_temp))`` without replacement.
        max_length: total length (prompt + generated). Dream's rule: when ``max_new_tokens`` is set it
            wins (``max_length = prompt + max_new_tokens``); when ``max_length`` keeps its default (20)
            and was not passed as a keyword, it becomes ``20 + prompt`` (capped by the model's
            ``max_position_embeddings``).
        max_new_tokens: number of tokens to generate.
        output_history: keep the canvas after every step (returned with ``return_dict_in_generate``).
        return_dict_in_generate: return a :class:`~hf_lrdwm.generation.DiffusionGenerationOutput`.
        num_return_sequences: samples per prompt (inputs are repeated with ``repeat_interleave``).
        mask_token_id, pad_token_id, bos_token_id, eos_token_id: special ids (the mask id is required;
            missing ids are taken from the model's config / generation config).
    """

    temperature: float = 0.0
    top_p: float | None = None
    top_k: int | None = None
    eps: float = 1e-3
    steps: int = 512
    alg: str = "origin"
    alg_temp: float | None = None
    max_length: int | None = _DEFAULT_MAX_LENGTH
    max_new_tokens: int | None = None
    output_history: bool = False
    return_dict_in_generate: bool = False
    num_return_sequences: int = 1
    mask_token_id: int | None = None
    pad_token_id: int | None = None
    bos_token_id: int | None = None
    eos_token_id: int | list[int] | None = None

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        """Check every field; raise ``ValueError`` / ``TypeError`` naming the field and the value."""
        if not _is_number(self.temperature) or self.temperature < 0:
            raise ValueError(f"`temperature` must be a finite number >= 0, got {self.temperature!r}")
        if self.top_p is not None and (not _is_number(self.top_p) or not 0 < self.top_p <= 1):
            raise ValueError(f"`top_p` must be None or in (0, 1], got {self.top_p!r}")
        if self.top_k is not None and (not _is_int(self.top_k) or self.top_k < 0):
            raise ValueError(f"`top_k` must be None or an int >= 0 (0 = off), got {self.top_k!r}")
        if not _is_number(self.eps) or not 0 <= self.eps < 1:
            raise ValueError(f"`eps` must be a number in [0, 1), got {self.eps!r}")
        if not _is_int(self.steps) or self.steps < 1:
            raise ValueError(f"`steps` must be an int >= 1, got {self.steps!r}")
        if self.alg not in DREAM_ALGS:
            raise ValueError(f"`alg` must be one of {DREAM_ALGS}, got {self.alg!r}")
        if self.alg_temp is not None and (not _is_number(self.alg_temp) or self.alg_temp < 0):
            raise ValueError(f"`alg_temp` must be None or a finite number >= 0, got {self.alg_temp!r}")
        for name in ("max_length", "max_new_tokens"):
            value = getattr(self, name)
            if value is not None and (not _is_int(value) or value < 1):
                raise ValueError(f"`{name}` must be None or an int >= 1, got {value!r}")
        if not _is_int(self.num_return_sequences) or self.num_return_sequences < 1:
            raise ValueError(f"`num_return_sequences` must be an int >= 1, got {self.num_return_sequences!r}")
        for name in ("output_history", "return_dict_in_generate"):
            if not isinstance(getattr(self, name), bool):
                raise TypeError(f"`{name}` must be a bool, got {type(getattr(self, name)).__name__}")
        for name in _TOKEN_FIELDS:
            value = getattr(self, name)
            if value is None:
                continue
            ids = value if (name == "eos_token_id" and isinstance(value, (list, tuple))) else [value]
            if not all(_is_int(v) and v >= 0 for v in ids):
                raise ValueError(f"`{name}` must be None or a non-negative int, got {value!r}")

    @classmethod
    def field_names(cls) -> tuple[str, ...]:
        return tuple(f.name for f in fields(cls))

    @classmethod
    def from_generation_config(cls, generation_config: Any = None, **overrides: Any) -> DreamSamplingConfig:
        """Build from a ``DreamSamplingConfig``, a transformers ``GenerationConfig``, Dream's remote
        ``DreamGenerationConfig`` (or any object with the same attribute names) or a dict.

        Attributes that are missing or ``None`` keep Dream's defaults; ``overrides`` are applied last
        (``None`` there is kept as given).
        """
        names = cls.field_names()
        values: dict[str, Any] = {}
        if generation_config is None:
            pass
        elif isinstance(generation_config, DreamSamplingConfig):
            values = asdict(generation_config)
        elif isinstance(generation_config, Mapping):
            values = {k: v for k, v in generation_config.items() if k in names and v is not None}
        else:
            for name in names:
                value = getattr(generation_config, name, None)
                if value is not None:
                    values[name] = value
        values.update(overrides)
        return cls(**values)


# ----------------------------------------------------------------------------------------------
# Sampling pieces (Dream's semantics)
# ----------------------------------------------------------------------------------------------
def _top_p_filter(logits: torch.Tensor, top_p: float) -> torch.Tensor:
    """Keep the smallest prefix of the sorted distribution whose mass exceeds ``top_p``."""
    sorted_logits, order = torch.sort(logits, descending=True)
    cumulative = torch.cumsum(F.softmax(sorted_logits, dim=-1), dim=-1)
    drop_sorted = cumulative > top_p
    drop_sorted[..., 1:] = drop_sorted[..., :-1].clone()  # keep the first token above the threshold
    drop_sorted[..., 0] = False
    drop = torch.zeros_like(logits, dtype=torch.bool).scatter_(-1, order, drop_sorted)
    return logits.masked_fill(drop, torch.finfo(logits.dtype).min)


def _top_k_filter(logits: torch.Tensor, top_k: int) -> torch.Tensor:
    k = min(top_k, logits.size(-1))
    kth = torch.topk(logits, k)[0][..., -1, None]
    return logits.masked_fill(logits < kth, torch.finfo(logits.dtype).min)


def _filtered_probs(logits: torch.Tensor, cfg: DreamSamplingConfig) -> torch.Tensor:
    if cfg.temperature > 0:
        logits = logits / cfg.temperature
    if cfg.top_p is not None and cfg.top_p < 1:
        logits = _top_p_filter(logits, cfg.top_p)
    if cfg.top_k:  # None and 0 are "off"
        logits = _top_k_filter(logits, cfg.top_k)
    return torch.softmax(logits, dim=-1)


def _sample_tokens(
    logits: torch.Tensor,
    cfg: DreamSamplingConfig,
    confidence_kind: str = "probability",
    confidence_logits: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Dream's ``sample_tokens``: returns ``(confidence, tokens)`` for rows of logits [n, V].

    ``confidence_logits`` (the un-watermarked logits of the same rows) makes the confidence come from
    them while the tokens, and every random draw, come from ``logits``.
    """
    probs = _filtered_probs(logits, cfg)
    if cfg.temperature > 0:
        try:
            # Exactly Dream's draw: a validated Categorical (it normalises `probs` and calls multinomial).
            tokens = torch.distributions.Categorical(probs=probs).sample()
            confidence = torch.gather(probs, -1, tokens.unsqueeze(-1)).squeeze(-1)
        except torch.OutOfMemoryError:
            raise
        except (ValueError, RuntimeError):
            # Dream falls back to the argmax when the categorical refuses the probabilities (e.g. bf16
            # probabilities whose sum misses 1 by more than the validation tolerance).
            confidence, tokens = probs.max(dim=-1)
    else:
        confidence, tokens = probs.max(dim=-1)
    if confidence_logits is not None:
        probs = _filtered_probs(confidence_logits, cfg)
        confidence = torch.gather(probs, -1, tokens.unsqueeze(-1)).squeeze(-1)
    if confidence_kind == "margin":
        top2 = torch.topk(probs, 2, dim=-1).values
        confidence = top2[:, 0] - top2[:, 1]
    elif confidence_kind == "entropy":
        confidence = torch.sum(probs * torch.log(probs + 1e-10), dim=-1)
    return confidence, tokens


_CONFIDENCE_KIND = {"maskgit_plus": "probability", "topk_margin": "margin", "entropy": "entropy"}


# ----------------------------------------------------------------------------------------------
# Argument handling
# ----------------------------------------------------------------------------------------------
def _model_attr(model: Any, holder: str, name: str) -> Any:
    obj = getattr(model, holder, None)
    return getattr(obj, name, None) if obj is not None else None


def _resolve_config(model: Any, generation_config: Any, kwargs: dict[str, Any]) -> DreamSamplingConfig:
    names = set(DreamSamplingConfig.field_names())
    overrides = {k: kwargs.pop(k) for k in list(kwargs) if k in names}
    if kwargs:
        from transformers import GenerationConfig

        known = GenerationConfig().to_dict()
        unknown = sorted(k for k in kwargs if k not in known and not hasattr(GenerationConfig, k))
        if unknown:
            raise TypeError(f"dream_generate() got unexpected keyword arguments {unknown}")
        logger.warning("Dream's sampler ignores these generation arguments: %s", sorted(kwargs))
    cfg = DreamSamplingConfig.from_generation_config(generation_config, **overrides)
    # Special ids: explicit > given generation config > the model's config > the model's generation config.
    for name in _TOKEN_FIELDS:
        if getattr(cfg, name) is None:
            for holder in ("config", "generation_config"):
                value = _model_attr(model, holder, name)
                if value is not None:
                    setattr(cfg, name, value)
                    break
    cfg.validate()
    if cfg.mask_token_id is None:
        raise ValueError(
            "Dream sampling needs `mask_token_id` (pass it, or set it on the model's config or generation "
            "config; Dream-7B uses 151666)"
        )
    return cfg


def _unpack_inputs(inputs: Any, attention_mask: Any) -> tuple[torch.Tensor, torch.Tensor | None]:
    if isinstance(inputs, Mapping):  # a tokenizer's BatchEncoding or a dict
        if attention_mask is None:
            attention_mask = inputs.get("attention_mask")
        inputs = inputs.get("input_ids")
    if not isinstance(inputs, torch.Tensor):
        raise TypeError(f"`inputs` must be a LongTensor of prompt ids [B, P], got {type(inputs).__name__}")
    if inputs.dim() == 1:
        inputs = inputs.unsqueeze(0)
        if isinstance(attention_mask, torch.Tensor) and attention_mask.dim() == 1:
            attention_mask = attention_mask.unsqueeze(0)
    if inputs.dim() != 2 or inputs.dtype.is_floating_point or inputs.dtype == torch.bool:
        raise ValueError(
            f"`inputs` must be integer ids of shape [B, P], got {tuple(inputs.shape)} {inputs.dtype}"
        )
    if attention_mask is not None:
        is_tensor = isinstance(attention_mask, torch.Tensor)
        if not is_tensor or tuple(attention_mask.shape) != tuple(inputs.shape):
            shape = tuple(attention_mask.shape) if is_tensor else attention_mask
            raise ValueError(
                f"`attention_mask` must be a tensor of shape {tuple(inputs.shape)}, got {shape!r}"
            )
    return inputs, attention_mask


def _max_length(model: Any, cfg: DreamSamplingConfig, prompt_length: int, max_length_given: bool) -> int:
    """Dream's rule for the canvas length (see :class:`DreamSamplingConfig`)."""
    if cfg.max_new_tokens is not None:
        if max_length_given and cfg.max_length is not None:
            logger.warning("both `max_new_tokens` and `max_length` are set: `max_new_tokens` wins")
        return cfg.max_new_tokens + prompt_length
    if cfg.max_length is None or (not max_length_given and cfg.max_length == _DEFAULT_MAX_LENGTH):
        length = _DEFAULT_MAX_LENGTH + prompt_length
        limit = _model_attr(model, "config", "max_position_embeddings")
        return min(length, limit) if _is_int(limit) else length
    return cfg.max_length


def _attention_for_model(model: Any, mask4d: torch.Tensor) -> torch.Tensor:
    """Dream's boolean [B, 1, N, N] mask in the form the model's attention implementation consumes.

    transformers 5.x passes a 4-D mask to the attention function as is: SDPA reads a boolean mask as
    "may attend", but the eager path *adds* the mask to the scores, so it gets an additive float mask
    (0 / dtype minimum) with the same meaning. Models without a transformers attention implementation
    (remote code) get Dream's boolean mask unchanged.
    """
    impl = _model_attr(model, "config", "_attn_implementation")
    if impl is None or impl == "sdpa":
        return mask4d
    if "flash" in str(impl):
        raise ValueError(
            f"padded batches need a 4-D attention mask, which attn_implementation={impl!r} cannot take; "
            "load the model with attn_implementation='sdpa' or 'eager', or do not pad"
        )
    dtype = getattr(model, "dtype", None)
    dtype = dtype if isinstance(dtype, torch.dtype) and dtype.is_floating_point else torch.float32
    return torch.zeros(mask4d.shape, dtype=dtype, device=mask4d.device).masked_fill(
        ~mask4d, torch.finfo(dtype).min
    )


def _identity_tokens(step: int | None, x: torch.Tensor, logits: torch.Tensor | None) -> torch.Tensor:
    return x


def _identity_logits(step: int, x: torch.Tensor, logits: torch.Tensor) -> torch.Tensor:
    return logits


# ----------------------------------------------------------------------------------------------
# The loop
# ----------------------------------------------------------------------------------------------
@torch.no_grad()
def dream_generate(
    model: Any,
    inputs: Any = None,
    generation_config: Any = None,
    *,
    watermark: LRDWMConfig | LRDWMLogitsProcessor | None = None,
    **kwargs: Any,
) -> torch.Tensor | DiffusionGenerationOutput:
    """Dream's ``diffusion_generate``, optionally with the LR-DWM watermark.

    Args:
        model: a Dream-family network called as ``model(input_ids=x, attention_mask=..., position_ids=...)``
            returning ``.logits`` [B, N, V]; natively a transformers ``Qwen2ForCausalLM`` with
            ``is_causal=False``.
        inputs: prompt ids [B, P] (left-padded when the batch has prompts of different lengths), or a
            tokenizer output holding ``input_ids`` / ``attention_mask``. ``input_ids=`` also works.
        generation_config: a :class:`DreamSamplingConfig`, a transformers ``GenerationConfig``, Dream's
            ``DreamGenerationConfig`` or a dict; its attributes are read, missing ones take Dream's
            defaults (see :class:`DreamSamplingConfig`).
        watermark: ``None`` (vanilla: exactly Dream's loop, no extra computation or random draw), an
            :class:`~hf_lrdwm.LRDWMConfig` (a processor is built for this call) or an
            :class:`~hf_lrdwm.LRDWMLogitsProcessor`. The bias goes on the shifted logits after
            ``generation_logits_hook_func`` and before temperature / top-p / top-k / sampling /
            confidence. With ``confidence_sees_watermark=False`` on the config, the remasking confidence
            of ``maskgit_plus`` (the un-watermarked probability of the chosen token), ``topk_margin`` and
            ``entropy`` is computed from the un-watermarked logits, while tokens are drawn from the
            watermarked ones with exactly the same random draws. That costs one extra copy of the masked
            positions' logits per step (``n_masked x V`` in the logits' dtype, e.g. 300 x 152,064 x 4 B =
            174 MiB in fp32 at the first step) plus a second softmax / filter over it.
        **kwargs: fields of :class:`DreamSamplingConfig` (``steps``, ``max_new_tokens``, ``temperature``,
            ``alg``, ...), ``attention_mask`` [B, P] (1 = token, 0 = padding), and Dream's two hooks
            ``generation_tokens_hook_func(step, x, logits) -> x`` (called with ``(None, x, None)`` before
            the loop and ``(i, x, logits)`` after each step) and
            ``generation_logits_hook_func(step, x, logits) -> logits`` (after the shift).

    Returns:
        the final canvas ``[B * num_return_sequences, max_length]``, or a
        :class:`~hf_lrdwm.generation.DiffusionGenerationOutput` (``sequences``, and ``history``: the
        canvas after each step when ``output_history=True``) with ``return_dict_in_generate=True``.

    The loop (Dream's): the prompt is right-padded with the mask token to ``max_length``. If
    ``attention_mask`` has padding, attention is the boolean ``[B, 1, N, N]`` outer product of the padded
    2-D mask and positions are ``cumsum(mask) - 1`` (1 at pads); otherwise attention is full and
    positions default. ``timesteps = linspace(1, eps, steps + 1)``. Each step: logits of the canvas,
    shifted right by one position (position i is predicted from hidden state i - 1), the logits hook,
    the watermark, then over the masked positions: ``origin`` reveals each with probability
    ``1 - s/t`` (a ``rand`` draw, then sampling); the other algorithms sample every masked position,
    score it, and reveal the ``int(mean_masks_per_row * (1 - s/t))`` best (all at the last step) with
    ``topk``, or with ``multinomial`` over ``softmax(confidence / alg_temp)`` when ``alg_temp > 0``.
    At ``temperature > 0`` tokens are drawn with ``torch.distributions.Categorical``; like Dream, the
    argmax is taken when it rejects the probabilities.

    Notes:
        - A processor built from a config adds the bias in place, into the tensor the logits hook
          returned (no [B, N, V] copy); a hook that keeps a reference to what it returns sees the
          watermarked values. The processor's row cache is freed when the call returns (also for a
          processor passed in).
        - Padded batches: transformers 5.x hands a 4-D mask to the attention function unchanged. SDPA
          reads Dream's boolean mask as "may attend" and gets it as is; the eager path adds the mask to
          the scores, so it gets the same mask as an additive float mask (0 / dtype minimum); flash
          attention cannot take a 4-D mask and is refused for padded batches.
        - ``watermark=None`` runs no watermark code at all and makes no extra random draws.

    Example (a tiny random Qwen2 with bidirectional attention stands in for Dream-7B):

        >>> import torch, transformers
        >>> from hf_lrdwm import LRDWMConfig
        >>> from hf_lrdwm.generation.dream import dream_generate
        >>> torch.manual_seed(0)  # doctest: +ELLIPSIS
        <torch._C.Generator object at ...>
        >>> cfg = transformers.Qwen2Config(vocab_size=100, hidden_size=32, intermediate_size=64,
        ...     num_hidden_layers=1, num_attention_heads=4, num_key_value_heads=2, is_causal=False,
        ...     mask_token_id=99, eos_token_id=98, pad_token_id=98)
        >>> model = transformers.Qwen2ForCausalLM(cfg).eval()
        >>> prompt = torch.tensor([[5, 6, 7]])
        >>> out = dream_generate(model, prompt, max_new_tokens=8, steps=8, alg="entropy",
        ...     watermark=LRDWMConfig(key="secret", delta=2.0))
        >>> out.shape  # prompt + 8 new tokens
        torch.Size([1, 11])
    """
    tokens_hook: Callable = kwargs.pop("generation_tokens_hook_func", None) or _identity_tokens
    logits_hook: Callable = kwargs.pop("generation_logits_hook_func", None) or _identity_logits
    attention_mask = kwargs.pop("attention_mask", None)
    if inputs is None:
        inputs = kwargs.pop("input_ids", None)
    if inputs is None:
        raise ValueError("dream_generate needs the prompt ids (`inputs`)")
    if watermark is not None and not isinstance(watermark, (LRDWMConfig, LRDWMLogitsProcessor)):
        raise TypeError(
            "`watermark` must be an LRDWMConfig, an LRDWMLogitsProcessor or None, "
            f"got {type(watermark).__name__}"
        )
    max_length_given = kwargs.get("max_length") is not None
    cfg = _resolve_config(model, generation_config, kwargs)
    input_ids, attention_mask = _unpack_inputs(inputs, attention_mask)

    device = getattr(model, "device", None)
    if isinstance(device, torch.device):
        input_ids = input_ids.to(device)
        attention_mask = attention_mask.to(device) if attention_mask is not None else None
    if cfg.num_return_sequences > 1:
        input_ids = input_ids.repeat_interleave(cfg.num_return_sequences, dim=0)
        if attention_mask is not None:
            attention_mask = attention_mask.repeat_interleave(cfg.num_return_sequences, dim=0)
    prompt_length = input_ids.shape[-1]
    max_length = _max_length(model, cfg, prompt_length, max_length_given)
    if prompt_length >= max_length:
        raise ValueError(
            f"the prompt has {prompt_length} tokens but max_length is {max_length}: "
            "increase `max_new_tokens` / `max_length`"
        )

    mask_id = int(cfg.mask_token_id)
    wm_config = watermark.config if isinstance(watermark, LRDWMLogitsProcessor) else watermark
    sees_watermark = wm_config is None or wm_config.confidence_sees_watermark
    processor: LRDWMLogitsProcessor | None = None
    history: list[torch.Tensor] | None = [] if (cfg.return_dict_in_generate and cfg.output_history) else None
    try:
        x = F.pad(input_ids, (0, max_length - prompt_length), value=mask_id)
        if attention_mask is not None and torch.any(attention_mask == 0.0):
            mask2d = F.pad(attention_mask, (0, max_length - prompt_length), value=1.0)
            position_ids = mask2d.long().cumsum(-1) - 1
            position_ids.masked_fill_(mask2d == 0, 1)
            mask4d = torch.logical_and(mask2d.unsqueeze(1).unsqueeze(-2), mask2d.unsqueeze(1).unsqueeze(-1))
            model_mask = _attention_for_model(model, mask4d)
        else:
            position_ids = None
            model_mask = None  # "full" attention
        timesteps = torch.linspace(1, cfg.eps, cfg.steps + 1, device=x.device)
        x = tokens_hook(None, x, None)
        for i in range(cfg.steps):
            mask_index = x == mask_id
            logits = model(input_ids=x, attention_mask=model_mask, position_ids=position_ids).logits
            logits = torch.cat([logits[:, :1], logits[:, :-1]], dim=1)
            logits = logits_hook(i, x, logits)
            clean_mask_logits = None
            if watermark is not None:
                if processor is None:
                    processor = resolve_watermark(
                        watermark, vocab_size=logits.shape[-1], mask_token_id=mask_id, device=logits.device
                    )
                if not sees_watermark and cfg.alg != "origin":
                    clean_mask_logits = logits[mask_index]
                logits = processor(x, logits)
            mask_logits = logits[mask_index]
            t = timesteps[i]
            s = timesteps[i + 1]
            if cfg.alg == "origin":
                p_transfer = 1 - s / t if i < cfg.steps - 1 else 1
                x0 = torch.zeros_like(x[mask_index], dtype=torch.long) + mask_id
                transfer = torch.rand(*x0.shape, device=x.device) < p_transfer
                _, x0[transfer] = _sample_tokens(mask_logits[transfer], cfg)
                x[mask_index] = x0.clone()
            else:
                confidence, x0 = _sample_tokens(
                    mask_logits, cfg, _CONFIDENCE_KIND[cfg.alg], confidence_logits=clean_mask_logits
                )
                del clean_mask_logits
                masks_per_row = mask_index.sum() / mask_index.shape[0]
                if i < cfg.steps - 1:
                    n_transfer = int(masks_per_row * (1 - s / t))
                else:
                    n_transfer = int(masks_per_row)
                full_confidence = torch.full_like(x, -torch.inf, dtype=logits.dtype)
                full_confidence[mask_index] = confidence
                if n_transfer > 0:
                    if cfg.alg_temp is None or cfg.alg_temp == 0:
                        _, transfer_index = torch.topk(full_confidence, n_transfer)
                    else:
                        weights = F.softmax(full_confidence / cfg.alg_temp, dim=-1)
                        transfer_index = torch.multinomial(weights, num_samples=n_transfer)
                    candidates = torch.zeros_like(x, dtype=torch.long) + mask_id
                    candidates[mask_index] = x0.clone()
                    rows = torch.arange(x.size(0), device=x.device).unsqueeze(1).expand_as(transfer_index)
                    x[rows, transfer_index] = candidates[rows, transfer_index]
            x = tokens_hook(i, x, logits)
            if history is not None:
                history.append(x.clone())
    finally:
        if processor is not None:
            processor.reset()
    if cfg.return_dict_in_generate:
        return DiffusionGenerationOutput(sequences=x, history=history)
    return x
