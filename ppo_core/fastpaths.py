"""Speed paths: the numbers of the readable code in ``rollout.py`` and ``model.py``, with less work.

One switch, the config flag ``train.fast_paths`` (default true); the trainer passes a ``PromptCache``
to ``rollout.sample``/``rollout.score`` and calls ``enable(actor)`` when it is on. With it off, every
forward pass is the plain one a reader sees in ``rollout.py`` and ``model.py``. Both paths agree up to
float rounding (tests/test_rollout.py, tests/test_model.py check it, and the ratio = 1 check of every
first minibatch holds on both); measured speed-ups are in ``benchmarks/README.md``.

1. ``PromptCache``: scoring reuses generate's keys and values of the prompt. ``generate`` already ran
   the policy over every prompt token (the prefill) with the very weights the scoring forward uses, so
   the actor's scoring forward keeps positions 0..P-2 of generate's cache and runs on the T positions
   P-1..P+T-2 only (the ones whose outputs score the response)::

       generate:   [p0 .. p_P-2] p_P-1 r0 .. r_T-2        cache of every position it processed
       score:      [  cached   ] p_P-1 r0 .. r_T-2        -> logits, values at P-1 .. P+T-2

   Used for a float32 policy only: on a GPU a cached prefix and a full forward run different kernels
   whose bf16 roundings were not measured, and the ratio = 1 check must not depend on luck. The
   reference model has other weights and always runs in full.

2. ``split_prefix_logits``: a float32 training forward (gradients on) runs in two calls, the positions
   before ``keep`` first, then the kept ones on top of the first call's keys and values. No kept output
   depends on the prefix's *last-layer* attention output or MLP, so autograd skips them (about
   1/layers of the trunk's backward). A separate critic's trunk is split the same way
   (``split_prefix_hidden``). Used from ``SPLIT_MIN_PREFIX_TOKENS`` prefix tokens
   (rows x positions) on, below which the second call's fixed cost outweighs the saving, and never
   under activation checkpointing (which turns transformers' cache off). Lower precisions keep the one
   call, so their training forward rounds exactly like their scoring forward.

3. ``shared_prompt_pair_loss``: chapter 06's Bradley-Terry step (``reward_model.pair_loss``) runs each pair's
   prompt through the reward model's trunk once instead of twice. The prompts go first (left-padded), their
   keys and values are copied for the two responses, and the chosen and rejected continuations run on top.
   (Prefix sharing, as Wang and Hegde do for DPO, https://arxiv.org/abs/2410.20305; they put both responses
   in one row behind a block-sparse mask.) On chapter 06's pairs the prompts hold about 78 % of a batch's
   tokens, so running each once removes about 39 % of them, and a training step takes about half the time.
   Scores and gradients agree with ``pair_loss`` to float rounding (tests/test_reward_model.py). Used by
   ``run.rm.fit_reward_model`` when the reward-model config's ``train.fast_paths`` is on (the default), for
   any pair whose tokens split at the prompt's end; a batch with one that does not (a tokenizer merging the
   prompt's last characters with the response's first) takes the plain ``pair_loss``.
"""

import torch
from transformers import DynamicCache

from .logprobs import logprobs_from_logits
from .model import lm_logits, position_ids_from_mask, trunk_hidden
from .precision import autocast, compute_dtype
from .reward_model import bradley_terry_loss, pair_loss

__all__ = [
    "PromptCache",
    "shared_prompt_pair_loss",
    "cat_values",
    "split_prefix_logits",
    "split_prefix_hidden",
    "enable",
    "SPLIT_MIN_PREFIX_TOKENS",
]

SPLIT_MIN_PREFIX_TOKENS = 2048
"""``split_prefix_logits`` runs the prefix apart only from this many prefix tokens (rows x positions) on."""


def cat_values(values: list) -> torch.Tensor | None:
    """The chunks' values as one float32 (B, T) tensor, or None for an actor without a value head."""
    return None if values[0] is None else torch.cat(values).float()


