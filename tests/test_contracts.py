"""Contracts of the algorithm functions that the per-module tests left open (found by tests/quality/mutation.py).

Each test pins a promise a caller relies on: a 0/1 mask of any dtype means the same as a bool mask (the
trainer passes ``attention_mask``-style long tensors), the documented defaults are the ones the code uses,
arguments reach the function they are meant for, degenerate inputs stay finite, and bad input gets an
error that names the value and the fix.
"""

import pytest
import torch

from ppo_core.advantages import (
    discounted_returns,
    group_relative_advantages,
    kl_loss,
    outcome_advantages,
    reinforce_plus_plus_advantages,
)
from ppo_core.kl import kl_penalty
from ppo_core.logprobs import entropy_from_logits, logprobs_from_logits, response_logits
from ppo_core.losses import aggregate_loss, policy_loss
from ppo_core.masking import masked_mean, masked_sum, masked_var, masked_whiten


@pytest.fixture
def batch():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(4, 6, generator=g, dtype=torch.float64)
    mask = torch.tensor(
        [[1, 1, 1, 0, 0, 0], [1, 1, 1, 1, 1, 1], [1, 0, 0, 0, 0, 0], [1, 1, 1, 1, 0, 0]], dtype=torch.long
    )
    return x, mask


# ---- a 0/1 mask of any dtype is a bool mask --------------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.long, torch.int32, torch.float32, torch.uint8])
def test_masking_functions_take_0_1_masks_of_any_dtype(batch, dtype):
    x, mask = batch
    m, b = mask.to(dtype), mask.bool()
    torch.testing.assert_close(masked_sum(x, m), masked_sum(x, b))
    torch.testing.assert_close(masked_sum(x, m, dim=1), masked_sum(x, b, dim=1))
    torch.testing.assert_close(masked_mean(x, m), masked_mean(x, b))
    torch.testing.assert_close(masked_mean(x, m, dim=1), masked_mean(x, b, dim=1))
    torch.testing.assert_close(masked_var(x, m), masked_var(x, b))
    torch.testing.assert_close(masked_whiten(x, m), masked_whiten(x, b))


