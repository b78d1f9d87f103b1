"""Tests for ppo_core.advantages (chapter 07): critic-free advantages and the KL as a loss term.

Each function is compared with a naive loop over plain Python floats (no shared code with the package),
over shapes, group sizes and dtypes; plus the invariants that define each method.
"""

import math

import pytest
import reference_impls as ref
import torch
from torch.testing import assert_close

from ppo_core.advantages import (
    discounted_returns,
    group_relative_advantages,
    kl_loss,
    leave_one_out_advantages,
    outcome_advantages,
    reinforce_plus_plus_advantages,
)
from ppo_core.gae import token_rewards
from ppo_core.kl import kl_penalty

DTYPES = [torch.float32, torch.float64]
GROUPS = [(2, 1), (4, 2), (3, 5), (8, 4)]  # (group_size G, number of prompts)


def naive_grpo(scores: list[float], G: int, norm_by_std: bool, eps: float = 1e-6) -> list[float]:
    out = []
    for start in range(0, len(scores), G):
        group = scores[start : start + G]
        mean = math.fsum(group) / G
        std = math.sqrt(math.fsum((s - mean) ** 2 for s in group) / (G - 1))
        out += [(s - mean) / (std + eps) if norm_by_std else s - mean for s in group]
    return out


def naive_rloo(scores: list[float], G: int) -> list[float]:
    out = []
    for start in range(0, len(scores), G):
        group = scores[start : start + G]
        for i, s in enumerate(group):
            others = [group[j] for j in range(G) if j != i]
            out.append(s - math.fsum(others) / len(others))
    return out


def naive_returns(rewards: list[list[float]], mask: list[list[bool]], gamma: float) -> list[list[float]]:
    out = []
    for row, m in zip(rewards, mask):
        running, back = 0.0, []
        for r, keep in zip(reversed(row), reversed(m)):
            if keep:
                running = r + gamma * running
            back.append(running if keep else 0.0)
        out.append(back[::-1])
    return out


def _scores(G, n, dtype, seed=0, binary=False):
    g = torch.Generator().manual_seed(seed)
    x = (
        (torch.rand(G * n, generator=g) < 0.5).double()
        if binary
        else torch.randn(G * n, generator=g, dtype=torch.float64)
    )
    return x.to(dtype)


