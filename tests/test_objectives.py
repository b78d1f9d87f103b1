"""Tests for ppo_core.objectives and the loss terms (chapter 08): every objective against a naive per-token
loop, at ratio 1, and every term's gradient (objectives, value loss, entropy, KL in the loss) against the
autograd gradient of a naive reference, with respect to the logits and the values; split invariance of
every objective x aggregation over micro-batches that pass the minibatch's counts."""

import math

import pytest
import reference_impls as ref
import torch
from torch.testing import assert_close

from ppo_core.advantages import kl_loss
from ppo_core.logprobs import logprobs_from_logits
from ppo_core.losses import LOSS_AGG_MODES, aggregate_loss, entropy_loss, loss_units, value_loss
from ppo_core.objectives import POLICY_LOSSES, compute_policy_loss

SHAPES = [(1, 1), (2, 5), (4, 9), (6, 3)]  # (B, T)
SETTINGS = {  # objective -> keyword arguments of compute_policy_loss
    "vanilla": dict(clip_eps=0.2),
    "clip-higher": dict(clip_eps=0.2, clip_eps_high=0.28),
    "dual-clip": dict(clip_eps=0.2, clip_eps_low=0.1, dual_clip_c=1.5),
    "gspo": dict(clip_eps=0.05),
    "cispo": dict(clip_eps_low=0.2, clip_eps_high=0.28),
    "sapo": dict(tau_pos=1.0, tau_neg=1.05),
}
NAME = {"clip-higher": "vanilla", "dual-clip": "vanilla"}


# --- the naive reference: per-token scalar torch ops in Python loops (autograd flows through them) ---------


def naive_token_losses(name, lp, old, adv, mask, kw):
    """[[l_{i,t} (a 0-d tensor) or None off the mask for t] for i], one scalar at a time."""
    clip = kw.get("clip_eps", 0.2)
    lo, hi = kw.get("clip_eps_low") or clip, kw.get("clip_eps_high") or clip
    out = []
    for i in range(lp.shape[0]):
        ts = [t for t in range(lp.shape[1]) if mask[i, t]]
        seq_lr = sum(float(lp[i, t].detach() - old[i, t]) for t in ts) / max(len(ts), 1)  # a constant: sg(log s_i)
        row = []
        for t in range(lp.shape[1]):
            if not mask[i, t]:
                row.append(None)
                continue
            a = float(adv[i, t])
            r = torch.exp(lp[i, t] - old[i, t])
            rv = float(r.detach())
            if name == "gspo":
                r = math.exp(seq_lr) * torch.exp(lp[i, t] - lp[i, t].detach())
            if name in ("vanilla", "gspo"):
                x = torch.maximum(-a * r, -a * torch.clamp(r, 1 - lo, 1 + hi))
                if kw.get("dual_clip_c") is not None and a < 0:
                    x = torch.minimum(x, torch.tensor(-a * kw["dual_clip_c"], dtype=x.dtype))
            elif name == "cispo":
                w = min(max(rv, 1 - lo), 1 + hi)
                x = -w * a * lp[i, t]
            else:  # sapo
                tau = kw.get("tau_pos", 1.0) if a > 0 else kw.get("tau_neg", 1.05)
                x = -a * 4.0 / tau * torch.sigmoid(tau * (r - 1.0))
            row.append(x)
        out.append(row)
    return out


def naive_aggregate(rows, mode, norm_len, units=None):
    """The three modes by loops; ``units`` overrides the count (the whole minibatch's)."""
    B, T = len(rows), len(rows[0])
    total = 0.0
    if mode == "token-mean":
        n = sum(x is not None for row in rows for x in row) if units is None else units
        for row in rows:
            for x in row:
                total = total + (0.0 if x is None else x)
        return total / max(n, 1)
    if mode == "seq-mean-token-mean":
        n = sum(any(x is not None for x in row) for row in rows) if units is None else units
        for row in rows:
            kept = [x for x in row if x is not None]
            if kept:
                total = total + sum(kept[1:], kept[0]) / len(kept)
        return total / max(n, 1)
    n = B if units is None else units
    for row in rows:
        for x in row:
            total = total + (0.0 if x is None else x)
    return total / (n * (norm_len or T))


