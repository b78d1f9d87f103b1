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

Each denominator is a count over the whole minibatch (``loss_units``): a micro-batch or a rank that
holds part of it passes the minibatch's count as ``units``, so the parts' losses add up to the minibatch's
loss and so do their gradients (dividing by a part's own count is the gradient-accumulation bug; chapter 08).
"""

import torch

from .logprobs import entropy_from_logits
from .masking import masked_mean, masked_sum
from .registry import POLICY_LOSSES, PolicySwitches

__all__ = [
    "policy_loss",
    "vanilla_loss",
    "value_loss",
    "entropy_loss",
    "aggregate_loss",
    "loss_units",
    "token_stat",
    "LOSS_AGG_MODES",
]

LOSS_AGG_MODES = ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum-norm")


def policy_loss(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    clip_eps: float = 0.2,
    loss_agg_mode: str = "token-mean",
    norm_len: int | None = None,
    *,
    clip_eps_low: float | None = None,
    clip_eps_high: float | None = None,
    dual_clip_c: float | None = None,
    units=None,
) -> tuple[torch.Tensor, dict]:
    """Clipped surrogate loss (to minimise): masked mean of max(-A * ratio, -A * clip(ratio, 1 - eps_lo, 1 + eps_hi)).

    All inputs (B, T); ``old_logprobs`` and ``advantages`` are constants (computed at rollout time).
    ``loss_agg_mode`` (``norm_len``, ``units``) pick how the per-token terms are averaged (``aggregate_loss``,
    chapter 07); the stats are token means whatever the mode (``token_stat``). Chapter 08's switches (veRL's keys
    in brackets):
    ``clip_eps_low`` / ``clip_eps_high`` (clip_ratio_low / high; None: ``clip_eps``; DAPO's clip-higher
    raises the upper one), ``dual_clip_c`` (clip_ratio_c; None: off): for A < 0 the term is also capped at
    -A * c, so a token whose ratio exploded cannot dominate (Ye et al. 2019, arXiv 1912.09729).
    stats: ``clipfrac`` (share of tokens where the clipped term is the active one), ``clipfrac_lower`` (share
    where the dual clip is), ``approx_kl`` (k3 estimate of KL(pi_old || pi_theta), joschu.net/blog/kl-approx.html),
    ``ratio_mean``.
    """
    lo = clip_eps if clip_eps_low is None else clip_eps_low
    hi = clip_eps if clip_eps_high is None else clip_eps_high
    # Zero the log-ratio off the mask *before* exp: an overflow there would give 0 * inf = NaN gradients.
    log_ratio = torch.where(
        mask.to(torch.bool), logprobs - old_logprobs, torch.zeros((), dtype=logprobs.dtype)
    )  # (B, T)
    ratio = torch.exp(log_ratio)
    unclipped = -advantages * ratio
    clipped = -advantages * torch.clamp(ratio, 1.0 - lo, 1.0 + hi)
    loss_mat = torch.maximum(unclipped, clipped)  # (B, T)
    dual = torch.zeros_like(mask, dtype=torch.bool)
    if dual_clip_c is not None:
        cap = -advantages * dual_clip_c
        dual = (advantages < 0) & (loss_mat > cap)
        loss_mat = torch.where(advantages < 0, torch.minimum(loss_mat, cap), loss_mat)
    loss = aggregate_loss(loss_mat, mask, loss_agg_mode, norm_len, units)
    with torch.no_grad():
        stats = {
            "clipfrac": token_stat(clipped > unclipped, mask, units),
            "clipfrac_lower": token_stat(dual, mask, units),
            "approx_kl": token_stat((ratio - 1.0) - log_ratio, mask, units),
            "ratio_mean": token_stat(ratio, mask, units),
        }
    return loss, stats


@POLICY_LOSSES.register("vanilla", openrlhf="ppo")
def vanilla_loss(logprobs, old_logprobs, advantages, mask, s: PolicySwitches, **agg) -> tuple[torch.Tensor, dict]:
    """``policy_loss`` as an entry of ``registry.POLICY_LOSSES``: PPO's clip, clip-higher, dual clip."""
    return policy_loss(logprobs, old_logprobs, advantages, mask, s.clip_eps, clip_eps_low=s.low,
                       clip_eps_high=s.high, dual_clip_c=s.dual_clip_c, **agg)  # fmt: skip


