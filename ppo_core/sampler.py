"""Chapter 09 - the behaviour policy mu: the weights that sample, when they are not the trainer's.

Fast RL systems sample with an inference engine that holds its own copy of the weights, often in bf16,
and often some policy versions behind the learner. ``Sampler`` makes both on a CPU (``sampler.*`` keys):

    dtype         its copy in bfloat16 or float16 while the trainer scores in float32
    stale_steps   k: at step n it samples with theta_{n-1-k}, the weights of k updates ago (async training)
    weight_noise  s: its copy's weights perturbed by s * std(w) * N(0, 1), a fixed draw: a mismatch of any size
    top_k/top_p   a truncated sampling distribution while the trainer scores the full softmax (in ``sample``)
    keep_sampling_mask  the fix for top-k/top-p: pi_old and pi_theta are scored on the sampler's support too
                  (DeepSeek-V3.2's "Keep Sampling Mask", arXiv:2512.02556); one bool per vocabulary entry per token

With none set it is the actor itself (no copy). Each copy costs one model of memory: k + 1 of them.
Checkpoints do not keep the old copies: a resumed stale sampler starts again from the resumed weights.
"""

import copy
from collections import deque

import torch

from .precision import DTYPES

__all__ = ["Sampler", "apply_sampling_mask"]

NOISE_SEED = 1234  # the noise is one fixed draw: the same "other engine" at every sync, not fresh noise per step


MASKED_LOGIT = -1e4  # not -inf: exp underflows to exactly 0 all the same, and no 0 * inf reaches a gradient


def apply_sampling_mask(logits: torch.Tensor, sampling_mask: torch.Tensor) -> torch.Tensor:
    """(B, T, V) logits set to ``MASKED_LOGIT`` where the sampler's top-k/top-p could not draw (``sampling_mask``
    False): their softmax is the sampler's renormalised nucleus, the distribution the tokens were drawn from."""
    return logits.masked_fill(~sampling_mask.to(logits.device), MASKED_LOGIT)


class Sampler:
    """The weights ``rollout.sample`` draws from; ``sync`` after every policy update."""

    def __init__(self, lm, dtype: str = "", stale_steps: int = 0, top_k: int = 0, top_p: float = 1.0,
                 weight_noise: float = 0.0, keep_sampling_mask: bool = False):  # fmt: skip
        self.dtype = DTYPES[dtype] if dtype else None
        self.stale_steps, self.top_k, self.top_p, self.weight_noise = stale_steps, top_k, top_p, weight_noise
        self.keep_sampling_mask = keep_sampling_mask and (top_k > 0 or top_p < 1.0)  # nothing to keep otherwise
        self.own = self.dtype is not None or stale_steps > 0 or weight_noise > 0  # False: sample with the actor
        self.mismatch = self.own or top_k > 0 or top_p < 1.0  # mu differs from pi_old beyond float rounding
        self.lm = lm
        if self.own:
            self.lm = copy.deepcopy(lm).to(self.dtype) if self.dtype is not None else copy.deepcopy(lm)
            self.lm.eval()
            self._perturb()
        self.versions = deque([self._snapshot(lm)], maxlen=stale_steps + 1) if stale_steps else None

    def options(self, compute_dtype, correction) -> dict:
        """``rollout.sample``'s keywords for these weights: the dtype (None for a copy: as its weights are), top-k,
        top-p, ``keep_sampling_mask`` and ``behaviour`` (keep mu's logprobs) when mu may differ or ``correction``
        (``correction.*``) reads it."""
        reads = correction.mode == "bypass" or correction.is_level is not None or correction.rs_level is not None
        dtype = None if self.dtype is not None else compute_dtype
        return {"dtype": dtype, "behaviour": self.mismatch or reads, "top_k": self.top_k, "top_p": self.top_p,
                "keep_sampling_mask": self.keep_sampling_mask}  # fmt: skip

    def starts_at_ratio_one(self, correction) -> bool:
        """Whether the first update's ratio is 1 (``train.check_ratio``): not if bypass clips against a distinct mu."""
        return not (correction.mode == "bypass" and self.mismatch)

    @staticmethod
    def _snapshot(lm) -> dict:
        return {k: v.detach().clone() for k, v in lm.state_dict().items()}

    @torch.no_grad()
    def _perturb(self) -> None:
        """Add the fixed noise ``weight_noise * std(w) * N(0, 1)`` to every floating weight of the copy."""
        if not self.weight_noise:
            return
        g = torch.Generator().manual_seed(NOISE_SEED)
        for p in self.lm.parameters():
            if p.is_floating_point() and p.numel() > 1:
                noise = torch.randn(p.shape, generator=g).to(p.device, p.dtype)
                p.add_(noise * (self.weight_noise * p.float().std().item()))

    @torch.no_grad()
    def sync(self, lm) -> None:
        """Push the trainer's new weights: the sampler now holds those of ``stale_steps`` updates ago."""
        if not self.own:
            return
        if self.versions is None:  # fresh weights, in the sampler's dtype
            self.lm.load_state_dict(lm.state_dict())
        else:
            self.versions.append(self._snapshot(lm))
            self.lm.load_state_dict(self.versions[0])  # theta_{n-k} (theta_0 until k updates have happened)
        self._perturb()
