"""Tests for ppo_core.update: ``ppo_loss`` as a whole. Every term it adds (the policy objective, the value loss,
the entropy bonus, the KL in the loss, with chapter 09's weights and kept mask) has its gradient with respect to the
logits and the values checked against a naive per-token reference, term by term and all together; a term computed
on detached inputs keeps its value and loses its gradient, and these tests see it."""

import pytest
import reference_impls as ref
import torch
from test_objectives import NAME, SETTINGS, _grad, naive_aggregate, naive_logprob, naive_token_losses
from torch.testing import assert_close

from ppo_core import update
from ppo_core.advantages import kl_loss
from ppo_core.logprobs import logprobs_from_logits
from ppo_core.losses import entropy_loss
from ppo_core.update import LossSwitches, ppo_loss

B, T, V, TEMP = 3, 5, 7, 1.3


class FixedActor(torch.nn.Module):
    """Returns the given (B, T, V) logits and (B, T) values as they are, so gradients land on them."""

    def __init__(self, logits, values):
        super().__init__()
        self.logits, self.values = logits, values

    def forward(self, input_ids, attention_mask, position_ids=None, keep=None):
        return self.logits, self.values


def _case(seed=0, critic=True, correction=False):
    gen = torch.Generator().manual_seed(seed)
    logits = (torch.randn(B, T, V, generator=gen, dtype=torch.float64) * 2).requires_grad_(True)
    values = torch.randn(B, T, generator=gen, dtype=torch.float64).requires_grad_(True) if critic else None
    tokens = torch.randint(0, V, (B, T), generator=gen)
    mask = ref.random_prefix_mask(B, T, gen)
    with torch.no_grad():
        lp0 = logprobs_from_logits(logits, tokens, TEMP)
    mb = {
        "input_ids": torch.zeros(B, 2 + T, dtype=torch.long),
        "attention_mask": torch.ones(B, 2 + T, dtype=torch.long),
        "response_ids": tokens,
        "mask": mask,
        "old_logprobs": lp0 + torch.randn(B, T, generator=gen, dtype=torch.float64) * 0.3,
        "advantages": torch.randn(B, T, generator=gen, dtype=torch.float64),
        "ref_logprobs": lp0 + torch.randn(B, T, generator=gen, dtype=torch.float64) * 0.3,
        "keep": slice(1, 1 + T),
    }
    if critic:
        mb["old_values"] = values.detach() + torch.randn(B, T, generator=gen, dtype=torch.float64) * 0.3
        mb["returns"] = torch.randn(B, T, generator=gen, dtype=torch.float64)
    if correction:  # chapter 09: weights on the advantages, a kept mask for the policy loss only
        mb["is_weights"] = torch.rand(B, T, generator=gen, dtype=torch.float64) * 2
        mb["policy_mask"] = mask & (torch.rand(B, T, generator=gen) > 0.3)
    return FixedActor(logits, values), mb


def _naive(actor, mb, coefs, s: LossSwitches, terms=("policy", "value", "entropy", "kl")):
    """The loss ppo_loss should compute, one token at a time."""
    logits, values, mask = actor.logits, actor.values, mb["mask"]
    lp = [[naive_logprob(logits[i, t], mb["response_ids"][i, t], TEMP) for t in range(T)] for i in range(B)]
    lp = torch.stack([torch.stack(row) for row in lp])
    total = 0.0
    if "policy" in terms:
        adv = mb["advantages"] * mb.get("is_weights", 1.0)
        kw = {"clip_eps": coefs["clip_eps"], "clip_eps_low": s.clip_eps_low, "clip_eps_high": s.clip_eps_high,
              "dual_clip_c": s.dual_clip_c, "tau_pos": s.tau_pos, "tau_neg": s.tau_neg}  # fmt: skip
        rows = naive_token_losses(s.policy_loss, lp, mb["old_logprobs"], adv, mb.get("policy_mask", mask), kw)
        total = total + naive_aggregate(rows, s.loss_agg_mode, s.loss_norm_len)
    if "value" in terms and values is not None:
        eps, errs = coefs["vf_clip_eps"], []
        for i, t in mask.nonzero().tolist():
            old, ret = mb["old_values"][i, t], mb["returns"][i, t]
            clipped = old + torch.clamp(values[i, t] - old, -eps, eps)
            errs.append(torch.maximum((values[i, t] - ret) ** 2, (clipped - ret) ** 2))
        total = total + coefs["vf_coef"] * 0.5 * sum(errs) / len(errs)
    if "entropy" in terms:
        ents = []
        for i, t in mask.nonzero().tolist():
            logp = torch.log_softmax(logits[i, t] / TEMP, 0)
            ents.append(-(logp.exp() * logp).sum())
        total = total - coefs["ent_coef"] * sum(ents) / len(ents)
    if "kl" in terms and s.kl_loss_coef > 0:
        rows = []
        for i in range(B):
            row = []
            for t in range(T):
                d = lp[i, t] - mb["ref_logprobs"][i, t]
                k = {"k1": d, "k2": 0.5 * d**2, "k3": torch.exp(-d) - 1 + d}[s.kl_loss_type]
                row.append(k if mask[i, t] else None)
            rows.append(row)
        total = total + s.kl_loss_coef * naive_aggregate(rows, s.loss_agg_mode, s.loss_norm_len)
    return total


