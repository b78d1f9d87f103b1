import copy

import pytest
import torch
from transformers import AutoModelForCausalLM, GPT2Config

from ppo_core import fastpaths
from ppo_core.model import ActorWithValueHead, make_reference, position_ids_from_mask


def _gpt2(dropout=0.1):
    torch.manual_seed(0)
    cfg = GPT2Config(
        vocab_size=40,
        n_embd=32,
        n_layer=2,
        n_head=2,
        n_positions=64,
        resid_pdrop=dropout,
        embd_pdrop=dropout,
        attn_pdrop=dropout,
        bos_token_id=1,
        eos_token_id=2,
        pad_token_id=0,
    )
    return AutoModelForCausalLM.from_config(cfg)


def test_position_ids_count_real_tokens():
    mask = torch.tensor([[0, 0, 1, 1, 1], [1, 1, 1, 1, 1]])
    assert position_ids_from_mask(mask).tolist() == [[0, 0, 0, 1, 2], [0, 1, 2, 3, 4]]


def test_actor_logits_match_lm_and_values_start_at_zero():
    lm = _gpt2()
    actor = ActorWithValueHead(copy.deepcopy(lm))
    lm.eval()
    ids = torch.randint(3, 40, (2, 7))
    attn = torch.tensor([[0, 0, 1, 1, 1, 1, 1], [1] * 7])
    logits, values = actor(ids, attn)
    ref = lm(input_ids=ids, attention_mask=attn, position_ids=position_ids_from_mask(attn)).logits
    torch.testing.assert_close(logits, ref)
    assert values.shape == (2, 7) and values.abs().max() == 0  # zero-initialised head
    assert actor.value_head.weight.dtype == torch.float32
    kept_logits, kept_values = actor(ids, attn, keep=slice(2, 6))
    torch.testing.assert_close(kept_logits, ref[:, 2:6])


def test_dropout_is_off_even_in_train_mode():
    actor = ActorWithValueHead(_gpt2(dropout=0.5)).train()
    ids, attn = torch.randint(3, 40, (2, 6)), torch.ones(2, 6, dtype=torch.long)
    a, b = actor(ids, attn)[0], actor(ids, attn)[0]
    torch.testing.assert_close(a, b, rtol=0, atol=0)


def test_reference_is_frozen_copy():
    actor = ActorWithValueHead(_gpt2())
    ref = make_reference(actor)
    assert not ref.training and all(not p.requires_grad for p in ref.parameters())
    with torch.no_grad():
        next(actor.lm.parameters()).add_(1.0)
    assert not torch.equal(next(actor.lm.parameters()), next(ref.parameters()))


def test_save_load_round_trip(tmp_path):
    actor = ActorWithValueHead(_gpt2(), value_head_init_std=0.1)
    actor.save_pretrained(tmp_path)
    loaded = ActorWithValueHead.from_pretrained(str(tmp_path))
    ids, attn = torch.randint(3, 40, (2, 6)), torch.ones(2, 6, dtype=torch.long)
    for a, b in zip(actor.eval()(ids, attn), loaded.eval()(ids, attn)):
        torch.testing.assert_close(a, b)
    assert AutoModelForCausalLM.from_pretrained(tmp_path) is not None  # plain transformers loads the LM


def test_checkpoints_are_written_without_transformers_bars(tmp_path, capfd):
    """The run's checkpoints go out through ``save_actor`` (the reward model's through ``run.rm``, under the same
    ``utils.no_transformers_bars``); transformers' own "Writing model shards" bar (one per trunk, at every
    checkpoint) would break the run's progress bar. Off for the write, then back as it was."""
    from transformers.utils import logging as hf_logging

    from ppo_core.run.lora import save_actor

    actor = ActorWithValueHead(_gpt2(), separate_critic=True)
    hf_logging.enable_progress_bar()
    try:
        actor.save_pretrained(tmp_path / "plain")  # the bar this guards against (so this test can fail)
        assert "Writing model shards" in capfd.readouterr().err
        save_actor(actor, tmp_path / "run")
        assert "Writing model shards" not in capfd.readouterr().err
        assert hf_logging.is_progress_bar_enabled()
        hf_logging.disable_progress_bar()  # train.progress=false: stays off
        save_actor(actor, tmp_path / "quiet")
        assert not hf_logging.is_progress_bar_enabled()
    finally:
        hf_logging.enable_progress_bar()
    assert (tmp_path / "run" / "model.safetensors").is_file()


