"""Chapter 09 - when the sampler is not the learner: importance weights between pi_old and the sampler mu.

Three policies: mu (the behaviour policy, the sampler's logprobs as it reports them), pi_old (the same
weights scored by the trainer before the update) and pi_theta. With the per-token log-ratio
l_t = log pi_old(a_t) - log mu(a_t) and rho_t = exp(l_t), the corrections (veRL's ``rollout_is`` /
``rollout_rs``; chapters/09_sampler_mismatch) give each token a weight w and a keep-mask k:

    token TIS      w_t = min(rho_t, C)                       biased, low variance (Yao et al., 2025)
    sequence TIS   w_t = min(prod_s rho_s, C)                 the whole sequence's weight, on each token
    token MIS      k_t = [lo <= rho_t <= hi]                  drop outlier tokens (veRL rollout_rs=token)
    sequence MIS   k_t = [lo <= prod_s rho_s <= hi]           drop outlier sequences
    geometric MIS  k_t = [lo <= exp(mean_s l_s) <= hi]        per-token average, length-free
    IcePop         w_t = rho_t [lo <= rho_t <= hi]            token TIS (C = hi) + token MIS: a two-sided mask

Decoupled mode clips against pi_old and multiplies each token's policy loss by w (rejected tokens leave
the mask); bypass mode sets pi_old := mu. Every weight is 1 and every token kept when mu = pi_old.
All tensors (B, T); masks boolean; weights are constants (no gradient) and 0 off the mask.

Where veRL differs (verl/trainer/ppo/rollout_corr_helper.py): its IcePop (rollout_is_threshold "lo_hi") and
the IcePop paper (arXiv:2510.18855) keep rejected tokens in the token mean's count with weight 0; here they
leave it (as with veRL's rollout_rs). veRL's token_k1 rejection bounds mu / pi_old, this module pi_old / mu:
the same tokens for symmetric bounds (lo = 1 / hi), [lo, hi] here is [1 / hi, 1 / lo] there.
"""

import torch

from .masking import masked_mean, masked_sum
from .registry import CORRECTION_LEVELS

__all__ = [
    "CORRECTION_LEVELS",
    "IS_LEVELS",
    "RS_LEVELS",
    "MODES",
    "SAFETY_BOUND",
    "importance_weights",
    "truncated_weights",
    "rejection_mask",
    "icepop_weights",
    "rollout_correction",
    "mismatch_metrics",
    "policy_inputs",
]

MODES = ("decoupled", "bypass")
SAFETY_BOUND = 20.0  # |log weight| is clamped to 20 before exp (veRL's bound): e^20 ~ 5e8, never inf