def value_loss(
    values: torch.Tensor,
    old_values: torch.Tensor,
    returns: torch.Tensor,
    mask: torch.Tensor,
    clip_eps: float = 0.2,
    *,
    units=None,
) -> tuple[torch.Tensor, dict]:
    """Clipped value loss: 1/2 * masked mean of max((V - R)^2, (clip(V, V_old +- eps) - R)^2).

    All inputs (B, T); a token mean (``units``: the minibatch's token count, see ``aggregate_loss``).
    stats: ``clipfrac``, the share of tokens where the clipped error is larger.
    """
    values_clipped = old_values + torch.clamp(values - old_values, -clip_eps, clip_eps)
    err = (values - returns) ** 2
    err_clipped = (values_clipped - returns) ** 2
    loss = 0.5 * aggregate_loss(torch.maximum(err, err_clipped), mask, "token-mean", units=units)
    with torch.no_grad():
        stats = {"clipfrac": token_stat(err_clipped > err, mask, units)}
    return loss, stats


def entropy_loss(
    logits: torch.Tensor, mask: torch.Tensor, temperature: float = 1.0, *, units=None
) -> tuple[torch.Tensor, dict]:
    """Negative mean entropy of the full next-token distribution, (B, T, V) logits and (B, T) mask.

    Minimising it raises the entropy; a token mean (``units`` as in ``value_loss``).
    stats: ``entropy`` (the masked mean over these tokens, in nats).
    """
    entropy = entropy_from_logits(logits, temperature)  # (B, T)
    loss = -aggregate_loss(entropy, mask, "token-mean", units=units)
    return loss, {"entropy": token_stat(entropy.detach(), mask, units)}


def aggregate_loss(
    loss_mat: torch.Tensor,
    mask: torch.Tensor,
    loss_agg_mode: str = "token-mean",
    norm_len: int | None = None,
    units=None,
) -> torch.Tensor:
    """(B, T) per-token losses -> scalar, over the True entries of ``mask`` only (see the module docstring).

    ``norm_len`` is T_max of ``seq-mean-token-sum-norm`` (default: ``mask.shape[1]``, the padded length,
    which is the response limit when responses are padded to it). Rows with no True token do not count
    in ``seq-mean-token-mean``'s average over sequences. ``units``: the denominator's count over the whole
    minibatch when these rows are a part of it (``loss_units(minibatch_mask)``); None: these rows' own count.
    """
    if loss_agg_mode not in LOSS_AGG_MODES:
        raise ValueError(f"unknown loss_agg_mode {loss_agg_mode!r}; choose one of {', '.join(LOSS_AGG_MODES)}")
    mask = mask.to(torch.bool)
    n = loss_units(mask) if units is None else units  # a count, or loss_units' dict of them
    n = n[loss_agg_mode] if isinstance(n, dict) else n
    n = torch.as_tensor(n, dtype=loss_mat.dtype, device=loss_mat.device).clamp(min=1)
    if loss_agg_mode == "token-mean":
        return masked_sum(loss_mat, mask) / n
    if loss_agg_mode == "seq-mean-token-mean":
        per_seq = masked_mean(loss_mat, mask, dim=1)  # (B,), 0 for a row without tokens
        return per_seq.sum() / n
    return masked_sum(loss_mat, mask) / (n * (norm_len or mask.shape[1]))  # seq-mean-token-sum-norm


def loss_units(mask: torch.Tensor) -> dict:
    """What each ``loss_agg_mode`` divides by, counted in a (B, T) ``mask``: tokens (token-mean), responses
    with a token (seq-mean-token-mean), responses (seq-mean-token-sum-norm, times T_max). Plain ints."""
    mask = mask.to(torch.bool)
    return {
        "token-mean": int(mask.sum()),
        "seq-mean-token-mean": int(mask.any(dim=1).sum()),
        "seq-mean-token-sum-norm": int(mask.shape[0]),
    }


def token_stat(x: torch.Tensor, mask: torch.Tensor, units=None) -> float:
    """A logged token mean of (B, T) ``x`` as a float; with ``units`` (``loss_units``' dict of the whole
    minibatch) these rows' share of the minibatch's mean, so that the parts' stats add up as their losses do."""
    with torch.no_grad():
        n = units["token-mean"] if isinstance(units, dict) else None
        x = x.detach() if x.is_floating_point() else x.float()  # a bool indicator counts as 0 / 1
        return aggregate_loss(x, mask, "token-mean", units=n).item()