@pytest.mark.cuda
def test_value_head_stays_float32_with_bf16_trunk():
    actor = ActorWithValueHead(_gpt2().to(torch.bfloat16)).cuda()
    ids, attn = torch.randint(3, 40, (2, 6), device="cuda"), torch.ones(2, 6, dtype=torch.long, device="cuda")
    logits, values = actor(ids, attn)
    assert logits.dtype == torch.bfloat16 and values.dtype == torch.float32


def test_forward_with_a_cached_prefix_equals_the_full_forward():
    """Positions after a cached prefix get the full forward's logits and values (left padding, absolute positions)."""
    actor = ActorWithValueHead(_gpt2(), value_head_init_std=0.5).eval()
    ids = torch.randint(3, 40, (2, 9))
    attn = torch.tensor([[0, 0, 1, 1, 1, 1, 1, 1, 0], [1] * 9])  # left padding, and a masked last position
    with torch.no_grad():
        full_logits, full_values = actor(ids, attn)
        pos = position_ids_from_mask(attn)
        cache = actor.lm.base_model(
            input_ids=ids[:, :5], attention_mask=attn[:, :5], position_ids=pos[:, :5], use_cache=True
        ).past_key_values
        logits, values = actor(ids[:, 5:], attn, past_key_values=cache)  # position ids from the whole mask
    torch.testing.assert_close(logits, full_logits[:, 5:], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(values, full_values[:, 5:], atol=1e-5, rtol=1e-5)


def _input_lengths(actor, *args, **kwargs):
    """The sequence lengths of the trunk calls that ``actor(*args, **kwargs)`` makes."""
    lengths = []
    hook = actor.lm.base_model.register_forward_hook(
        lambda m, a, kw, out: lengths.append(kw["input_ids"].shape[1]), with_kwargs=True
    )
    actor(*args, **kwargs)
    hook.remove()
    return lengths


def test_float32_training_forward_runs_the_prefix_apart_with_the_same_numbers_and_gradients(monkeypatch):
    """With gradients on, ``keep`` splits the trunk into two calls; logits, values and gradients do not change."""
    actor = ActorWithValueHead(_gpt2(), value_head_init_std=0.5).train()
    ids = torch.randint(3, 40, (3, 10))
    attn = torch.tensor([[0, 0, 0, 1, 1, 1, 1, 1, 1, 0], [1] * 10, [0, 1, 1, 1, 1, 1, 1, 1, 1, 1]])
    keep = slice(4, 9)
    monkeypatch.setattr(fastpaths, "SPLIT_MIN_PREFIX_TOKENS", 12)
    assert _input_lengths(actor, ids, attn, keep=keep) == [10]  # the readable path (fast paths off): one call
    fastpaths.enable(actor)
    monkeypatch.setattr(fastpaths, "SPLIT_MIN_PREFIX_TOKENS", 13)
    assert _input_lengths(actor, ids, attn, keep=keep) == [10]  # 3 x 4 prefix tokens: too few to pay, one call
    monkeypatch.setattr(fastpaths, "SPLIT_MIN_PREFIX_TOKENS", 12)
    assert _input_lengths(actor, ids, attn, keep=keep) == [
        4,
        5,
    ]  # the prefix, then only the kept positions on its cache
    logits, values = actor(ids, attn, keep=keep)
    with torch.no_grad():
        one_call_logits, one_call_values = actor(ids, attn, keep=keep)  # no gradients: a single call
    torch.testing.assert_close(logits, one_call_logits, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(values, one_call_values, atol=1e-5, rtol=1e-5)
    params = [p for p in actor.lm.parameters()]
    loss = (logits.log_softmax(-1)[..., 0] * attn[:, keep]).sum()
    split_grads = torch.autograd.grad(loss, params, allow_unused=True)
    full = actor.lm(input_ids=ids, attention_mask=attn, position_ids=position_ids_from_mask(attn)).logits[:, keep]
    full_grads = torch.autograd.grad((full.log_softmax(-1)[..., 0] * attn[:, keep]).sum(), params, allow_unused=True)
    for a, b in zip(split_grads, full_grads):
        if b is not None:
            torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-4)


def test_a_separate_critic_runs_its_prefix_apart_with_the_same_values_and_gradients(monkeypatch):
    """The separate critic's trunk is split like the LM's (two calls); its values and gradients do not change."""
    actor = ActorWithValueHead(_gpt2(dropout=0.0), value_head_init_std=0.5, separate_critic=True).train()
    with torch.no_grad():  # a critic that differs from the policy, so that a mix-up of the trunks would show
        for p in actor.critic_trunk.parameters():
            p.add_(0.05 * torch.randn_like(p))
    ids = torch.randint(3, 40, (3, 10))
    attn = torch.tensor([[0, 0, 0, 1, 1, 1, 1, 1, 1, 0], [1] * 10, [0, 1, 1, 1, 1, 1, 1, 1, 1, 1]])
    keep = slice(4, 9)
    lengths = []
    hook = actor.critic_trunk.register_forward_hook(
        lambda m, a, kw, out: lengths.append(kw["input_ids"].shape[1]), with_kwargs=True
    )
    params = list(actor.critic_trunk.parameters()) + list(actor.value_head.parameters())
    weights = torch.randn(3, 5)
    plain = actor.critic_values(ids, attn, keep=keep)  # the readable path: one call
    plain_grads = torch.autograd.grad((plain * weights).sum(), params)
    assert lengths == [10]
    monkeypatch.setattr(fastpaths, "SPLIT_MIN_PREFIX_TOKENS", 12)
    fastpaths.enable(actor)
    lengths.clear()
    split = actor.critic_values(ids, attn, keep=keep)
    assert lengths == [4, 5]  # the prefix, then only the kept positions on its cache
    split_grads = torch.autograd.grad((split * weights).sum(), params)
    hook.remove()
    torch.testing.assert_close(split, plain, atol=1e-5, rtol=1e-5)
    for a, b in zip(split_grads, plain_grads):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-4)
    _, values = actor(ids, attn, keep=keep)  # forward() reads the critic through the same path
    torch.testing.assert_close(values, plain, atol=1e-5, rtol=1e-5)


