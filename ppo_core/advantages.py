"""Chapter 07 - advantages without a critic, and the KL as a loss term: PPO's relatives.

PPO (chapter 03) gets its baseline from a learned value function, V(s_t), and turns rewards into
advantages with GAE. Its relatives drop the critic and take the baseline from the rewards themselves.
Each function here is one of those switches, registered in ``ADV_ESTIMATORS`` under the name the config
accepts (veRL's ``algorithm.adv_estimator`` names; GAE's entry is ``gae.gae_advantages``).

With ``B`` sequences sampled as ``B / G`` prompts x ``G`` samples each (``group_size`` G), laid out
**contiguously**: rows ``[0, G)`` answer prompt 0, rows ``[G, 2G)`` prompt 1, and so on
(``records`` repeated with ``repeat_interleave``), and R_i the return of sequence i (its score, minus
the summed KL penalty when the KL sits in the reward):

    grpo  (Shao et al. 2024, DeepSeekMath)     A_i = (R_i - mean_group R) / (std_group R + eps)
          (Liu et al. 2025, Dr. GRPO)          A_i =  R_i - mean_group R          (norm_by_std=False)
    rloo  (Ahmadian et al. 2024)               A_i =  R_i - mean_{j in group, j != i} R_j
                                                   =  G / (G - 1) * (R_i - mean_group R)
    reinforce_plus_plus  (Hu 2025)             A_t = whiten_batch( sum_{s >= t} gamma^(s-t) r_s )

The sequence-level advantages are broadcast to every response token of the sequence. The KL in the
loss (``kl_loss``) replaces the KL in the reward for GRPO-style training: see its docstring for which
estimator's gradient is the KL's.
"""

import torch

from .gae import compute_gae
from .kl import kl_penalty
from .losses import aggregate_loss, token_stat
from .masking import masked_sum, masked_whiten
from .registry import ADV_ESTIMATORS, KL_ESTIMATORS, AdvantageOptions

__all__ = [
    "ADV_ESTIMATORS",
    "group_relative_advantages",
    "leave_one_out_advantages",
    "discounted_returns",
    "reinforce_plus_plus_advantages",
    "outcome_advantages",
    "kl_loss",
]


