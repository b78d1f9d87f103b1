"""Rollout logprobs must be those of the distribution that sampled (temperature, position ids, left padding)."""

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from ppo_core.logprobs import logprobs_from_logits
from ppo_core.model import ActorWithValueHead, make_reference
from ppo_core.rollout import sample, sampling_config, score, tokenize_prompts


def _load(path):
    return AutoModelForCausalLM.from_pretrained(path).eval(), AutoTokenizer.from_pretrained(path)


PROMPTS = ["Ann has 3 apples.\n", "Bob has 12 cards and gets 4 more. How many?\n", "Hi\n"]


def test_sample_masks_and_left_padding(tiny_model_path):
    lm, tok = _load(tiny_model_path)
    torch.manual_seed(0)
    ro = sample(lm, tok, PROMPTS, max_new_tokens=10, temperature=1.0)
    assert ro.input_ids.shape[1] == ro.prompt_len + ro.response_ids.shape[1]
    assert ro.input_ids[:, 0].tolist().count(tok.pad_token_id) == 2  # shorter prompts are left-padded
    assert ro.mask.dtype == torch.bool and ro.mask.any(1).all()
    for row, m in zip(ro.response_ids, ro.mask):  # True up to and including the first EOS
        eos = (row == tok.eos_token_id).nonzero()
        if len(eos):
            assert m[: eos[0] + 1].all() and not m[eos[0] + 1 :].any()
    assert len(ro.completions) == 3


def test_scored_logprobs_equal_generation_distribution(tiny_model_path):
    """generate's processed logits / temperature (top_k=0, top_p=1) give the same logprobs as score()."""
    lm, tok = _load(tiny_model_path)
    temperature = 0.7
    ids, attn = tokenize_prompts(tok, PROMPTS, 64, "cpu")
    torch.manual_seed(0)
    out = lm.generate(input_ids=ids, attention_mask=attn, generation_config=sampling_config(tok, 8, temperature),
                      output_scores=True, return_dict_in_generate=True)
    response = out.sequences[:, ids.shape[1]:]
    gen_logprobs = logprobs_from_logits(torch.stack(out.scores, 1), response, temperature=1.0)  # scores are logits / T
    torch.manual_seed(0)
    ro = sample(lm, tok, PROMPTS, max_new_tokens=8, temperature=temperature)
    actor = ActorWithValueHead(lm)
    score(actor, make_reference(actor), ro, temperature, batch_size=2)
    T = ro.response_ids.shape[1]
    assert torch.equal(ro.response_ids, response[:, :T])
    torch.testing.assert_close(ro.logprobs[ro.mask], gen_logprobs[:, :T][ro.mask], atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(ro.ref_logprobs, ro.logprobs)  # the reference starts as the same model
    wrong = logprobs_from_logits(torch.stack(out.scores, 1) * temperature, response, temperature=1.0)
    assert (wrong[:, :T][ro.mask] - ro.logprobs[ro.mask]).abs().max() > 1e-2  # without temperature: different
