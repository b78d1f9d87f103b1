"""Tests for ppo_core.gae (chapter 03): per-token rewards and generalised advantage estimation."""

import pytest
import reference_impls as ref
import torch
from torch.testing import assert_close

from ppo_core.gae import compute_gae, last_true_index, token_rewards

SHAPES = [(1, 1), (1, 7), (3, 5), (4, 12), (6, 3)]  # (B, T)
DTYPES = [torch.float32, torch.float64]
MASK_KINDS = ["prefix", "arbitrary"]


def _case(shape, dtype, kind, seed=0):
    gen = torch.Generator().manual_seed(seed)
    rewards = torch.randn(shape, generator=gen, dtype=torch.float64).to(dtype)
    values = torch.randn(shape, generator=gen, dtype=torch.float64).to(dtype)
    mask = ref.MASK_KINDS[kind](*shape, gen)
    return rewards, values, mask, gen


# --- token_rewards -----------------------------------------------------------------------------


def test_token_rewards_hand_computed():
    # kl_coef = 0.1. Row 0, mask [T, T, F]: last True token is t=1 -> [-0.01, -0.02 + 1.0, 0] = [-0.01, 0.98, 0].
    # Row 1, mask [T, F, T] (a hole): last True token is t=2 -> [-0.04, 0, -0.06 - 0.5] = [-0.04, 0, -0.56].
    # Row 2, no True token: all 0, and its score (7.0) lands nowhere.
    scores = torch.tensor([1.0, -0.5, 7.0])
    kl = torch.tensor([[0.1, 0.2, 0.3], [0.4, 0.5, 0.6], [0.7, 0.8, 0.9]])
    mask = torch.tensor([[True, True, False], [True, False, True], [False, False, False]])
    want = torch.tensor([[-0.01, 0.98, 0.0], [-0.04, 0.0, -0.56], [0.0, 0.0, 0.0]])
    assert_close(token_rewards(scores, kl, mask, kl_coef=0.1), want)


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("kind", MASK_KINDS)
@pytest.mark.parametrize("kl_coef", [0.0, 0.05, 0.3])
def test_token_rewards_match_naive_loop(shape, dtype, kind, kl_coef):
    gen = torch.Generator().manual_seed(shape[0] * 7 + shape[1])
    scores = torch.randn(shape[0], generator=gen, dtype=torch.float64).to(dtype)
    kl = torch.randn(shape, generator=gen, dtype=torch.float64).to(dtype)
    mask = ref.MASK_KINDS[kind](*shape, gen)
    got = token_rewards(scores, kl, mask, kl_coef)
    assert got.shape == shape and got.dtype == dtype
    assert_close(got, ref.as_tensor(ref.ref_token_rewards(scores, kl, mask, kl_coef), got))


def test_token_rewards_sum_is_score_minus_kl():
    # Per row: sum_t r_t = score - kl_coef * sum_{t in mask} kl_t. The score is added exactly once.
    rewards_shape = (5, 9)
    gen = torch.Generator().manual_seed(3)
    scores = torch.randn(5, generator=gen, dtype=torch.float64)
    kl = torch.rand(rewards_shape, generator=gen, dtype=torch.float64)
    mask = ref.random_arbitrary_mask(*rewards_shape, gen)
    mask[:, 0] = True  # every row non-empty
    got = token_rewards(scores, kl, mask, 0.2)
    assert_close(got.sum(dim=1), scores - 0.2 * (kl * mask).sum(dim=1))


def test_token_rewards_masked_kl_never_matters():
    gen = torch.Generator().manual_seed(4)
    scores = torch.randn(4, generator=gen)
    kl = torch.randn(4, 6, generator=gen)
    mask = ref.random_arbitrary_mask(4, 6, gen)
    got = token_rewards(scores, ref.fill_masked(kl, mask, gen), mask, 0.1)
    assert_close(got, token_rewards(scores, kl, mask, 0.1), rtol=0, atol=0)


def test_token_rewards_does_not_modify_inputs():
    # The score is added in place into the rewards tensor: it must be a fresh tensor, not kl or scores.
    scores, kl = torch.tensor([1.0, 2.0]), torch.tensor([[0.1, 0.2], [0.3, 0.4]])
    mask = torch.tensor([[True, True], [True, False]])
    s0, kl0, m0 = scores.clone(), kl.clone(), mask.clone()
    for kl_coef in (0.0, 0.1):
        token_rewards(scores, kl, mask, kl_coef)
    assert torch.equal(scores, s0) and torch.equal(kl, kl0) and torch.equal(mask, m0)