def _case(shape, kind, seed, dtype=torch.float64, spread=0.3):
    gen = torch.Generator().manual_seed(seed)
    old = -torch.rand(shape, generator=gen, dtype=torch.float64) * 3.0
    lp = old + torch.randn(shape, generator=gen, dtype=torch.float64) * spread
    adv = torch.randn(shape, generator=gen, dtype=torch.float64)
    mask = ref.MASK_KINDS[kind](*shape, gen)
    return lp.to(dtype).requires_grad_(True), old.to(dtype), adv.to(dtype), mask


def _grad(loss, x):
    """d loss / d x; zeros where the loss does not depend on x at all (a detached input)."""
    if not torch.is_tensor(loss) or not loss.requires_grad:
        return torch.zeros_like(x)
    (g,) = torch.autograd.grad(loss, x, allow_unused=True, retain_graph=True)
    return torch.zeros_like(x) if g is None else g


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("kind", ["prefix", "arbitrary"])
@pytest.mark.parametrize("mode", LOSS_AGG_MODES)
@pytest.mark.parametrize("setting", SETTINGS)
def test_objective_matches_naive_loop_value_and_gradient(shape, kind, mode, setting):
    lp, old, adv, mask = _case(shape, kind, seed=shape[0] * 7 + shape[1])
    name, kw = NAME.get(setting, setting), SETTINGS[setting]
    norm_len = shape[1] + 2 if mode == "seq-mean-token-sum-norm" else None
    loss, stats = compute_policy_loss(name, lp, old, adv, mask, loss_agg_mode=mode, norm_len=norm_len, **kw)
    want = naive_aggregate(naive_token_losses(name, lp, old, adv, mask, kw), mode, norm_len)
    want = torch.as_tensor(want, dtype=lp.dtype)
    assert loss.shape == () and set(stats) == {"clipfrac", "clipfrac_lower", "approx_kl", "ratio_mean"}
    assert all(type(v) is float for v in stats.values())
    assert_close(loss, want)
    assert_close(_grad(loss, lp), _grad(want, lp))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("mode", LOSS_AGG_MODES)
@pytest.mark.parametrize("setting", SETTINGS)
def test_at_ratio_one_every_objective_is_the_plain_policy_gradient(dtype, mode, setting):
    """logprobs == old_logprobs: the gradient is that of -A log pi aggregated the same way."""
    lp, _, adv, mask = _case((4, 7), "prefix", seed=5, dtype=dtype)
    name, kw = NAME.get(setting, setting), SETTINGS[setting]
    loss, stats = compute_policy_loss(name, lp, lp.detach().clone(), adv, mask, loss_agg_mode=mode, **kw)
    plain = aggregate_loss(-adv * lp, mask, mode)
    assert_close(_grad(loss, lp), _grad(plain, lp))
    assert stats["clipfrac"] == 0.0 and stats["ratio_mean"] == pytest.approx(1.0)


def test_clip_higher_lets_a_favoured_token_rise_further():
    """A > 0, ratio 1.25: inside 1 + 0.28 (gradient flows), outside 1 + 0.2 (clipped: no gradient)."""
    old = torch.tensor([[-1.0]], dtype=torch.float64)
    lp = (old + math.log(1.25)).requires_grad_(True)
    adv, mask = torch.ones(1, 1, dtype=torch.float64), torch.ones(1, 1, dtype=torch.bool)
    sym, s = compute_policy_loss("vanilla", lp, old, adv, mask, clip_eps=0.2)
    high, h = compute_policy_loss("vanilla", lp, old, adv, mask, clip_eps=0.2, clip_eps_high=0.28)
    assert _grad(sym, lp).item() == 0.0 and s["clipfrac"] == 1.0
    assert _grad(high, lp).item() == pytest.approx(-1.25) and h["clipfrac"] == 0.0


