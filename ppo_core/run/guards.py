"""NaN guards: what stops a run before anything broken is trained on or saved.

* a minibatch update with a non-finite loss or gradient is skipped and counted (``update.minibatch_update``
  does the skipping; ``skip_reason`` names the culprit);
* a non-finite rollout or parameter (``nonfinite_parameters``), or ``train.max_skipped_steps``
  all-skipped steps in a row, stops the run with ``NonFiniteError`` naming which tensor and which step,
  before anything broken is saved.
"""

import math

import torch

__all__ = ["DIVERGED_HINT", "NonFiniteError", "nonfinite_parameters", "skip_reason"]

DIVERGED_HINT = (
    "resume from the last good checkpoint with a lower ppo.lr or ppo.max_grad_norm, "
    "or model.dtype=bfloat16/float32 instead of float16"
)
"""The advice every NonFiniteError ends with."""


class NonFiniteError(RuntimeError):
    """NaN or inf where training cannot go on (a rollout tensor, a parameter): the run stops, nothing broken is saved."""


def nonfinite_parameters(module: torch.nn.Module) -> list[str]:
    """Names of the parameters holding NaN or inf (one device sync for the whole model)."""
    named = list(module.named_parameters())
    finite = torch.stack([torch.isfinite(p).all() for _, p in named])
    return [] if bool(finite.all()) else [n for (n, _), ok in zip(named, finite.tolist()) if not ok]


def skip_reason(stats: dict) -> str:
    """Which of the losses, or else the gradient, was non-finite in a skipped update."""
    losses = [k for k in ("loss/policy", "loss/value", "loss/entropy") if not math.isfinite(stats.get(k, 0.0))]
    return ", ".join(losses) if losses else f"gradient (params/grad_norm={stats.get('params/grad_norm')})"