def _groups(scores: torch.Tensor, group_size: int) -> torch.Tensor:
    """(B,) -> (B / G, G): row k holds the G samples of prompt k (contiguous layout)."""
    B = scores.shape[0]
    if group_size < 2 or B % group_size:
        raise ValueError(
            f"a group-relative baseline needs group_size >= 2 samples per prompt and a batch that divides into "
            f"groups; got group_size={group_size} for {B} sequences (set rollout.group_size >= 2)"
        )
    return scores.reshape(B // group_size, group_size)


def group_relative_advantages(
    scores: torch.Tensor, group_size: int, norm_by_std: bool = True, eps: float = 1e-6
) -> torch.Tensor:
    """GRPO's advantage: each sequence's score minus its group's mean, optionally over the group's std.

    Args:
        scores: (B,) one return per sequence, B = n_prompts * G with each prompt's G samples adjacent.
        group_size: G, samples per prompt (>= 2).
        norm_by_std: divide by the group's std (unbiased, as ``torch.std``) + ``eps`` (GRPO, Shao et al.
            2024); False keeps the plain difference (Dr. GRPO, Liu et al. 2025, who show that the std
            up-weights prompts that are nearly always or nearly never solved).
        eps: keeps a group whose samples all scored the same at advantage 0 (0 / eps), never NaN.
    Returns:
        (B,) advantages; each group's sum to 0.
    """
    g = _groups(scores, group_size)  # (B / G, G)
    adv = g - g.mean(dim=1, keepdim=True)
    if norm_by_std:
        adv = adv / (g.std(dim=1, keepdim=True) + eps)
    return adv.reshape(-1)


def leave_one_out_advantages(scores: torch.Tensor, group_size: int) -> torch.Tensor:
    """RLOO's advantage (Ahmadian et al. 2024): score minus the mean of the *other* G - 1 samples.

    (B,) -> (B,), contiguous groups of ``group_size`` as in ``group_relative_advantages``. The baseline
    does not depend on the sample it is subtracted from, so the REINFORCE gradient stays unbiased;
    it equals G / (G - 1) times the group-mean difference.
    """
    g = _groups(scores, group_size)  # (B / G, G)
    others_mean = (g.sum(dim=1, keepdim=True) - g) / (group_size - 1)
    return (g - others_mean).reshape(-1)


def discounted_returns(rewards: torch.Tensor, mask: torch.Tensor, gamma: float = 1.0) -> torch.Tensor:
    """(B, T) -> (B, T) reward-to-go G_t = sum_{s >= t, s on the mask} gamma^(s-t) r_s, 0 off the mask.

    This is GAE with no critic: V = 0 and lambda = 1 make A_t the discounted sum of the rewards ahead.
    """
    advantages, _ = compute_gae(rewards, torch.zeros_like(rewards), mask, gamma=gamma, lam=1.0)
    return advantages


def reinforce_plus_plus_advantages(
    rewards: torch.Tensor, mask: torch.Tensor, gamma: float = 1.0, eps: float = 1e-8
) -> torch.Tensor:
    """REINFORCE++ (Hu 2025): the token-level return of the KL-penalised reward, whitened over the batch.

    ``rewards`` (B, T) from ``gae.token_rewards`` (score on the last token, -kl_coef * KL on each).
    The batch-wide mean is the only baseline; no groups, so it works with one sample per prompt.
    Returns (B, T), 0 off the mask.
    """
    return masked_whiten(discounted_returns(rewards, mask, gamma), mask, eps=eps)


def outcome_advantages(
    estimator: str,
    rewards: torch.Tensor,
    mask: torch.Tensor,
    group_size: int = 1,
    gamma: float = 1.0,
    norm_by_std: bool = True,
) -> torch.Tensor:
    """The critic-free advantage named by ``estimator`` (an entry of ``ADV_ESTIMATORS``), (B, T) token rewards ->
    (B, T) advantages.

    For grpo and rloo the sequence return R_i is the sum of its token rewards (the score, minus the KL
    penalty if it is in the reward) and A_i is put on every response token.
    """
    if estimator not in _critic_free():
        raise ValueError(f"unknown critic-free estimator {estimator!r}; choose one of {', '.join(_critic_free())}")
    opts = AdvantageOptions(gamma=gamma, group_size=group_size, norm_by_std=norm_by_std)
    return ADV_ESTIMATORS.get(estimator)(rewards, None, mask, opts)[0]


def _critic_free() -> tuple:
    return tuple(n for n in ADV_ESTIMATORS if not ADV_ESTIMATORS.info(n, "critic"))


def _on_tokens(adv: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """(B,) sequence advantages -> (B, T), on every response token, 0 elsewhere."""
    return torch.where(mask, adv[:, None], torch.zeros((), dtype=adv.dtype, device=adv.device))


@ADV_ESTIMATORS.register("grpo", groups=True)
def _grpo(rewards, values, mask, opts: AdvantageOptions):
    mask = mask.to(torch.bool)
    seq_returns = masked_sum(rewards, mask, dim=1)  # (B,)
    return _on_tokens(group_relative_advantages(seq_returns, opts.group_size, opts.norm_by_std), mask), None


@ADV_ESTIMATORS.register("rloo", groups=True, openrlhf="rloo")
def _rloo(rewards, values, mask, opts: AdvantageOptions):
    mask = mask.to(torch.bool)
    seq_returns = masked_sum(rewards, mask, dim=1)  # (B,)
    return _on_tokens(leave_one_out_advantages(seq_returns, opts.group_size), mask), None


@ADV_ESTIMATORS.register("reinforce_plus_plus", openrlhf="reinforce")
def _reinforce_plus_plus(rewards, values, mask, opts: AdvantageOptions):
    return reinforce_plus_plus_advantages(rewards, mask.to(torch.bool), opts.gamma), None


def kl_loss(
    logprobs: torch.Tensor,
    ref_logprobs: torch.Tensor,
    mask: torch.Tensor,
    kl_loss_type: str = "k2",
    loss_agg_mode: str = "token-mean",
    norm_len: int | None = None,
    units=None,
) -> tuple[torch.Tensor, dict]:
    """The KL to the reference as a loss term (GRPO's placement), to add as ``kl_loss_coef * loss``.

    ``logprobs`` (B, T) carry the gradient (the current policy's, of tokens sampled by the rollout
    policy); ``ref_logprobs`` (B, T) are constants. Differentiating the estimator itself (not a
    REINFORCE surrogate of it), with l = log pi - log pi_ref and a ~ pi:

        k1 = l              E[grad k1] = E[grad log pi]                = 0          (no pull at all)
        k2 = l^2 / 2        E[grad k2] = E[l grad log pi]              = grad KL(pi || pi_ref)   (exact)
        k3 = e^-l - 1 + l   E[grad k3] = E[(1 - pi_ref/pi) grad log pi] = grad KL(pi_ref || pi) (reverse)

    So k2 is the estimator whose gradient in the loss is the gradient of the KL being estimated; k3,
    GRPO's choice, is an unbiased estimate of KL(pi || pi_ref) but its gradient is that of the reverse KL
    (a fine regulariser, a different one). Chapter 07 checks all three on an enumerable toy.
    ``loss_agg_mode``, ``norm_len``, ``units``: averaged over tokens as the policy loss is (``losses.aggregate_loss``).
    stats: ``kl`` (the aggregated estimate, a float).
    """
    KL_ESTIMATORS.get(kl_loss_type)  # an unknown name fails here, naming the choices
    per_token = kl_penalty(logprobs, ref_logprobs, kl_loss_type)  # (B, T)
    loss = aggregate_loss(per_token, mask, loss_agg_mode, norm_len, units)
    with torch.no_grad():
        stats = {"kl": token_stat(per_token, mask, units)}
    return loss, stats
