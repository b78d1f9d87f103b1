"""Chapter 03 - per-token rewards and generalised advantage estimation (Schulman et al., 2016).

    delta_t = r_t + gamma * V(s_{t+1}) - V(s_t)            (one-step TD error)
    A_t     = delta_t + gamma * lam * A_{t+1}              (run backwards from the last token)
    R_t     = A_t + V(s_t)                                 (the value target, "returns")

The state after the last response token is terminal: V = 0 and A = 0 there.
"""

import torch

from .masking import masked_var
from .registry import ADV_ESTIMATORS, AdvantageOptions

__all__ = ["token_rewards", "compute_gae", "gae_advantages", "last_true_index", "explained_variance"]


def last_true_index(mask: torch.Tensor) -> torch.Tensor:
    """(B, T) bool -> (B,) index of the last True entry of each row (-1 for an all-False row)."""
    T = mask.shape[1]
    positions = torch.arange(T, device=mask.device).expand_as(mask)
    return torch.where(mask.to(torch.bool), positions, -1).max(dim=1).values


def token_rewards(scores: torch.Tensor, kl: torch.Tensor, mask: torch.Tensor, kl_coef: float) -> torch.Tensor:
    """Per-token reward: -kl_coef * kl on every response token, plus the sequence score on the last one.

    Args:
        scores: (B,) one task reward per sequence (e.g. 1.0 for a correct answer).
        kl: (B, T) per-token KL estimate (``ppo_core.kl.kl_penalty``).
        mask: (B, T) bool, True on response tokens.
    Returns:
        (B, T) rewards, 0 wherever the mask is False. A row with no True token gets no score.
    """
    mask = mask.to(torch.bool)
    zeros = torch.zeros((), dtype=kl.dtype, device=kl.device)
    rewards = torch.where(mask, -kl_coef * kl, zeros)  # (B, T)
    last = last_true_index(mask)  # (B,)
    rows = torch.nonzero(last >= 0).squeeze(-1)
    rewards[rows, last[rows]] += scores[rows].to(rewards.dtype)
    return rewards


def compute_gae(
    rewards: torch.Tensor,
    values: torch.Tensor,
    mask: torch.Tensor,
    gamma: float = 1.0,
    lam: float | torch.Tensor = 0.95,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Generalised advantage estimates and returns, both (B, T), **not whitened**.

    Only True positions are steps of the trajectory: the "next state" of a token is the next True
    position in its row, and after the last one the value is 0. Rewards and values at False
    positions are never read, and advantages and returns are 0 there.

    ``lam`` is one float for the whole batch, or a (B,) / (B, 1) tensor with one lambda per sequence
    (row b then runs ``A_t = delta_t + gamma * lam_b * A_{t+1}``), as the length-adaptive lambda of
    VAPO needs (``adaptive_lam``). With ``lam = 1`` the return is the Monte-Carlo return-to-go
    ``R_t = sum_{k >= t} gamma^(k-t) r_k``, whatever the values.
    """
    mask = mask.to(torch.bool)
    B, T = rewards.shape
    if torch.is_tensor(lam):
        lam = lam.to(values.dtype).reshape(B)  # (B,): one lambda per row
    zeros = torch.zeros(B, dtype=values.dtype, device=values.device)
    next_value, next_adv = zeros, zeros
    advantages = torch.zeros_like(values)
    for t in reversed(range(T)):  # backwards: A_t needs A_{t+1}
        m = mask[:, t]
        delta = rewards[:, t] + gamma * next_value - values[:, t]  # (B,)
        adv = torch.where(m, delta + gamma * lam * next_adv, zeros)
        advantages[:, t] = adv
        next_value = torch.where(m, values[:, t], next_value)
        next_adv = torch.where(m, adv, next_adv)
    returns = torch.where(mask, advantages + values, torch.zeros_like(values))
    return advantages, returns


@ADV_ESTIMATORS.register("gae", critic=True, openrlhf="gae")
def gae_advantages(rewards, values, mask, opts: AdvantageOptions) -> tuple[torch.Tensor, torch.Tensor]:
    """PPO's estimator, the entry ``gae`` of ``registry.ADV_ESTIMATORS``: GAE(``opts.lam``) advantages, and the
    critic's targets with their own lambda (``opts.lam_value``; None: the same). (B, T) each."""
    advantages, returns = compute_gae(rewards, values, mask, opts.gamma, opts.lam)
    if opts.lam_value is not None and opts.lam_value != opts.lam:  # the critic's targets, with their own lambda
        _, returns = compute_gae(rewards, values, mask, opts.gamma, opts.lam_value)
    return advantages, returns


def explained_variance(values: torch.Tensor, returns: torch.Tensor, mask: torch.Tensor) -> float:
    """1 - Var[R - V] / Var[R] over response tokens, (B, T) each: 1 = perfect critic, 0 = no better than a constant."""
    var_r = masked_var(returns, mask).item()
    return float("nan") if var_r == 0 else 1.0 - masked_var(returns - values, mask).item() / var_r
