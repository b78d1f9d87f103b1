"""Chapter 04 - the three PPO losses. Each returns ``(loss, stats)``; stats are plain floats.

    ratio_t  = pi_theta(a_t | s_t) / pi_old(a_t | s_t)      (old = the policy that sampled the rollout)
    L^CLIP   = E_t[ min(ratio_t A_t, clip(ratio_t, 1 - eps, 1 + eps) A_t) ]   (maximised)
    L^VF     = 1/2 E_t[ max((V - R)^2, (clip(V, V_old - eps, V_old + eps) - R)^2) ]
    L^ENT    = -E_t[ H(pi_theta(. | s_t)) ]

The frozen reference model never appears here: it enters only through the KL penalty in the reward.
"""

import torch

from .logprobs import entropy_from_logits
from .masking import masked_mean

__all__ = ["policy_loss", "value_loss", "entropy_loss"]


def policy_loss(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    clip_eps: float = 0.2,
) -> tuple[torch.Tensor, dict]:
    """Clipped surrogate loss (to minimise): masked mean of max(-A * ratio, -A * clip(ratio, 1 +- eps)).

    All inputs (B, T); ``old_logprobs`` and ``advantages`` are constants (computed at rollout time).
    stats: ``clipfrac`` (share of tokens where the clipped term is the active one), ``approx_kl``
    (k3 estimate of KL(pi_old || pi_theta), see joschu.net/blog/kl-approx.html), ``ratio_mean``.
    """
    # Zero the log-ratio off the mask *before* exp: an overflow there would give 0 * inf = NaN gradients.
    log_ratio = torch.where(
        mask.to(torch.bool), logprobs - old_logprobs, torch.zeros((), dtype=logprobs.dtype)
    )  # (B, T)
    ratio = torch.exp(log_ratio)
    unclipped = -advantages * ratio
    clipped = -advantages * torch.clamp(ratio, 1.0 - clip_eps, 1.0 + clip_eps)
    loss = masked_mean(torch.maximum(unclipped, clipped), mask)
    with torch.no_grad():
        stats = {
            "clipfrac": masked_mean((clipped > unclipped).to(ratio.dtype), mask).item(),
            "approx_kl": masked_mean((ratio - 1.0) - log_ratio, mask).item(),
            "ratio_mean": masked_mean(ratio, mask).item(),
        }
    return loss, stats


def value_loss(
    values: torch.Tensor,
    old_values: torch.Tensor,
    returns: torch.Tensor,
    mask: torch.Tensor,
    clip_eps: float = 0.2,
) -> tuple[torch.Tensor, dict]:
    """Clipped value loss: 1/2 * masked mean of max((V - R)^2, (clip(V, V_old +- eps) - R)^2).

    All inputs (B, T). stats: ``clipfrac``, the share of tokens where the clipped error is larger.
    """
    values_clipped = old_values + torch.clamp(values - old_values, -clip_eps, clip_eps)
    err = (values - returns) ** 2
    err_clipped = (values_clipped - returns) ** 2
    loss = 0.5 * masked_mean(torch.maximum(err, err_clipped), mask)
    with torch.no_grad():
        stats = {"clipfrac": masked_mean((err_clipped > err).to(err.dtype), mask).item()}
    return loss, stats


def entropy_loss(logits: torch.Tensor, mask: torch.Tensor, temperature: float = 1.0) -> tuple[torch.Tensor, dict]:
    """Negative mean entropy of the full next-token distribution, (B, T, V) logits and (B, T) mask.

    Minimising it raises the entropy. stats: ``entropy`` (the masked mean, in nats).
    """
    entropy = entropy_from_logits(logits, temperature)  # (B, T)
    mean_entropy = masked_mean(entropy, mask)
    return -mean_entropy, {"entropy": mean_entropy.item()}
