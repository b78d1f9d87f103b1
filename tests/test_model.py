import copy

import pytest
import torch
from transformers import AutoModelForCausalLM, GPT2Config

from ppo_core.model import ActorWithValueHead, make_reference, position_ids_from_mask


def _gpt2(dropout=0.1):
    torch.manual_seed(0)
    cfg = GPT2Config(vocab_size=40, n_embd=32, n_layer=2, n_head=2, n_positions=64, resid_pdrop=dropout,
                     embd_pdrop=dropout, attn_pdrop=dropout, bos_token_id=1, eos_token_id=2, pad_token_id=0)
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


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_value_head_stays_float32_with_bf16_trunk():
    actor = ActorWithValueHead(_gpt2().to(torch.bfloat16)).cuda()
    ids, attn = torch.randint(3, 40, (2, 6), device="cuda"), torch.ones(2, 6, dtype=torch.long, device="cuda")
    logits, values = actor(ids, attn)
    assert logits.dtype == torch.bfloat16 and values.dtype == torch.float32