@pytest.mark.parametrize("G,n", GROUPS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("norm_by_std", [True, False])
def test_grpo_matches_naive_loop(G, n, dtype, norm_by_std):
    for binary in (False, True):
        scores = _scores(G, n, dtype, seed=G * 10 + n, binary=binary)
        got = group_relative_advantages(scores, G, norm_by_std)
        want = ref.as_tensor(naive_grpo(scores.double().tolist(), G, norm_by_std), scores)
        assert_close(got, want)


@pytest.mark.parametrize("G,n", GROUPS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_rloo_matches_naive_loop_and_the_scaled_group_difference(G, n, dtype):
    scores = _scores(G, n, dtype, seed=G + n)
    got = leave_one_out_advantages(scores, G)
    assert_close(got, ref.as_tensor(naive_rloo(scores.double().tolist(), G), scores))
    assert_close(got, G / (G - 1) * group_relative_advantages(scores, G, norm_by_std=False))


def test_all_equal_group_gets_zero_advantage_not_nan():
    scores = torch.tensor([1.0, 1.0, 1.0, 1.0, 0.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0])
    for norm in (True, False):
        adv = group_relative_advantages(scores, 4, norm_by_std=norm)
        assert torch.isfinite(adv).all()
        assert (adv[:8] == 0).all()  # nothing to learn from a prompt every sample solved (or failed)
        assert adv[8] > 0 and (adv[9:] < 0).all()
    assert (leave_one_out_advantages(scores, 4)[:8] == 0).all()


def test_groups_are_contiguous_not_strided():
    # prompt 0's samples are rows 0-1, prompt 1's rows 2-3: [1, 0 | 5, 5]; a strided layout would pair 1 with 5
    scores = torch.tensor([1.0, 0.0, 5.0, 5.0])
    assert_close(group_relative_advantages(scores, 2, norm_by_std=False), torch.tensor([0.5, -0.5, 0.0, 0.0]))


def test_group_advantages_sum_to_zero_per_group_and_ignore_other_groups():
    scores = _scores(4, 3, torch.float64, seed=3)
    adv = group_relative_advantages(scores, 4).reshape(3, 4)
    assert_close(adv.sum(1), torch.zeros(3, dtype=torch.float64), atol=1e-12, rtol=0)
    shifted = scores.clone()
    shifted[4:] += 100.0  # other prompts' scores do not move prompt 0's advantages
    assert_close(group_relative_advantages(shifted, 4)[:4], adv[0])


def test_bad_group_size_names_the_fix():
    for G, B in ((1, 4), (3, 4)):
        with pytest.raises(ValueError, match="rollout.group_size"):
            group_relative_advantages(torch.zeros(B), G)


@pytest.mark.parametrize("B,T", [(1, 1), (3, 6), (8, 5)])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("gamma", [1.0, 0.9])
def test_discounted_returns_match_naive_loop(B, T, dtype, gamma):
    g = torch.Generator().manual_seed(B * T)
    for kind in ("prefix", "arbitrary"):
        mask = ref.MASK_KINDS[kind](B, T, g)
        rewards = torch.randn(B, T, generator=g, dtype=torch.float64).to(dtype)
        want = ref.as_tensor(naive_returns(rewards.double().tolist(), mask.tolist(), gamma), rewards)
        assert_close(discounted_returns(ref.fill_masked_finite(rewards, mask, g), mask, gamma), want)


def test_reinforce_plus_plus_whitens_the_returns_over_the_batch():
    g = torch.Generator().manual_seed(0)
    mask = ref.random_prefix_mask(6, 7, g)
    rewards = torch.randn(6, 7, generator=g, dtype=torch.float64)
    returns = ref.as_tensor(naive_returns(rewards.tolist(), mask.tolist(), 0.95), rewards)
    want = ref.as_tensor(ref.ref_masked_whiten(returns, mask), rewards)
    got = reinforce_plus_plus_advantages(rewards, mask, 0.95)
    assert_close(got, want)
    assert abs(got[mask].mean().item()) < 1e-12 and abs(got[mask].std().item() - 1) < 1e-6


def test_outcome_advantages_put_the_sequence_advantage_on_every_response_token():
    mask = torch.tensor([[1, 1, 0], [1, 0, 0], [1, 1, 1], [1, 1, 0]], dtype=torch.bool)
    scores = torch.tensor([1.0, 0.0, 1.0, 1.0])
    kl = torch.full((4, 3), 0.5)
    rewards = token_rewards(scores, kl, mask, kl_coef=0.1)  # R_i = score - 0.05 * n_i
    seq = torch.tensor([1 - 0.1, -0.05, 1 - 0.15, 1 - 0.1])
    for est, want in (
        ("grpo", group_relative_advantages(seq, 2)),
        ("rloo", leave_one_out_advantages(seq, 2)),
    ):
        got = outcome_advantages(est, rewards, mask, group_size=2)
        assert_close(got, torch.where(mask, want[:, None], torch.zeros(())))
    assert_close(
        outcome_advantages("reinforce_plus_plus", rewards, mask), reinforce_plus_plus_advantages(rewards, mask)
    )
    with pytest.raises(ValueError, match="grpo"):
        outcome_advantages("gea", rewards, mask, 2)


# ---- the KL in the loss: which estimator's gradient is the KL's -------------------------------------


def _toy(seed=0, K=6):
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(K, generator=g, dtype=torch.float64).requires_grad_(True)
    ref_logits = torch.randn(K, generator=g, dtype=torch.float64)
    return logits, ref_logits


def _expected_grad_in_loss(kl_loss_type: str, logits, ref_logits):
    """Exact E_{a ~ pi}[grad k(a)] over all K tokens: the sampling weights pi(a) carry no gradient (the
    samples are fixed data in the loss), only log pi(a) inside the estimator does."""
    logp, ref_logp = torch.log_softmax(logits, -1), torch.log_softmax(ref_logits, -1)
    expected = (logp.detach().exp() * kl_penalty(logp, ref_logp, kl_loss_type)).sum()
    (grad,) = torch.autograd.grad(expected, logits)
    return grad


def test_k2_in_the_loss_has_exactly_the_gradient_of_kl_pi_to_ref_and_k3_that_of_the_reverse_kl():
    for seed in range(5):
        logits, ref_logits = _toy(seed)
        logp, ref_logp = torch.log_softmax(logits, -1), torch.log_softmax(ref_logits, -1)
        forward_kl = (logp.exp() * (logp - ref_logp)).sum()  # KL(pi || pi_ref)
        reverse_kl = (ref_logp.exp() * (ref_logp - logp)).sum()  # KL(pi_ref || pi)
        g_fwd, g_rev = (torch.autograd.grad(kl, logits, retain_graph=True)[0] for kl in (forward_kl, reverse_kl))
        assert_close(_expected_grad_in_loss("k2", logits, ref_logits), g_fwd)
        g_k3 = _expected_grad_in_loss("k3", logits, ref_logits)
        assert_close(g_k3, g_rev)
        assert (g_k3 - g_fwd).abs().max() > 1e-3  # not the gradient of the KL it estimates
        assert_close(_expected_grad_in_loss("k1", logits, ref_logits), torch.zeros_like(g_fwd), atol=1e-12, rtol=0)


def test_kl_loss_values_and_aggregation():
    g = torch.Generator().manual_seed(1)
    logp = -torch.rand(3, 4, generator=g, dtype=torch.float64) * 2
    ref_logp = -torch.rand(3, 4, generator=g, dtype=torch.float64) * 2
    mask = torch.tensor([[1, 1, 1, 1], [1, 0, 0, 0], [1, 1, 0, 0]], dtype=torch.bool)
    for est in ("k1", "k2", "k3"):
        per = ref.as_tensor(ref.ref_kl(logp, ref_logp, est), logp)
        loss, stats = kl_loss(logp, ref_logp, mask, est)
        assert_close(loss, per[mask].mean())
        assert stats["kl"] == pytest.approx(per[mask].mean().item())
        loss_seq, _ = kl_loss(logp, ref_logp, mask, est, "seq-mean-token-mean")
        assert_close(loss_seq, torch.stack([per[i][mask[i]].mean() for i in range(3)]).mean())
    with pytest.raises(ValueError, match="k1, k2, k3"):
        kl_loss(logp, ref_logp, mask, "low_var_kl")
