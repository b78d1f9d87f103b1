"""The separate critic (ppo.separate_critic): a transformer of its own under the value head.

What must hold: it starts as a copy of the policy's trunk but shares no storage with it; the value loss trains
only it and the policy loss only the policy; their gradient norms are clipped apart; its optimizer group, the
value warm-up, the fast scoring path, checkpoints and resume all include it; LoRA refuses it.
"""

import copy
import math

import pytest
import torch

from ppo_core.model import CRITIC_DIR, ActorWithValueHead, position_ids_from_mask
from ppo_core.run.config import ConfigError, derive, load_config
from ppo_core.run.runner import RunTrainer
from ppo_core.run.setup import build_optimizer
from ppo_core.tasks.tiny import build_char_tokenizer, build_tiny_model
from ppo_core.update import clip_groups, minibatch_update, ppo_loss, value_update


def _actor(separate=True, seed=0):
    torch.manual_seed(seed)
    lm = build_tiny_model(build_char_tokenizer("abcdef"))
    actor = ActorWithValueHead(lm, value_head_init_std=0.1, separate_critic=separate)
    return actor


def _batch(actor, B=4, P=5, T=6, seed=0):
    g = torch.Generator().manual_seed(seed)
    V = actor.lm.config.vocab_size
    ids = torch.randint(3, V, (B, P + T), generator=g)
    attn = torch.ones(B, P + T, dtype=torch.long)
    attn[0, :2] = 0  # a left-padded row
    mask = torch.ones(B, T, dtype=torch.bool)
    mask[1, 4:] = False
    attn[1, P + 4 :] = 0
    keep = slice(P - 1, P + T - 1)
    with torch.no_grad():
        logits, values = actor(ids, attn, position_ids_from_mask(attn), keep=keep)
        old_logprobs = torch.log_softmax(logits, -1).gather(-1, ids[:, P:, None]).squeeze(-1)
    return {
        "input_ids": ids,
        "attention_mask": attn,
        "response_ids": ids[:, P:],
        "mask": mask,
        "old_logprobs": old_logprobs,
        "old_values": values,
        "advantages": torch.randn(B, T, generator=g),
        "returns": torch.randn(B, T, generator=g),
        "keep": keep,
    }


def test_starts_as_a_copy_of_the_policy_trunk_with_storage_of_its_own():
    actor = _actor()
    trunk, critic = actor.lm.base_model.state_dict(), actor.critic_trunk.state_dict()
    assert trunk.keys() == critic.keys()
    assert all(torch.equal(trunk[k], critic[k]) for k in trunk)
    assert not {t.data_ptr() for t in trunk.values()} & {t.data_ptr() for t in critic.values()}
    assert _actor(separate=False).critic_trunk is None
    assert ActorWithValueHead(build_tiny_model(build_char_tokenizer("ab")), with_value_head=False,
                              separate_critic=True).critic_trunk is None  # fmt: skip


def test_values_come_from_the_critic_trunk_and_logits_from_the_policy():
    actor, shared = _actor(), _actor(separate=False)
    shared.load_state_dict({k: v for k, v in actor.state_dict().items() if not k.startswith("critic_trunk.")})
    with torch.no_grad():  # make the two trunks differ, so that reading the wrong one shows
        for p in actor.critic_trunk.parameters():
            p.add_(0.05 * torch.randn_like(p))
    mb = _batch(actor)
    pos = position_ids_from_mask(mb["attention_mask"])
    logits, values = actor(mb["input_ids"], mb["attention_mask"], pos, keep=mb["keep"])
    want_logits, shared_values = shared(mb["input_ids"], mb["attention_mask"], pos, keep=mb["keep"])
    torch.testing.assert_close(logits, want_logits)
    hidden = actor.critic_trunk(input_ids=mb["input_ids"], attention_mask=mb["attention_mask"], position_ids=pos)
    want = actor.value_head(hidden.last_hidden_state[:, mb["keep"]]).squeeze(-1)
    torch.testing.assert_close(values, want)
    torch.testing.assert_close(actor.critic_values(mb["input_ids"], mb["attention_mask"], pos, mb["keep"]), want)
    assert not torch.allclose(values, shared_values)
    with pytest.raises(ValueError, match="critic_values"):
        actor(mb["input_ids"], mb["attention_mask"], pos, past_key_values=object())


def _grads(params):
    return [p.grad for p in params]