def test_last_true_index():
    mask = torch.tensor([[True, True, False], [True, False, True], [False, False, False]])
    assert torch.equal(last_true_index(mask), torch.tensor([1, 2, -1]))


# --- compute_gae -------------------------------------------------------------------------------


def test_gae_hand_computed():
    # gamma = 0.9, lam = 0.8 (gamma * lam = 0.72); rewards [0, 0, 1], values [0.5, 0.6, 0.7], V after the end = 0.
    # delta_2 = 1 + 0.9*0 - 0.7 = 0.3             A_2 = 0.3
    # delta_1 = 0 + 0.9*0.7 - 0.6 = 0.03          A_1 = 0.03 + 0.72*0.3 = 0.246
    # delta_0 = 0 + 0.9*0.6 - 0.5 = 0.04          A_0 = 0.04 + 0.72*0.246 = 0.21712
    # returns = A + V = [0.71712, 0.846, 1.0]
    rewards = torch.tensor([[0.0, 0.0, 1.0]])
    values = torch.tensor([[0.5, 0.6, 0.7]])
    mask = torch.ones(1, 3, dtype=torch.bool)
    adv, ret = compute_gae(rewards, values, mask, gamma=0.9, lam=0.8)
    assert_close(adv, torch.tensor([[0.21712, 0.246, 0.3]]))
    assert_close(ret, torch.tensor([[0.71712, 0.846, 1.0]]))


def test_gae_hand_computed_with_a_hole_and_padding():
    # mask [T, F, T, F]: the steps are t=0 and t=2 (the next state of t=0 is t=2); junk (9) where False.
    # gamma = 0.9, lam = 0.8: A_2 = 1 - 0.7 = 0.3; delta_0 = 0 + 0.9*0.7 - 0.5 = 0.13, A_0 = 0.13 + 0.72*0.3 = 0.346.
    rewards = torch.tensor([[0.0, 9.0, 1.0, 9.0]])
    values = torch.tensor([[0.5, 9.0, 0.7, 9.0]])
    mask = torch.tensor([[True, False, True, False]])
    adv, ret = compute_gae(rewards, values, mask, gamma=0.9, lam=0.8)
    assert_close(adv, torch.tensor([[0.346, 0.0, 0.3, 0.0]]))
    assert_close(ret, torch.tensor([[0.846, 0.0, 1.0, 0.0]]))


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("kind", MASK_KINDS)
@pytest.mark.parametrize("gamma,lam", [(1.0, 0.95), (0.9, 0.8), (0.7, 1.0), (0.99, 0.0)])
def test_gae_matches_naive_loop(shape, dtype, kind, gamma, lam):
    rewards, values, mask, _ = _case(shape, dtype, kind, seed=shape[0] * 13 + shape[1])
    adv, ret = compute_gae(rewards, values, mask, gamma=gamma, lam=lam)
    assert adv.shape == shape and ret.shape == shape
    assert adv.dtype == dtype and ret.dtype == dtype
    want_adv, want_ret = ref.ref_gae(rewards, values, mask, gamma, lam)
    assert_close(adv, ref.as_tensor(want_adv, adv))
    assert_close(ret, ref.as_tensor(want_ret, ret))


@pytest.mark.parametrize("kind", MASK_KINDS)
@pytest.mark.parametrize("gamma", [1.0, 0.9])
def test_gae_lambda_one_is_monte_carlo_return_minus_value(kind, gamma):
    rewards, values, mask, _ = _case((5, 10), torch.float64, kind, seed=1)
    adv, ret = compute_gae(rewards, values, mask, gamma=gamma, lam=1.0)
    want = ref.as_tensor(ref.ref_monte_carlo_advantages(rewards, values, mask, gamma), adv)
    assert_close(adv, want)
    # gamma = lam = 1: the returns are the plain reward-to-go, whatever the values.
    if gamma == 1.0:
        togo = torch.flip(torch.cumsum(torch.flip(rewards * mask, [1]), 1), [1]) * mask
        assert_close(ret, togo)