class PromptCache:
    """generate's key/value caches, kept by ``rollout.sample`` for ``rollout.score`` and used once.

    It travels beside the rollout, never inside it: a ``Rollout`` stays plain tensors.
    """

    def __init__(self):
        self.chunks: list = []  # [(first row, DynamicCache)], one per generate call
        self.lm, self.complete = None, True

    def keep(self, lm, start: int, out) -> None:
        """Called by ``sample`` after each generate call (rows ``start``..); float32 compute only."""
        if compute_dtype(lm) != torch.float32 or not isinstance(out.past_key_values, DynamicCache):
            self.complete = False
            return
        self.lm = lm
        self.chunks.append((start, out.past_key_values))

    def prompt_caches(self, prompt_len: int) -> list | None:
        """The caches cut to the prompts' first ``prompt_len - 1`` positions, one per generate call, for another draw
        from the same prompts with the same weights (``rollout.sample``'s ``prompt_past``); None if a call kept none.
        Frees them here."""
        chunks, usable = self.chunks, self.complete and bool(self.chunks)
        self.chunks, self.lm = [], None
        if not usable:
            return None
        for _, cache in chunks:  # all but the last prompt token, which is left to run: generate needs one to start
            cache.crop(-(cache.get_seq_length() - (prompt_len - 1)))
        return [cache for _, cache in chunks]

    def actor_scores(self, actor, ro, temperature: float) -> tuple | None:
        """Old logprobs and values (B, T) from the caches, as ``ActorWithValueHead.forward`` gives them; or None
        if they cannot serve ``actor`` (another model sampled, a chunk kept no cache). Frees the caches."""
        chunks, usable = self.chunks, self.complete and bool(self.chunks) and self.lm is actor.lm
        self.chunks, self.lm = [], None
        if not usable:
            return None
        keep = ro.keep  # [P-1 : P+T-1]: the positions this forward runs on
        bounds = [start for start, _ in chunks[1:]] + [ro.input_ids.shape[0]]
        logprobs, values = [], []
        for (start, cache), end in zip(chunks, bounds):
            cache.crop(-(cache.get_seq_length() - keep.start))  # keep positions 0..P-2: the prompt but its last token
            ids = ro.input_ids[start:end, keep]  # (b, T): p_P-1, r0 .. r_T-2
            attn = ro.attention_mask[start:end, : keep.stop]  # (b, P+T-1): cached positions and these T
            pos = position_ids_from_mask(attn)[:, keep]  # (b, T)
            if getattr(actor, "critic_trunk", None) is None:
                logits, v = actor(ids, attn, pos, past_key_values=cache)  # (b, T, V), (b, T)
            else:  # a separate critic has no cache of its own: it reads the whole rows
                with autocast(ids.device, actor.compute_dtype):
                    logits, _ = actor.logits_fn(actor.lm, ids, attn, pos, past_key_values=cache)  # (b, T, V)
                rows = ro.attention_mask[start:end]
                v = actor.critic_values(ro.input_ids[start:end], rows, position_ids_from_mask(rows), keep)  # (b, T)
            logprobs.append(logprobs_from_logits(logits, ro.response_ids[start:end], temperature))
            values.append(v)
        return torch.cat(logprobs), cat_values(values)


def _split_prefix(trunk, prefix_tokens: int) -> bool:
    """Whether to run the prefix apart: a float32-compute training forward (float32 weights, no autocast) with
    at least ``SPLIT_MIN_PREFIX_TOKENS`` prefix tokens, without activation checkpointing (which turns
    transformers' cache off). ``trunk``: the transformer without its LM head."""
    return (
        torch.is_grad_enabled()
        and prefix_tokens >= SPLIT_MIN_PREFIX_TOKENS
        and compute_dtype(trunk) == torch.float32
        and not getattr(trunk, "gradient_checkpointing", False)
    )


def _kept_hidden(trunk, input_ids, attention_mask, position_ids, keep: slice):
    """The trunk's final hidden states at ``keep`` (B, L', H) from two calls, the prefix first; None if the
    trunk keeps no cache."""
    stop = input_ids.shape[1] if keep.stop is None else keep.stop  # later positions cannot affect kept ones
    prefix = trunk(
        input_ids=input_ids[:, : keep.start],
        attention_mask=attention_mask[:, : keep.start],
        position_ids=position_ids[:, : keep.start],
        use_cache=True,
    )
    if prefix.past_key_values is None:
        return None
    return trunk(
        input_ids=input_ids[:, keep.start : stop],
        attention_mask=attention_mask[:, :stop],
        position_ids=position_ids[:, keep.start : stop],
        past_key_values=prefix.past_key_values,
        use_cache=True,
    ).last_hidden_state


