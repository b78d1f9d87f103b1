"""A critic that reads the policy (ppo.critic_reads_policy): the policy's confidence as the critic's features.

What must hold: each feature at response state t is a function of that state (the tokens before t and the
policy's distribution over token t), never of token t itself, or the value would stop being a baseline; the
reader adds 0 at first and is trained by the value loss alone, in the critic's optimizer group; scoring fills
the features (the fast path the same as the full forwards) and the update and the value warm-up read the
rollout's; checkpoints and resume carry the reader, and resuming with the other setting is a one-line error.
(Ranks pad the features with the rest of the rollout: tests/test_distributed.py.)
"""

import copy
import math
import sys
from pathlib import Path

import pytest
import torch

from ppo_core.logprobs import logprobs_from_logits
from ppo_core.model import (
    POLICY_FEATURES,
    POLICY_READER_FILE,
    ActorWithValueHead,
    policy_features,
    position_ids_from_mask,
)
from ppo_core.run.config import load_config
from ppo_core.tasks.tiny import build_char_tokenizer, build_tiny_model
from ppo_core.trainer import PPOTrainer
from ppo_core.update import ppo_loss, value_update


def _actor(seed=0, **kw):
    torch.manual_seed(seed)
    lm = build_tiny_model(build_char_tokenizer("abcdef"))
    return ActorWithValueHead(lm, value_head_init_std=0.1, critic_reads_policy=True, **kw)


def _score(actor, ids, P, mask, temperature=1.0):
    """Logits, logprobs of the response tokens and features of rows ``ids`` (B, P + T), no padding."""
    attn = torch.ones_like(ids)
    keep = slice(P - 1, ids.shape[1] - 1)
    with torch.no_grad():
        logits, values = actor(ids, attn, position_ids_from_mask(attn), keep=keep)
    logp = logprobs_from_logits(logits, ids[:, P:], temperature)
    return logits, logp, values, policy_features(logits, logp, mask, temperature)


def test_features_read_the_tokens_before_a_state_and_the_distribution_over_its_next_token_by_hand():
    actor = _actor()
    ids = torch.randint(3, actor.lm.config.vocab_size, (3, 5 + 6), generator=torch.Generator().manual_seed(1))
    mask = torch.ones(3, 6, dtype=torch.bool)
    mask[2, 3:] = False  # a response that ended after 3 tokens
    logits, logp, _, feats = _score(actor, ids, 5, mask, temperature=0.7)
    assert feats.shape == (3, 6, len(POLICY_FEATURES)) and feats.dtype == torch.float32
    for b in range(3):
        for t in range(6):
            before = [logp[b, j].item() if mask[b, j] else 0.0 for j in range(t)]  # padding: probability 1
            last = before[-1] if before else 0.0
            dist = torch.softmax(logits[b, t] / 0.7, -1)
            want = [
                math.exp(last),
                math.exp(min(before, default=0.0)),
                last / 5,
                sum(before) / 10,
                dist.max().item(),
                -(dist * dist.log()).sum().item() / 3,
            ]
            torch.testing.assert_close(feats[b, t], torch.tensor(want), rtol=1e-5, atol=1e-6)


def test_a_state_s_features_and_value_do_not_depend_on_the_token_drawn_there():
    """Two responses that differ only at token t: equal features and values up to state t, different after."""
    actor = _actor()
    with torch.no_grad():
        for layer in actor.policy_reader:
            if isinstance(layer, torch.nn.Linear):
                layer.weight.normal_()  # a reader that has learned something
    P, T, t = 5, 6, 2
    ids = torch.randint(3, actor.lm.config.vocab_size, (1, P + T), generator=torch.Generator().manual_seed(2))
    other = ids.clone()
    other[0, P + t] = 3 if ids[0, P + t] != 3 else 4
    mask = torch.ones(1, T, dtype=torch.bool)
    _, _, v_a, f_a = _score(actor, ids, P, mask)
    _, _, v_b, f_b = _score(actor, other, P, mask)
    read_a, read_b = actor.read_policy(v_a, f_a), actor.read_policy(v_b, f_b)
    torch.testing.assert_close(f_a[:, : t + 1], f_b[:, : t + 1], rtol=0, atol=0)
    torch.testing.assert_close(read_a[:, : t + 1], read_b[:, : t + 1], rtol=0, atol=0)
    assert not torch.equal(f_a[:, t + 1, :4], f_b[:, t + 1, :4])  # state t + 1 has seen the token
    assert not torch.equal(read_a[:, t + 1], read_b[:, t + 1])


