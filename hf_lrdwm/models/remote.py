"""Compatibility shims for LLaDA's and Dream's remote code on transformers 5.

Each shim fixes one documented failure of the published modeling code, is applied only where its
symptom can occur, is idempotent, and reports its name when it changed something.
:func:`hf_lrdwm.load_model` (``trust_remote_code=True``) applies them in this order:

1. :func:`fix_use_cache` on the config, before the model is built (LLaDA);
2. :func:`apply_class_shims` on the remote model class and the modules of its package
   (:func:`fix_rope_default`, :func:`fix_generation_config_validate`,
   :func:`fix_generation_config_from_model_config`), before any instance exists;
3. :func:`apply_model_shims` on the loaded model (``use_cache`` again, the rotary buffers,
   Dream's generation config).

The first four shims fix the failures listed in the project's notes on the official samplers;
:func:`fix_rotary_buffers` fixes a silent one found while writing them (read off transformers 5.24's
loading code and reproduced with a stand-in model in the tests, not yet observed on the real
checkpoint here).

Everything here patches only the remote code's own modules and classes (and the one config object);
transformers' global tables are left untouched.
"""

from __future__ import annotations

import functools
import inspect
import sys
import warnings
from types import ModuleType
from typing import Any

import torch

__all__ = [
    "apply_class_shims",
    "apply_model_shims",
    "default_rope_init",
    "fix_generation_config_from_model_config",
    "fix_generation_config_validate",
    "fix_model_generation_config",
    "fix_rope_default",
    "fix_rotary_buffers",
    "fix_use_cache",
    "remote_modules",
]

_SHIM_MARK = "_hf_lrdwm_shim"
_SPECIAL_TOKEN_FIELDS = ("mask_token_id", "pad_token_id", "bos_token_id", "eos_token_id")


def fix_use_cache(config: Any, default: bool = False) -> bool:
    """Give ``config`` a ``use_cache`` attribute when it has none.

    Symptom (LLaDA): transformers 5 no longer stores ``use_cache`` for config classes that do not
    declare it, so LLaDA's forward pass fails with ``AttributeError: ... has no attribute 'use_cache'``.
    ``default`` should be the value of config.json (LLaDA's says ``false``; diffusion sampling uses no
    KV cache).
    """
    if hasattr(config, "use_cache"):
        return False
    config.use_cache = default
    return True


def default_rope_init(
    config: Any = None,
    device: torch.device | str | None = None,
    seq_len: int | None = None,
    **rope_kwargs: Any,
) -> tuple[torch.Tensor, float]:
    """The standard RoPE inverse frequencies ``1 / base^(2i/dim)``; returns ``(inv_freq, 1.0)``.

    Accepts both call styles of transformers' rope init functions: ``(config, device)`` and the
    4.x-era ``(None, device, base=..., dim=...)``.
    """
    if config is None:
        base, dim = float(rope_kwargs["base"]), int(rope_kwargs["dim"])
    else:
        base = getattr(config, "rope_theta", None)
        if base is None:
            base = (getattr(config, "rope_parameters", None) or {}).get("rope_theta", 10000.0)
        head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
        dim = int(head_dim * getattr(config, "partial_rotary_factor", 1.0))
    exponent = torch.arange(0, dim, 2, dtype=torch.int64).to(device=device, dtype=torch.float) / dim
    return 1.0 / (float(base) ** exponent), 1.0


def fix_rope_default(module: ModuleType) -> bool:
    """Give ``module`` a ``ROPE_INIT_FUNCTIONS`` table with a ``'default'`` entry.

    Symptom (Dream): the rotary embedding looks up ``ROPE_INIT_FUNCTIONS['default']``, which
    transformers 5 dropped, and building the model fails with ``KeyError: 'default'``. The module's
    name is rebound to a copy of the table plus :func:`default_rope_init`, so transformers' own table
    is left as it is.
    """
    table = getattr(module, "ROPE_INIT_FUNCTIONS", None)
    if not isinstance(table, dict) or "default" in table:
        return False
    module.ROPE_INIT_FUNCTIONS = {**table, "default": default_rope_init}
    return True


