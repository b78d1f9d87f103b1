"""Chapter 09 - the behaviour policy mu: the weights that sample, when they are not the trainer's.

Fast RL systems sample with an inference engine that holds its own copy of the weights, often in bf16,
and often some policy versions behind the learner. ``Sampler`` makes both on a CPU (``sampler.*`` keys):

    dtype        its copy in bfloat16 or float16 while the trainer scores in float32
    stale_steps  k: at step n it samples with theta_{n-1-k}, the weights of k updates ago (async training)
    top_k/top_p  a truncated sampling distribution while the trainer scores the full softmax (in ``sample``)

With none set it is the actor itself (no copy). Each copy costs one model of memory: k + 1 of them.
Checkpoints do not keep the old copies: a resumed stale sampler starts again from the resumed weights.
"""

import copy
from collections import deque

import torch

from .precision import DTYPES

__all__ = ["Sampler"]


class Sampler:
    """The weights ``rollout.sample`` draws from; ``sync`` after every policy update."""

    def __init__(self, lm, dtype: str = "", stale_steps: int = 0, top_k: int = 0, top_p: float = 1.0):
        self.dtype = DTYPES[dtype] if dtype else None
        self.stale_steps, self.top_k, self.top_p = stale_steps, top_k, top_p
        self.own = self.dtype is not None or stale_steps > 0  # False: sample with the actor itself
        self.mismatch = self.own or top_k > 0 or top_p < 1.0  # mu differs from pi_old beyond float rounding
        self.lm = lm
        if self.own:
            self.lm = copy.deepcopy(lm).to(self.dtype) if self.dtype is not None else copy.deepcopy(lm)
            self.lm.eval()
        self.versions = deque([self._snapshot(lm)], maxlen=stale_steps + 1) if stale_steps else None

    def options(self, compute_dtype, correction) -> dict:
        """``rollout.sample``'s keywords for these weights: the dtype (None for a copy: as its weights are), top-k,
        top-p, and ``behaviour`` (keep mu's logprobs) when mu may differ or ``correction`` (``correction.*``) reads
        it."""
        reads = correction.mode == "bypass" or correction.is_level is not None or correction.rs_level is not None
        dtype = None if self.dtype is not None else compute_dtype
        return {"dtype": dtype, "behaviour": self.mismatch or reads, "top_k": self.top_k, "top_p": self.top_p}

    def starts_at_ratio_one(self, correction) -> bool:
        """Whether the first update's ratio is 1 (``train.check_ratio``): not if bypass clips against a distinct mu."""
        return not (correction.mode == "bypass" and self.mismatch)

    @staticmethod
    def _snapshot(lm) -> dict:
        return {k: v.detach().clone() for k, v in lm.state_dict().items()}

    @torch.no_grad()
    def sync(self, lm) -> None:
        """Push the trainer's new weights: the sampler now holds those of ``stale_steps`` updates ago."""
        if not self.own:
            return
        if self.versions is None:  # fresh weights, in the sampler's dtype
            self.lm.load_state_dict(lm.state_dict())
            return
        self.versions.append(self._snapshot(lm))
        self.lm.load_state_dict(self.versions[0])  # theta_{n-k} (theta_0 until k updates have happened)
