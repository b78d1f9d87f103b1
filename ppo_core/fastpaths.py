"""Speed paths: the numbers of the readable code in ``rollout.py`` and ``model.py``, with less work.

One switch, the config flag ``train.fast_paths`` (default true); the trainer passes a ``PromptCache``
to ``rollout.sample``/``rollout.score`` and calls ``enable(actor)`` when it is on. With it off, every
forward pass is the plain one a reader sees in ``rollout.py`` and ``model.py``. Both paths agree up to
float rounding (tests/test_rollout.py, tests/test_model.py check it, and the ratio = 1 check of every
first minibatch holds on both); measured speed-ups are in ``benchmarks/README.md``.

1. ``PromptCache``: scoring reuses what ``generate`` computed with the very weights the scoring forward uses.

   a. While ``generate`` samples, ``SamplerScores`` (a logits processor, plus a hook on the trunk) keeps each
      drawn token's log-probability under softmax(logits / temperature) and the trunk's final hidden state
      before it. Those are the old logprobs and, through the value head, the values: the policy does not run
      again to score its own rollout. TRL's PPOTrainer takes its old logprobs from ``generate`` too; veRL and
      OpenRLHF run the actor again by default, since their sampler (vLLM) is another program with other kernels.
   b. Without a record (scoring at another temperature, a rollout edited after the draw), the actor's
      scoring forward keeps positions 0..P-2 of generate's cache and runs on the T positions P-1..P+T-2 only
      (the ones whose outputs score the response)::

       generate:   [p0 .. p_P-2] p_P-1 r0 .. r_T-2        cache of every position it processed
       score:      [  cached   ] p_P-1 r0 .. r_T-2        -> logits, values at P-1 .. P+T-2

   Decoding one position at a time against a cache adds in another order than a forward over whole rows, so
   both give the plain forward's numbers up to float rounding (on SmolLM2 at temperature 0.5, log-probabilities
   within about 5e-5 of the training forward's, inside ``train.ratio_tol``). Used for a float32 policy only: on
   a GPU a cached prefix and a full forward run different kernels whose bf16 roundings were not measured, and
   the ratio = 1 check must not depend on luck. The reference model has other weights and always runs in full,
   and so does a separate critic.

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

import contextlib
from typing import NamedTuple

import torch
from transformers import DynamicCache, LogitsProcessor, LogitsProcessorList

from .logprobs import logprobs_from_logits
from .model import lm_logits, position_ids_from_mask, trunk_hidden
from .precision import autocast, compute_dtype
from .reward_model import bradley_terry_loss, pair_loss

__all__ = [
    "PromptCache",
    "SamplerScores",
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
    """What ``generate`` computed, kept by ``rollout.sample`` for ``rollout.score`` and used once: its key/value
    caches and, with ``scores`` (default), each drawn token's log-probability under softmax(logits / temperature)
    and the final hidden state the value head reads, recorded while it samples (``SamplerScores``).

    It travels beside the rollout, never inside it: a ``Rollout`` stays plain tensors.
    """

    def __init__(self, scores: bool = True):
        self.chunks: list = []  # [(first row, DynamicCache, Recorded or None)], one per generate call
        self.lm, self.complete, self.scores = None, True, scores
        self.recorder: SamplerScores | None = None

    @contextlib.contextmanager
    def recording(self, lm, temperature: float | None):
        """Around each generate call in ``sample``: yields the ``logits_processor`` that records its scores (None:
        nothing to record, a greedy draw). The hook on the trunk comes off when the call ends, even if it raised."""
        if not self.scores or temperature is None:  # greedy draws are not scored
            yield None
            return
        recorder = SamplerScores(lm, temperature)
        try:
            yield LogitsProcessorList([recorder])
        finally:
            recorder.close()
        self.recorder = recorder  # the call returned: ``keep`` reads it

    def keep(self, lm, start: int, out) -> None:
        """Called by ``sample`` after each generate call (rows ``start``..); float32 compute only."""
        recorder, self.recorder = self.recorder, None
        recorded = recorder.finish(out.sequences) if recorder is not None else None
        if compute_dtype(lm) != torch.float32 or not isinstance(out.past_key_values, DynamicCache):
            self.complete = False
            return
        self.lm = lm
        self.chunks.append((start, out.past_key_values, recorded))

    def prompt_caches(self, prompt_len: int) -> list | None:
        """The caches cut to the prompts' first ``prompt_len - 1`` positions, one per generate call, for another draw
        from the same prompts with the same weights (``rollout.sample``'s ``prompt_past``); None if a call kept none.
        Frees them here."""
        chunks, usable = self.chunks, self.complete and bool(self.chunks)
        self.chunks, self.lm = [], None
        if not usable:
            return None
        for _, cache, _ in chunks:  # all but the last prompt token, which is left to run: generate needs one to start
            cache.crop(-(cache.get_seq_length() - (prompt_len - 1)))
        return [cache for _, cache, _ in chunks]

    def actor_scores(self, actor, ro, temperature: float) -> tuple | None:
        """Old logprobs and values (B, T) from what generate computed, as ``ActorWithValueHead.forward`` gives
        them; or None if that cannot serve ``actor`` (another model sampled, a chunk kept no cache). Frees it all.

        Recorded scores at this ``temperature`` need no forward of the policy at all (a separate critic still reads
        the whole rows); without them the policy runs on the response positions over the cached prompt."""
        chunks, usable = self.chunks, self.complete and bool(self.chunks) and self.lm is actor.lm
        self.chunks, self.lm = [], None
        if not usable:
            return None
        keep, T = ro.keep, ro.response_ids.shape[1]  # keep: [P-1 : P+T-1], the positions that score the response
        bounds = [start for start, _, _ in chunks[1:]] + [ro.input_ids.shape[0]]
        separate = getattr(actor, "critic_trunk", None) is not None
        logprobs, values = [], []
        for (start, cache, recorded), end in zip(chunks, bounds):
            rows = slice(start, end)
            ids, attn, mask, tokens = ro.input_ids[rows], ro.attention_mask[rows], ro.mask[rows], ro.response_ids[rows]
            v = None
            if recorded is not None and recorded.serves(tokens, mask, temperature):
                # no forward of the policy; 0 off the mask (generate ran past a row's EOS with another attention mask)
                lp = torch.where(mask, _width(recorded.logprobs, T), 0.0)  # (b, T)
                if not separate and actor.value_head is not None:  # the shared head on what generate computed
                    v = torch.where(mask, actor.head_values(_width(recorded.hidden, T)), 0.0)
            else:  # the policy over the cached prompt
                cache.crop(-(cache.get_seq_length() - keep.start))  # positions 0..P-2: the prompt but its last token
                new_attn = attn[:, : keep.stop]  # (b, P+T-1): cached positions and the T that run
                pos = position_ids_from_mask(new_attn)[:, keep]  # (b, T)
                if separate:  # ids[:, keep]: p_P-1, r0 .. r_T-2
                    with autocast(ids.device, actor.compute_dtype):
                        logits, _ = actor.logits_fn(actor.lm, ids[:, keep], new_attn, pos, past_key_values=cache)
                else:
                    logits, v = actor(ids[:, keep], new_attn, pos, past_key_values=cache)  # (b, T, V), (b, T)
                lp = logprobs_from_logits(logits, tokens, temperature)
            if separate:  # a separate critic has no cache or record of its own: it reads the whole rows
                v = actor.critic_values(ids, attn, position_ids_from_mask(attn), keep)  # (b, T)
            logprobs.append(lp)
            values.append(v)
        return torch.cat(logprobs), cat_values(values)


def _width(x: torch.Tensor, T: int) -> torch.Tensor:
    """(b, n, ...) cut or zero-padded to (b, T, ...): a generate call's steps against the rollout's columns."""
    if x.shape[1] >= T:
        return x[:, :T]
    return torch.cat([x, x.new_zeros(x.shape[0], T - x.shape[1], *x.shape[2:])], dim=1)


class Recorded(NamedTuple):
    """One generate call's record: the (b, n) tokens it drew, their log-probabilities at ``temperature`` and the
    (b, n, H) final hidden states before each."""

    tokens: torch.Tensor
    logprobs: torch.Tensor
    hidden: torch.Tensor
    temperature: float

    def serves(self, response_ids: torch.Tensor, mask: torch.Tensor, temperature: float) -> bool:
        """Whether it scores these (b, T) tokens at this temperature: a rollout edited after the draw is not."""
        tokens = _width(self.tokens, response_ids.shape[1]).to(response_ids.device)
        return temperature == self.temperature and bool(((tokens == response_ids) | ~mask).all())


class SamplerScores(LogitsProcessor):
    """Records, inside one ``generate`` call, what scoring would compute again: each drawn token's log-probability
    under softmax(logits / temperature) and the trunk's final hidden state before it (the value head's input).

    Step n of ``generate`` runs the policy on the newest position and hands its next-token logits to the logits
    processors, this one first (transformers puts custom processors before the temperature and the top-k/top-p
    warpers, so it sees the raw logits, as scoring does); the token drawn from them arrives as the last column of
    ``input_ids`` at step n + 1, or of ``sequences`` after the last step. These are the very numbers the draw came
    from, in float32; a forward over the finished rows gives the same up to float rounding (decoding one position
    at a time against a cache adds in another order), which the ratio = 1 check of the first minibatch bounds.
    """

    def __init__(self, lm, temperature: float):
        self.temperature, self.logprobs, self.hidden, self.pending = temperature, [], [], None
        self.handle = lm.base_model.register_forward_hook(self._trunk_output)

    def close(self) -> None:
        """Take the hook off the trunk (``PromptCache.recording`` does, when the generate call ends)."""
        self.handle.remove()

    def _trunk_output(self, module, args, output) -> None:
        self.hidden.append(output.last_hidden_state[:, -1].clone())  # (b, H), after the final norm

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        if self.pending is not None:
            self._take(input_ids[:, -1])
        self.pending = scores
        return scores

    def _take(self, tokens: torch.Tensor) -> None:
        lp = logprobs_from_logits(self.pending[:, None], tokens[:, None].to(self.pending.device), self.temperature)
        self.logprobs.append(lp[:, 0])
        self.pending = None

    def finish(self, sequences: torch.Tensor) -> Recorded | None:
        """After the generate call: its record, or None if the steps and the forwards do not pair up."""
        if self.pending is not None:
            self._take(sequences[:, -1])
        if not self.logprobs or len(self.hidden) != len(self.logprobs):
            return None
        n = len(self.logprobs)
        tokens = sequences[:, sequences.shape[1] - n :]
        return Recorded(tokens, torch.stack(self.logprobs, 1), torch.stack(self.hidden, 1), self.temperature)


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
