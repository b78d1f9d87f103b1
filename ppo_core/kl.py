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

from .registry import KL_ESTIMATORS

__all__ = ["kl_penalty", "KL_ESTIMATORS", "AdaptiveKLController", "FixedKLController"]


@KL_ESTIMATORS.register("k1", verl="kl")
def k1(log_ratio: torch.Tensor) -> torch.Tensor:
    """l: unbiased, high variance."""
    return log_ratio


@KL_ESTIMATORS.register("k2", verl="mse")
def k2(log_ratio: torch.Tensor) -> torch.Tensor:
    """l^2 / 2: biased, low variance."""
    return 0.5 * log_ratio**2


@KL_ESTIMATORS.register("k3", verl="low_var_kl")  # veRL's low_var_kl is k3 clamped to +-10
def k3(log_ratio: torch.Tensor) -> torch.Tensor:
    """r - 1 - log r with log r = -l; expm1 keeps precision when r is close to 1."""
    return torch.expm1(-log_ratio) + log_ratio


def kl_penalty(logprobs: torch.Tensor, ref_logprobs: torch.Tensor, estimator: str = "k1") -> torch.Tensor:
    """Per-token KL estimate, (B, T) -> (B, T). ``logprobs`` are the policy's, of tokens it sampled.
    ``estimator``: a name of ``KL_ESTIMATORS``."""
    fn = KL_ESTIMATORS.get(estimator)
    return fn(logprobs - ref_logprobs)  # log pi - log pi_ref, (B, T)


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
