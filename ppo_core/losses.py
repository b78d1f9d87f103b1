"""Chapter 04 - the three PPO losses. Each returns ``(loss, stats)``; stats are plain floats.

    ratio_t  = pi_theta(a_t | s_t) / pi_old(a_t | s_t)      (old = the policy that sampled the rollout)
    L^CLIP   = E_t[ min(ratio_t A_t, clip(ratio_t, 1 - eps, 1 + eps) A_t) ]   (maximised)
    L^VF     = 1/2 E_t[ max((V - R)^2, (clip(V, V_old - eps, V_old + eps) - R)^2) ]
    L^ENT    = -E_t[ H(pi_theta(. | s_t)) ]

The frozen reference model never appears here: it enters only through the KL penalty in the reward.

How the per-token losses l_{i,t} become one number (``aggregate_loss``; chapter 07), with m the mask,
n_i = sum_t m_{i,t} the length of response i, and T_max a constant (the response length limit):

    token-mean                L = sum_{i,t} m l / sum_i n_i        every token weighs the same (PPO, default)
    seq-mean-token-mean       L = 1/B sum_i (sum_t m l / n_i)      every sequence weighs the same (GRPO)
    seq-mean-token-sum-norm   L = sum_{i,t} m l / (B * T_max)      a constant normaliser (Dr. GRPO)
"""

import torch

from .logprobs import entropy_from_logits
from .masking import masked_mean, masked_sum

__all__ = ["policy_loss", "value_loss", "entropy_loss", "aggregate_loss", "LOSS_AGG_MODES"]

LOSS_AGG_MODES = ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum-norm")


def policy_loss(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    clip_eps: float = 0.2,
    loss_agg_mode: str = "token-mean",
    norm_len: int | None = None,
) -> tuple[torch.Tensor, dict]:
    """Clipped surrogate loss (to minimise): masked mean of max(-A * ratio, -A * clip(ratio, 1 +- eps)).

    All inputs (B, T); ``old_logprobs`` and ``advantages`` are constants (computed at rollout time).
    ``loss_agg_mode`` (and ``norm_len``) pick how the per-token terms are averaged (``aggregate_loss``,
    chapter 07); the stats are token means whatever the mode.
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
    loss = aggregate_loss(torch.maximum(unclipped, clipped), mask, loss_agg_mode, norm_len)
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


def aggregate_loss(
    loss_mat: torch.Tensor, mask: torch.Tensor, loss_agg_mode: str = "token-mean", norm_len: int | None = None
) -> torch.Tensor:
    """(B, T) per-token losses -> scalar, over the True entries of ``mask`` only (see the module docstring).

    ``norm_len`` is T_max of ``seq-mean-token-sum-norm`` (default: ``mask.shape[1]``, the padded length,
    which is the response limit when responses are padded to it). Rows with no True token do not count
    in ``seq-mean-token-mean``'s average over sequences.
    """
    if loss_agg_mode == "token-mean":
        return masked_mean(loss_mat, mask)
    mask = mask.to(torch.bool)
    if loss_agg_mode == "seq-mean-token-mean":
        per_seq = masked_mean(loss_mat, mask, dim=1)  # (B,)
        has_tokens = mask.any(dim=1)
        return masked_mean(per_seq, has_tokens)
    if loss_agg_mode == "seq-mean-token-sum-norm":
        B, T = mask.shape
        return masked_sum(loss_mat, mask) / (B * (norm_len or T))
    raise ValueError(f"unknown loss_agg_mode {loss_agg_mode!r}; choose one of {', '.join(LOSS_AGG_MODES)}")