def test_the_value_loss_trains_only_the_critic_and_the_policy_loss_only_the_policy():
    actor = _actor()
    mb = _batch(actor)
    critic = {id(p) for p in actor.critic_parameters()}
    policy = [p for p in actor.parameters() if id(p) not in critic]
    assert len(critic) == len(list(actor.critic_trunk.parameters())) + 2
    loss, _ = ppo_loss(actor, mb, 0.2, 0.2, vf_coef=0.0, ent_coef=0.01, temperature=1.0)
    loss.backward()
    assert all(g is None or g.abs().sum() == 0 for g in _grads(actor.critic_parameters()))
    assert any(g is not None and g.abs().sum() > 0 for g in _grads(policy))
    actor.zero_grad(set_to_none=True)
    mb["advantages"] = torch.zeros_like(mb["advantages"])  # no policy-gradient signal, no entropy term
    loss, _ = ppo_loss(actor, mb, 0.2, 0.2, vf_coef=1.0, ent_coef=0.0, temperature=1.0)
    loss.backward()
    assert all(g is None or g.abs().sum() == 0 for g in _grads(policy))
    assert all(g is not None for g in _grads(actor.critic_trunk.parameters()))


def test_gradient_norms_are_clipped_apart():
    """A huge value error must not shrink the policy's step: the policy moves the same whatever the returns."""
    actor = _actor()
    groups = clip_groups(actor)
    assert len(groups) == 2 and {id(p) for p in groups[1]} == {id(p) for p in actor.critic_parameters()}
    assert len(groups[0]) + len(groups[1]) == len(list(actor.parameters()))
    assert len(clip_groups(_actor(separate=False))) == 1
    moved, stats = [], []
    for scale in (1.0, 1e4):
        a = copy.deepcopy(actor)
        mb = _batch(a)
        mb["returns"] = mb["returns"] * scale
        opt = torch.optim.SGD(a.parameters(), lr=0.1)  # plain SGD: the step is the clipped gradient itself
        stats.append(minibatch_update(a, opt, mb, vf_coef=1.0, max_grad_norm=0.5, vf_clip_eps=1e9))
        moved.append({k: v.clone() for k, v in a.lm.state_dict().items()})
        critic_step = torch.cat([(p - q).flatten() for p, q in zip(a.critic_parameters(), actor.critic_parameters())])
        assert critic_step.norm() <= 0.1 * 0.5 * (1 + 1e-4)  # the critic's own clip
    assert all(torch.equal(moved[0][k], moved[1][k]) for k in moved[0])
    assert stats[1]["value/grad_norm"] > 100 * stats[0]["value/grad_norm"]
    norm = lambda ps: torch.cat([p.grad.flatten() for p in ps if p.grad is not None]).norm().item()  # noqa: E731
    for scale, st in zip((1.0, 1e4), stats):  # the two norms before clipping, computed apart from minibatch_update
        b = copy.deepcopy(actor)
        mb = _batch(b)
        mb["returns"] = mb["returns"] * scale
        loss, _ = ppo_loss(b, mb, 0.2, 1e9, 1.0, 0.0, 1.0)
        loss.backward()
        critic_ids = {id(p) for p in b.critic_parameters()}
        policy_norm = norm([p for p in b.parameters() if id(p) not in critic_ids])
        critic_norm = norm(b.critic_parameters())
        assert st["value/grad_norm"] == pytest.approx(critic_norm, rel=1e-3)
        assert st["train/grad_norm"] == pytest.approx(math.hypot(policy_norm, critic_norm), rel=1e-3)


def test_value_warmup_step_trains_the_whole_critic_and_not_the_policy():
    actor = _actor()
    mb = _batch(actor)
    lm_before = copy.deepcopy(actor.lm.state_dict())
    trunk_before = copy.deepcopy(actor.critic_trunk.state_dict())
    opt = torch.optim.AdamW(actor.parameters(), lr=1e-2)
    stats = value_update(actor, opt, mb, vf_clip_eps=1e9)
    assert stats["value/loss"] > 0 and stats["train/skipped"] == 0
    assert all(torch.equal(v, lm_before[k]) for k, v in actor.lm.state_dict().items())
    assert any(not torch.equal(v, trunk_before[k]) for k, v in actor.critic_trunk.state_dict().items())


def _cfg(tiny_model_path, out, steps=1, *extra):
    from ppo_test_support import _tiny_overrides

    over = _tiny_overrides(tiny_model_path, out, steps, "train.tensorboard=false", "ppo.separate_critic=true", *extra)
    return load_config("cpu", over)