@CORRECTION_LEVELS.register("token", truncated=True)
def _token(log_ratio: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """l_t: each token's own weight."""
    return log_ratio


@CORRECTION_LEVELS.register("sequence", truncated=True)
def _sequence(log_ratio: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """sum_s l_s: the whole sequence's weight on each token, (B, 1) -> (B, T)."""
    return masked_sum(log_ratio, mask, dim=1).unsqueeze(1).expand_as(log_ratio)


@CORRECTION_LEVELS.register("geometric")
def _geometric(log_ratio: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """mean_s l_s: the per-token average, length-free (rejection only)."""
    return masked_mean(log_ratio, mask, dim=1).unsqueeze(1).expand_as(log_ratio)


RS_LEVELS = CORRECTION_LEVELS  # every level rejects; truncated weights at the levels registered truncated=True
IS_LEVELS = CORRECTION_LEVELS.names(truncated=True)  # those registered after import: CORRECTION_LEVELS.names(...)


def _level_log_ratio(log_ratio: torch.Tensor, mask: torch.Tensor, level: str) -> torch.Tensor:
    """(B, T) token log-ratios -> the level's log weight, broadcast to (B, T) (an entry of ``CORRECTION_LEVELS``)."""
    return CORRECTION_LEVELS.get(level)(log_ratio, mask)


def importance_weights(
    old_logprobs: torch.Tensor, behaviour_logprobs: torch.Tensor, mask: torch.Tensor, level: str = "token"
) -> torch.Tensor:
    """rho = pi_old / mu per token (``token``), per sequence (``sequence``: the product over its tokens) or
    their geometric mean (``geometric``), broadcast to (B, T); log-weights clamped to +-SAFETY_BOUND, 0 off the mask."""
    mask = mask.to(torch.bool)
    log_ratio = torch.where(mask, old_logprobs - behaviour_logprobs, torch.zeros((), dtype=old_logprobs.dtype))
    log_w = _level_log_ratio(log_ratio, mask, level).clamp(-SAFETY_BOUND, SAFETY_BOUND)
    return torch.where(mask, torch.exp(log_w), torch.zeros((), dtype=log_w.dtype)).detach()


def truncated_weights(
    old_logprobs: torch.Tensor, behaviour_logprobs: torch.Tensor, mask: torch.Tensor, level: str = "token",
    threshold: float = 2.0,
) -> torch.Tensor:  # fmt: skip
    """Truncated importance sampling (TIS): min(rho, ``threshold``) at ``level`` (token or sequence), (B, T)."""
    _truncation_level(level)
    return importance_weights(old_logprobs, behaviour_logprobs, mask, level).clamp(max=threshold)


def _truncation_level(level: str) -> None:
    levels = CORRECTION_LEVELS.names(truncated=True)
    if level not in levels:
        raise ValueError(f"unknown importance-sampling level {level!r}; choose one of {', '.join(levels)}")


def rejection_mask(
    old_logprobs: torch.Tensor, behaviour_logprobs: torch.Tensor, mask: torch.Tensor, level: str = "token",
    threshold: float = 2.0, threshold_lower: float | None = None,
) -> torch.Tensor:  # fmt: skip
    """Masked importance sampling: ``mask`` with False where the level's weight pi_old / mu leaves
    [``threshold_lower``, ``threshold``] (lower default 1 / threshold), (B, T) bool. veRL bounds mu / pi_old."""
    lo = 1.0 / threshold if threshold_lower is None else threshold_lower
    w = importance_weights(old_logprobs, behaviour_logprobs, mask, level)
    return mask.to(torch.bool) & (w >= lo) & (w <= threshold)


def icepop_weights(
    old_logprobs: torch.Tensor, behaviour_logprobs: torch.Tensor, mask: torch.Tensor, lower: float = 0.5,
    upper: float = 5.0,
) -> torch.Tensor:  # fmt: skip
    """IcePop (Ling team, 2025, arXiv:2510.18855): rho_t where lower <= rho_t <= upper, else 0; (B, T). Defaults:
    the paper's. In the trainer a rejected token also leaves the loss's token count (the paper keeps it)."""
    keep = rejection_mask(old_logprobs, behaviour_logprobs, mask, "token", upper, lower)
    return torch.where(keep, importance_weights(old_logprobs, behaviour_logprobs, mask), 0.0)


def rollout_correction(
    old_logprobs: torch.Tensor,
    behaviour_logprobs: torch.Tensor,
    mask: torch.Tensor,
    is_level: str | None = None,
    is_threshold: float = 2.0,
    rs_level: str | None = None,
    rs_threshold: float = 2.0,
    rs_threshold_lower: float | None = None,
) -> tuple[torch.Tensor, torch.Tensor, dict]:
    """The switches together, as veRL's ``rollout_is`` and ``rollout_rs``: returns (weights, kept mask, stats).

    weights (B, T): TIS at ``is_level`` (None: 1 on the mask), 0 where the token was rejected; kept mask
    (B, T) bool: ``mask`` minus the tokens rejected at ``rs_level`` (None: ``mask``). IcePop is
    is_level=token, is_threshold=hi, rs_level=token, [rs_threshold_lower, rs_threshold] = [lo, hi].
    stats: ``mismatch_metrics`` plus ``correction/truncated_frac`` (tokens whose weight was cut),
    ``correction/masked_frac`` (tokens rejected) and the kept weights' ``weight_min``, ``weight_max``, ``weight_mean``.
    """
    mask = mask.to(torch.bool)
    kept = mask
    if rs_level is not None:
        kept = rejection_mask(old_logprobs, behaviour_logprobs, mask, rs_level, rs_threshold, rs_threshold_lower)
    if is_level is None:
        weights, truncated = kept.to(old_logprobs.dtype), torch.zeros_like(mask)
    else:
        _truncation_level(is_level)
        raw = importance_weights(old_logprobs, behaviour_logprobs, mask, is_level)
        weights, truncated = torch.where(kept, raw.clamp(max=is_threshold), 0.0), kept & (raw > is_threshold)
    stats = mismatch_metrics(old_logprobs, behaviour_logprobs, mask)
    with torch.no_grad():
        w_kept = weights[kept] if kept.any() else weights.new_ones(1)
        stats.update({
            "correction/truncated_frac": masked_mean(truncated.to(weights.dtype), mask).item(),
            "correction/masked_frac": masked_mean((mask & ~kept).to(weights.dtype), mask).item(),
            "correction/weight_min": w_kept.min().item(),
            "correction/weight_max": w_kept.max().item(),
            "correction/weight_mean": w_kept.mean().item(),
        })  # fmt: skip
    return weights, kept, stats


def mismatch_metrics(old_logprobs: torch.Tensor, behaviour_logprobs: torch.Tensor, mask: torch.Tensor) -> dict:
    """How far the sampler mu is from the trainer's pi_old, on the sampled tokens (a ~ mu), as floats.

    ``mismatch/kl_k1`` = mean(log mu - log pi_old) and ``mismatch/kl_k3`` = mean(rho - 1 - log rho): both
    estimate KL(mu || pi_old) (joschu.net/blog/kl-approx.html; veRL's ``kl`` and ``k3_kl``);
    ``mismatch/max_abs_log_ratio``: the largest |log rho| of any token.
    """
    mask = mask.to(torch.bool)
    with torch.no_grad():
        log_ratio = torch.where(mask, old_logprobs - behaviour_logprobs, 0.0)  # log rho, (B, T)
        k3 = torch.expm1(log_ratio) - log_ratio
        return {
            "mismatch/kl_k1": masked_mean(-log_ratio, mask).item(),
            "mismatch/kl_k3": masked_mean(k3, mask).item(),
            "mismatch/max_abs_log_ratio": log_ratio.abs().max().item() if mask.any() else 0.0,
        }


def policy_inputs(
    old_logprobs: torch.Tensor, behaviour_logprobs: torch.Tensor | None, mask: torch.Tensor, cfg
) -> tuple[dict, dict]:
    """The update's policy inputs under ``cfg`` (a ``CorrectionConfig``): (tensors, stats).

    tensors: ``old_logprobs`` (pi_old; mu itself in bypass mode) and, with a correction on, ``is_weights``
    and ``policy_mask`` (B, T) for ``update.ppo_loss``. Without behaviour logprobs: the plain update.
    """
    if behaviour_logprobs is None:
        return {"old_logprobs": old_logprobs}, {}
    if cfg.mode == "bypass":
        return {"old_logprobs": behaviour_logprobs}, mismatch_metrics(old_logprobs, behaviour_logprobs, mask)
    if cfg.is_level is None and cfg.rs_level is None:
        return {"old_logprobs": old_logprobs}, mismatch_metrics(old_logprobs, behaviour_logprobs, mask)
    weights, kept, stats = rollout_correction(
        old_logprobs, behaviour_logprobs, mask, cfg.is_level, cfg.is_threshold, cfg.rs_level, cfg.rs_threshold,
        cfg.rs_threshold_lower,
    )  # fmt: skip
    return {"old_logprobs": old_logprobs, "is_weights": weights, "policy_mask": kept}, stats