def test_activation_checkpointing_keeps_the_single_call(monkeypatch):
    """transformers turns its cache off under activation checkpointing, so the prefix is not run apart there."""
    monkeypatch.setattr(fastpaths, "SPLIT_MIN_PREFIX_TOKENS", 0)
    actor = fastpaths.enable(ActorWithValueHead(_gpt2()).train())
    enable = getattr(actor.lm, "activation_checkpointing_enable", None) or actor.lm.gradient_checkpointing_enable
    enable()
    ids, attn = torch.randint(3, 40, (2, 8)), torch.ones(2, 8, dtype=torch.long)
    assert _input_lengths(actor, ids, attn, keep=slice(3, 7)) == [8]
    logits, _ = actor(ids, attn, keep=slice(3, 7))
    with torch.no_grad():
        torch.testing.assert_close(logits, actor(ids, attn, keep=slice(3, 7))[0])


def test_loading_weights_refuses_a_tensor_the_model_has_no_place_for(tmp_path):
    """A checkpoint of another architecture (here a second layer) is refused by name, not half loaded."""
    from ppo_core.precision import load_weights_

    _gpt2().save_pretrained(tmp_path)  # two layers
    one_layer = AutoModelForCausalLM.from_config(GPT2Config(vocab_size=40, n_embd=32, n_layer=1, n_head=2))
    with pytest.raises(ValueError, match=r"tensor 'transformer.h.1.* has no place in the model"):
        load_weights_(one_layer, tmp_path)