def fix_generation_config_validate(cls: type) -> bool:
    """Let ``cls.validate`` accept (and drop) the keyword arguments it does not know.

    Symptom (Dream): transformers 5 calls ``generation_config.validate(user_set_attributes=...)``
    (in ``update`` and ``from_dict``) and ``DreamGenerationConfig.validate(self, is_init=False)``
    raises ``TypeError: ... unexpected keyword argument 'user_set_attributes'``.
    """
    original = cls.__dict__.get("validate")
    if original is None or getattr(original, _SHIM_MARK, False):
        return False
    params = inspect.signature(original).parameters
    if (
        any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
        or "user_set_attributes" in params
    ):
        return False

    @functools.wraps(original)
    def validate(self: Any, *args: Any, **kwargs: Any) -> Any:
        return original(self, *args, **{k: v for k, v in kwargs.items() if k in params})

    setattr(validate, _SHIM_MARK, True)
    cls.validate = validate
    return True


def fix_generation_config_from_model_config(cls: type) -> bool:
    """Make ``cls.from_model_config(model_config)`` return an instance of ``cls``.

    Symptom (Dream): under transformers 5, ``DreamGenerationConfig.from_model_config(config)`` does not
    give a Dream generation config: transformers' version compares every field of the new config with
    a plain ``GenerationConfig()``, which has no ``eps``, ``steps``, ``alg``, ..., and
    ``diffusion_generate`` without an explicit generation config fails with ``AttributeError: ...
    'eps'``. The wrapper keeps a result that is an instance of ``cls``; when the original raises
    ``AttributeError`` or returns anything else, it builds the config as transformers 4 did for a
    config without sub-configs: ``cls.from_dict`` of the model config's non-``None`` fields (Dream's
    defaults plus the model's special-token ids), plus the values a plain result had set.
    """
    current = inspect.getattr_static(cls, "from_model_config", None)
    if current is None or getattr(getattr(current, "__func__", current), _SHIM_MARK, False):
        return False
    original = cls.from_model_config  # bound to cls

    def from_model_config(klass: type, model_config: Any) -> Any:
        try:
            result = original.__func__(klass, model_config)
        except AttributeError:
            result = None
        if isinstance(result, klass):
            return result
        config_dict = dict(model_config) if isinstance(model_config, dict) else model_config.to_dict()
        config_dict = {k: v for k, v in config_dict.items() if v is not None}
        config_dict.pop("_from_model_config", None)
        fixed = klass.from_dict(config_dict, _from_model_config=True)
        if result is not None:
            for key, value in result.to_diff_dict().items():
                if not key.startswith("_") and key != "transformers_version":
                    setattr(fixed, key, value)
        for name in _SPECIAL_TOKEN_FIELDS:
            value = (
                model_config.get(name)
                if isinstance(model_config, dict)
                else getattr(model_config, name, None)
            )
            if value is not None:
                setattr(fixed, name, value)
        fixed._from_model_config = True
        return fixed

    setattr(from_model_config, _SHIM_MARK, True)
    cls.from_model_config = classmethod(from_model_config)
    return True


def remote_modules(model_class: type) -> list[ModuleType]:
    """The loaded modules of the remote-code package that defines ``model_class``."""
    module_name = model_class.__module__
    if not module_name.startswith("transformers_modules."):
        return [sys.modules[module_name]] if module_name in sys.modules else []
    package = module_name.rpartition(".")[0] + "."
    return [m for name, m in list(sys.modules.items()) if name.startswith(package) and m is not None]


def _generation_config_classes(modules: list[ModuleType]) -> list[type]:
    from transformers import GenerationConfig

    names = {m.__name__ for m in modules}
    found: dict[int, type] = {}
    for module in modules:
        for value in vars(module).values():
            if (
                isinstance(value, type)
                and issubclass(value, GenerationConfig)
                and value is not GenerationConfig
                and value.__module__ in names
            ):
                found[id(value)] = value
    return list(found.values())