def test_the_reader_adds_zero_at_first_and_needs_the_features():
    actor = _actor()
    values, feats = torch.randn(2, 4), torch.rand(2, 4, len(POLICY_FEATURES))
    torch.testing.assert_close(actor.read_policy(values, feats), values, rtol=0, atol=0)
    assert {id(p) for p in actor.policy_reader.parameters()} <= {id(p) for p in actor.critic_parameters()}
    with pytest.raises(ValueError, match="ppo.critic_reads_policy"):
        actor.read_policy(values, None)
    plain = ActorWithValueHead(build_tiny_model(build_char_tokenizer("ab")))
    assert plain.policy_reader is None and plain.read_policy(values, None) is values


H = {"clip_eps": 0.2, "vf_clip_eps": 0.2, "ent_coef": 0.0, "temperature": 1.0}


def _mb(actor, B=4, P=5, T=6):
    g = torch.Generator().manual_seed(3)
    ids = torch.randint(3, actor.lm.config.vocab_size, (B, P + T), generator=g)
    mask = torch.ones(B, T, dtype=torch.bool)
    _, logp, values, feats = _score(actor, ids, P, mask)
    with torch.no_grad():
        old_values = actor.read_policy(values, feats)
    return {
        "input_ids": ids,
        "attention_mask": torch.ones_like(ids),
        "response_ids": ids[:, P:],
        "mask": mask,
        "old_logprobs": logp,
        "old_values": old_values,
        "advantages": torch.randn(B, T, generator=g),
        "returns": torch.rand(B, T, generator=g) + 1.0,
        "policy_features": feats,
        "keep": slice(P - 1, P + T - 1),
    }


@pytest.mark.parametrize("separate", [False, True])
def test_the_value_loss_trains_the_reader_and_the_policy_loss_does_not(separate):
    actor = _actor(separate_critic=separate)
    mb = _mb(actor)
    last = actor.policy_reader[2]
    loss, _ = ppo_loss(actor, mb, vf_coef=0.0, **H)  # the policy's loss alone
    loss.backward()
    assert last.weight.grad is None or not last.weight.grad.any()
    actor.zero_grad()
    loss, _ = ppo_loss(actor, mb, vf_coef=1.0, **H)
    loss.backward()
    assert last.weight.grad.abs().sum() > 0 and last.bias.grad.abs().sum() > 0
    opt = torch.optim.AdamW(actor.critic_parameters(), lr=1e-2)
    before = copy.deepcopy(actor.policy_reader.state_dict())
    stats = value_update(actor, opt, mb, vf_clip_eps=10.0)
    assert stats["train/skipped"] == 0
    assert any(not torch.equal(v, before[k]) for k, v in actor.policy_reader.state_dict().items())
    mb.pop("policy_features")
    with pytest.raises(ValueError, match="policy_features"):
        ppo_loss(actor, mb, vf_coef=1.0, **H)


def _cfg(tiny_model_path, out, steps=1, *extra):
    from ppo_test_support import _tiny_overrides

    over = _tiny_overrides(
        tiny_model_path, out, steps, "train.tensorboard=false", "ppo.critic_reads_policy=true", *extra
    )
    return load_config("cpu", over)


def test_the_trainer_puts_the_reader_in_the_critic_s_group(tiny_model_path, tmp_path):
    tr = PPOTrainer(_cfg(tiny_model_path, tmp_path / "run", 1, "ppo.value_lr=3e-3"))
    groups = tr.optimizer.param_groups
    assert [g["lr"] for g in groups] == [tr.cfg.ppo.lr, 3e-3]
    assert {id(p) for p in tr.actor.policy_reader.parameters()} <= {id(p) for p in groups[1]["params"]}
    grpo = PPOTrainer(_cfg(tiny_model_path, tmp_path / "grpo", 1, "algo.adv_estimator=grpo", "rollout.group_size=4"))
    assert grpo.actor.policy_reader is None  # no critic: the key is ignored


