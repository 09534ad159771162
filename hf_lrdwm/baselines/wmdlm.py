"""WM-DLM-style watermark: delta times the gradient of the expected green mass, by autograd."""

from __future__ import annotations

import torch

from ..config import LRDWMConfig
from ..hashing import green_pairs
from ._base import BaselineProcessor

__all__ = ["WMDLMStyleProcessor"]


def _next_pow2(n: int) -> int:
    return 1 << (n - 1).bit_length()


class WMDLMStyleProcessor(BaselineProcessor):
    """Expected-green-mass watermark in the style of WM-DLM (Gloaguen et al. 2025).

    At every call, for the whole canvas:

    1. ``q_t = softmax(scores_t / temperature)`` at masked positions and the one-hot of the token at
       revealed ones (a [B, L, V] float32 tensor, the leaf of the autograd graph);
    2. the distribution ``h_t`` of the context hash of each position from its neighbours'
       distributions, truncated to the ``top_k`` most likely values: ``context="left"``: the hash is the
       left neighbour's id, ``h_t = topk(q_{t-1})``; ``context="both"``: it is the sum of the left and
       right ids, whose distribution is the convolution of ``topk(q_{t-1})`` and ``topk(q_{t+1})``,
       truncated to its ``top_k`` most likely values. ``conv="fft"`` (WM-DLM's way) scatters both back
       to length V and convolves them by FFT over ``2V`` points at every position (O(L V log V) per
       call: about 30-60x a vanilla LLaDA step at V = 126,464 on a CPU); ``conv="outer"`` (default)
       forms the ``k x k`` pairwise sums of the two supports directly and keeps the ``top_k`` most
       likely pairs (the same convolution restricted to the top-k supports, O(L k^2); repeated sums
       are kept as separate terms, which leaves ``J`` unchanged, so only the truncation differs);
    3. the energy ``J = sum_t h_t^T G q_t`` over ``top_k`` context values x ``top_k`` tokens of
       ``q_t``, where ``G[c, v] = green(k_L, c, v)`` is a stateless keyed hash (our SplitMix64 hash,
       no table);
    4. ``grad = dJ/dq`` by autograd ([B, L, V]): for a token, its expected greenness under the
       uncertain context plus how much it would make its neighbours green;
    5. ``scores += delta * grad`` at masked positions (revealed positions are untouched).

    ``temperature`` is the watermark's own (WM-DLM divides by the sampler's temperature and cannot run
    at temperature 0; here any sampler temperature works).

    Simplifications: a fixed ``delta`` (no bisection for a KL budget); positions without the
    neighbours their context needs (the first one, and the last one with ``context="both"``) get no
    own term; our hash replaces WM-DLM's; one gradient step (no fixed-point iteration).
    """

    name = "wmdlm"

    def __init__(
        self,
        *,
        config: LRDWMConfig,
        vocab_size: int,
        mask_token_id: int,
        context: str = "left",
        conv: str = "outer",
        top_k: int = 50,
        temperature: float = 1.0,
        device: torch.device | str | None = None,
        in_place: bool = False,
    ) -> None:
        super().__init__(
            config=config,
            vocab_size=vocab_size,
            mask_token_id=mask_token_id,
            device=device,
            in_place=in_place,
        )
        if context not in ("left", "both"):
            raise ValueError(f"`context` must be 'left' or 'both', got {context!r}")
        if isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 1:
            raise ValueError(f"`top_k` must be an int >= 1, got {top_k!r}")
        if not float(temperature) > 0:
            raise ValueError(f"`temperature` must be > 0, got {temperature!r}")
        if conv not in ("outer", "fft"):
            raise ValueError(f"`conv` must be 'outer' or 'fft', got {conv!r}")
        self.context = context
        self.conv = conv
        self.top_k = min(top_k, vocab_size)
        self.temperature = float(temperature)

    def distributions(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        """``q`` [B, L, V] float32: softmax at masked positions, one-hot at revealed ones."""
        q = torch.softmax(scores.float() / self.temperature, dim=-1)
        revealed = (input_ids != self.mask_token_id)[..., None]
        q.masked_fill_(revealed, 0.0)
        q.scatter_add_(-1, input_ids[..., None], revealed.to(q.dtype))
        return q

    def energy(self, q: torch.Tensor) -> torch.Tensor:
        """``J(q)``: the expected number of green tokens (top-k truncated), differentiable in ``q``."""
        k = self.top_k
        vals, idx = q.topk(k, dim=-1)  # [B, L, k]
        if self.context == "left":
            h_vals, h_ctx = vals[:, :-1], idx[:, :-1]
            tok_vals, tok_idx = vals[:, 1:], idx[:, 1:]
        elif self.conv == "fft":
            V = q.shape[-1]
            n = _next_pow2(2 * V - 1)
            sparse = torch.zeros_like(q).scatter(-1, idx, vals)
            spec = torch.fft.rfft(sparse, n=n)
            conv = torch.fft.irfft(spec[:, :-2] * spec[:, 2:], n=n)[..., : 2 * V - 1]
            h_vals, h_ctx = conv.topk(k, dim=-1)  # distribution of x_{t-1} + x_{t+1}, t = 1 .. L-2
            tok_vals, tok_idx = vals[:, 1:-1], idx[:, 1:-1]
        else:  # "outer": the k x k sums of the two top-k supports, then the k most likely pairs
            B, L = q.shape[:2]
            pair_p = (vals[:, :-2, :, None] * vals[:, 2:, None, :]).reshape(B, L - 2, k * k)
            pair_c = (idx[:, :-2, :, None] + idx[:, 2:, None, :]).reshape(B, L - 2, k * k)
            h_vals, top = pair_p.topk(k, dim=-1)
            h_ctx = pair_c.gather(-1, top)
            tok_vals, tok_idx = vals[:, 1:-1], idx[:, 1:-1]
        green = green_pairs(
            self.config.key_left, h_ctx[..., :, None], tok_idx[..., None, :], self.config.gamma
        )
        return torch.einsum("blc,blcv,blv->", h_vals, green.to(q.dtype), tok_vals)

    def gradient(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        """``dJ/dq`` [B, L, V] float32 at the canvas' distributions."""
        input_ids = input_ids.to(scores.device)
        with torch.enable_grad():
            q = self.distributions(input_ids, scores.detach()).requires_grad_(True)
            if q.shape[1] < (2 if self.context == "left" else 3):
                return torch.zeros_like(q, requires_grad=False)
            (grad,) = torch.autograd.grad(self.energy(q), q)
        return grad

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        out = self._output(input_ids, scores)
        if self.config.delta == 0.0:
            return out
        input_ids = input_ids.to(scores.device)
        grad = self.gradient(input_ids, scores)
        grad.mul_((input_ids == self.mask_token_id)[..., None].to(grad.dtype))
        out.add_(grad, alpha=self.config.delta)
        return out
