"""Chapter 08 - the policy objectives of reasoning-model trainers, as one switch (``algo.policy_loss``).

With l_t = log pi_theta(a_t) - log pi_old(a_t), r_t = e^{l_t}, A_t the advantage, m the mask, n_i the
length of response i, eps_lo / eps_hi the clip range (veRL's clip_ratio_low / clip_ratio_high) and sg the
stop-gradient, each objective is a per-token loss l_{i,t} (to minimise), aggregated by ``losses.aggregate_loss``:

    vanilla  max(-A r, -A clip(r, 1 - eps_lo, 1 + eps_hi))   PPO; clip-higher (DAPO) when eps_hi > eps_lo;
             and for A < 0, min(that, -A c) with dual_clip_c = c (dual-clip)      (losses.policy_loss)
    gspo     the same with r_t replaced by s_{i,t} = sg(s_i) * pi_theta(a_t) / sg(pi_theta(a_t)),
             s_i = exp(1/n_i sum_t m l_t): one ratio per sequence, clipped per sequence (arXiv 2507.18071)
    cispo    -sg(clip(r, 1 - eps_lo, 1 + eps_hi)) A log pi_theta(a_t): the IS weight is clipped and
             detached, every token keeps its log-prob gradient (MiniMax-M1, arXiv 2506.13585)
    sapo     -A f_tau(r), f_tau(r) = 4 / tau * sigmoid(tau (r - 1)), tau = tau_pos if A > 0 else tau_neg:
             a soft gate whose slope 4 s (1 - s) fades away from r = 1 instead of dropping to 0 (arXiv 2511.20347);
             the weight on grad log pi is r times that slope: above 1 for 1 < r < ~3.5 (1.57 at r = 2)

At r = 1 (the first minibatch of an update) every one has the plain policy gradient -A grad log pi_theta.
All inputs (B, T); ``old_logprobs`` and ``advantages`` are constants. Each returns ``(loss, stats)`` with the
stats of ``losses.policy_loss``: ``clipfrac`` (share of tokens whose gradient the trust region cut or bounded),
``clipfrac_lower``, ``approx_kl``, ``ratio_mean`` (of the token ratio r).

Where veRL differs (its ``core_algos.py``): its ``vanilla`` loss applies the dual clip always (``clip_ratio_c``,
default 3), here only when ``dual_clip_c`` is set; its ``gspo`` and ``sapo`` losses always aggregate
``seq-mean-token-mean``, here ``loss_agg_mode`` applies to every objective (pass ``seq-mean-token-mean`` for
SAPO's own normalisation: no preset uses SAPO).
"""

import torch

from .losses import aggregate_loss, token_stat  # (and registers vanilla)
from .masking import masked_mean
from .registry import POLICY_LOSSES, PolicySwitches

__all__ = ["POLICY_LOSSES", "PolicySwitches", "compute_policy_loss", "gspo_loss", "cispo_loss", "sapo_loss"]


def _log_ratio(logprobs, old_logprobs, mask):
    """(B, T) l = log pi_theta - log pi_old, zeroed off the mask before any exp (see ``losses.policy_loss``)."""
    return torch.where(mask.to(torch.bool), logprobs - old_logprobs, torch.zeros((), dtype=logprobs.dtype))


def _stats(log_ratio, mask, cut, units) -> dict:
    with torch.no_grad():
        ratio = torch.exp(log_ratio)
        return {
            "clipfrac": token_stat(cut, mask, units),
            "clipfrac_lower": 0.0,
            "approx_kl": token_stat((ratio - 1.0) - log_ratio, mask, units),
            "ratio_mean": token_stat(ratio, mask, units),
        }


def gspo_loss(logprobs, old_logprobs, advantages, mask, eps_lo=3e-4, eps_hi=4e-4, max_log_ratio=10.0, **agg):
    """GSPO's sequence-level clipped surrogate (module docstring). ``agg``: ``aggregate_loss``'s keywords.

    The token ratio s_{i,t} equals s_i in value, and its gradient is s_i grad log pi_theta(a_t), so under
    seq-mean-token-mean the gradient is A_i grad s_i (GSPO-token with a per-sequence advantage is GSPO).
    ``max_log_ratio`` caps log s_{i,t} against overflow (veRL's 10). The paper's clip range is ~4e-4.
    """
    log_ratio = _log_ratio(logprobs, old_logprobs, mask)  # (B, T)
    seq_log_ratio = masked_mean(log_ratio, mask, dim=1)  # (B,) 1/n_i sum_t m l_t
    log_s = logprobs - logprobs.detach() + seq_log_ratio.detach().unsqueeze(1)  # (B, T) value log s_i
    s = torch.exp(torch.clamp(log_s, max=max_log_ratio))
    unclipped = -advantages * s
    clipped = -advantages * torch.clamp(s, 1.0 - eps_lo, 1.0 + eps_hi)
    loss = aggregate_loss(torch.maximum(unclipped, clipped), mask, **agg)
    return loss, _stats(log_ratio, mask, clipped > unclipped, agg.get("units"))


