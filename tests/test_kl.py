"""Tests for ppo_core.kl (chapter 03): per-token estimators of KL(pi || pi_ref)."""

import math

import pytest
import reference_impls as ref
import torch
from torch.testing import assert_close

from ppo_core.kl import KL_ESTIMATORS, kl_penalty

SHAPES = [(1, 1), (2, 5), (3, 8), (4, 13)]
DTYPES = [torch.float32, torch.float64]


def _logprob_pair(shape, dtype, seed=0, spread=1.0):
    gen = torch.Generator().manual_seed(seed)
    logprobs = -torch.rand(shape, generator=gen, dtype=torch.float64) * 4.0
    ref_logprobs = logprobs + torch.randn(shape, generator=gen, dtype=torch.float64) * spread
    return logprobs.to(dtype), ref_logprobs.to(dtype)


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("estimator", KL_ESTIMATORS)
def test_kl_penalty_matches_naive_loop(shape, dtype, estimator):
    logprobs, ref_logprobs = _logprob_pair(shape, dtype, seed=shape[1])
    got = kl_penalty(logprobs, ref_logprobs, estimator)
    assert got.shape == shape and got.dtype == dtype
    assert_close(got, ref.as_tensor(ref.ref_kl(logprobs, ref_logprobs, estimator), got))


def test_kl_penalty_hand_computed():
    # log pi = ln 0.5, log pi_ref = ln 0.25: log ratio l = ln 2 = 0.693147.
    # k1 = l = 0.693147; k2 = l^2 / 2 = 0.240227; k3 = r - 1 - ln r with r = pi_ref / pi = 1/2:
    #   1/2 - 1 + ln 2 = 0.193147.
    # Swapped (log pi = ln 0.25, log pi_ref = ln 0.5): k1 = -ln 2, k2 = 0.240227, k3 = 2 - 1 - ln 2 = 0.306853.
    lp = torch.tensor([[math.log(0.5), math.log(0.25)]])
    rlp = torch.tensor([[math.log(0.25), math.log(0.5)]])
    ln2 = math.log(2.0)
    assert_close(kl_penalty(lp, rlp, "k1"), torch.tensor([[ln2, -ln2]]))
    assert_close(kl_penalty(lp, rlp, "k2"), torch.tensor([[ln2**2 / 2, ln2**2 / 2]]))
    assert_close(kl_penalty(lp, rlp, "k3"), torch.tensor([[0.5 - 1 + ln2, 2 - 1 - ln2]]))


def test_kl_default_estimator_is_k1():
    lp, rlp = _logprob_pair((2, 3), torch.float64, seed=1)
    assert_close(kl_penalty(lp, rlp), lp - rlp)


def test_kl_unknown_estimator_raises():
    lp, rlp = _logprob_pair((1, 2), torch.float32)
    with pytest.raises(ValueError):
        kl_penalty(lp, rlp, "k4")


@pytest.mark.parametrize("dtype", DTYPES)
def test_k3_and_k2_are_never_negative(dtype):
    # Log-ratios of both signs over 11.5 orders of magnitude, including tiny ones where r - 1 - log r
    # computed as exp(-l) - 1 + l cancels to a negative number (in float32 and in float64). We pass
    # the log-ratio as logprobs against ref_logprobs = 0 so that the difference is exact: with
    # ref_logprobs = -3 the tiny ratios would be rounded to 0 or to multiples of 2.4e-7 first.
    mags = torch.logspace(-10, 1.5, 4000, dtype=torch.float64)
    log_ratio = torch.cat([mags, -mags, torch.zeros(1, dtype=torch.float64)]).to(dtype).reshape(1, -1)
    ref_lp = torch.zeros_like(log_ratio)
    for estimator in ("k2", "k3"):
        k = kl_penalty(log_ratio, ref_lp, estimator)
        assert torch.isfinite(k).all()
        assert (k >= 0).all(), f"{estimator} negative at {log_ratio[k < 0][:5].tolist()}"
    # ... and the same on random pairs.
    lp, rlp = _logprob_pair((16, 32), dtype, seed=2, spread=3.0)
    assert (kl_penalty(lp, rlp, "k3") >= 0).all()


def test_k3_is_accurate_for_small_log_ratios_in_float32():
    # Near r = 1, k3 ~ l^2 / 2 is tiny: exp(-l) - 1 + l loses it to cancellation (float32 rounds exp to
    # ~6e-8, i.e. 10 % of k3 at |l| = 1e-3), expm1(-l) + l keeps it (~1e-4 relative). Tolerance 1e-3.
    mags = torch.logspace(-3, -1, 200, dtype=torch.float64)
    log_ratio = torch.cat([mags, -mags]).float().reshape(1, -1)
    got = kl_penalty(log_ratio, torch.zeros_like(log_ratio), "k3")
    want = ref.as_tensor(ref.ref_kl(log_ratio, torch.zeros_like(log_ratio), "k3"), got)
    assert_close(got, want, rtol=1e-3, atol=0)


