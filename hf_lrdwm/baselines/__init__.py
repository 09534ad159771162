"""Reference re-implementations of peer watermarks, for side-by-side benchmarks and evaluation only.

Written from the papers' descriptions (see ``docs/benchmarks.md``), not from anybody's code. They are
never imported by ``hf_lrdwm`` itself and never used by default: import this package explicitly.

Every class here is an :class:`~hf_lrdwm.LRDWMLogitsProcessor` subclass with the same call protocol
(``processor(input_ids [B, L] canvas, scores [B, L, V]) -> scores``, ``in_place``, ``reset()``,
``vocab_size``, ``mask_token_id``, ``config``), so every sampler of this package accepts it as
``watermark=``:

* :class:`KGWLeftProcessor`: the naive left-only adaptation of KGW (left neighbour only; KGW's
  ``randperm`` green lists seeded by ``key * previous_token``, or our hash).
* :class:`DMarkStyleProcessor`: DMARK-style: the whole V x V boolean green table built once; left
  neighbour row plus right neighbour column.
* :class:`WMDLMStyleProcessor`: WM-DLM-style: expected green mass over the neighbours' predicted
  distributions (top-k), its gradient by autograd, ``delta * gradient`` added to the logits.

Each class docstring lists what it simplifies.

>>> import torch
>>> from hf_lrdwm import LRDWMConfig
>>> from hf_lrdwm.baselines import KGWLeftProcessor
>>> proc = KGWLeftProcessor(config=LRDWMConfig(key="k"), vocab_size=50, mask_token_id=49)
>>> out = proc(torch.tensor([[3, 49, 49]]), torch.zeros(1, 3, 50))
>>> int((out[0, 1] > 0).sum()), int((out[0, 2] > 0).sum())  # gamma * V green at the frontier only
(25, 0)
"""

from __future__ import annotations

from .dmark import DMarkStyleProcessor, build_dmark_table, dmark_table_nbytes
from .kgw import KGWLeftProcessor
from .wmdlm import WMDLMStyleProcessor

__all__ = [
    "KGWLeftProcessor",
    "DMarkStyleProcessor",
    "WMDLMStyleProcessor",
    "build_dmark_table",
    "dmark_table_nbytes",
    "BASELINES",
]

#: Name -> class, for benchmark scripts.
BASELINES = {
    "kgw-left": KGWLeftProcessor,
    "dmark": DMarkStyleProcessor,
    "wmdlm": WMDLMStyleProcessor,
}