@POLICY_LOSSES.register("gspo", openrlhf="gspo")
def _gspo(logprobs, old_logprobs, advantages, mask, s: PolicySwitches, **agg):
    return gspo_loss(logprobs, old_logprobs, advantages, mask, s.low, s.high, **agg)


def cispo_loss(logprobs, old_logprobs, advantages, mask, eps_lo=0.2, eps_hi=0.28, **agg):
    """CISPO: -sg(clip(r, 1 - eps_lo, 1 + eps_hi)) * A * log pi_theta (module docstring).

    Unlike PPO's clip no token's gradient is zeroed: a clipped weight only caps how much it counts.
    MiniMax-M1 clips only from above (a large ``eps_lo``); veRL's cispo takes both ends.
    """
    log_ratio = _log_ratio(logprobs, old_logprobs, mask)  # (B, T)
    ratio = torch.exp(log_ratio)
    weight = torch.clamp(ratio, 1.0 - eps_lo, 1.0 + eps_hi).detach()  # (B, T), no gradient
    loss = aggregate_loss(-weight * advantages * logprobs, mask, **agg)
    return loss, _stats(log_ratio, mask, weight != ratio.detach(), agg.get("units"))


@POLICY_LOSSES.register("cispo")
def _cispo(logprobs, old_logprobs, advantages, mask, s: PolicySwitches, **agg):
    return cispo_loss(logprobs, old_logprobs, advantages, mask, s.low, s.high, **agg)


def sapo_loss(logprobs, old_logprobs, advantages, mask, tau_pos=1.0, tau_neg=1.05, band=(0.2, 0.2), **agg):
    """SAPO: -A * 4 / tau * sigmoid(tau (r - 1)), tau = ``tau_pos`` for A > 0 else ``tau_neg`` (veRL's defaults).

    No hard clip: ``clipfrac`` reports the share of tokens whose ratio left the PPO band 1 - band[0] ..
    1 + band[1], for comparison with the clipped objectives.
    """
    log_ratio = _log_ratio(logprobs, old_logprobs, mask)  # (B, T)
    ratio = torch.exp(log_ratio)
    tau = torch.where(advantages > 0, tau_pos, tau_neg).to(ratio.dtype)  # (B, T)
    gate = torch.sigmoid(tau * (ratio - 1.0)) * (4.0 / tau)  # (B, T), slope 1 at r = 1
    loss = aggregate_loss(-gate * advantages, mask, **agg)
    outside = (ratio.detach() > 1.0 + band[1]) | (ratio.detach() < 1.0 - band[0])
    return loss, _stats(log_ratio, mask, outside, agg.get("units"))


@POLICY_LOSSES.register("sapo")
def _sapo(logprobs, old_logprobs, advantages, mask, s: PolicySwitches, **agg):
    return sapo_loss(logprobs, old_logprobs, advantages, mask, s.tau_pos, s.tau_neg, band=(s.low, s.high), **agg)


def compute_policy_loss(
    name: str,
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    clip_eps: float = 0.2,
    clip_eps_low: float | None = None,
    clip_eps_high: float | None = None,
    dual_clip_c: float | None = None,
    tau_pos: float = 1.0,
    tau_neg: float = 1.05,
    loss_agg_mode: str = "token-mean",
    norm_len: int | None = None,
    units=None,
) -> tuple[torch.Tensor, dict]:
    """The policy loss ``name`` (an entry of ``POLICY_LOSSES``) with veRL's key semantics (``PolicySwitches``)."""
    switches = PolicySwitches(clip_eps, clip_eps_low, clip_eps_high, dual_clip_c, tau_pos, tau_neg)
    agg = {"loss_agg_mode": loss_agg_mode, "norm_len": norm_len, "units": units}
    return POLICY_LOSSES.get(name)(logprobs, old_logprobs, advantages, mask, switches, **agg)