@pytest.mark.parametrize("kind", MASK_KINDS)
@pytest.mark.parametrize("gamma", [1.0, 0.8])
def test_gae_lambda_zero_is_td_error(kind, gamma):
    rewards, values, mask, _ = _case((5, 10), torch.float64, kind, seed=2)
    adv, _ = compute_gae(rewards, values, mask, gamma=gamma, lam=0.0)
    assert_close(adv, ref.as_tensor(ref.ref_td_errors(rewards, values, mask, gamma), adv))


def test_gae_default_gamma_and_lambda():
    # The documented defaults are gamma = 1, lam = 0.95.
    rewards, values, mask, _ = _case((3, 6), torch.float64, "prefix", seed=3)
    adv, ret = compute_gae(rewards, values, mask)
    want_adv, want_ret = ref.ref_gae(rewards, values, mask, 1.0, 0.95)
    assert_close(adv, ref.as_tensor(want_adv, adv))
    assert_close(ret, ref.as_tensor(want_ret, ret))


def test_gae_perfect_values_give_zero_advantage():
    # If V(s_t) is the true expected return-to-go (here: deterministic rewards, gamma = 1), every TD error
    # is 0, so every advantage is 0 for any lam, and returns equal values.
    rewards = torch.tensor([[0.1, -0.2, 0.0, 1.0]], dtype=torch.float64)
    values = torch.flip(torch.cumsum(torch.flip(rewards, [1]), 1), [1])  # [0.9, 0.8, 1.0, 1.0]
    mask = torch.ones(1, 4, dtype=torch.bool)
    for lam in (0.0, 0.5, 1.0):
        adv, ret = compute_gae(rewards, values, mask, gamma=1.0, lam=lam)
        assert_close(adv, torch.zeros_like(adv))
        assert_close(ret, values)


@pytest.mark.parametrize("kind", MASK_KINDS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_gae_masked_positions_never_matter(kind, dtype):
    rewards, values, mask, gen = _case((5, 8), dtype, kind, seed=4)
    adv, ret = compute_gae(rewards, values, mask, gamma=0.95, lam=0.9)
    for _ in range(3):
        junk_r, junk_v = ref.fill_masked(rewards, mask, gen), ref.fill_masked(values, mask, gen)
        adv2, ret2 = compute_gae(junk_r, junk_v, mask, gamma=0.95, lam=0.9)
        assert_close(adv2, adv, rtol=0, atol=0)
        assert_close(ret2, ret, rtol=0, atol=0)
    assert (adv[~mask] == 0).all() and (ret[~mask] == 0).all()


def test_gae_does_not_bootstrap_from_padding():
    # A row that ends early: the value at the padding right after its last token must not be used as
    # V(s_T). Changing it (to a finite number) must not change anything.
    rewards = torch.tensor([[0.0, 1.0, 0.0, 0.0]])
    values = torch.tensor([[0.2, 0.4, 5.0, 5.0]])
    mask = torch.tensor([[True, True, False, False]])
    adv, _ = compute_gae(rewards, values, mask, gamma=1.0, lam=1.0)
    assert_close(adv, torch.tensor([[1.0 - 0.2, 1.0 - 0.4, 0.0, 0.0]]))


def test_gae_does_not_modify_inputs():
    rewards, values, mask, _ = _case((3, 5), torch.float32, "arbitrary", seed=5)
    r0, v0, m0 = rewards.clone(), values.clone(), mask.clone()
    compute_gae(rewards, values, mask, gamma=0.9, lam=0.9)
    assert torch.equal(rewards, r0) and torch.equal(values, v0) and torch.equal(mask, m0)


def test_a_zero_one_mask_gives_what_the_bool_mask_gives():
    """Masks arrive as bool, 0/1 long (an attention mask) or float: token_rewards and last_true_index agree."""
    from ppo_core.gae import last_true_index, token_rewards

    mask = torch.tensor([[1, 1, 0, 0], [1, 1, 1, 1], [0, 0, 0, 0]], dtype=torch.bool)
    kl, scores = torch.arange(12.0).reshape(3, 4) / 10, torch.tensor([1.0, -2.0, 3.0])
    for other in (mask.long(), mask.float()):
        assert torch.equal(last_true_index(other), last_true_index(mask))
        assert torch.equal(token_rewards(scores, kl, other, 0.1), token_rewards(scores, kl, mask, 0.1))
    assert last_true_index(mask).tolist() == [1, 3, -1]
