"""Rollout logprobs must be those of the distribution that sampled (temperature, position ids, left padding)."""

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from ppo_core import fastpaths
from ppo_core.fastpaths import PromptCache
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
    out = lm.generate(
        input_ids=ids,
        attention_mask=attn,
        generation_config=sampling_config(tok, 8, temperature),
        output_scores=True,
        return_dict_in_generate=True,
    )
    response = out.sequences[:, ids.shape[1] :]
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


# ---- the actor's scoring forward reuses generate's cache of the prompt (float32 only) ----------


def _gpt2_folder(tmp_path):
    """GPT-2 has absolute position embeddings: the cached prompt and the scored tail must agree on positions."""
    from ppo_core.tasks.synthetic import SYNTHETIC_ALPHABET
    from ppo_core.tasks.tiny import build_char_tokenizer, build_tiny_model, save_tiny

    torch.manual_seed(0)
    tok = build_char_tokenizer(SYNTHETIC_ALPHABET)
    return str(save_tiny(build_tiny_model(tok, "gpt2", n_embd=32, n_layer=2, n_head=2), tok, tmp_path / "gpt2"))


def _scored(lm, tok, batch_size, cache, seed=0, top_k=0, top_p=1.0, prompts=PROMPTS, max_new_tokens=10):
    """Sample at temperature 0.9 and score; returns the rollout, whether generate's caches were kept and how many
    times the policy's trunk ran during scoring."""
    torch.manual_seed(123)
    actor = ActorWithValueHead(lm, value_head_init_std=0.5)  # the same non-zero value head in every call
    torch.manual_seed(seed)
    ro = sample(lm, tok, prompts, max_new_tokens, temperature=0.9, batch_size=batch_size, prompt_cache=cache,
                top_k=top_k, top_p=top_p)  # fmt: skip
    kept = cache is not None and cache.complete and bool(cache.chunks)
    ref, calls = make_reference(actor), []  # a copy, made before the policy's trunk gets a counting hook
    hook = lm.base_model.register_forward_hook(lambda *args: calls.append(1))
    score(actor, ref, ro, 0.9, batch_size=2, prompt_cache=cache)
    hook.remove()
    assert cache is None or not cache.chunks  # used once, then released
    return ro, kept, len(calls)


def test_score_from_generation_equals_full_forward(tiny_model_path, tmp_path):
    """Old logprobs and values recorded while generate samples (no forward of the policy), or a forward on the
    response positions over generate's cached prompt: both equal a full forward's, per chunk of rows."""
    for path in (tiny_model_path, _gpt2_folder(tmp_path)):
        lm, tok = _load(path)
        for gen_batch in (0, 2):  # one generate call, or two chunks (3 prompts): one cache per chunk
            full, kept, full_calls = _scored(lm, tok, gen_batch, None)
            assert not kept and full_calls > 0
            for cache in (PromptCache(), PromptCache(scores=False)):
                cached, kept, calls = _scored(lm, tok, gen_batch, cache)
                assert kept, "a float32 policy keeps generate's caches"
                assert (calls == 0) == cache.scores, f"the policy ran {calls} times in scoring (scores={cache.scores})"
                assert torch.equal(cached.response_ids, full.response_ids)
                m = full.mask
                torch.testing.assert_close(cached.logprobs[m], full.logprobs[m], atol=1e-5, rtol=1e-5)
                torch.testing.assert_close(cached.values[m], full.values[m], atol=1e-5, rtol=1e-5)
                torch.testing.assert_close(cached.ref_logprobs, full.ref_logprobs)