def apply_class_shims(model_class: type) -> list[str]:
    """Apply the shims that must precede model construction; returns the names of those applied."""
    applied = []
    modules = remote_modules(model_class)
    for module in modules:
        if fix_rope_default(module):
            applied.append(f"fix_rope_default({module.__name__})")
    for cls in _generation_config_classes(modules):
        if fix_generation_config_validate(cls):
            applied.append(f"fix_generation_config_validate({cls.__name__})")
        if fix_generation_config_from_model_config(cls):
            applied.append(f"fix_generation_config_from_model_config({cls.__name__})")
    return applied


def fix_model_generation_config(model: Any) -> bool:
    """Replace a plain ``model.generation_config`` by the remote code's own generation config class.

    Symptom (Dream): transformers 5 builds ``model.generation_config`` with the plain
    ``GenerationConfig`` (the model class keeps the default ``generation_config_class``), which lacks
    ``eps``, ``steps``, ``alg``, ...; code that falls back on it fails with ``AttributeError``.
    Only done when the remote package defines exactly one generation config class.
    """
    current = getattr(model, "generation_config", None)
    if current is None:
        return False
    classes = _generation_config_classes(remote_modules(type(model)))
    if len(classes) != 1 or isinstance(current, classes[0]):
        return False
    cls = classes[0]
    fix_generation_config_from_model_config(cls)
    fixed = cls.from_model_config(model.config)
    for key, value in current.to_diff_dict().items():
        if not key.startswith("_") and key != "transformers_version":
            setattr(fixed, key, value)
    model.generation_config = fixed
    return True


def fix_rotary_buffers(model: Any) -> bool:
    """Recompute the ``inv_freq`` buffers of the remote code's rotary embeddings after loading.

    Symptom (Dream-style remote code; silent): transformers 5 builds a model on the meta device and
    materialises its non-persistent buffers, which are not in the checkpoint, as uninitialised memory;
    only ``PreTrainedModel._init_weights`` recomputes rotary ``inv_freq`` buffers, and remote code that
    overrides ``_init_weights`` (Dream does) never reaches that branch. The model then loads and runs
    without an error but its positions are encoded with garbage and its logits are noise. The buffers
    are recomputed with the module's own ``rope_init_fn`` (``'default'`` rope when it has none).
    """
    changed = False
    for module in model.modules():
        if "RotaryEmbedding" not in type(module).__name__:
            continue
        non_persistent = getattr(module, "_non_persistent_buffers_set", set())
        if "inv_freq" not in non_persistent or not isinstance(
            getattr(module, "inv_freq", None), torch.Tensor
        ):
            continue
        config = getattr(module, "config", None)
        rope_kwargs = dict(getattr(module, "rope_kwargs", None) or {})
        init_fn = getattr(module, "rope_init_fn", None)
        if init_fn is None:
            if getattr(module, "rope_type", "default") != "default":
                warnings.warn(f"cannot recompute the rotary buffers of {type(module).__name__}", stacklevel=2)
                continue
            init_fn = default_rope_init
        if config is None and not rope_kwargs:
            config = model.config
        inv_freq, _ = init_fn(config, module.inv_freq.device, **rope_kwargs)
        with torch.no_grad():
            module.inv_freq.copy_(inv_freq)
            original = getattr(module, "original_inv_freq", None)
            if "original_inv_freq" in module._buffers:
                original.copy_(inv_freq)
            elif original is not None:
                module.original_inv_freq = module.inv_freq  # an alias, as the 4.x-era code made it
        others = non_persistent - {"inv_freq", "original_inv_freq"}
        if others:
            warnings.warn(
                f"{type(module).__name__} has non-persistent buffers {sorted(others)} that transformers 5 "
                "may leave uninitialised; hf_lrdwm only recomputes inv_freq",
                stacklevel=2,
            )
        changed = True
    return changed


def apply_model_shims(model: Any, *, use_cache: bool = False) -> list[str]:
    """Apply the shims that act on a loaded model; returns the names of those applied."""
    applied = []
    if fix_use_cache(model.config, use_cache):
        applied.append("fix_use_cache")
    if fix_rotary_buffers(model):
        applied.append("fix_rotary_buffers")
    if fix_model_generation_config(model):
        applied.append("fix_model_generation_config")
    return applied
