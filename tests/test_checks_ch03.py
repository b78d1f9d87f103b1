"""Tests for the chapter 03 checkers: they pass the package's functions and a learner-style correct
solution, and name the mistake in typical wrong implementations (written here the way a learner would)."""

import pytest
import torch

from ppo_core import checks
from ppo_core.checks import CheckFailure, NotImplementedYet
from ppo_core.checks.ch03_gae import _gae_loop, _lengths_mask
from ppo_core.gae import compute_gae, token_rewards
from ppo_core.kl import kl_penalty
from ppo_core.masking import masked_whiten


# ---------------------------------------------------------------- compute_gae, learner style
def _gae(
    rewards,
    values,
    mask,
    gamma=1.0,
    lam=0.95,
    *,
    forwards=False,
    delta_gamma=True,
    rec_gamma=True,
    use_lam=True,
    mask_next=True,
    roll=False,
    use_mask=True,
    reset_carry=True,
    mask_returns=True,
    returns_kind="a+v",
    whiten=False,
):
    """A typical learner loop over t; each keyword switches on one mistake."""
    B, T = rewards.shape
    m = mask.to(rewards.dtype) if use_mask else torch.ones_like(rewards)
    keep = m if reset_carry else torch.ones_like(rewards)
    if roll:
        next_values = torch.roll(values, -1, dims=1)  # (B, T), wraps around at the end
    else:
        next_values = torch.cat([values[:, 1:], torch.zeros(B, 1, dtype=values.dtype)], dim=1)  # (B, T)
        if mask_next:
            next_values = next_values * torch.cat([m[:, 1:], torch.zeros(B, 1, dtype=m.dtype)], dim=1)
    deltas = rewards + (gamma if delta_gamma else 1.0) * next_values - values  # (B, T)
    advantages = torch.zeros_like(rewards)
    last = torch.zeros(B, dtype=rewards.dtype)
    for t in range(T) if forwards else reversed(range(T)):
        last = (deltas[:, t] + (gamma if rec_gamma else 1.0) * (lam if use_lam else 1.0) * last) * keep[:, t]
        advantages[:, t] = last
    if whiten:
        advantages = masked_whiten(advantages, mask)
    if returns_kind == "a+v":
        returns = (advantages + values) * (m if mask_returns else 1.0)
    elif returns_kind == "a":
        returns = advantages
    elif returns_kind == "a-v":
        returns = (advantages - values) * m
    else:  # rewards-to-go
        returns = torch.zeros_like(rewards)
        carry = torch.zeros(B, dtype=rewards.dtype)
        for t in reversed(range(T)):
            carry = (rewards[:, t] + gamma * carry) * m[:, t]
            returns[:, t] = carry
    return advantages, returns


def _wrong(**mistake):
    def fn(rewards, values, mask, gamma=1.0, lam=0.95):
        return _gae(rewards, values, mask, gamma, lam, **mistake)

    return fn


def test_compute_gae_checker_passes_package_and_learner_solution():
    assert checks.check_compute_gae(compute_gae, verbose=False)
    assert checks.check_compute_gae(_wrong(), verbose=False)


@pytest.mark.parametrize(
    "mistake, message",
    [
        (dict(forwards=True), "recursion forwards"),
        (dict(delta_gamma=False), "forgot gamma in the TD error"),
        (dict(use_lam=False), "forgot lam"),
        (dict(rec_gamma=False), "forgot gamma in the recursion"),
        (dict(mask_next=False), "bootstrapped the last response token from the value at the next position"),
        (dict(roll=True), "torch.roll"),
        (dict(use_mask=False), "forgot the mask altogether"),
        (dict(whiten=True), "whitened the advantages inside compute_gae"),
        (dict(returns_kind="rtg"), "returns as the rewards-to-go"),
        (dict(returns_kind="a"), "returned the advantages as the returns"),
        (dict(returns_kind="a-v"), r"computed returns = advantages - values"),
        (dict(reset_carry=False), "let the padding leak into the recursion"),
        (dict(mask_returns=False), "returns are right on the response tokens but not 0 on padding"),
    ],
)
def test_compute_gae_checker_names_the_mistake(mistake, message):
    with pytest.raises(CheckFailure, match=message):
        checks.check_compute_gae(_wrong(**mistake), verbose=False)


