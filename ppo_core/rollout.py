"""Chapter 05 - rollouts: sample responses, then score them with one forward pass per model.

    prompts (left-padded, P tokens) --generate--> responses (T tokens, stop at EOS)
    prompt + response --actor forward--> old logprobs, values        (B, T) each
    prompt + response --reference forward--> reference logprobs      (B, T)

All three come from forward passes with position ids from the attention mask and at the sampling
temperature, so that the training forward reproduces them exactly (ratio = 1 before the first update).

The prompt's keys and values are computed once. ``generate`` already ran the policy over every
prompt token (the prefill) with the very weights the scoring forward uses, so ``score`` keeps
positions 0..P-2 of generate's cache and runs the actor on the T positions P-1..P+T-2 only (the
ones whose outputs score the response)::

    generate:   [p0 .. p_P-2] p_P-1 r0 .. r_T-2        cache of every position it processed
    score:      [  cached   ] p_P-1 r0 .. r_T-2        -> logits, values at P-1 .. P+T-2

Prompts are most of the tokens (about 75 % in the course's CPU run), so this removes most of the
actor's scoring forward. The result equals a full forward up to float rounding (measured on the
tiny model: within 1e-6 nats in float32, against a ratio-check tolerance of 1e-4). We use it for a
float32 policy only: on a GPU a cached prefix and a full forward run different kernels, whose bf16
roundings we could not measure (on a CPU they agreed exactly), and the ratio = 1 check must not
depend on luck; a bf16 or fp16 policy gets the full forward. The reference model has other weights
and always runs in full.
"""

import warnings
from dataclasses import dataclass, field

import torch
from transformers import DynamicCache, GenerationConfig

from .logprobs import logprobs_from_logits
from .masking import response_mask
from .model import lm_logits, position_ids_from_mask

__all__ = ["Rollout", "tokenize_prompts", "sample", "score", "sampling_config"]


@dataclass
class Rollout:
    """One batch of experience. Shapes: B sequences, P prompt tokens, T response tokens."""

    input_ids: torch.Tensor  # (B, P + T) prompt then response
    attention_mask: torch.Tensor  # (B, P + T) 1 on real prompt tokens and on counted response tokens
    prompt_len: int  # P
    response_ids: torch.Tensor  # (B, T)
    mask: torch.Tensor  # (B, T) bool response mask
    completions: list = field(default_factory=list)  # decoded responses
    logprobs: torch.Tensor | None = None  # (B, T) old policy, at the sampling temperature
    values: torch.Tensor | None = None  # (B, T) old values; None for an actor without a value head
    ref_logprobs: torch.Tensor | None = None  # (B, T) frozen reference
    # generate's caches, [(first row, cache)] per generation chunk, and the LM that made them (float32 only);
    # score() uses and then drops them
    caches: list | None = field(default=None, repr=False)
    cache_lm: torch.nn.Module | None = field(default=None, repr=False)

    @property
    def keep(self) -> slice:
        """The positions whose outputs predict the response tokens: [P-1 : P+T-1]."""
        T = self.response_ids.shape[1]
        return slice(self.prompt_len - 1, self.prompt_len + T - 1)


def sampling_config(tokenizer, max_new_tokens: int, temperature: float | None) -> GenerationConfig:
    """Plain ancestral sampling from softmax(logits / temperature): no top-k, top-p or penalties.

    We replace the model's own generation config (chat models ship top_k / top_p / repetition
    penalties), because PPO's logprobs must be those of the distribution that really sampled.
    ``temperature=None`` means greedy decoding (for evaluation).
    """
    greedy = temperature is None
    return GenerationConfig(
        do_sample=not greedy,
        temperature=None if greedy else temperature,
        top_k=None if greedy else 0,
        top_p=None if greedy else 1.0,
        max_new_tokens=max_new_tokens,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=tokenizer.bos_token_id,
    )


def tokenize_prompts(tokenizer, prompts: list[str], max_prompt_len: int, device) -> tuple[torch.Tensor, torch.Tensor]:
    """Left-padded prompt ids and attention mask, (B, P) each; prompts over the limit lose their start."""
    tokenizer.padding_side, tokenizer.truncation_side = "left", "left"
    enc = tokenizer(prompts, return_tensors="pt", padding=True, add_special_tokens=True)
    if enc["input_ids"].shape[1] > max_prompt_len:
        n = int((enc["attention_mask"].sum(1) > max_prompt_len).sum())
        warnings.warn(
            f"{n} prompt(s) longer than data.max_prompt_len={max_prompt_len} tokens were truncated from the left"
        )
        enc = tokenizer(
            prompts,
            return_tensors="pt",
            padding=True,
            truncation=True,
            max_length=max_prompt_len,
            add_special_tokens=True,
        )
    return enc["input_ids"].to(device), enc["attention_mask"].to(device)