def split_prefix_logits(
    lm, input_ids, attention_mask, position_ids=None, keep: slice | None = None, past_key_values=None
):
    """``model.lm_logits`` with the prefix before ``keep`` run in a separate call where that pays (see above)."""
    if (
        keep is None
        or past_key_values is not None
        or not keep.start
        or not _split_prefix(lm.base_model, input_ids.shape[0] * keep.start)
    ):
        return lm_logits(lm, input_ids, attention_mask, position_ids, keep, past_key_values)
    if position_ids is None:
        position_ids = position_ids_from_mask(attention_mask)
    hidden = _kept_hidden(lm.base_model, input_ids, attention_mask, position_ids, keep)  # (B, L', H)
    if hidden is None:  # a model without a cache: the one call
        return lm_logits(lm, input_ids, attention_mask, position_ids, keep)
    return lm.get_output_embeddings()(hidden), hidden


def split_prefix_hidden(trunk, input_ids, attention_mask, position_ids, keep: slice | None = None):
    """``model.trunk_hidden`` (a separate critic's trunk) with the prefix before ``keep`` run apart where that pays."""
    if keep is None or not keep.start or not _split_prefix(trunk, input_ids.shape[0] * keep.start):
        return trunk_hidden(trunk, input_ids, attention_mask, position_ids, keep)
    hidden = _kept_hidden(trunk, input_ids, attention_mask, position_ids, keep)
    return trunk_hidden(trunk, input_ids, attention_mask, position_ids, keep) if hidden is None else hidden


def enable(actor):
    """Switch ``actor``'s forward to ``split_prefix_logits`` and its critic's to ``split_prefix_hidden``
    (``train.fast_paths``); returns the actor."""
    actor.logits_fn = split_prefix_logits
    actor.critic_hidden_fn = split_prefix_hidden
    return actor


def shared_prompt_pair_loss(rm, pairs: list[dict]):
    """``reward_model.pair_loss`` with each prompt run once: the same ``(loss, stats)`` up to float rounding.

    Rows of the second call: chosen 0, rejected 0, chosen 1, ... on top of their prompt's copied cache::

        call 1:  <pad> <pad> p0 p1 p2 p3                    (N prompts, left-padded, keys and values kept)
        call 2:  [  prompt i's cache  ] c0 c1 c2 <eos> <pad>  (2N responses, right-padded; read at <eos>)
    """
    tok = rm.tokenizer
    eos = tok.eos_token or ""
    prompts = tok([p["prompt"] for p in pairs])["input_ids"]
    rows = tok([p["prompt"] + p[side] + eos for p in pairs for side in ("chosen", "rejected")])["input_ids"]
    if not all(row[: len(prompts[j // 2])] == prompts[j // 2] and len(row) > len(prompts[j // 2])
               for j, row in enumerate(rows)):  # fmt: skip
        return pair_loss(rm, pairs)  # a pair whose tokens do not split at the prompt's end
    trunk, device = rm.model.base_model, next(rm.parameters()).device
    left = tok.pad({"input_ids": prompts}, padding_side="left", return_tensors="pt")
    prompt_ids, prompt_mask = left["input_ids"], left["attention_mask"]  # (N, P)
    responses = [row[len(prompts[j // 2]) :] for j, row in enumerate(rows)]
    right = tok.pad({"input_ids": responses}, padding_side="right", return_tensors="pt")
    response_ids, response_mask = right["input_ids"], right["attention_mask"]  # (2N, R)
    prefix = trunk(input_ids=prompt_ids.to(device), attention_mask=prompt_mask.to(device),
                   position_ids=position_ids_from_mask(prompt_mask).to(device), use_cache=True)  # fmt: skip
    cache = prefix.past_key_values
    if cache is None:  # a trunk without a cache
        return pair_loss(rm, pairs)
    cache.batch_repeat_interleave(2)  # prompt i's keys and values for rows 2i and 2i + 1
    mask = torch.cat([prompt_mask.repeat_interleave(2, dim=0), response_mask], dim=1)  # (2N, P + R)
    hidden = trunk(
        input_ids=response_ids.to(device),
        attention_mask=mask.to(device),
        position_ids=position_ids_from_mask(mask)[:, prompt_ids.shape[1] :].to(device),
        past_key_values=cache,
        use_cache=True,
    ).last_hidden_state  # (2N, R, H)
    last = response_mask.sum(1).to(device) - 1  # each row's <eos>
    scores = rm.model.score(hidden[torch.arange(len(rows), device=device), last]).squeeze(-1).float()  # (2N,)
    return bradley_terry_loss(scores[0::2], scores[1::2])
