"""Second solutions for chapter 03: GAE as one matrix of discounts (no loop), rewards row by row, KL via rho."""

import torch


def my_compute_gae(rewards, values, mask, gamma=1.0, lam=0.95):
    # A_t = sum_{k >= t} (gamma lam)^(k - t) delta_k, with padding selected away (not multiplied) first
    n_rows, n_tokens = rewards.shape
    m = mask.to(torch.bool)
    v = torch.where(m, values, torch.zeros((), dtype=values.dtype))
    r = torch.where(m, rewards, torch.zeros((), dtype=values.dtype))
    v_next = torch.cat([v[:, 1:], torch.zeros(n_rows, 1, dtype=v.dtype)], dim=1)  # 0 after each row's end
    delta = torch.where(m, r + gamma * v_next - v, torch.zeros((), dtype=v.dtype))  # (B, T)
    steps = torch.arange(n_tokens)
    k_minus_t = (steps[None, :] - steps[:, None]).to(torch.float64)  # (T, T): [t, k] = k - t
    decay = torch.tensor(gamma * lam, dtype=torch.float64)
    discounts = torch.where(k_minus_t >= 0, decay ** k_minus_t.clamp(min=0), torch.zeros((), dtype=torch.float64))
    advantages = (delta.to(torch.float64) @ discounts.T).to(values.dtype)  # (B, T)
    advantages = torch.where(m, advantages, torch.zeros((), dtype=values.dtype))
    returns = torch.where(m, advantages + v, torch.zeros((), dtype=values.dtype))
    return advantages, returns


def my_token_rewards(scores, kl, mask, kl_coef):
    # row by row: the KL penalty on the response tokens, the score added on the last of them
    rewards = torch.zeros_like(kl)
    for b in range(kl.shape[0]):
        n = int(mask[b].sum())
        rewards[b, :n] = -kl_coef * kl[b, :n]
        rewards[b, n - 1] = rewards[b, n - 1] + scores[b]
    return rewards


def my_kl_penalty(logprobs, ref_logprobs, estimator="k1"):
    # written from rho = pi_ref / pi and its log, log rho = ref_logprobs - logprobs
    log_rho = ref_logprobs - logprobs
    if estimator == "k1":
        return -log_rho
    elif estimator == "k2":
        return log_rho.pow(2) / 2
    elif estimator == "k3":
        return torch.exp(log_rho) - 1 - log_rho
    else:
        raise ValueError(f"estimator must be 'k1', 'k2' or 'k3', got {estimator!r}")