@torch.inference_mode()
def sample(
    lm,
    tokenizer,
    prompts: list[str],
    max_new_tokens: int,
    temperature: float | None,
    max_prompt_len: int = 512,
    batch_size: int = 0,
    keep_cache: bool = False,
) -> Rollout:
    """Generate one response per prompt (``temperature=None``: greedy). Returns a Rollout without scores.

    ``keep_cache``: keep generate's key/value caches in the Rollout for ``score`` (float32 ``lm`` only);
    the trainer sets it, callers that never score (evaluation) leave it off and hold no cache.
    """
    device = next(lm.parameters()).device
    ids, attn = tokenize_prompts(tokenizer, prompts, max_prompt_len, device)  # (B, P)
    P = ids.shape[1]
    gen_cfg = sampling_config(tokenizer, max_new_tokens, temperature)
    gen_cfg.return_dict_in_generate = True
    keep_cache = keep_cache and next(lm.parameters()).dtype == torch.float32
    chunks, caches = [], []
    step = batch_size or len(prompts)
    for i in range(0, len(prompts), step):
        out = lm.generate(input_ids=ids[i : i + step], attention_mask=attn[i : i + step], generation_config=gen_cfg)
        chunks.append(out.sequences[:, P:])  # (b, T_i) generate pads finished rows with pad_token_id
        if keep_cache and isinstance(out.past_key_values, DynamicCache):
            caches.append((i, out.past_key_values))
    T = max(c.shape[1] for c in chunks)
    response = torch.cat(
        [torch.nn.functional.pad(c, (0, T - c.shape[1]), value=tokenizer.pad_token_id) for c in chunks]
    )
    # generate pads a row only after its EOS, so every token up to the first EOS was sampled and
    # counts, even one that happens to be the pad id (pad_token_id=-1 matches nothing).
    mask = response_mask(response, tokenizer.eos_token_id, pad_token_id=-1)  # (B, T)
    T = int(mask.any(0).nonzero().max()) + 1 if mask.any() else 1  # drop columns no row uses
    response, mask = response[:, :T], mask[:, :T]
    completions = tokenizer.batch_decode(torch.where(mask, response, tokenizer.pad_token_id), skip_special_tokens=True)
    every_chunk = len(caches) == len(chunks)
    return Rollout(
        input_ids=torch.cat([ids, response], dim=1),
        attention_mask=torch.cat([attn, mask.long()], dim=1),
        prompt_len=P,
        response_ids=response,
        mask=mask,
        completions=completions,
        caches=caches if every_chunk else None,
        cache_lm=lm if every_chunk else None,
    )


def _actor_from_cache(actor, ro: Rollout, temperature: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Old logprobs and values (B, T) from generate's caches: the actor runs on positions P-1..P+T-2 only."""
    P, T = ro.prompt_len, ro.response_ids.shape[1]
    bounds = [start for start, _ in ro.caches[1:]] + [ro.input_ids.shape[0]]
    logprobs, values = [], []
    for (start, cache), end in zip(ro.caches, bounds):
        cache.crop(-(cache.get_seq_length() - (P - 1)))  # keep positions 0..P-2: the prompt but its last token
        ids = torch.cat([ro.input_ids[start:end, P - 1 : P], ro.response_ids[start:end, :-1]], dim=1)  # (b, T)
        attn = ro.attention_mask[start:end, : P + T - 1]  # (b, P+T-1): cached positions and these T
        pos = position_ids_from_mask(attn)[:, P - 1 :]  # (b, T)
        logits, v = actor(ids, attn, pos, past_key_values=cache)  # (b, T, V), (b, T)
        logprobs.append(logprobs_from_logits(logits, ro.response_ids[start:end], temperature))
        values.append(v)
    return torch.cat(logprobs), _cat_values(values)


def _cat_values(values: list) -> torch.Tensor | None:
    """The chunks' values as one float32 (B, T) tensor, or None for an actor without a value head."""
    return None if values[0] is None else torch.cat(values).float()


@torch.inference_mode()
def score(actor, ref_lm, ro: Rollout, temperature: float, batch_size: int) -> Rollout:
    """Fill in the old logprobs and values (actor) and the reference logprobs, in chunks of ``batch_size``.

    If ``ro`` holds the caches of the generate call that sampled it with ``actor.lm`` (and the
    actor has not changed since), the actor's forward reuses the prompt's keys and values.
    """
    reuse = ro.caches is not None and ro.cache_lm is actor.lm
    if reuse:
        ro.logprobs, ro.values = _actor_from_cache(actor, ro, temperature)
    logprobs, values, ref_logprobs = [], [], []
    for i in range(0, ro.input_ids.shape[0], batch_size):
        ids, attn = ro.input_ids[i : i + batch_size], ro.attention_mask[i : i + batch_size]
        tokens = ro.response_ids[i : i + batch_size]
        pos = position_ids_from_mask(attn)
        if not reuse:
            logits, v = actor(ids, attn, pos, keep=ro.keep)  # (b, T, V), (b, T)
            logprobs.append(logprobs_from_logits(logits, tokens, temperature))
            values.append(v)
        ref_logits, _ = lm_logits(ref_lm, ids, attn, pos, keep=ro.keep)
        ref_logprobs.append(logprobs_from_logits(ref_logits, tokens, temperature))
    if not reuse:
        ro.logprobs, ro.values = torch.cat(logprobs), _cat_values(values)
    ro.ref_logprobs = torch.cat(ref_logprobs)
    ro.caches = ro.cache_lm = None  # used once; free the memory
    return ro