def test_dual_clip_bounds_a_negative_advantage_token_whose_ratio_exploded():
    """A = -1, ratio 5: PPO's term is -A r = 5 with gradient 5; dual-clip c = 3 caps it at 3, gradient 0."""
    old = torch.tensor([[-3.0]], dtype=torch.float64)
    lp = (old + math.log(5.0)).requires_grad_(True)
    adv, mask = -torch.ones(1, 1, dtype=torch.float64), torch.ones(1, 1, dtype=torch.bool)
    plain, _ = compute_policy_loss("vanilla", lp, old, adv, mask)
    dual, stats = compute_policy_loss("vanilla", lp, old, adv, mask, dual_clip_c=3.0)
    assert plain.item() == pytest.approx(5.0) and _grad(plain, lp).item() == pytest.approx(5.0)
    assert dual.item() == pytest.approx(3.0) and _grad(dual, lp).item() == 0.0 and stats["clipfrac_lower"] == 1.0


def test_cispo_keeps_the_gradient_of_a_token_ppo_clips():
    """A > 0, ratio 1.5: PPO's gradient is 0; CISPO's is -clip(1.5) * A = -1.28 (the weight is capped, not zeroed)."""
    old = torch.tensor([[-1.0]], dtype=torch.float64)
    lp = (old + math.log(1.5)).requires_grad_(True)
    adv, mask = torch.ones(1, 1, dtype=torch.float64), torch.ones(1, 1, dtype=torch.bool)
    ppo, _ = compute_policy_loss("vanilla", lp, old, adv, mask, clip_eps_high=0.28)
    cispo, stats = compute_policy_loss("cispo", lp, old, adv, mask, clip_eps_high=0.28)
    assert _grad(ppo, lp).item() == 0.0
    assert _grad(cispo, lp).item() == pytest.approx(-1.28) and stats["clipfrac"] == 1.0


def test_gspo_gradient_is_the_sequence_ratio_gradient():
    """Advantages constant per sequence, no clipping: GSPO's loss has the gradient of -mean_i A_i s_i with
    s_i = exp(mean_t l_t) differentiated through (the paper's sequence-level objective)."""
    lp, old, _, mask = _case((5, 6), "prefix", seed=3, spread=0.01)
    adv = torch.randn(5, 1, generator=torch.Generator().manual_seed(1), dtype=torch.float64).expand(5, 6)
    loss, stats = compute_policy_loss("gspo", lp, old, adv, mask, clip_eps=1.0, loss_agg_mode="seq-mean-token-mean")
    n = mask.sum(1).clamp(min=1)
    s = torch.exp(((lp - old) * mask).sum(1) / n)  # (B,)
    rows = mask.any(1)
    want = -(adv[:, 0] * s)[rows].mean()
    assert stats["clipfrac"] == 0.0
    assert_close(_grad(loss, lp), _grad(want, lp))


def test_sapo_gate_is_soft():
    """Away from ratio 1 the SAPO gradient shrinks smoothly (4 s (1 - s) r) instead of dropping to 0."""
    old = torch.zeros(1, 5, dtype=torch.float64) - 1.0
    lp = (old + torch.tensor([[0.0, 0.1, 0.3, 0.7, 1.5]], dtype=torch.float64)).requires_grad_(True)
    adv, mask = torch.ones(1, 5, dtype=torch.float64), torch.ones(1, 5, dtype=torch.bool)
    loss, _ = compute_policy_loss("sapo", lp, old, adv, mask, loss_agg_mode="seq-mean-token-sum-norm", norm_len=1)
    g = -_grad(loss, lp)[0] / torch.exp(lp - old)[0].detach()  # d gate / d r
    assert g[0].item() == pytest.approx(1.0)
    assert all(g[i + 1] < g[i] for i in range(4)) and g[-1] > 0