@pytest.mark.parametrize("separate", ["false", "true"])
def test_scoring_fills_the_features_and_the_fast_path_agrees(tiny_model_path, tmp_path, separate):
    from ppo_core.rollout import sample, score
    from ppo_core.run.fastpaths import PromptCache

    tr = PPOTrainer(
        _cfg(tiny_model_path, tmp_path / "run", 1, "train.fast_paths=true", f"ppo.separate_critic={separate}")
    )
    with torch.no_grad():
        for p in tr.actor.policy_reader.parameters():
            p.normal_()
    prompts = tr.prompts(tr.train_records[:6])
    cache = PromptCache()
    torch.manual_seed(0)
    ro = sample(tr.actor.lm, tr.tokenizer, prompts, 8, 1.0, 200, prompt_cache=cache)
    fast = score(tr.actor, tr.ref, copy.copy(ro), 1.0, 4, cache)
    slow = score(tr.actor, tr.ref, copy.copy(ro), 1.0, 4, None)
    torch.testing.assert_close(fast.policy_features, slow.policy_features, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(fast.values, slow.values, rtol=1e-4, atol=1e-5)
    assert slow.policy_features.shape == (*ro.response_ids.shape, len(POLICY_FEATURES))
    with torch.no_grad():
        logits, trunk_values = tr.actor(
            ro.input_ids, ro.attention_mask, position_ids_from_mask(ro.attention_mask), ro.keep
        )
    want = trunk_values + tr.actor.policy_reader(policy_features(logits, slow.logprobs, ro.mask)).squeeze(-1)
    torch.testing.assert_close(slow.values, want, rtol=1e-4, atol=1e-5)


def test_checkpoint_holds_the_reader_and_resume_continues_exactly(tiny_model_path, tmp_path):
    from ppo_test_support import resumed_run_repeats_the_full_one

    extra = ("train.save_every=1", "train.keep_last=5", "ppo.value_lr=1e-2", "ppo.value_warmup_steps=1")
    make = lambda out, *more: PPOTrainer(_cfg(tiny_model_path, out, 2, *extra, *more))  # noqa: E731
    full, _ = resumed_run_repeats_the_full_one(make, tmp_path, stop_after=2)  # the warm-up step and one PPO step
    assert (full.out / "step_2" / POLICY_READER_FILE).is_file()
    assert full.actor.policy_reader[2].weight.abs().sum() > 0  # the warm-up and the updates trained it
    loaded = ActorWithValueHead.from_pretrained(str(full.out / "step_3"))
    assert loaded.policy_reader is not None
    for k, v in full.actor.state_dict().items():
        assert torch.equal(loaded.state_dict()[k], v), k


def test_resuming_with_the_other_setting_is_a_one_line_error(tiny_model_path, tmp_path):
    from ppo_test_support import resuming_with_the_other_setting_fails

    make = lambda out, *more: PPOTrainer(_cfg(tiny_model_path, out, 1, *more))  # noqa: E731
    resuming_with_the_other_setting_fails(make, tmp_path, "ppo.critic_reads_policy")


def test_lora_checkpoints_carry_the_reader(tiny_model_path, tmp_path):
    from ppo_core.run import lora

    tr = PPOTrainer(_cfg(tiny_model_path, tmp_path / "run", 1, "model.lora.r=4", "ppo.separate_critic=false"))
    assert all(p.requires_grad for p in tr.actor.policy_reader.parameters())
    with torch.no_grad():
        for p in tr.actor.policy_reader.parameters():
            p.normal_()
    lora.save_actor(tr.actor, tmp_path / "ckpt")
    assert (tmp_path / "ckpt" / POLICY_READER_FILE).is_file()
    other = PPOTrainer(_cfg(tiny_model_path, tmp_path / "run2", 1, "model.lora.r=4", "ppo.separate_critic=false"))
    lora.load_actor(other.actor, tmp_path / "ckpt")
    for k, v in tr.actor.policy_reader.state_dict().items():
        assert torch.equal(other.actor.policy_reader.state_dict()[k], v), k


@pytest.mark.skipif(not Path("/proc/self/clear_refs").exists(), reason="measures peak RSS through Linux's /proc/self")
def test_the_features_take_the_next_token_distribution_one_row_at_a_time():
    """On a real vocabulary, all rows' float32 log-softmax at once costs several (B, T, V) tensors; the features
    must cost about one row's (``benchmarks/memory.py --policy-features``: 6.96 -> 0.44 GiB at the cuda preset)."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    from memory import policy_features_peaks

    peaks = policy_features_peaks(4, 64, 151936)  # one float32 (B, T, V) tensor: 156 MB
    one = 4 * 64 * 151936 * 4
    assert peaks[True] > 2 * one, f"the all-rows reference should take several (B, T, V) tensors: {peaks}"
    assert peaks[False] < one, f"policy_features should take about a row at a time, not the batch: {peaks}"
