"""LLaDA's official sampling loop (``generate()`` of the LLaDA authors), with the LR-DWM watermark.

Written from the description in ``docs/samplers.md`` (section LLaDA). With ``watermark=None`` the loop
performs the same operations and random draws, in the same order, as the official function, so the same
torch seed gives the same tokens.
"""

from __future__ import annotations

import logging
import math
import operator
from typing import Any

import torch

from ..config import LRDWMConfig
from ..processor import LRDWMLogitsProcessor
from .common import DiffusionGenerationOutput, resolve_watermark

__all__ = ["llada_generate"]

logger = logging.getLogger(__name__)

_REMASKING = ("low_confidence", "random")


# ----------------------------------------------------------------------------------------------
# Argument checks and id resolution
# ----------------------------------------------------------------------------------------------
def _positive_int(value: Any, name: str) -> int:
    if isinstance(value, bool):
        raise TypeError(f"`{name}` must be a positive int, got a bool")
    try:
        value = operator.index(value)
    except TypeError:
        raise TypeError(f"`{name}` must be a positive int, got {type(value).__name__}") from None
    if value < 1:
        raise ValueError(f"`{name}` must be a positive int, got {value}")
    return value


def _non_negative_float(value: Any, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        if not (isinstance(value, torch.Tensor) and value.numel() == 1):
            raise TypeError(f"`{name}` must be a number, got {type(value).__name__}")
        value = value.item()
    if not math.isfinite(float(value)):
        raise ValueError(f"`{name}` must be finite, got {value!r}")
    if value < 0:
        raise ValueError(f"`{name}` must be >= 0, got {value!r}")
    return value


def _token_ids(value: Any, model: Any, attr: str) -> list[int] | None:
    """Ids from the argument, else from ``model.config.<attr>``; ``None`` when neither has one."""
    if value is None:
        value = getattr(getattr(model, "config", None), attr, None)
    if value is None:
        return None
    items = value.tolist() if isinstance(value, torch.Tensor) else value
    if not isinstance(items, (list, tuple)):
        items = [items]
    ids = []
    for item in items:
        if isinstance(item, bool) or not isinstance(item, int) or item < 0:
            raise ValueError(f"`{attr}` must be a non-negative int (or a list of them), got {value!r}")
        ids.append(item)
    return ids or None


def _check_inputs(input_ids: Any, attention_mask: Any) -> None:
    if not isinstance(input_ids, torch.Tensor):
        raise TypeError(f"`input_ids` must be a torch.Tensor [B, prompt_len], got {type(input_ids).__name__}")
    if input_ids.dim() != 2:
        raise ValueError(
            f"`input_ids` must have shape [batch, prompt_len], got shape {tuple(input_ids.shape)} "
            "(use input_ids[None] for a single prompt)"
        )
    if input_ids.dtype.is_floating_point or input_ids.dtype.is_complex or input_ids.dtype == torch.bool:
        raise TypeError(f"`input_ids` must hold integer token ids, got dtype {input_ids.dtype}")
    if input_ids.shape[0] == 0:
        raise ValueError("`input_ids` has an empty batch")
    if attention_mask is not None:
        if not isinstance(attention_mask, torch.Tensor):
            raise TypeError(f"`attention_mask` must be a torch.Tensor, got {type(attention_mask).__name__}")
        if tuple(attention_mask.shape) != tuple(input_ids.shape):
            raise ValueError(
                f"`attention_mask` shape {tuple(attention_mask.shape)} does not match "
                f"`input_ids` shape {tuple(input_ids.shape)}"
            )
        if attention_mask.shape[1] and bool((attention_mask[:, -1] == 0).any()):
            logger.warning(
                "`attention_mask` has padding at the end of a prompt: LLaDA's loop supports left padding "
                "only (the generated tokens would follow the pads)"
            )


def _model_device(model: Any, fallback: torch.device) -> torch.device:
    device = getattr(model, "device", None)
    if isinstance(device, torch.device):
        return device
    try:
        return next(model.parameters()).device
    except (AttributeError, StopIteration, TypeError):
        return fallback


# ----------------------------------------------------------------------------------------------
# The pieces of the official loop
# ----------------------------------------------------------------------------------------------
def _num_transfer_tokens(block_mask: torch.Tensor, steps: int) -> list[list[int]]:
    """Tokens to reveal at each step, per row: ``count // steps`` plus one on the first ``count % steps``."""
    counts = block_mask.sum(dim=1).tolist()
    schedule = []
    for count in counts:
        base, remainder = divmod(int(count), steps)
        schedule.append([base + 1 if s < remainder else base for s in range(steps)])
    return schedule


def _gumbel_perturbed(logits: torch.Tensor, temperature: float) -> torch.Tensor:
    """``exp(logits) / (-log(u)) ** T`` in float64 with ``u ~ U(0, 1)`` of the logits' shape.

    Temperature 0 returns ``logits`` itself (plain argmax), as the official loop does. The arithmetic
    is done in place on two float64 buffers (same values as the out-of-place formula, less memory).
    """
    if temperature == 0:
        return logits
    perturbed = logits.to(torch.float64, copy=True)
    noise = torch.rand(perturbed.shape, dtype=torch.float64, device=perturbed.device)
    noise.log_().neg_().pow_(temperature)
    return perturbed.exp_().div_(noise)


def _forward(
    model: Any,
    x: torch.Tensor,
    attention_mask: torch.Tensor | None,
    prompt_index: torch.Tensor,
    mask_id: int,
    cfg_scale: float,
) -> torch.Tensor:
    """Logits [B, L, V] of the canvas; with CFG the conditional and unconditional canvases in one batch."""
    if cfg_scale > 0:
        uncond_x = x.clone()
        uncond_x[prompt_index] = mask_id
        both = torch.cat([x, uncond_x], dim=0)
        both_mask = None if attention_mask is None else torch.cat([attention_mask, attention_mask], dim=0)
        cond, uncond = torch.chunk(model(both, attention_mask=both_mask).logits, 2, dim=0)
        return uncond + (cfg_scale + 1) * (cond - uncond)
    return model(x, attention_mask=attention_mask).logits


# ----------------------------------------------------------------------------------------------
# Public entry point
# ----------------------------------------------------------------------------------------------
def llada_generate(
    model: Any,
    input_ids: torch.LongTensor,
    attention_mask: torch.Tensor | None = None,
    *,
    steps: int = 128,
    gen_length: int = 128,
    block_length: int = 128,
    temperature: float = 0.0,
    cfg_scale: float = 0.0,
    remasking: str = "low_confidence",
    logits_eos_inf: bool = False,
    confidence_eos_eot_inf: bool = False,
    watermark: LRDWMConfig | LRDWMLogitsProcessor | None = None,
    return_dict_in_generate: bool = False,
    output_history: bool = False,
    mask_token_id: int | None = None,
    eos_token_id: int | list[int] | None = None,
    eot_token_id: int | list[int] | None = None,
) -> torch.LongTensor | DiffusionGenerationOutput:
    """Generate with LLaDA's official masked-diffusion loop, optionally with the LR-DWM watermark.

    Same arguments, defaults and behaviour as the authors' ``generate()`` (semi-autoregressive blocks,
    low-confidence or random remasking, classifier-free guidance, EOS/EoT options), including the
    random draws in the same order: with ``watermark=None`` and the same torch seed the tokens are the
    official function's tokens. Bound as ``model.diffusion_generate`` by
    :func:`hf_lrdwm.generation.attach_diffusion_generate` (``model`` is then implicit).

    The canvas is the prompt followed by ``gen_length`` mask tokens. The generation is split into
    ``gen_length // block_length`` blocks decoded left to right, each in ``steps // num_blocks`` steps.
    At each step the model predicts every position (no shift); a candidate token is chosen per position
    (argmax, or a Gumbel-max sample at ``temperature > 0``), and in each row the ``k`` masked positions
    of the current block with the highest confidence are revealed (``k`` = the block's mask count
    spread evenly over its steps, the remainder one each on the first steps).

    Where the watermark acts: right after the logits (after classifier-free guidance), before
    ``logits_eos_inf``, the Gumbel noise and the confidence. It sees the canvas of the step, i.e. as it
    was before that step's reveals (the prompt counts as revealed; tokens revealed in the same step do
    not see each other), and adds ``delta`` to the green set of each revealed neighbour of every masked
    position. With CFG it is applied once, to the combined logits, with the conditional canvas as
    context. By default (``LRDWMConfig.confidence_sees_watermark=True``) the low-confidence score is the
    softmax of the *watermarked* logits, so the bias also steers which positions are revealed first. With
    ``confidence_sees_watermark=False`` the score is computed from a copy of the un-watermarked logits
    taken before the bias: this costs one extra ``[B, prompt + end of current block, V]`` tensor in the
    logits' dtype per step (e.g. 0.3 GB in bf16 for B=1, 1,200 positions, V=126,464; freed each step),
    and it does not apply to ``remasking="random"``.

    Args:
        model: a LLaDA model returning ``.logits`` [B, L, V] from ``model(ids, attention_mask=...)``
            (``hf_lrdwm.load_model`` gives a Llama with ``is_causal=False``; the remote-code LLaDA works
            too).
        input_ids: LongTensor [B, prompt_len], left-padded when the prompts differ in length.
        attention_mask: [B, prompt_len] (1 = token, 0 = left pad) or ``None``; extended with ones over
            the generated part.
        steps: total denoising steps (one forward pass each); must be a multiple of the number of blocks.
        gen_length: number of tokens to generate; must be a multiple of ``block_length``.
        block_length: semi-autoregressive block size (``gen_length`` = one block: fully parallel).
        temperature: 0 = argmax (deterministic); > 0 samples from ``softmax(logits / temperature)``.
        cfg_scale: classifier-free guidance scale (0 = off). The unconditional canvas has the prompt
            replaced by masks; ``logits = uncond + (cfg_scale + 1) * (cond - uncond)``.
        remasking: ``"low_confidence"`` (reveal the most probable candidates first) or ``"random"``.
        logits_eos_inf: forbid EOS (its logit set to ``-inf``) before choosing candidates.
        confidence_eos_eot_inf: after choosing candidates, set EoT's logit (and, as in the official code,
            at temperature 0 also EOS's) to ``-inf``, lowering the confidence of positions whose
            candidate is EoT (or EOS) so that they are revealed last.
        watermark: ``None`` (vanilla), an :class:`~hf_lrdwm.LRDWMConfig` (a processor is built for this
            call, in place on the logits) or an :class:`~hf_lrdwm.LRDWMLogitsProcessor`. Its row cache is
            freed when the call returns.
        return_dict_in_generate: return a :class:`DiffusionGenerationOutput` instead of the tensor.
        output_history: with ``return_dict_in_generate``, also keep the canvas after every step.
        mask_token_id, eos_token_id, eot_token_id: special ids; default ``model.config.<name>``. The mask
            id is always needed; EOS for ``logits_eos_inf`` and both for ``confidence_eos_eot_inf``
            (LLaDA-8B: mask 126336, EOS 126081, EoT 126348).

    Returns:
        LongTensor [B, prompt_len + gen_length] (prompt included), or a
        :class:`DiffusionGenerationOutput` with ``sequences`` and ``history`` (a list of ``steps``
        canvases, or ``None``).

    Example:
        >>> import torch, transformers
        >>> from hf_lrdwm import LRDWMConfig, LRDWMDetector
        >>> from hf_lrdwm.generation.llada import llada_generate
        >>> _ = torch.manual_seed(0)
        >>> cfg = transformers.LlamaConfig(vocab_size=1000, hidden_size=32, intermediate_size=64,
        ...     num_hidden_layers=1, num_attention_heads=4, is_causal=False, mask_token_id=999)
        >>> model = transformers.LlamaForCausalLM(cfg).eval()
        >>> prompt = torch.randint(0, 990, (1, 8))
        >>> wm = LRDWMConfig(key="demo", delta=4.0)
        >>> out = llada_generate(model, prompt, steps=64, gen_length=64, block_length=32, watermark=wm)
        >>> out.shape
        torch.Size([1, 72])
        >>> det = LRDWMDetector(wm, vocab_size=1000, ignore_token_ids=[999])
        >>> bool(det(out[:, 8:], prompt_ids=prompt[0].tolist()).prediction[0])
        True
    """
    # -- checks (all before any forward pass) --------------------------------------------------
    _check_inputs(input_ids, attention_mask)
    steps = _positive_int(steps, "steps")
    gen_length = _positive_int(gen_length, "gen_length")
    block_length = _positive_int(block_length, "block_length")
    temperature = _non_negative_float(temperature, "temperature")
    cfg_scale = _non_negative_float(cfg_scale, "cfg_scale")
    if remasking not in _REMASKING:
        raise ValueError(f"`remasking` must be one of {_REMASKING}, got {remasking!r}")
    if gen_length % block_length != 0:
        raise ValueError(f"`gen_length` ({gen_length}) must be a multiple of `block_length` ({block_length})")
    num_blocks = gen_length // block_length
    if steps % num_blocks != 0:
        raise ValueError(
            f"`steps` ({steps}) must be a multiple of the number of blocks "
            f"(gen_length // block_length = {gen_length} // {block_length} = {num_blocks})"
        )
    if watermark is not None and not isinstance(watermark, (LRDWMConfig, LRDWMLogitsProcessor)):
        raise TypeError(
            "`watermark` must be an LRDWMConfig, an LRDWMLogitsProcessor or None, "
            f"got {type(watermark).__name__}"
        )

    mask_ids = _token_ids(mask_token_id, model, "mask_token_id")
    if mask_ids is None:
        raise ValueError(
            "unknown mask token id: pass `mask_token_id=` or set `model.config.mask_token_id` "
            "(126336 for LLaDA-8B)"
        )
    if len(mask_ids) != 1:
        raise ValueError(f"`mask_token_id` must be a single id, got {mask_ids}")
    mask_id = mask_ids[0]
    eos_ids = eot_ids = None
    if logits_eos_inf or confidence_eos_eot_inf:
        eos_ids = _token_ids(eos_token_id, model, "eos_token_id")
        if eos_ids is None:
            option = "logits_eos_inf" if logits_eos_inf else "confidence_eos_eot_inf"
            raise ValueError(
                f"`{option}=True` needs the EOS id: pass `eos_token_id=` or set `model.config.eos_token_id`"
            )
    if confidence_eos_eot_inf:
        eot_ids = _token_ids(eot_token_id, model, "eot_token_id")
        if eot_ids is None:
            raise ValueError(
                "`confidence_eos_eot_inf=True` needs the EoT id: pass `eot_token_id=` or set "
                "`model.config.eot_token_id` (126348 for LLaDA-8B)"
            )

    embeddings = _num_embeddings(model)
    if embeddings is not None and mask_id >= embeddings:
        raise ValueError(
            f"`mask_token_id` {mask_id} is outside the model's vocabulary of {embeddings} embeddings"
        )

    # -- canvas --------------------------------------------------------------------------------
    device = _model_device(model, input_ids.device)
    batch, prompt_len = input_ids.shape
    total = prompt_len + gen_length
    x = torch.full((batch, total), mask_id, dtype=torch.long, device=device)
    x[:, :prompt_len] = input_ids.to(device)
    if attention_mask is not None:
        attention_mask = attention_mask.to(device)
        attention_mask = torch.cat(
            [attention_mask, torch.ones((batch, gen_length), dtype=attention_mask.dtype, device=device)],
            dim=-1,
        )
    prompt_index = x != mask_id
    steps_per_block = steps // num_blocks
    history: list[torch.Tensor] | None = [] if (output_history and return_dict_in_generate) else None

    proc: LRDWMLogitsProcessor | None = None
    confidence_sees_watermark = True
    if watermark is not None:
        wm_config = watermark if isinstance(watermark, LRDWMConfig) else watermark.config
        confidence_sees_watermark = wm_config.confidence_sees_watermark
    first = True
    try:
        with torch.no_grad():
            for block in range(num_blocks):
                start = prompt_len + block * block_length
                end = start + block_length
                schedule = _num_transfer_tokens(x[:, start:end] == mask_id, steps_per_block)
                for step in range(steps_per_block):
                    mask_index = x == mask_id
                    logits = _forward(model, x, attention_mask, prompt_index, mask_id, cfg_scale)
                    if first:
                        first = False
                        _check_logits(logits, x, mask_id, eos_ids, eot_ids)
                        proc = resolve_watermark(
                            watermark,
                            vocab_size=logits.shape[-1],
                            mask_token_id=mask_id,
                            device=logits.device,
                        )

                    # 1. watermark, right after the logits (after CFG)
                    clean = None  # un-watermarked logits up to the block end, for the confidence
                    if proc is not None:
                        if not confidence_sees_watermark and remasking == "low_confidence":
                            clean = logits[:, :end].clone()
                        logits = proc(x, logits)
                    # 2. EOS ban, 3. candidates (Gumbel-max in float64; plain argmax at T=0)
                    if logits_eos_inf:
                        logits[:, :, eos_ids] = -torch.inf
                        if clean is not None:
                            clean[:, :, eos_ids] = -torch.inf
                    perturbed = _gumbel_perturbed(logits, temperature)
                    x0 = torch.argmax(perturbed, dim=-1)
                    # 4. EOS / EoT lowered after the choice (same tensor at T=0, as in the official code)
                    if confidence_eos_eot_inf:
                        perturbed[:, :, eos_ids] = -torch.inf
                        logits[:, :, eot_ids] = -torch.inf
                        if clean is not None:
                            clean[:, :, eot_ids] = -torch.inf
                            if perturbed is logits:
                                clean[:, :, eos_ids] = -torch.inf
                    # 5. confidence (only positions before the block end can be revealed)
                    if remasking == "low_confidence":
                        source = clean if clean is not None else logits[:, :end]
                        probs = torch.softmax(source, dim=-1)
                        head = torch.gather(probs, -1, x0[:, :end, None]).squeeze(-1)
                        del probs, source, clean
                        x0_p = torch.full((batch, total), -torch.inf, dtype=head.dtype, device=head.device)
                        x0_p[:, :end] = head
                    else:
                        x0_p = torch.rand((batch, total), device=x0.device)
                        x0_p[:, end:] = -torch.inf
                    del perturbed, logits
                    x0 = torch.where(mask_index, x0, x)
                    confidence = torch.where(mask_index, x0_p, -torch.inf)
                    # 6. reveal the k most confident masked positions per row
                    transfer = torch.zeros_like(x0, dtype=torch.bool)
                    for row in range(batch):
                        _, chosen = torch.topk(confidence[row], k=schedule[row][step])
                        transfer[row, chosen] = True
                    x[transfer] = x0[transfer]
                    if history is not None:
                        history.append(x.clone())
    finally:
        if proc is not None:
            proc.reset()

    if return_dict_in_generate:
        return DiffusionGenerationOutput(sequences=x, history=history)
    return x


def _num_embeddings(model: Any) -> int | None:
    """Rows of the input embedding table, when the model exposes it (mask id checked before forward)."""
    try:
        weight = model.get_input_embeddings().weight
    except (AttributeError, NotImplementedError, TypeError):
        return None
    return int(weight.shape[0]) if isinstance(weight, torch.Tensor) and weight.dim() == 2 else None


def _check_logits(
    logits: Any, x: torch.Tensor, mask_id: int, eos_ids: list[int] | None, eot_ids: list[int] | None
) -> None:
    """First-forward checks: logits for every canvas position, special ids inside the vocabulary."""
    if not isinstance(logits, torch.Tensor) or logits.dim() != 3 or tuple(logits.shape[:2]) != tuple(x.shape):
        shape = tuple(logits.shape) if isinstance(logits, torch.Tensor) else type(logits).__name__
        raise ValueError(
            f"the model must return logits [B, L, V] for every canvas position; got {shape} for a canvas of "
            f"shape {tuple(x.shape)}"
        )
    vocab = logits.shape[-1]
    for name, ids in (("mask_token_id", [mask_id]), ("eos_token_id", eos_ids), ("eot_token_id", eot_ids)):
        for token in ids or []:
            if token >= vocab:
                raise ValueError(f"`{name}` {token} is outside the model's vocabulary of {vocab} logits")