def test_unknown_policy_loss_names_the_choices():
    lp, old, adv, mask = _case((2, 3), "prefix", 0)
    with pytest.raises(ValueError, match="vanilla, gspo, cispo, sapo"):
        compute_policy_loss("grpo", lp, old, adv, mask)


# --- every term's gradient with respect to the logits and the values --------------------------------------


def naive_logprob(logits_row, token, temperature):
    z = logits_row / temperature
    return z[token] - torch.logsumexp(z, 0)


def _logits_case(B=3, T=5, V=7, seed=0):
    gen = torch.Generator().manual_seed(seed)
    logits = (torch.randn(B, T, V, generator=gen, dtype=torch.float64) * 2).requires_grad_(True)
    tokens = torch.randint(0, V, (B, T), generator=gen)
    mask = ref.random_prefix_mask(B, T, gen)
    with torch.no_grad():
        lp0 = logprobs_from_logits(logits, tokens, 1.3)
    old = lp0 + torch.randn(B, T, generator=gen, dtype=torch.float64) * 0.3
    adv = torch.randn(B, T, generator=gen, dtype=torch.float64)
    return logits, tokens, mask, old, adv


def assert_grad_matches(package_loss, naive_loss, x):
    """The gradient check used below: both losses' autograd gradients w.r.t. ``x`` agree."""
    assert_close(_grad(package_loss, x), _grad(naive_loss, x))


@pytest.mark.parametrize("mode", LOSS_AGG_MODES)
@pytest.mark.parametrize("setting", SETTINGS)
def test_objective_gradient_wrt_logits_matches_naive(mode, setting):
    logits, tokens, mask, old, adv = _logits_case(seed=len(setting))
    name, kw = NAME.get(setting, setting), SETTINGS[setting]
    lp = logprobs_from_logits(logits, tokens, 1.3)
    loss, _ = compute_policy_loss(name, lp, old, adv, mask, loss_agg_mode=mode, **kw)
    naive_lp = [[naive_logprob(logits[i, t], tokens[i, t], 1.3) for t in range(5)] for i in range(3)]
    naive_lp = torch.stack([torch.stack(r) for r in naive_lp])  # (B, T), built one token at a time
    want = naive_aggregate(naive_token_losses(name, naive_lp, old, adv, mask, kw), mode, None)
    assert_grad_matches(loss, want, logits)


def test_value_loss_gradient_wrt_values_matches_naive():
    gen = torch.Generator().manual_seed(4)
    old_v = torch.randn(4, 6, generator=gen, dtype=torch.float64)
    values = (old_v + torch.randn(4, 6, generator=gen, dtype=torch.float64) * 0.3).requires_grad_(True)
    returns = torch.randn(4, 6, generator=gen, dtype=torch.float64)
    mask = ref.random_arbitrary_mask(4, 6, gen)
    loss, _ = value_loss(values, old_v, returns, mask, 0.2)
    terms = []
    for i in range(4):
        for t in range(6):
            if mask[i, t]:
                clipped = old_v[i, t] + torch.clamp(values[i, t] - old_v[i, t], -0.2, 0.2)
                terms.append(torch.maximum((values[i, t] - returns[i, t]) ** 2, (clipped - returns[i, t]) ** 2))
    assert_grad_matches(loss, 0.5 * sum(terms) / len(terms), values)


def test_entropy_gradient_wrt_logits_matches_naive():
    logits, _, mask, _, _ = _logits_case(seed=2)
    loss, _ = entropy_loss(logits, mask, 1.3)
    terms = []
    for i, t in mask.nonzero().tolist():
        logp = torch.log_softmax(logits[i, t] / 1.3, 0)
        terms.append(-(logp.exp() * logp).sum())
    assert_grad_matches(loss, -sum(terms) / len(terms), logits)