def _assert_same_gradients(actor, mb, coefs, s, terms=("policy", "value", "entropy", "kl")):
    loss, _ = ppo_loss(actor, mb, coefs["clip_eps"], coefs["vf_clip_eps"], coefs["vf_coef"], coefs["ent_coef"],
                       TEMP, s)  # fmt: skip
    want = _naive(actor, mb, coefs, s, terms)
    assert_close(loss, want)
    assert_close(_grad(loss, actor.logits), _grad(want, actor.logits))
    if actor.values is not None:
        assert_close(_grad(loss, actor.values), _grad(want, actor.values))


ALL = dict(clip_eps=0.2, vf_clip_eps=0.2, vf_coef=0.5, ent_coef=0.05)


@pytest.mark.parametrize("setting", SETTINGS)
@pytest.mark.parametrize("mode", ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum-norm"])
def test_every_term_of_ppo_loss_has_the_naive_gradient(setting, mode):
    s = LossSwitches(mode, T + 2, kl_loss_coef=0.1, kl_loss_type="k3", policy_loss=NAME.get(setting, setting),
                     **{k: v for k, v in SETTINGS[setting].items() if k != "clip_eps"})  # fmt: skip
    actor, mb = _case(seed=len(setting))
    _assert_same_gradients(actor, mb, {**ALL, "clip_eps": SETTINGS[setting].get("clip_eps", 0.2)}, s)


@pytest.mark.parametrize("term", ["policy", "value", "entropy", "kl"])
def test_each_term_alone_has_the_naive_gradient(term):
    """One term at a time: the others' coefficients 0 (the policy's: advantages 0)."""
    actor, mb = _case(seed=3)
    coefs = {**ALL, "vf_coef": 0.5 * (term == "value"), "ent_coef": 0.05 * (term == "entropy")}
    s = LossSwitches(kl_loss_coef=0.1 * (term == "kl"), kl_loss_type="k2")
    if term != "policy":
        mb["advantages"] = torch.zeros_like(mb["advantages"])
    _assert_same_gradients(actor, mb, coefs, s, terms=(term,))


def test_critic_free_with_the_corrections_has_the_naive_gradient():
    actor, mb = _case(seed=5, critic=False, correction=True)
    s = LossSwitches("seq-mean-token-mean", kl_loss_coef=0.04, kl_loss_type="k3")
    _assert_same_gradients(actor, mb, ALL, s)


def test_a_term_on_detached_logprobs_fails_the_check(monkeypatch):
    """The KL in the loss computed on detached log-probs: the same value, no gradient; the check must fail."""
    actor, mb = _case(seed=7)
    s = LossSwitches(kl_loss_coef=0.1, kl_loss_type="k3")
    _assert_same_gradients(actor, mb, ALL, s)  # the package's own passes
    detached = lambda logprobs, *a, **k: kl_loss(logprobs.detach(), *a, **k)  # noqa: E731
    monkeypatch.setattr(update, "kl_loss", detached)
    with pytest.raises(AssertionError):
        _assert_same_gradients(actor, mb, ALL, s)
    monkeypatch.undo()
    monkeypatch.setattr(update, "entropy_loss", lambda logits, *a, **k: entropy_loss(logits.detach(), *a, **k))
    with pytest.raises(AssertionError):  # the entropy bonus likewise
        _assert_same_gradients(actor, mb, ALL, s)