def test_compute_gae_checker_other_failures():
    def in_place(rewards, values, mask, gamma=1.0, lam=0.95):
        rewards *= mask
        return compute_gae(rewards, values, mask, gamma, lam)

    def only_advantages(rewards, values, mask, gamma=1.0, lam=0.95):
        return compute_gae(rewards, values, mask, gamma, lam)[0]

    def nan_for_large(rewards, values, mask, gamma=1.0, lam=0.95):
        adv, ret = compute_gae(rewards, values, mask, gamma, lam)
        return torch.where(adv.abs() > 1e3, torch.nan, adv), ret

    with pytest.raises(CheckFailure, match="in place"):
        checks.check_compute_gae(in_place, verbose=False)
    with pytest.raises(CheckFailure, match="tuple"):
        checks.check_compute_gae(only_advantages, verbose=False)
    with pytest.raises(CheckFailure, match="NaN"):
        checks.check_compute_gae(nan_for_large, verbose=False)


def test_compute_gae_checker_rejects_float32_output_for_float64_input():
    def always_float32(rewards, values, mask, gamma=1.0, lam=0.95):
        advantages, returns = compute_gae(rewards.float(), values.float(), mask, gamma, lam)
        return advantages, returns

    with pytest.raises(CheckFailure, match="came back as torch.float32 for float64 inputs"):
        checks.check_compute_gae(always_float32, verbose=False)


def test_compute_gae_checker_stub():
    def stub(rewards, values, mask, gamma=1.0, lam=0.95):
        raise NotImplementedError("Exercise 3.1")

    with pytest.raises(NotImplementedYet):
        checks.check_compute_gae(stub, verbose=False)


def test_naive_loop_reference_matches_package():
    gen = torch.Generator().manual_seed(0)
    for B, T, gamma, lam in [(3, 10, 0.9, 0.7), (4, 5, 1.0, 1.0), (2, 1, 0.5, 0.0)]:
        mask = _lengths_mask(torch.randint(1, T + 1, (B,), generator=gen).tolist(), T)
        rewards, values = torch.randn(B, T, generator=gen), torch.randn(B, T, generator=gen)
        want, _ = compute_gae(rewards, values, mask, gamma, lam)
        torch.testing.assert_close(_gae_loop(rewards, values, mask, gamma, lam), want)


# ---------------------------------------------------------------- token_rewards, learner style
def _rewards(scores, kl, mask, kl_coef, *, where="last_true", sign=-1.0, use_mask=True, use_coef=True):
    rewards = sign * (kl_coef if use_coef else 1.0) * kl
    if use_mask:
        rewards = rewards * mask
    rewards = rewards.clone()
    B, T = kl.shape
    rows = torch.arange(B)
    if where == "last_true":
        rewards[rows, mask.sum(dim=1) - 1] += scores
    elif where == "first":
        rewards[:, 0] += scores
    elif where == "row_end":
        rewards[:, -1] += scores
    elif where == "every":
        rewards += scores[:, None] * mask
    elif where == "one_past":
        idx = mask.sum(dim=1)
        ok = idx < T
        rewards[rows[ok], idx[ok]] += scores[ok]
    return rewards


def _wrong_rewards(**mistake):
    return lambda scores, kl, mask, kl_coef: _rewards(scores, kl, mask, kl_coef, **mistake)


def test_token_rewards_checker_passes():
    assert checks.check_token_rewards(token_rewards, verbose=False)
    assert checks.check_token_rewards(_wrong_rewards(), verbose=False)


@pytest.mark.parametrize(
    "mistake, message",
    [
        (dict(where="first"), "score on the first response token"),
        (dict(where="row_end"), "last position of the row"),
        (dict(where="one_past"), "one position too far"),
        (dict(sign=1.0), "flipped the sign of the KL penalty"),
        (dict(use_mask=False), "forgot the mask"),
        (dict(use_coef=False), "forgot kl_coef"),
        (dict(where="every"), "added the score to every response token"),
    ],
)
def test_token_rewards_checker_names_the_mistake(mistake, message):
    with pytest.raises(CheckFailure, match=message):
        checks.check_token_rewards(_wrong_rewards(**mistake), verbose=False)