def test_recorded_scores_are_the_full_softmax_and_follow_each_row(tiny_model_path):
    """A truncated sampler (top-k, top-p) still gets the full softmax's logprobs, as scoring computes them; rows
    that stop early and chunks of different lengths line up with their tokens."""
    lm, tok = _load(tiny_model_path)
    prompts = PROMPTS * 3
    for top_k, top_p in ((20, 1.0), (0, 0.9)):
        full, _, _ = _scored(lm, tok, 4, None, top_k=top_k, top_p=top_p, prompts=prompts, max_new_tokens=40)
        rec, kept, calls = _scored(lm, tok, 4, PromptCache(), top_k=top_k, top_p=top_p, prompts=prompts,
                                   max_new_tokens=40)  # fmt: skip
        assert kept and calls == 0 and torch.equal(rec.response_ids, full.response_ids)
        lengths = full.mask.sum(1)
        assert lengths.min() < lengths.max(), "the test needs rows of different lengths"
        m = full.mask
        torch.testing.assert_close(rec.logprobs[m], full.logprobs[m], atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(rec.values[m], full.values[m], atol=1e-5, rtol=1e-5)


def test_recorded_scores_of_other_tokens_or_temperature_are_not_used(tiny_model_path):
    """Scored at another temperature than the draw's, or after the rollout's tokens were edited, the logprobs are
    those of a forward over the rollout as it is."""
    lm, tok = _load(tiny_model_path)
    actor = ActorWithValueHead(lm)
    for edit, temperature in ((False, 1.3), (True, 0.9)):
        torch.manual_seed(0)
        cache = PromptCache()
        ro = sample(lm, tok, PROMPTS, max_new_tokens=8, temperature=0.9, prompt_cache=cache)
        if edit:  # another token in the middle of the first row
            with torch.inference_mode():
                ro.response_ids[0, 3] = (ro.response_ids[0, 3] + 1) % len(tok)
                ro.input_ids[0, ro.prompt_len + 3] = ro.response_ids[0, 3]
            assert ro.mask[0, 3]
        score(actor, make_reference(actor), ro, temperature, batch_size=3, prompt_cache=cache)
        torch.testing.assert_close(ro.logprobs[ro.mask], ro.ref_logprobs[ro.mask], atol=1e-5, rtol=1e-5)


def test_an_interrupted_draw_leaves_no_hook_on_the_trunk(tiny_model_path, monkeypatch):
    """The recorder's hook comes off the policy's trunk when generate returns and when it raises (a Ctrl-C in a
    notebook): left on, every later forward would keep a copy of its last hidden state."""
    lm, tok = _load(tiny_model_path)
    real_generate = lm.generate

    def interrupted(*args, **kwargs):
        lm(input_ids=kwargs["input_ids"], attention_mask=kwargs["attention_mask"])  # a step ran, the hook fired
        raise KeyboardInterrupt

    monkeypatch.setattr(lm, "generate", interrupted)
    cache = PromptCache()
    with pytest.raises(KeyboardInterrupt):
        sample(lm, tok, PROMPTS, max_new_tokens=4, temperature=1.0, prompt_cache=cache)
    assert not lm.base_model._forward_hooks and cache.recorder is None
    monkeypatch.setattr(lm, "generate", real_generate)
    sample(lm, tok, PROMPTS, max_new_tokens=4, temperature=1.0, prompt_cache=cache)
    assert not lm.base_model._forward_hooks and cache.chunks[0][2] is not None


def test_cache_of_another_model_is_not_used(tiny_model_path):
    """A rollout sampled by one LM and scored by an actor around another must get the actor's own logprobs."""
    lm, tok = _load(tiny_model_path)
    other = ActorWithValueHead(AutoModelForCausalLM.from_pretrained(tiny_model_path).eval())
    with torch.no_grad():
        for p in other.lm.parameters():
            p.mul_(1.5)  # a different policy
    torch.manual_seed(0)
    cache = PromptCache()
    ro = sample(lm, tok, PROMPTS, max_new_tokens=8, temperature=1.0, prompt_cache=cache)
    assert cache.chunks
    score(other, make_reference(other), ro, 1.0, batch_size=3, prompt_cache=cache)
    torch.testing.assert_close(ro.logprobs, ro.ref_logprobs)  # both the other model's own, full forward


def test_low_precision_policy_keeps_no_cache(tiny_model_path):
    lm, tok = _load(tiny_model_path)
    lm = lm.to(torch.bfloat16)
    torch.manual_seed(0)
    cache = PromptCache()
    sample(lm, tok, PROMPTS, max_new_tokens=4, temperature=1.0, prompt_cache=cache)
    assert not cache.complete and cache.actor_scores(ActorWithValueHead(lm), None, 1.0) is None


def test_ratio_is_one_on_a_cached_rollout(tiny_model_path, monkeypatch):
    """The logprob-consistency check of the first PPO minibatch passes on logprobs scored from the cache,
    with the training forward's prompt run apart (``model.lm_logits``) as in large minibatches."""
    from ppo_core.update import minibatch_update

    monkeypatch.setattr(fastpaths, "SPLIT_MIN_PREFIX_TOKENS", 0)
    lm, tok = _load(tiny_model_path)
    actor = fastpaths.enable(ActorWithValueHead(lm))
    torch.manual_seed(0)
    cache = PromptCache()
    ro = sample(lm, tok, PROMPTS * 2, max_new_tokens=10, temperature=0.7, batch_size=4, prompt_cache=cache)
    assert cache.complete and len(cache.chunks) == 2
    score(actor, make_reference(actor), ro, 0.7, batch_size=6, prompt_cache=cache)
    mb = {
        "input_ids": ro.input_ids.clone(),
        "attention_mask": ro.attention_mask.clone(),
        "response_ids": ro.response_ids.clone(),
        "mask": ro.mask.clone(),
        "old_logprobs": ro.logprobs.clone(),
        "old_values": ro.values.clone(),
        "advantages": torch.randn(ro.mask.shape),
        "returns": torch.randn(ro.mask.shape),
        "keep": ro.keep,
    }
    optimizer = torch.optim.AdamW(actor.parameters(), lr=1e-3)
    stats = minibatch_update(actor, optimizer, mb, temperature=0.7, ratio_tol=1e-5)  # raises if |log ratio| > 1e-5
    assert stats["policy/max_abs_log_ratio"] < 1e-5


def test_a_long_prompt_loses_its_start_and_keeps_its_end(tiny_model_path):
    """The policy continues a prompt from its last tokens (the question's end and the newline): a prompt over
    ``max_prompt_len`` is cut on the left (after its BOS, which the tokenizer keeps), and a short one beside it
    is left-padded, not cut."""
    _, tok = _load(tiny_model_path)
    long_prompt, short = "Bob has 12 cards and gets 4 more. How many?\n", "Hi\n"
    full = tok(long_prompt, add_special_tokens=True)["input_ids"]
    limit = len(full) - 10
    with pytest.warns(UserWarning, match="truncated from the left"):
        ids, attn = tokenize_prompts(tok, [long_prompt, short], limit, "cpu")
    assert ids.shape == (2, limit)
    bos = full[:1] if tok.bos_token_id is not None and full[0] == tok.bos_token_id else []  # BOS stays first
    kept = bos + full[len(full) - (limit - len(bos)) :]
    assert ids[0].tolist() == kept, "the long prompt must keep its BOS and its last tokens, up to max_prompt_len"
    assert tok.decode(ids[0]).endswith("How many?\n")
    n_short = len(tok(short, add_special_tokens=True)["input_ids"])
    assert attn[1].tolist() == [0] * (limit - n_short) + [1] * n_short  # left padding


def test_bf16_compute_on_float32_weights_keeps_no_cache(tiny_model_path):
    """Under bf16 autocast the multiplies run in bf16 though the weights are float32: no cache either."""
    from ppo_core.precision import compute_dtype

    lm, tok = _load(tiny_model_path)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert compute_dtype(lm) == torch.bfloat16
    assert compute_dtype(lm) == torch.float32
    cache = PromptCache()
    sample(lm, tok, PROMPTS, max_new_tokens=4, temperature=1.0, prompt_cache=cache, dtype=torch.bfloat16)
    assert not cache.complete and not cache.chunks


def test_complete_repeats_itself_for_a_seed_and_restores_the_models_mode(tiny_model_path):
    """``complete(seed=...)``: the same texts whatever the global RNG held before; the model ends in the mode
    it was in (eval or train), while the draw itself runs in eval mode."""
    from ppo_core.rollout import complete

    lm, tok = _load(tiny_model_path)
    prompts = PROMPTS * 4
    torch.manual_seed(1)
    first = complete(lm, tok, prompts, max_new_tokens=8, temperature=1.0, seed=5)
    torch.manual_seed(2)
    assert complete(lm, tok, prompts, max_new_tokens=8, temperature=1.0, seed=5) == first
    assert complete(lm, tok, prompts, max_new_tokens=8, temperature=1.0, seed=6) != first
    assert not lm.training
    lm.train()
    complete(lm, tok, PROMPTS, max_new_tokens=2, temperature=1.0, seed=5)
    assert lm.training


def test_complete_samples_at_the_compute_dtype_it_is_given(tiny_model_path, monkeypatch):
    """``complete(dtype=bf16)`` (evaluation of a bf16 run) hands the dtype to every ``sample`` call."""
    import ppo_core.rollout as rollout

    lm, tok = _load(tiny_model_path)
    seen, real_sample = [], rollout.sample
    monkeypatch.setattr(rollout, "sample", lambda *a, **kw: seen.append(kw.get("dtype")) or real_sample(*a, **kw))
    rollout.complete(lm, tok, PROMPTS, max_new_tokens=2, temperature=None, batch_size=2, dtype=torch.bfloat16)
    assert seen == [torch.bfloat16, torch.bfloat16]


def test_complete_also_greedy_reuses_the_prompts_and_draws_what_two_calls_draw(tiny_model_path, monkeypatch):
    """``complete(also_greedy=True)``: the sampled texts of a plain call, and the greedy texts of a plain greedy call;
    each batch's greedy ``generate`` starts from the sampled draw's cache of the prompts (all but their last token)."""
    from ppo_core import rollout

    lm, tok = _load(tiny_model_path)
    prompts = PROMPTS * 5  # 15 prompts, batches of 4: the last batch holds 3
    sampled = rollout.complete(lm, tok, prompts, max_new_tokens=12, temperature=1.0, batch_size=4, seed=3)
    greedy = rollout.complete(lm, tok, prompts, max_new_tokens=12, temperature=None, batch_size=4, seed=3)
    cached, real_generate = [], lm.generate  # per generate call: the length of the cache it was given, or None

    def generate(**kw):
        past = kw.get("past_key_values")
        cached.append(None if past is None else past.get_seq_length())
        return real_generate(**kw)

    monkeypatch.setattr(lm, "generate", generate)
    both = rollout.complete(lm, tok, prompts, max_new_tokens=12, temperature=1.0, batch_size=4, seed=3,
                            also_greedy=True)  # fmt: skip
    assert both == (sampled, greedy)
    assert sampled != greedy  # temperature 1 on a random model: the draws differ
    P = [tokenize_prompts(tok, prompts[i : i + 4], 512, "cpu")[0].shape[1] for i in range(0, 15, 4)]
    assert cached == [x for p in P for x in (None, p - 1)]  # sampled from scratch; greedy from its first P - 1


def test_complete_also_greedy_in_bf16_runs_the_prompts_again(tiny_model_path, monkeypatch):
    """Under a bf16 compute dtype the prompt cache is not kept (``PromptCache`` serves float32 only): the greedy
    draw runs its prompts from scratch and still equals a plain greedy call."""
    from ppo_core import rollout

    lm, tok = _load(tiny_model_path)
    kw = dict(max_new_tokens=6, batch_size=2, seed=3, dtype=torch.bfloat16)
    greedy = rollout.complete(lm, tok, PROMPTS, temperature=None, **kw)
    given, real_generate = [], lm.generate

    def generate(**call):
        given.append(call.get("past_key_values"))
        return real_generate(**call)

    monkeypatch.setattr(lm, "generate", generate)
    sampled, both_greedy = rollout.complete(lm, tok, PROMPTS, temperature=1.0, also_greedy=True, **kw)
    assert both_greedy == greedy and len(sampled) == len(PROMPTS)
    assert given == [None] * 4  # two batches, each drawn twice, every prompt run in full
