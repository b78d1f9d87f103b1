"""Tests for ppo_core.losses (chapter 04): clipped policy loss, clipped value loss, entropy loss."""

import math

import pytest
import reference_impls as ref
import torch
from torch.testing import assert_close

from ppo_core.losses import LOSS_AGG_MODES, aggregate_loss, entropy_loss, policy_loss, value_loss

SHAPES = [(1, 1), (2, 5), (4, 9), (6, 3)]  # (B, T)
DTYPES = [torch.float32, torch.float64]
MASK_KINDS = ["prefix", "arbitrary"]
STAT_TOL = dict(rtol=1e-5, atol=1e-6)  # stats are Python floats computed in the input dtype


def _policy_case(shape, dtype, kind, seed=0):
    """logprobs (leaf, requires grad), old_logprobs, advantages, mask; ratios spread well beyond 1 +- 0.2."""
    gen = torch.Generator().manual_seed(seed)
    old = -torch.rand(shape, generator=gen, dtype=torch.float64) * 3.0
    logprobs = old + torch.randn(shape, generator=gen, dtype=torch.float64) * 0.3
    advantages = torch.randn(shape, generator=gen, dtype=torch.float64)
    mask = ref.MASK_KINDS[kind](*shape, gen)
    return logprobs.to(dtype).requires_grad_(True), old.to(dtype), advantages.to(dtype), mask, gen


def _value_case(shape, dtype, kind, seed=0):
    gen = torch.Generator().manual_seed(seed)
    old_values = torch.randn(shape, generator=gen, dtype=torch.float64)
    values = old_values + torch.randn(shape, generator=gen, dtype=torch.float64) * 0.3
    returns = torch.randn(shape, generator=gen, dtype=torch.float64)
    mask = ref.MASK_KINDS[kind](*shape, gen)
    return values.to(dtype).requires_grad_(True), old_values.to(dtype), returns.to(dtype), mask, gen


def _assert_stats_are_floats(stats, keys):
    assert set(keys) <= set(stats)
    for key in keys:
        assert type(stats[key]) is float, f"stats[{key!r}] is {type(stats[key]).__name__}, not a Python float"


# --- policy_loss -------------------------------------------------------------------------------


def test_policy_loss_hand_computed():
    # eps = 0.2. Per token: ratio r, advantage A, terms -A r and -A clip(r, 0.8, 1.2); the loss term is the max.
    #  t0: r=1.5, A=+1: -1.5 vs -1.2 -> -1.2 (clipped: r moved past 1.2 in the favoured direction), grad 0
    #  t1: r=0.5, A=+1: -0.5 vs -0.8 -> -0.5 (not clipped: the pessimistic term is the unclipped one),
    #      grad d(-A r)/d log r / n = -0.5 / 4 = -0.125
    #  t2: r=1.1, A=-1: +1.1 vs +1.1 -> 1.1 (inside the range, not clipped), grad +1.1 / 4 = 0.275
    #  t3: r=0.5, A=-1: +0.5 vs +0.8 -> 0.8 (clipped: r moved below 0.8, as A<0 favours), grad 0
    #  t4: masked out (junk).
    # loss = (-1.2 - 0.5 + 1.1 + 0.8) / 4 = 0.05; clipfrac = 2/4; ratio_mean = (1.5+0.5+1.1+0.5)/4 = 0.9;
    # approx_kl = mean(r - 1 - ln r) = (0.5 - ln 1.5 + (-0.5 - ln 0.5) * 2 + 0.1 - ln 1.1) / 4.
    ratio = torch.tensor([[1.5, 0.5, 1.1, 0.5, 3.0]], dtype=torch.float64)
    old = torch.tensor([[-1.0, -2.0, -0.5, -1.5, -1.0]], dtype=torch.float64)
    logprobs = (old + ratio.log()).requires_grad_(True)
    advantages = torch.tensor([[1.0, 1.0, -1.0, -1.0, 5.0]], dtype=torch.float64)
    mask = torch.tensor([[True, True, True, True, False]])
    loss, stats = policy_loss(logprobs, old, advantages, mask, clip_eps=0.2)
    assert_close(loss, torch.tensor(0.05, dtype=torch.float64))
    assert stats["clipfrac"] == pytest.approx(0.5)
    assert stats["ratio_mean"] == pytest.approx(0.9)
    want_kl = (0.5 - math.log(1.5) + 2 * (-0.5 - math.log(0.5)) + 0.1 - math.log(1.1)) / 4
    assert stats["approx_kl"] == pytest.approx(want_kl)
    loss.backward()
    assert_close(logprobs.grad, torch.tensor([[0.0, -0.125, 0.275, 0.0, 0.0]], dtype=torch.float64))


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("kind", MASK_KINDS)
@pytest.mark.parametrize("clip_eps", [0.1, 0.2])
def test_policy_loss_matches_naive_loop(shape, dtype, kind, clip_eps):
    logprobs, old, advantages, mask, _ = _policy_case(shape, dtype, kind, seed=shape[0] * 11 + shape[1])
    loss, stats = policy_loss(logprobs, old, advantages, mask, clip_eps=clip_eps)
    want = ref.ref_policy_loss(logprobs, old, advantages, mask, clip_eps)
    assert loss.shape == () and loss.dtype == dtype
    assert_close(loss, ref.as_tensor(want["loss"], loss))
    _assert_stats_are_floats(stats, ["clipfrac", "approx_kl", "ratio_mean"])
    for key in ("clipfrac", "approx_kl", "ratio_mean"):
        assert stats[key] == pytest.approx(want[key], **{"rel": STAT_TOL["rtol"], "abs": STAT_TOL["atol"]}), key
    loss.backward()
    assert_close(logprobs.grad, ref.as_tensor(want["grad"], logprobs.grad))


