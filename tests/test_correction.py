"""ppo_core.correction: each correction against a naive loop, the identity at zero mismatch, masks honoured."""

import math

import pytest
import torch
from torch.testing import assert_close

from ppo_core.correction import (
    icepop_weights,
    importance_weights,
    mismatch_metrics,
    rejection_mask,
    rollout_correction,
    truncated_weights,
)


def make(B=4, T=7, scale=0.5, seed=0, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    old = -torch.rand(B, T, generator=g, dtype=dtype) * 3
    beh = old + scale * torch.randn(B, T, generator=g, dtype=dtype)
    mask = torch.rand(B, T, generator=g) > 0.3
    mask[:, 0] = True
    return old, beh, mask


def naive_weight(old, beh, mask, b, t, level):
    """rho of token (b, t) at a level, by loops over Python floats."""
    if not mask[b, t]:
        return 0.0
    terms = [float(old[b, s] - beh[b, s]) for s in range(old.shape[1]) if mask[b, s]]
    log_w = {"token": float(old[b, t] - beh[b, t]), "sequence": sum(terms), "geometric": sum(terms) / len(terms)}
    return math.exp(max(-20.0, min(20.0, log_w[level])))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("level", ["token", "sequence", "geometric"])
def test_weights_and_masks_match_naive_loops(level, dtype):
    old, beh, mask = make(dtype=dtype)
    B, T = old.shape
    ref = torch.tensor([[naive_weight(old, beh, mask, b, t, level) for t in range(T)] for b in range(B)], dtype=dtype)
    assert_close(importance_weights(old, beh, mask, level), ref)
    keep = torch.tensor([[bool(mask[b, t]) and 0.5 <= ref[b, t] <= 1.5 for t in range(T)] for b in range(B)])
    assert torch.equal(rejection_mask(old, beh, mask, level, 1.5, 0.5), keep)
    if level != "geometric":
        assert_close(truncated_weights(old, beh, mask, level, 1.3), ref.clamp(max=1.3))


def test_icepop_is_the_two_sided_token_mask_and_the_composed_switches():
    old, beh, mask = make(scale=1.0)
    B, T = old.shape
    naive = torch.zeros(B, T, dtype=old.dtype)
    for b in range(B):
        for t in range(T):
            rho = math.exp(float(old[b, t] - beh[b, t]))
            naive[b, t] = rho if mask[b, t] and 0.5 <= rho <= 2.0 else 0.0
    assert_close(icepop_weights(old, beh, mask, 0.5, 2.0), naive)
    w, kept, _ = rollout_correction(old, beh, mask, "token", 2.0, "token", 2.0, 0.5)
    assert_close(w, naive)
    assert torch.equal(kept, mask & (naive > 0))
    assert 0 < (mask & ~kept).sum() < mask.sum()  # the case exercises both sides of the mask


@pytest.mark.parametrize(
    "switches",
    [dict(is_level="token"), dict(is_level="sequence"), dict(rs_level="token"), dict(rs_level="sequence"),
     dict(rs_level="geometric", rs_threshold=1.001), dict(is_level="token", rs_level="token", rs_threshold_lower=0.5)],
)  # fmt: skip
def test_identity_at_zero_mismatch(switches):
    old, _, mask = make()
    w, kept, stats = rollout_correction(old, old.clone(), mask, **switches)
    assert torch.equal(w, mask.to(w.dtype)) and torch.equal(kept, mask)
    assert stats["correction/truncated_frac"] == stats["correction/masked_frac"] == 0.0
    assert stats["mismatch/kl_k1"] == stats["mismatch/kl_k3"] == stats["mismatch/max_abs_log_ratio"] == 0.0
    assert stats["correction/weight_min"] == stats["correction/weight_max"] == 1.0


def test_off_mask_entries_never_matter():
    old, beh, mask = make(scale=1.0)
    junk_old = torch.where(mask, old, torch.tensor(float("nan"), dtype=old.dtype))
    junk_beh = torch.where(mask, beh, torch.tensor(-1e30, dtype=old.dtype))
    for switches in (dict(is_level="sequence"), dict(is_level="token", rs_level="geometric")):
        w, kept, stats = rollout_correction(old, beh, mask, **switches)
        w2, kept2, stats2 = rollout_correction(junk_old, junk_beh, mask, **switches)
        assert_close(w, w2) and torch.equal(kept, kept2)
        assert stats == stats2
        assert not w[~mask].any() and not kept[~mask].any()


def test_truncated_and_masked_shares_and_weight_range():
    old, beh, mask = make(scale=1.0, seed=3)
    rho = torch.exp(old - beh)[mask]
    _, _, stats = rollout_correction(old, beh, mask, is_level="token", is_threshold=1.5)
    assert stats["correction/truncated_frac"] == pytest.approx(float((rho > 1.5).double().mean()))
    assert stats["correction/weight_max"] == 1.5 and stats["correction/weight_min"] == pytest.approx(float(rho.min()))
    _, kept, stats = rollout_correction(old, beh, mask, rs_level="token", rs_threshold=1.5)
    assert stats["correction/masked_frac"] == pytest.approx(float(((rho > 1.5) | (rho < 1 / 1.5)).double().mean()))
    assert stats["correction/truncated_frac"] == 0.0


def test_sequence_weights_are_one_per_sequence_and_huge_ones_stay_finite():
    old, beh, mask = make(scale=3.0, T=40)
    w = importance_weights(old, beh, mask, "sequence")
    for b in range(old.shape[0]):
        assert torch.unique(w[b][mask[b]]).numel() == 1
    assert torch.isfinite(w).all() and w.max() <= math.exp(20.0) * (1 + 1e-12)


def test_mismatch_metrics_are_the_kl_estimators_of_mu_to_pi_old():
    old, beh, mask = make(scale=0.3)
    stats = mismatch_metrics(old, beh, mask)
    log_rho = (old - beh)[mask]
    assert stats["mismatch/kl_k1"] == pytest.approx(float((-log_rho).mean()))
    assert stats["mismatch/kl_k3"] == pytest.approx(float((log_rho.exp() - 1 - log_rho).mean()))
    assert stats["mismatch/kl_k3"] > 0


def test_bad_levels_name_the_choices():
    old, beh, mask = make()
    with pytest.raises(ValueError, match="token, sequence$"):
        rollout_correction(old, beh, mask, is_level="geometric")
    with pytest.raises(ValueError, match="token, sequence, geometric"):
        rejection_mask(old, beh, mask, "tokens")