def test_token_rewards_checker_stub():
    def stub(scores, kl, mask, kl_coef):
        raise NotImplementedError

    with pytest.raises(NotImplementedYet):
        checks.check_token_rewards(stub, verbose=False)


# ---------------------------------------------------------------- kl_penalty, learner style
def _kl(logprobs, ref_logprobs, estimator="k1", *, mistake=None):
    """A typical learner kl_penalty; ``mistake`` switches on one error."""
    log_ratio = logprobs - ref_logprobs
    if mistake == "flipped":
        log_ratio = ref_logprobs - logprobs
    if mistake == "probs":
        log_ratio = logprobs.exp() - ref_logprobs.exp()
    if estimator == "k1":
        out = log_ratio
    elif estimator == "k2":
        out = log_ratio**2 if mistake == "no_half" else 0.5 * log_ratio**2
    elif estimator == "k3":
        rho = torch.exp(-log_ratio)  # pi_ref / pi
        if mistake == "k3_rho_flipped":
            rho = torch.exp(log_ratio)
            return (rho - 1) - torch.log(rho)
        out = (rho - 1) + torch.log(rho) if mistake == "k3_sign" else (rho - 1) - torch.log(rho)
    else:
        raise ValueError(estimator)
    if mistake == "mean":
        out = out.mean()
    return out


def _wrong_kl(mistake):
    def fn(logprobs, ref_logprobs, estimator="k1"):
        return _kl(logprobs, ref_logprobs, estimator, mistake=mistake)

    return fn


def test_kl_penalty_checker_passes():
    assert checks.check_kl_penalty(kl_penalty, verbose=False)
    assert checks.check_kl_penalty(_wrong_kl(None), verbose=False)


@pytest.mark.parametrize(
    "mistake, message",
    [
        ("flipped", "flipped the log-ratio"),
        ("probs", "used probabilities instead of log-probabilities"),
        ("no_half", "forgot the 1/2"),
        ("k3_rho_flipped", r"used rho = pi / pi_ref in k3"),
        ("k3_sign", "flipped the sign of log rho in k3"),
        ("mean", "reduced over tokens"),
    ],
)
def test_kl_penalty_checker_names_the_mistake(mistake, message):
    with pytest.raises(CheckFailure, match=message):
        checks.check_kl_penalty(_wrong_kl(mistake), verbose=False)


def test_kl_penalty_checker_other_failures():
    def k3_is_k1(logprobs, ref_logprobs, estimator="k1"):
        return kl_penalty(logprobs, ref_logprobs, "k1" if estimator == "k3" else estimator)

    def silent_on_unknown(logprobs, ref_logprobs, estimator="k1"):
        return kl_penalty(logprobs, ref_logprobs, estimator if estimator in ("k1", "k2", "k3") else "k1")

    def float32_always(logprobs, ref_logprobs, estimator="k1"):
        return kl_penalty(logprobs, ref_logprobs, estimator).float()

    def stub(logprobs, ref_logprobs, estimator="k1"):
        raise NotImplementedError

    with pytest.raises(CheckFailure, match="returned k1"):
        checks.check_kl_penalty(k3_is_k1, verbose=False)
    with pytest.raises(CheckFailure, match="did not raise ValueError"):
        checks.check_kl_penalty(silent_on_unknown, verbose=False)
    with pytest.raises(CheckFailure, match="float64"):
        checks.check_kl_penalty(float32_always, verbose=False)
    with pytest.raises(NotImplementedYet):
        checks.check_kl_penalty(stub, verbose=False)


def test_kl_penalty_checker_rejects_k3_computed_in_float32_for_float64_inputs():
    """Right dtype on the way out, but float32 inside: k3 of a 1e-6 log-ratio (about 5e-13) loses its digits."""

    def float32_inside(logprobs, ref_logprobs, estimator="k1"):
        return kl_penalty(logprobs.float(), ref_logprobs.float(), estimator).to(logprobs.dtype)

    with pytest.raises(CheckFailure, match="k3 for log-ratios of 1e-6"):
        checks.check_kl_penalty(float32_inside, verbose=False)
