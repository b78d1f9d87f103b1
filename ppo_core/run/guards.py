"""NaN guards: what stops a run before anything broken is trained on or saved.

* a minibatch update with a non-finite loss or gradient is skipped and counted (``update.minibatch_update``
  skips it; ``SkippedUpdates`` warns, naming the culprit, and counts all-skipped steps in a row);
* a non-finite rollout (``check_rollout``) or parameter (``check_parameters``), or
  ``train.max_skipped_steps`` all-skipped steps in a row, stops the run with ``NonFiniteError``
  naming which tensor and which step, before anything broken is saved.
"""

import math
import warnings

import torch

from .checkpoint import latest_checkpoint

__all__ = [
    "DIVERGED_HINT",
    "NonFiniteError",
    "nonfinite_parameters",
    "skip_reason",
    "check_rollout",
    "check_parameters",
    "SkippedUpdates",
]

DIVERGED_HINT = (
    "resume from the last good checkpoint with a lower ppo.lr or ppo.max_grad_norm, "
    "or model.dtype=bfloat16/float32 instead of float16"
)
"""The advice every NonFiniteError ends with."""


class NonFiniteError(RuntimeError):
    """NaN or inf where training cannot go on (a rollout tensor, a parameter): the run stops, nothing broken is
    saved."""


def nonfinite_parameters(module: torch.nn.Module) -> list[str]:
    """Names of the parameters holding NaN or inf (one device sync for the whole model)."""
    named = list(module.named_parameters())
    finite = torch.stack([torch.isfinite(p).all() for _, p in named])
    return [] if bool(finite.all()) else [n for (n, _), ok in zip(named, finite.tolist()) if not ok]


def skip_reason(stats: dict) -> str:
    """Which of the losses, or else the gradient, was non-finite in a skipped update."""
    losses = [k for k in ("policy/loss", "value/loss", "policy/entropy_loss") if not math.isfinite(stats.get(k, 0.0))]
    return ", ".join(losses) if losses else f"gradient (train/grad_norm={stats.get('train/grad_norm')})"


def last_good(out) -> str:
    """'last good checkpoint: ...' for the error messages."""
    ckpt = latest_checkpoint(out)
    return f"last good checkpoint: {ckpt}" if ckpt else "no checkpoint saved yet"


def sampling_failed(err: RuntimeError, step: int, out) -> NonFiniteError | None:
    """The NonFiniteError for ``torch.multinomial`` on NaN/inf probabilities, or None for another error."""
    if "probability tensor contains" not in str(err):
        return None
    return NonFiniteError(
        f"step {step}: sampling failed, the policy's next-token probabilities hold NaN/inf "
        f"({last_good(out)}); {DIVERGED_HINT}"
    )


def check_rollout(ro, step: int, out) -> None:
    """Stop before an update built from NaN: name the rollout tensor that holds it."""
    tensors = {
        "old logprobs": ro.logprobs[ro.mask],
        "values": ro.values[ro.mask] if ro.values is not None else ro.logprobs[:0],  # none without a critic
        "reference logprobs": ro.ref_logprobs[ro.mask],
        "scores": ro.scores,
    }
    finite = torch.stack([torch.isfinite(x).all() for x in tensors.values()]).tolist()
    bad = [name for name, ok in zip(tensors, finite) if not ok]
    if bad:
        raise NonFiniteError(
            f"step {step}: the rollout's {', '.join(bad)} hold NaN/inf before the update "
            f"({last_good(out)}); {DIVERGED_HINT}"
        )


def check_parameters(actor, step: int, out) -> None:
    """After a step's update: stop if a parameter holds NaN/inf (it is then never saved)."""
    bad = nonfinite_parameters(actor)
    if bad:
        raise NonFiniteError(
            f"step {step}: parameter(s) {', '.join(bad[:3])}{' ...' if len(bad) > 3 else ''} "
            f"hold NaN/inf after the update; not saved ({last_good(out)}); {DIVERGED_HINT}"
        )


class SkippedUpdates:
    """Counts skipped minibatch updates; stops the run after ``limit`` all-skipped steps in a row (0: never)."""

    def __init__(self, limit: int):
        self.limit, self.streak, self.reasons = limit, 0, set()

    def skipped(self, stats: dict, where: str) -> None:
        """Note one skipped update (``stats`` as returned by ``minibatch_update``) and warn."""
        self.reasons.add(skip_reason(stats))
        warnings.warn(
            f"{where}: update skipped (non-finite {skip_reason(stats)}); the parameters were not changed",
            stacklevel=3,
        )

    def end_step(self, all_skipped: bool, step: int, out) -> None:
        """After a step: raise NonFiniteError when ``limit`` steps in a row skipped every update."""
        self.streak = self.streak + 1 if all_skipped else 0
        if not all_skipped:
            self.reasons = set()
        if self.limit and self.streak >= self.limit:
            raise NonFiniteError(
                f"steps {step - self.streak + 1}-{step}: every update was skipped (non-finite "
                f"{', '.join(sorted(self.reasons))}); stopping ({last_good(out)}); {DIVERGED_HINT}"
            )