def test_trainer_builds_it_and_gives_it_the_value_learning_rate(tiny_model_path, tmp_path):
    tr = RunTrainer(_cfg(tiny_model_path, tmp_path / "run", 1, "ppo.value_lr=3e-3"))
    groups = tr.optimizer.param_groups
    assert [g["lr"] for g in groups] == [tr.cfg.ppo.lr, 3e-3]
    assert {id(p) for p in groups[1]["params"]} == {id(p) for p in tr.actor.critic_parameters()}
    lm_trunk = {id(p) for p in tr.actor.lm.parameters()}
    assert lm_trunk == {id(p) for p in groups[0]["params"]}
    assert len(build_optimizer(tr.actor, derive(tr.cfg, {"ppo.value_lr": 0.0}).ppo).param_groups) == 1


def test_fast_scoring_path_gives_the_same_values(tiny_model_path, tmp_path):
    """The prompt cache serves the policy's logprobs; the separate critic reads whole rows: same numbers."""
    from ppo_core.fastpaths import PromptCache
    from ppo_core.rollout import sample, score

    tr = RunTrainer(_cfg(tiny_model_path, tmp_path / "run", 1, "train.fast_paths=true"))
    with torch.no_grad():
        for p in tr.actor.critic_trunk.parameters():  # the critic's trunk is no longer the policy's
            p.add_(0.05 * torch.randn_like(p))
        tr.actor.value_head.weight.normal_()
    prompts = tr.prompts(tr.train_records[:6])
    cache = PromptCache()
    torch.manual_seed(0)
    ro = sample(tr.actor.lm, tr.tokenizer, prompts, 8, 1.0, 200, prompt_cache=cache)
    fast = score(tr.actor, tr.ref, copy.copy(ro), 1.0, 4, cache)
    fast_lp, fast_v = fast.logprobs.clone(), fast.values.clone()
    slow = score(tr.actor, tr.ref, ro, 1.0, 4, None)
    torch.testing.assert_close(fast_lp, slow.logprobs, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(fast_v, slow.values, rtol=1e-4, atol=1e-5)
    assert fast_v[ro.mask].abs().sum() > 0


def test_checkpoint_holds_the_critic_and_resume_continues_exactly(tiny_model_path, tmp_path):
    """Stopped after step 1 and resumed, the run repeats an uninterrupted one's metrics; the folder has critic/."""
    from ppo_test_support import resumed_run_repeats_the_full_one

    extra = ("train.save_every=1", "train.keep_last=5", "ppo.value_lr=1e-3")
    make = lambda out, *more: RunTrainer(_cfg(tiny_model_path, out, 2, *extra, *more))  # noqa: E731
    full, want = resumed_run_repeats_the_full_one(make, tmp_path, stop_after=1)
    assert (full.out / "step_1" / CRITIC_DIR / "config.json").is_file()
    assert any(r["value/loss"] > 0 for r in want)
    loaded = ActorWithValueHead.from_pretrained(str(full.out / "step_2"))  # the saved folder, critic and all
    for k, v in full.actor.state_dict().items():
        assert torch.equal(loaded.state_dict()[k], v), k


def test_resuming_with_the_other_critic_setting_is_a_one_line_error(tiny_model_path, tmp_path):
    from ppo_test_support import resuming_with_the_other_setting_fails

    make = lambda out, *more: RunTrainer(_cfg(tiny_model_path, out, 1, *more))  # noqa: E731
    resuming_with_the_other_setting_fails(make, tmp_path, "ppo.separate_critic")


def test_lora_with_a_separate_critic_is_refused():
    with pytest.raises(ConfigError, match="separate_critic") as err:
        load_config("cpu", ["ppo.separate_critic=true", "model.lora.r=8"])
    assert "\n" not in str(err.value)
    assert load_config("cpu", ["ppo.separate_critic=true", "algo.adv_estimator=grpo", "rollout.group_size=4"])


def test_extra_value_epochs_train_only_the_critic_and_are_logged(tiny_model_path, tmp_path, monkeypatch):
    """ppo.value_epochs=4 with ppo_epochs=2: two more passes of value-only updates after the PPO update."""
    import ppo_core.trainer as trainer_module

    tr = RunTrainer(_cfg(tiny_model_path, tmp_path / "run", 1, "ppo.value_epochs=4", "ppo.ppo_epochs=2"))
    tr.reward_fn = lambda completion, answer: float(len(completion) % 3)
    calls = []
    real = trainer_module.value_update
    monkeypatch.setattr(trainer_module, "value_update", lambda *a, **k: calls.append(1) or real(*a, **k))
    m = tr.step()
    per_epoch = -(-tr.cfg.rollout.batch_size // tr.cfg.ppo.minibatch_size)
    assert len(calls) == 2 * per_epoch and m["value/extra_loss"] > 0 and "policy/loss" in m
    assert len(tr.last_step.schedule) == 2  # the schedule is the policy's epochs