@pytest.mark.parametrize("estimator", ["k1", "k2", "k3"])
@pytest.mark.parametrize("mode", LOSS_AGG_MODES)
def test_kl_in_the_loss_gradient_wrt_logits_matches_naive(estimator, mode):
    logits, tokens, mask, ref_lp, _ = _logits_case(seed=6)
    loss, _ = kl_loss(logprobs_from_logits(logits, tokens, 1.3), ref_lp, mask, estimator, mode)
    rows = []
    for i in range(3):
        row = []
        for t in range(5):
            d = naive_logprob(logits[i, t], tokens[i, t], 1.3) - ref_lp[i, t]
            k = {"k1": d, "k2": 0.5 * d**2, "k3": torch.exp(-d) - 1 + d}[estimator]
            row.append(k if mask[i, t] else None)
        rows.append(row)
    assert_grad_matches(loss, naive_aggregate(rows, mode, None), logits)


def test_the_gradient_check_rejects_a_detached_input():
    """A loss that detached its logprobs (or CISPO without the stop-gradient on its weight) fails the check."""
    logits, tokens, mask, old, adv = _logits_case(seed=1)
    lp = logprobs_from_logits(logits, tokens, 1.3)
    want, _ = compute_policy_loss("vanilla", lp, old, adv, mask)
    detached, _ = compute_policy_loss("vanilla", lp.detach(), old, adv, mask)
    with pytest.raises(AssertionError):
        assert_grad_matches(detached, want, logits)
    cispo, _ = compute_policy_loss("cispo", lp, old, adv, mask)
    r = torch.exp(lp - old)
    no_sg = aggregate_loss(-torch.clamp(r, 0.8, 1.2) * adv * lp, mask)  # the weight differentiated too
    with pytest.raises(AssertionError):
        assert_grad_matches(no_sg, cispo, logits)


# --- split invariance: micro-batches that divide by the minibatch's counts add up to the minibatch ---------


def _split_grads(name, kw, mode, k, per_part_counts=False):
    logits, tokens, mask, old, adv = _logits_case(B=8, T=6, seed=9)
    mask[1, 2:] = False  # unequal lengths across the parts
    mask[6, 1:] = False
    mask[4] = False  # an empty response
    units = loss_units(mask)
    total = 0.0
    for idx in [torch.arange(8)[i::k] for i in range(k)]:
        lp = logprobs_from_logits(logits[idx], tokens[idx], 1.3)
        part_units = None if per_part_counts else units
        loss, _ = compute_policy_loss(
            name, lp, old[idx], adv[idx], mask[idx], loss_agg_mode=mode, units=part_units, **kw
        )
        total = total + (loss / k if per_part_counts else loss)
    full, _ = compute_policy_loss(
        name, logprobs_from_logits(logits, tokens, 1.3), old, adv, mask, loss_agg_mode=mode, **kw
    )
    return _grad(total, logits), _grad(full, logits), total, full


@pytest.mark.parametrize("k", [2, 4])
@pytest.mark.parametrize("mode", LOSS_AGG_MODES)
@pytest.mark.parametrize("setting", SETTINGS)
def test_micro_batches_add_up_to_the_minibatch(setting, mode, k):
    got, want, total, full = _split_grads(NAME.get(setting, setting), SETTINGS[setting], mode, k)
    assert_close(total, full)
    assert_close(got, want)


@pytest.mark.parametrize("mode", ["token-mean", "seq-mean-token-mean"])
def test_dividing_each_micro_batch_by_its_own_count_is_wrong(mode):
    """The gradient-accumulation bug (each part's mean, averaged over parts): the check above rejects it."""
    got, want, _, _ = _split_grads("vanilla", {}, mode, 2, per_part_counts=True)
    with pytest.raises(AssertionError):
        assert_close(got, want)


def test_loss_units_counts():
    mask = torch.tensor([[1, 1, 1], [1, 0, 0], [0, 0, 0]], dtype=torch.bool)
    assert loss_units(mask) == {"token-mean": 4, "seq-mean-token-mean": 2, "seq-mean-token-sum-norm": 3}


def test_every_objective_is_covered():
    assert {NAME.get(s, s) for s in SETTINGS} == set(POLICY_LOSSES)
