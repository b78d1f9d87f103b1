"""ppo_core.sampler and the three policies in the step: mu (the sampler), pi_old (the trainer), pi_theta."""

import pytest
import torch
from ppo_test_support import _tiny_overrides
from torch.testing import assert_close

from ppo_core.logprobs import logprobs_from_logits
from ppo_core.model import position_ids_from_mask
from ppo_core.rollout import sample
from ppo_core.run.config import ConfigError, load_config
from ppo_core.run.runner import build_trainer
from ppo_core.sampler import Sampler
from ppo_core.update import ppo_loss


def make(model_path, out, *extra):
    cfg = load_config("cpu", _tiny_overrides(model_path, out, 3, "ppo.value_warmup_steps=0", *extra))
    return build_trainer(cfg)


def params(tr):
    return [p.detach().clone() for p in tr.actor.parameters()]


def test_behaviour_logprobs_are_the_sampling_distributions(tiny_model_path, tmp_path, one_thread):
    """generate's scores give log softmax(logits / T) of the drawn tokens; under top-k, renormalised over the k."""
    tr = make(tiny_model_path, tmp_path)
    prompts = tr.prompts(tr.prompt_batch(1))
    for top_k in (0, 3):
        ro = sample(tr.actor.lm, tr.tokenizer, prompts, 6, 0.8, behaviour=True, top_k=top_k)
        with torch.inference_mode():
            pos = position_ids_from_mask(ro.attention_mask)
            logits, _ = tr.actor(ro.input_ids, ro.attention_mask, pos, keep=ro.keep)
        if top_k:  # the sampler's distribution: the top k logits renormalised
            kth = logits.topk(top_k, -1).values[..., -1:]
            logits = logits.masked_fill(logits < kth, float("-inf"))
        want = logprobs_from_logits(logits, ro.response_ids, 0.8)
        assert_close(ro.behaviour_logprobs[ro.mask], want[ro.mask], atol=1e-5, rtol=1e-5)
        assert not ro.behaviour_logprobs[~ro.mask].any()


def test_stale_sampler_holds_the_weights_of_k_updates_ago(tiny_model_path):
    lm = torch.nn.Linear(2, 2)
    lm.weight.data.fill_(0.5)
    s = Sampler(lm, stale_steps=2)
    seen = []
    for n in range(4):  # after update n + 1 the sampler holds theta_{max(0, n + 1 - 2)}
        with torch.no_grad():
            lm.weight.fill_(n + 1.0)
        s.sync(lm)
        seen.append(s.lm.weight[0, 0].item())
    assert s.lm is not lm and seen[0] == seen[1] not in (1.0, 2.0) and seen[2:] == [1.0, 2.0]
    bf16 = Sampler(lm, dtype="bfloat16")
    assert bf16.lm.weight.dtype == torch.bfloat16 and lm.weight.dtype == torch.float32
    assert Sampler(lm).lm is lm and not Sampler(lm).mismatch and Sampler(lm, top_p=0.9).mismatch


def test_no_mismatch_with_corrections_on_is_todays_step(tiny_model_path, tmp_path, one_thread):
    """Sampler = trainer: the weights are 1 up to float rounding, and the step lands where the plain one does."""
    plain = make(tiny_model_path, tmp_path / "a")
    plain.step()
    for extra in (["correction.is_level=token"], ["correction.is_level=sequence", "correction.rs_level=geometric"]):
        tr = make(tiny_model_path, tmp_path / extra[0], *extra)
        metrics = tr.step()
        assert metrics["mismatch/kl_k3"] < 1e-10 and metrics["correction/masked_frac"] == 0.0
        for a, b in zip(params(plain), params(tr)):
            assert_close(a, b, atol=1e-6, rtol=1e-5)


def test_exact_agreement_gives_the_identical_loss(tiny_model_path, tmp_path, one_thread):
    """mu = pi_old exactly: the corrected minibatch loss and its gradient are bit for bit the plain one's."""
    tr = make(tiny_model_path, tmp_path)
    ro = tr.collect(tr.prompt_batch(1))
    from ppo_core.correction import policy_inputs

    cfg = load_config("cpu", ["correction.is_level=sequence", "correction.rs_level=token"]).correction
    policy, _ = policy_inputs(ro.logprobs, ro.logprobs.clone(), ro.mask, cfg)
    base = dict(input_ids=ro.input_ids, attention_mask=ro.attention_mask, response_ids=ro.response_ids,
                mask=ro.mask, old_values=ro.values, returns=ro.values, advantages=torch.randn_like(ro.values),
                keep=ro.keep, old_logprobs=ro.logprobs)  # fmt: skip
    base = {k: v for k, v in base.items() if v is not None}
    losses = []
    base = {k: v.clone() if torch.is_tensor(v) else v for k, v in base.items()}  # not inference tensors
    policy = {k: v.clone() for k, v in policy.items()}
    for mb in (base, {**base, **policy}):
        tr.actor.zero_grad()
        loss, _ = ppo_loss(tr.actor, mb, 0.2, 0.2, 0.1, 0.0, 1.0)
        loss.backward()
        losses.append((loss.detach(), [p.grad.clone() for p in tr.actor.parameters() if p.grad is not None]))
    assert torch.equal(losses[0][0], losses[1][0])
    assert all(torch.equal(a, b) for a, b in zip(losses[0][1], losses[1][1]))


