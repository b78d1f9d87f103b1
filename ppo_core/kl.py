"""Chapter 03 - per-token estimates of KL(pi || pi_ref) from tokens sampled by pi.

With the log-ratio l = log pi(a) - log pi_ref(a) of a sampled token a ~ pi
(see http://joschu.net/blog/kl-approx.html):

    k1 = l                      unbiased, high variance, can be negative per token
    k2 = l^2 / 2                biased, low variance, always >= 0
    k3 = (r - 1) - log r        unbiased, low variance, always >= 0, with r = pi_ref(a) / pi(a) = e^-l

All three estimate KL(pi || pi_ref), the direction that penalises the policy for putting mass
where the reference does not. The samples must come from pi (the policy), not from pi_ref.
"""

import torch

__all__ = ["kl_penalty", "KL_ESTIMATORS", "AdaptiveKLController", "FixedKLController"]

KL_ESTIMATORS = ("k1", "k2", "k3")


def kl_penalty(logprobs: torch.Tensor, ref_logprobs: torch.Tensor, estimator: str = "k1") -> torch.Tensor:
    """Per-token KL estimate, (B, T) -> (B, T). ``logprobs`` are the policy's, of tokens it sampled."""
    log_ratio = logprobs - ref_logprobs  # log pi - log pi_ref, (B, T)
    if estimator == "k1":
        return log_ratio
    if estimator == "k2":
        return 0.5 * log_ratio**2
    if estimator == "k3":
        # r - 1 - log r with log r = -log_ratio; expm1 keeps precision when r is close to 1.
        return torch.expm1(-log_ratio) + log_ratio
    raise ValueError(f"unknown KL estimator {estimator!r}; choose one of {', '.join(KL_ESTIMATORS)}")


class AdaptiveKLController:
    """Adapts kl_coef so the KL to the reference tracks a target (Ziegler et al., 2019, sec. 2.2).

    kl_coef <- kl_coef * (1 + clip(KL / target - 1, -0.2, 0.2) * n_sequences / horizon)
    """

    def __init__(self, kl_coef: float, target: float, horizon: int):
        self.value, self.target, self.horizon = kl_coef, target, horizon

    def update(self, kl: float, n_sequences: int) -> float:
        error = min(max(kl / self.target - 1.0, -0.2), 0.2)
        self.value *= 1.0 + error * n_sequences / self.horizon
        return self.value


class FixedKLController:
    """A constant kl_coef (the default)."""

    def __init__(self, kl_coef: float):
        self.value = kl_coef

    def update(self, kl: float, n_sequences: int) -> float:
        return self.value