def test_policy_loss_default_clip_eps_is_0_2():
    logprobs, old, advantages, mask, _ = _policy_case((4, 9), torch.float64, "prefix", seed=1)
    loss, stats = policy_loss(logprobs, old, advantages, mask)
    want = ref.ref_policy_loss(logprobs, old, advantages, mask, 0.2)
    assert_close(loss, ref.as_tensor(want["loss"], loss))
    assert stats["clipfrac"] == pytest.approx(want["clipfrac"])


@pytest.mark.parametrize("kind", MASK_KINDS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_policy_loss_ratio_one_means_no_clipping(kind, dtype):
    # On the first minibatch of an update, logprobs == old_logprobs: ratio 1, nothing clipped,
    # loss = -masked_mean(A), approx_kl = 0, and the gradient is -A / n on every counted token.
    logprobs, old, advantages, mask, _ = _policy_case((5, 7), dtype, kind, seed=2)
    logprobs = old.clone().requires_grad_(True)
    loss, stats = policy_loss(logprobs, old, advantages, mask, clip_eps=0.2)
    assert_close(loss, -ref.as_tensor(ref.ref_masked_mean(advantages, mask), loss))
    assert stats["clipfrac"] == 0.0
    assert stats["approx_kl"] == 0.0
    assert stats["ratio_mean"] == pytest.approx(1.0)
    loss.backward()
    assert_close(logprobs.grad, -advantages * mask / mask.sum())


def test_policy_loss_gradient_zero_only_where_clipped_in_favoured_direction():
    # Ratios far outside [0.8, 1.2] on both sides, advantages of both signs.
    ratio = torch.tensor([[2.0, 2.0, 0.3, 0.3, 1.05, 1.05]], dtype=torch.float64)
    advantages = torch.tensor([[1.0, -1.0, 1.0, -1.0, 1.0, -1.0]], dtype=torch.float64)
    old = torch.full_like(ratio, -1.0)
    logprobs = (old + ratio.log()).requires_grad_(True)
    mask = torch.ones_like(ratio, dtype=torch.bool)
    loss, stats = policy_loss(logprobs, old, advantages, mask, clip_eps=0.2)
    loss.backward()
    grad = logprobs.grad[0]
    # r=2 with A>0 and r=0.3 with A<0: the ratio moved the way the advantage favours, past the clip -> 0.
    assert grad[0] == 0 and grad[3] == 0
    # r=2 with A<0 and r=0.3 with A>0: moved the wrong way -> not clipped, the gradient pushes it back.
    assert grad[1] > 0 and grad[2] < 0  # minimising: increase logprob where A>0 (negative grad), decrease where A<0
    assert grad[4] < 0 and grad[5] > 0  # inside the clip range
    assert stats["clipfrac"] == pytest.approx(2 / 6)


@pytest.mark.parametrize("kind", MASK_KINDS)
def test_policy_loss_masked_positions_never_matter(kind):
    logprobs, old, advantages, mask, gen = _policy_case((5, 8), torch.float32, kind, seed=3)
    loss, stats = policy_loss(logprobs, old, advantages, mask)
    for _ in range(3):
        lp2 = ref.fill_masked(logprobs.detach(), mask, gen)
        old2, adv2 = ref.fill_masked(old, mask, gen), ref.fill_masked(advantages, mask, gen)
        loss2, stats2 = policy_loss(lp2, old2, adv2, mask)
        assert_close(loss2, loss.detach(), rtol=0, atol=0)
        assert stats2 == stats
    # Gradients (with finite junk whose log-ratio stays far below float32's exp overflow at ~88):
    # identical on counted tokens, 0 on masked ones.
    loss.backward()
    lp3 = ref.fill_masked_finite(logprobs.detach(), mask, gen, scale=5.0).requires_grad_(True)
    old3 = ref.fill_masked_finite(old, mask, gen, scale=5.0)
    loss3, _ = policy_loss(lp3, old3, ref.fill_masked_finite(advantages, mask, gen), mask)
    loss3.backward()
    assert_close(lp3.grad, logprobs.grad, rtol=0, atol=0)
    assert (lp3.grad[~mask] == 0).all()


def test_policy_loss_gradient_finite_with_nan_or_overflowing_junk():
    """Junk at a masked position (NaN, or a log-ratio that overflows exp) must not poison the gradient."""
    logprobs, old, advantages, mask, gen = _policy_case((3, 6), torch.float32, "prefix", seed=4)
    mask[1, 3:] = False
    lp = logprobs.detach().clone()
    lp[1, 4], lp[1, 5] = float("nan"), 0.0
    old = old.clone()
    old[1, 5] = -200.0  # log-ratio 200 at a masked position: exp overflows float32
    lp.requires_grad_(True)
    loss, _ = policy_loss(lp, old, advantages, mask)
    loss.backward()
    assert torch.isfinite(lp.grad).all()


# --- value_loss --------------------------------------------------------------------------------


def test_value_loss_hand_computed():
    # eps = 0.2, old values all 0, so clip(V) lies in [-0.2, 0.2]. Per token (V, R):
    #  t0: V=0.5, R=1:   (V-R)^2 = 0.25, (0.2-1)^2 = 0.64   -> 0.64 (clipped error larger: clipped), grad 0
    #  t1: V=0.5, R=-1:  (V-R)^2 = 2.25, (0.2+1)^2 = 1.44   -> 2.25, grad (V-R)/n = 1.5/4 = 0.375
    #  t2: V=0.1, R=0.3: inside the range, both 0.04        -> 0.04 (equal: not clipped), grad -0.2/4 = -0.05
    #  t3: V=-0.5, R=0:  (V-R)^2 = 0.25, (-0.2)^2 = 0.04    -> 0.25, grad -0.5/4 = -0.125
    #  t4: masked out.
    # loss = 1/2 * (0.64 + 2.25 + 0.04 + 0.25) / 4 = 0.3975; clipfrac = 1/4.
    values = torch.tensor([[0.5, 0.5, 0.1, -0.5, 9.0]], dtype=torch.float64, requires_grad=True)
    old_values = torch.zeros(1, 5, dtype=torch.float64)
    returns = torch.tensor([[1.0, -1.0, 0.3, 0.0, -9.0]], dtype=torch.float64)
    mask = torch.tensor([[True, True, True, True, False]])
    loss, stats = value_loss(values, old_values, returns, mask, clip_eps=0.2)
    assert_close(loss, torch.tensor(0.3975, dtype=torch.float64))
    assert stats["clipfrac"] == pytest.approx(0.25)
    _assert_stats_are_floats(stats, ["clipfrac"])
    loss.backward()
    assert_close(values.grad, torch.tensor([[0.0, 0.375, -0.05, -0.125, 0.0]], dtype=torch.float64))


def test_value_loss_unclipped_is_half_mse():
    # With V == V_old (first minibatch) the clip is inactive: loss = 1/2 mean (V - R)^2.
    # V = [1, 2], R = [0, 0]: 1/2 * (1 + 4) / 2 = 1.25.
    values = torch.tensor([[1.0, 2.0]])
    loss, stats = value_loss(values, values.clone(), torch.zeros(1, 2), torch.ones(1, 2, dtype=torch.bool))
    assert_close(loss, torch.tensor(1.25))
    assert stats["clipfrac"] == 0.0


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("kind", MASK_KINDS)
@pytest.mark.parametrize("clip_eps", [0.1, 0.2])
def test_value_loss_matches_naive_loop(shape, dtype, kind, clip_eps):
    values, old_values, returns, mask, _ = _value_case(shape, dtype, kind, seed=shape[0] * 17 + shape[1])
    loss, stats = value_loss(values, old_values, returns, mask, clip_eps=clip_eps)
    want = ref.ref_value_loss(values, old_values, returns, mask, clip_eps)
    assert loss.shape == () and loss.dtype == dtype
    assert_close(loss, ref.as_tensor(want["loss"], loss))
    _assert_stats_are_floats(stats, ["clipfrac"])
    assert stats["clipfrac"] == pytest.approx(want["clipfrac"])
    loss.backward()
    assert_close(values.grad, ref.as_tensor(want["grad"], values.grad))


def test_value_loss_default_clip_eps_is_0_2():
    values, old_values, returns, mask, _ = _value_case((4, 9), torch.float64, "arbitrary", seed=1)
    loss, stats = value_loss(values, old_values, returns, mask)
    want = ref.ref_value_loss(values, old_values, returns, mask, 0.2)
    assert_close(loss, ref.as_tensor(want["loss"], loss))
    assert stats["clipfrac"] == pytest.approx(want["clipfrac"])


@pytest.mark.parametrize("kind", MASK_KINDS)
def test_value_loss_masked_positions_never_matter(kind):
    values, old_values, returns, mask, gen = _value_case((5, 8), torch.float32, kind, seed=2)
    loss, stats = value_loss(values, old_values, returns, mask)
    for _ in range(3):
        v2 = ref.fill_masked(values.detach(), mask, gen)
        old2, returns2 = ref.fill_masked(old_values, mask, gen), ref.fill_masked(returns, mask, gen)
        loss2, stats2 = value_loss(v2, old2, returns2, mask)
        assert_close(loss2, loss.detach(), rtol=0, atol=0)
        assert stats2 == stats
    loss.backward()
    v3 = ref.fill_masked_finite(values.detach(), mask, gen).requires_grad_(True)
    old3, returns3 = ref.fill_masked_finite(old_values, mask, gen), ref.fill_masked_finite(returns, mask, gen)
    loss3, _ = value_loss(v3, old3, returns3, mask)
    loss3.backward()
    assert_close(v3.grad, values.grad, rtol=0, atol=0)
    assert (v3.grad[~mask] == 0).all()


# --- entropy_loss ------------------------------------------------------------------------------


def test_entropy_loss_hand_computed_sign():
    # Token 0: uniform over 4 -> H = ln 4. Token 1: p = [1/4, 3/4, 0, 0] -> H = 0.562335. Token 2 masked out.
    # loss = -(ln 4 + 0.562335) / 2 = -0.974314 (negative: minimising the loss raises the entropy).
    logits = torch.tensor([[[0.0, 0.0, 0.0, 0.0], [0.0, math.log(3.0), -1e4, -1e4], [5.0, 0.0, 0.0, 0.0]]])
    mask = torch.tensor([[True, True, False]])
    h1 = -(0.25 * math.log(0.25) + 0.75 * math.log(0.75))
    loss, stats = entropy_loss(logits, mask)
    assert_close(loss, torch.tensor(-(math.log(4.0) + h1) / 2))
    _assert_stats_are_floats(stats, ["entropy"])
    assert stats["entropy"] == pytest.approx((math.log(4.0) + h1) / 2, rel=1e-6)
    assert loss.item() == pytest.approx(-stats["entropy"])  # loss = -entropy
    assert loss.item() < 0


@pytest.mark.parametrize("shape", [(1, 1, 3), (2, 5, 7), (4, 6, 11)])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("kind", MASK_KINDS)
@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_entropy_loss_matches_naive_loop(shape, dtype, kind, temperature):
    gen = torch.Generator().manual_seed(shape[0] * 19 + shape[1])
    logits = (torch.randn(shape, generator=gen, dtype=torch.float64) * 2.0).to(dtype)
    mask = ref.MASK_KINDS[kind](*shape[:2], gen)
    loss, stats = entropy_loss(logits, mask, temperature)
    want = ref.ref_entropy_loss(logits, mask, temperature)
    assert loss.dtype == dtype
    assert_close(loss, ref.as_tensor(want["loss"], loss))
    _assert_stats_are_floats(stats, ["entropy"])
    assert stats["entropy"] == pytest.approx(want["entropy"], rel=1e-5)
    assert loss.item() == pytest.approx(-stats["entropy"])


def test_entropy_loss_gradient_raises_entropy():
    # One gradient-descent step on the entropy loss must make the distributions flatter.
    gen = torch.Generator().manual_seed(5)
    logits = (torch.randn(3, 4, 6, generator=gen, dtype=torch.float64) * 2.0).requires_grad_(True)
    mask = torch.ones(3, 4, dtype=torch.bool)
    loss, stats = entropy_loss(logits, mask)
    loss.backward()
    assert torch.isfinite(logits.grad).all()
    _, stats_after = entropy_loss(logits.detach() - 0.1 * logits.grad, mask)
    assert stats_after["entropy"] > stats["entropy"]


@pytest.mark.parametrize("kind", MASK_KINDS)
def test_entropy_loss_masked_positions_never_matter(kind):
    gen = torch.Generator().manual_seed(6)
    logits = torch.randn(4, 6, 5, generator=gen)
    mask = ref.MASK_KINDS[kind](4, 6, gen)
    loss, stats = entropy_loss(logits, mask)
    loss2, stats2 = entropy_loss(ref.fill_masked(logits, mask, gen), mask)
    assert_close(loss2, loss, rtol=0, atol=0)
    assert stats2 == stats


# ---- loss aggregation (chapter 07) -----------------------------------------------------------------


def _naive_aggregate(loss_mat, mask, mode, norm_len=None):
    L, M = loss_mat.double().tolist(), mask.tolist()
    rows = [[v for v, m in zip(lr, mr) if m] for lr, mr in zip(L, M)]
    if mode == "token-mean":
        flat = [v for r in rows for v in r]
        return math.fsum(flat) / len(flat) if flat else 0.0
    if mode == "seq-mean-token-mean":
        means = [math.fsum(r) / len(r) for r in rows if r]
        return math.fsum(means) / len(means) if means else 0.0
    return math.fsum(v for r in rows for v in r) / (len(rows) * (norm_len or len(M[0])))


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("kind", MASK_KINDS)
@pytest.mark.parametrize("mode", LOSS_AGG_MODES)
def test_aggregate_loss_matches_naive_loop_and_ignores_masked_entries(shape, dtype, kind, mode):
    gen = torch.Generator().manual_seed(7)
    mask = ref.MASK_KINDS[kind](*shape, gen)
    x = torch.randn(shape, generator=gen, dtype=torch.float64).to(dtype)
    want = torch.tensor(_naive_aggregate(x, mask, mode), dtype=dtype)
    assert_close(aggregate_loss(ref.fill_masked(x, mask, gen), mask, mode), want)
    assert_close(aggregate_loss(x, mask, "seq-mean-token-sum-norm", norm_len=50), x[mask].sum() / (shape[0] * 50))


def test_policy_loss_aggregates_its_per_token_terms_with_the_chosen_mode():
    logprobs, old, adv, mask, _ = _policy_case((4, 9), torch.float64, "prefix")
    per_token = torch.maximum(-adv * (logprobs - old).exp(), -adv * (logprobs - old).exp().clamp(0.8, 1.2))
    default, stats = policy_loss(logprobs, old, adv, mask)
    for mode in LOSS_AGG_MODES:
        loss, mode_stats = policy_loss(logprobs, old, adv, mask, loss_agg_mode=mode)
        assert_close(loss, aggregate_loss(per_token, mask, mode))
        assert mode_stats == stats  # the logged stats are token means whatever the mode
    assert_close(default, policy_loss(logprobs, old, adv, mask, loss_agg_mode="token-mean")[0])
    with pytest.raises(ValueError, match="seq-mean-token-mean"):
        policy_loss(logprobs, old, adv, mask, loss_agg_mode="seq-mean")


def test_length_bias_of_each_aggregation_mode():
    """Two responses with the same advantage, 2 and 8 tokens long (T_max 8): the weight each token gets."""
    mask = torch.tensor([[1] * 2 + [0] * 6, [1] * 8], dtype=torch.bool)
    weights = {}
    for mode in LOSS_AGG_MODES:
        x = torch.zeros(2, 8, requires_grad=True)
        aggregate_loss(x, mask, mode).backward()
        weights[mode] = (x.grad[0, 0].item(), x.grad[1, 0].item())  # a short-response token, a long-response token
    assert weights["token-mean"] == pytest.approx((1 / 10, 1 / 10))  # per token equal: long responses weigh 4x
    assert weights["seq-mean-token-mean"] == pytest.approx((1 / 4, 1 / 16))  # a short response's token weighs 4x
    assert weights["seq-mean-token-sum-norm"] == pytest.approx((1 / 16, 1 / 16))  # equal, and fixed by T_max
    # the same responses with every length doubled (T_max 16): only the constant normaliser keeps per-token weights
    mask2 = torch.tensor([[1] * 4 + [0] * 12, [1] * 16], dtype=torch.bool)
    x = torch.zeros(2, 16, requires_grad=True)
    aggregate_loss(x, mask2, "seq-mean-token-sum-norm", norm_len=8).backward()
    assert x.grad[0, 0].item() == pytest.approx(1 / 16)