def test_weights_multiply_each_tokens_policy_loss(tiny_model_path, tmp_path, one_thread):
    """is_weights w: the policy loss is the token mean of w * the per-token clipped loss; policy_mask drops tokens."""
    from ppo_core.losses import policy_loss

    g = torch.Generator().manual_seed(0)
    logp, old, adv = (torch.randn(3, 5, generator=g) * 0.3 for _ in range(3))
    mask = torch.ones(3, 5, dtype=torch.bool)
    w = torch.rand(3, 5, generator=g) * 2
    kept = mask.clone()
    kept[1, 2:] = False
    per_token = torch.stack([policy_loss(logp[i : i + 1, t : t + 1], old[i : i + 1, t : t + 1],
                                         adv[i : i + 1, t : t + 1], mask[:1, :1])[0]
                             for i in range(3) for t in range(5)]).view(3, 5)  # fmt: skip
    want = (w * per_token)[kept].mean()
    got, _ = policy_loss(logp, old, adv * w, kept)
    assert_close(got, want)


def test_bf16_sampler_makes_a_measured_mismatch_and_bypass_clips_against_it(tiny_model_path, tmp_path, one_thread):
    tr = make(tiny_model_path, tmp_path / "d", "sampler.dtype=bfloat16", "correction.is_level=token")
    m = tr.step()
    assert m["mismatch/kl_k3"] > 1e-7 and m["mismatch/max_abs_log_ratio"] > 1e-4  # the ratio check's tolerance
    assert 0 < m["correction/weight_min"] < 1 < m["correction/weight_max"]
    tr = make(tiny_model_path, tmp_path / "b", "sampler.dtype=bfloat16", "correction.mode=bypass")
    seen = []
    box = tr.ppo
    update = box.minibatch_update
    box.minibatch_update = lambda actor, opt, mb, **kw: seen.append(mb["old_logprobs"]) or update(actor, opt, mb, **kw)
    ro = tr.collect(tr.prompt_batch(1))
    tr.learn(ro)  # the ratio check is on, and is skipped: against mu the ratio is not 1
    for old in seen:  # every minibatch clips against rows of mu, none against pi_old's
        assert (old[:, None, :] == ro.behaviour_logprobs[None]).all(-1).any(1).all()
        assert not (old[:, None, :] == ro.logprobs[None]).all(-1).any()
    assert tr.ppo.sampler.lm.dtype == torch.bfloat16 and tr.cfg.train.check_ratio


def test_weight_noise_is_one_fixed_draw_of_its_scale():
    lm = torch.nn.Linear(64, 64)
    s = Sampler(lm, weight_noise=0.5)
    first = s.lm.weight.detach().clone()
    rel = ((first - lm.weight) / lm.weight.std()).std().item()
    assert s.own and s.mismatch and 0.4 < rel < 0.6  # s * std(w) * N(0, 1)
    s.sync(lm)  # the same weights again: the same perturbed copy (one engine, not fresh noise per step)
    assert torch.equal(s.lm.weight, first) and not torch.equal(s.lm.weight, lm.weight)


def test_keep_sampling_mask_scores_pi_old_and_pi_theta_on_the_samplers_support(tiny_model_path, tmp_path, one_thread):
    """top-p: without the mask log rho = log Z < 0; with it pi_old = mu, the ratio starts at 1, gradients finite."""
    top_p = ["sampler.top_p=0.7", "ppo.ent_coef=0.01"]
    plain = make(tiny_model_path, tmp_path / "p", *top_p)
    ro = plain.collect(plain.prompt_batch(1))
    assert ro.sampling_mask is None and (ro.logprobs - ro.behaviour_logprobs)[ro.mask].min() < -1e-2
    tr = make(tiny_model_path, tmp_path / "k", *top_p, "sampler.keep_sampling_mask=true")
    ro = tr.collect(tr.prompt_batch(1))
    assert ro.sampling_mask.shape == (*ro.mask.shape, tr.actor.lm.config.vocab_size)
    assert not ro.sampling_mask[ro.mask].all()  # the nucleus left tokens out
    assert_close(ro.logprobs[ro.mask], ro.behaviour_logprobs[ro.mask], atol=1e-5, rtol=1e-5)
    m = tr.learn(ro)  # the ratio check is on: pi_theta on the same support starts at pi_old
    assert m["train/skipped"] == 0 and m["mismatch/max_abs_log_ratio"] < 1e-5


@pytest.mark.parametrize(
    "override, match",
    [("sampler.dtype=int8", "sampler.dtype must be"), ("correction.is_level=geometric", "correction.is_level"),
     ("sampler.top_p=0", "top_p"), ("sampler.stale_steps=-1", "stale_steps"),
     ("sampler.weight_noise=-0.1", "weight_noise")],
)  # fmt: skip
def test_bad_settings_are_one_line_errors(override, match):
    with pytest.raises(ConfigError, match=match) as err:
        load_config("cpu", [override])
    assert "\n" not in str(err.value)
    with pytest.raises(ConfigError, match="bypass"):
        load_config("cpu", ["correction.mode=bypass", "correction.is_level=token"])