def test_k3_is_zero_iff_ratio_is_one():
    lp = torch.tensor([[-1.0, -2.0, -0.5]])
    assert_close(kl_penalty(lp, lp, "k3"), torch.zeros(1, 3), rtol=0, atol=0)
    assert (kl_penalty(lp, lp + 0.1, "k3") > 0).all()


# --- the estimators estimate KL(pi || pi_ref), from samples of pi ---------------------------------

# Two categorical distributions over 3 tokens whose KLs differ clearly in the two directions:
# KL(pi || pi_ref) = 0.5767 nats, KL(pi_ref || pi) = 0.7455 nats.
PI = torch.tensor([0.80, 0.15, 0.05], dtype=torch.float64)
PI_REF = torch.tensor([0.30, 0.30, 0.40], dtype=torch.float64)
N_SAMPLES = 200_000


def _exact_kl(p, q):
    return float((p * (p / q).log()).sum())


def _exact_mean_and_std(p, per_token):
    """Exact E_p[f] and sd_p[f] of a per-token function given as a (V,) tensor."""
    mean = float((p * per_token).sum())
    return mean, math.sqrt(float((p * (per_token - mean) ** 2).sum()))


@pytest.mark.parametrize("estimator", ["k1", "k3"])
def test_k1_k3_converge_to_forward_kl_not_reverse(estimator):
    kl_fwd, kl_rev = _exact_kl(PI, PI_REF), _exact_kl(PI_REF, PI)  # 0.5767 and 0.7455 nats
    gen = torch.Generator().manual_seed(0)
    tokens = torch.multinomial(PI, N_SAMPLES, replacement=True, generator=gen)  # a ~ pi
    logprobs = PI.log()[tokens].reshape(1, -1).float()  # (1, N) as the package gets them: float32
    ref_logprobs = PI_REF.log()[tokens].reshape(1, -1).float()
    estimate = kl_penalty(logprobs, ref_logprobs, estimator).double().mean().item()

    # Tolerance: both estimators are unbiased for KL(pi || pi_ref), so the sample mean is off by about
    # sd / sqrt(N). We compute that sd exactly from the two distributions (k1: 0.85, k3: 1.00, so the
    # standard error is ~0.0019 and ~0.0022) and allow 5 standard errors (tol ~0.01): a false failure
    # has probability < 1e-6 (and the seed is fixed anyway). The gap to the reverse KL (0.169 nats) is
    # ~75 standard errors, so requiring a distance of 10 tol from it cannot fail by chance either.
    per_token = (PI.log() - PI_REF.log()) if estimator == "k1" else (PI_REF / PI - 1 - (PI_REF / PI).log())
    exact_mean, sd = _exact_mean_and_std(PI, per_token)
    assert abs(exact_mean - kl_fwd) < 1e-12  # unbiasedness, checked exactly
    tol = 5 * sd / math.sqrt(N_SAMPLES)
    assert abs(estimate - kl_fwd) < tol, f"{estimator}: {estimate:.4f} vs KL(pi||pi_ref) = {kl_fwd:.4f} (tol {tol:.4f})"
    assert abs(estimate - kl_rev) > 10 * tol, f"{estimator} estimates the reverse KL(pi_ref||pi)"


def test_swapping_roles_estimates_the_reverse_kl():
    # Sampling from pi_ref and passing (ref, pi) in the policy's slot estimates KL(pi_ref || pi): the
    # estimator's direction is set by which distribution sampled the tokens. Same tolerance reasoning.
    gen = torch.Generator().manual_seed(1)
    tokens = torch.multinomial(PI_REF, N_SAMPLES, replacement=True, generator=gen)
    est = kl_penalty(PI_REF.log()[tokens].reshape(1, -1), PI.log()[tokens].reshape(1, -1), "k3").mean().item()
    r = PI / PI_REF
    _, sd = _exact_mean_and_std(PI_REF, r - 1 - r.log())
    assert abs(est - _exact_kl(PI_REF, PI)) < 5 * sd / math.sqrt(N_SAMPLES)


def test_k2_is_close_to_kl_for_nearby_distributions():
    # k2 is biased, but for pi_ref close to pi its mean is KL + O(|log ratio|^3).
    pi_ref_near = PI * torch.exp(torch.tensor([0.05, -0.04, 0.03], dtype=torch.float64))
    pi_ref_near = pi_ref_near / pi_ref_near.sum()
    per_token_k2 = 0.5 * (PI.log() - pi_ref_near.log()) ** 2
    k2 = kl_penalty(PI.log().reshape(1, -1), pi_ref_near.log().reshape(1, -1), "k2").squeeze(0)
    assert_close(k2, per_token_k2)
    mean_k2 = float((PI * k2).sum())
    assert abs(mean_k2 - _exact_kl(PI, pi_ref_near)) < 0.1 * _exact_kl(PI, pi_ref_near)