@pytest.mark.parametrize("mode", ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum-norm"])
def test_losses_and_advantages_take_0_1_long_masks(batch, mode):
    x, mask = batch
    old = x + 0.1
    adv = torch.linspace(-1, 1, 24, dtype=torch.float64).reshape(4, 6)
    loss_long, _ = policy_loss(x, old, adv, mask, loss_agg_mode=mode)
    loss_bool, _ = policy_loss(x, old, adv, mask.bool(), loss_agg_mode=mode)
    torch.testing.assert_close(loss_long, loss_bool)
    torch.testing.assert_close(aggregate_loss(x, mask, mode), aggregate_loss(x, mask.bool(), mode))
    for est, G in (("grpo", 2), ("rloo", 2), ("reinforce_plus_plus", 1)):
        torch.testing.assert_close(outcome_advantages(est, x, mask, G), outcome_advantages(est, x, mask.bool(), G))


# ---- the documented defaults are the ones in use -----------------------------------------------------------


def test_documented_defaults(batch):
    x, mask = batch
    torch.testing.assert_close(discounted_returns(x, mask), discounted_returns(x, mask, gamma=1.0))
    torch.testing.assert_close(
        outcome_advantages("reinforce_plus_plus", x, mask), reinforce_plus_plus_advantages(x, mask)
    )
    torch.testing.assert_close(aggregate_loss(x, mask), masked_mean(x, mask))  # token-mean by default
    lp, ref = x, x.flip(1)
    torch.testing.assert_close(kl_loss(lp, ref, mask)[0], masked_mean(0.5 * (lp - ref) ** 2, mask))  # k2, token-mean
    torch.testing.assert_close(masked_whiten(x, mask), masked_whiten(x, mask, unbiased=True))


def test_arguments_reach_the_function_they_are_for(batch):
    x, mask = batch
    # gamma and norm_by_std pass through outcome_advantages
    torch.testing.assert_close(
        outcome_advantages("reinforce_plus_plus", x, mask, gamma=0.5), reinforce_plus_plus_advantages(x, mask, 0.5)
    )
    scores = masked_sum(x, mask, dim=1)
    plain = group_relative_advantages(scores, 2, norm_by_std=False)
    got = outcome_advantages("grpo", x, mask, group_size=2, norm_by_std=False)
    torch.testing.assert_close(got, torch.where(mask.bool(), plain[:, None], torch.zeros((), dtype=x.dtype)))
    # eps reaches the whitening
    torch.testing.assert_close(
        reinforce_plus_plus_advantages(x, mask, eps=1.0), masked_whiten(discounted_returns(x, mask), mask, eps=1.0)
    )
    # norm_len reaches the constant normaliser of the policy loss and of the KL loss
    B, T = mask.shape
    adv = torch.ones_like(x)
    loss, _ = policy_loss(x, x.detach(), adv, mask, loss_agg_mode="seq-mean-token-sum-norm", norm_len=3 * T)
    torch.testing.assert_close(loss, -masked_sum(adv, mask) / (B * 3 * T))
    kl, _ = kl_loss(x, x.flip(1), mask, "k2", "seq-mean-token-sum-norm", norm_len=3 * T)
    torch.testing.assert_close(kl, masked_sum(0.5 * (x - x.flip(1)) ** 2, mask) / (B * 3 * T))
    # unbiased reaches the variance inside the whitening
    xm = x[mask.bool()]
    torch.testing.assert_close(
        masked_whiten(x, mask, unbiased=False)[mask.bool()],
        (xm - xm.mean()) / torch.sqrt(xm.var(unbiased=False) + 1e-8),
    )


# ---- degenerate inputs ------------------------------------------------------------------------------------


def test_masked_var_applies_bessel_from_two_entries():
    x = torch.tensor([[1.0, 3.0, 100.0]])
    mask = torch.tensor([[True, True, False]])
    torch.testing.assert_close(masked_var(x, mask), torch.tensor(2.0))  # torch.var([1, 3]) = 2
    torch.testing.assert_close(masked_var(x, mask, unbiased=False), torch.tensor(1.0))


def test_whitening_a_constant_gives_zeros_not_nan():
    x = torch.full((2, 3), 0.7)
    out = masked_whiten(x, torch.ones(2, 3, dtype=torch.bool))
    assert torch.isfinite(out).all() and out.abs().max() < 1e-3


# ---- errors that name the value and the fix ---------------------------------------------------------------


def test_bad_input_errors_name_the_value_and_the_choices():
    t = torch.zeros(2, 3)
    with pytest.raises(ValueError, match=r"'k9'; choose one of k1, k2, k3"):
        kl_penalty(t, t, "k9")
    with pytest.raises(
        ValueError, match=r"'mean'; choose one of token-mean, seq-mean-token-mean, seq-mean-token-sum-norm"
    ):
        aggregate_loss(t, t.bool(), "mean")
    with pytest.raises(ValueError, match=r"'ppo'; choose one of grpo, rloo, reinforce_plus_plus"):
        outcome_advantages("ppo", t, t.bool(), 2)
    with pytest.raises(ValueError, match=r"temperature must be > 0, got 0.*small positive value"):
        logprobs_from_logits(torch.zeros(1, 2, 5), torch.zeros(1, 2, dtype=torch.long), temperature=0)
    with pytest.raises(ValueError, match=r"temperature must be > 0, got -1"):
        entropy_from_logits(torch.zeros(1, 2, 5), temperature=-1)
    logits = torch.zeros(1, 7, 5)
    with pytest.raises(ValueError, match=r"prompt_len must be >= 1 .*got 0"):
        response_logits(logits, 0, 3)
    with pytest.raises(ValueError, match=r"prompt_len \+ response_len = 9 exceeds the sequence length 7"):
        response_logits(logits, 4, 5)
