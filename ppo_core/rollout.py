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
tiny model: within 1e-6 nats in float32, against a ratio-check tolerance of 1e-4). We use it for
float32 compute only (the compute dtype, ``run.precision.compute_dtype``: float32 weights under bf16
autocast count as bf16): on a GPU a cached prefix and a full forward run different kernels, whose
bf16 roundings we could not measure (on a CPU they agreed exactly), and the ratio = 1 check must not
depend on luck; bf16 or fp16 compute gets the full forward. The reference model has other weights
and always runs in full.
"""

import contextlib
import warnings
from dataclasses import dataclass, field

import torch
from transformers import DynamicCache, GenerationConfig

from .logprobs import logprobs_from_logits
from .masking import response_mask
from .model import lm_logits, position_ids_from_mask
from .run.precision import autocast, compute_dtype

__all__ = ["Rollout", "tokenize_prompts", "sample", "score", "sampling_config", "stop_token_ids"]


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
    values: torch.Tensor | None = None  # (B, T) old values
    ref_logprobs: torch.Tensor | None = None  # (B, T) frozen reference
    # generate's caches, [(first row, cache)] per generation chunk, and the LM that made them (float32 compute);
    # score() uses and then drops them
    caches: list | None = field(default=None, repr=False)
    cache_lm: torch.nn.Module | None = field(default=None, repr=False)

    @property
    def keep(self) -> slice:
        """The positions whose outputs predict the response tokens: [P-1 : P+T-1]."""
        T = self.response_ids.shape[1]
        return slice(self.prompt_len - 1, self.prompt_len + T - 1)


def stop_token_ids(lm, tokenizer) -> list[int]:
    """Every id that ends a response: the tokenizer's EOS first, then the model's ``generation_config.eos_token_id``.

    Chat checkpoints stop on more than one token (Qwen2.5-Instruct: ``<|im_end|>`` and ``<|endoftext|>``),
    while their tokenizer names only one; asking the tokenizer alone would let a response run on past
    the second one and count what follows.
    """
    ids = [tokenizer.eos_token_id]
    extra = getattr(getattr(lm, "generation_config", None), "eos_token_id", None)
    ids += extra if isinstance(extra, (list, tuple)) else [extra]
    return list(dict.fromkeys(int(i) for i in ids if i is not None))


def sampling_config(tokenizer, max_new_tokens: int, temperature: float | None, stop_ids=None) -> GenerationConfig:
    """Plain ancestral sampling from softmax(logits / temperature): no top-k, top-p, penalties or bans.

    Every field that changes which token is drawn is set, to its neutral value, because ``generate``
    fills each field left unset from the model's own ``generation_config`` (transformers 5,
    ``_prepare_generation_config``), and chat models ship top-k, top-p, a temperature and a repetition
    penalty there. PPO's logprobs must be those of the distribution that really sampled. ``sample``
    also hides the model's own config during the call (``_own_generation_config``).
    ``temperature=None`` means greedy decoding (for evaluation). ``stop_ids``: every EOS id
    (``stop_token_ids``); default the tokenizer's one.
    """
    greedy = temperature is None

    def warper(neutral):  # the warpers act only when sampling; greedy leaves them unset (no warnings)
        return None if greedy else neutral

    return GenerationConfig(
        do_sample=not greedy,
        temperature=warper(temperature),
        top_k=warper(0),
        top_p=warper(1.0),
        min_p=None,
        typical_p=warper(1.0),
        epsilon_cutoff=warper(0.0),
        eta_cutoff=warper(0.0),
        top_h=None,
        repetition_penalty=1.0,
        encoder_repetition_penalty=1.0,
        no_repeat_ngram_size=0,
        encoder_no_repeat_ngram_size=0,
        length_penalty=1.0,
        bad_words_ids=None,
        sequence_bias=None,
        suppress_tokens=None,
        begin_suppress_tokens=None,
        forced_bos_token_id=None,
        forced_eos_token_id=None,
        exponential_decay_length_penalty=None,
        renormalize_logits=False,
        remove_invalid_values=False,
        guidance_scale=None,
        watermarking_config=None,
        num_beams=1,
        num_return_sequences=1,
        min_length=0,
        min_new_tokens=None,
        max_new_tokens=max_new_tokens,
        stop_strings=None,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=list(stop_ids) if stop_ids else tokenizer.eos_token_id,
        bos_token_id=tokenizer.bos_token_id,
    )


@contextlib.contextmanager
def _own_generation_config(lm, gen_cfg: GenerationConfig):
    """Make ``gen_cfg`` the model's generation config for the call: ``generate`` then has nothing else to merge."""
    saved = lm.generation_config
    lm.generation_config = gen_cfg
    try:
        yield gen_cfg
    finally:
        lm.generation_config = saved


def _adds_bos(tokenizer) -> bool:
    """Whether encoding with ``add_special_tokens=True`` puts a BOS in front."""
    bos = tokenizer.bos_token_id
    return bos is not None and tokenizer("", add_special_tokens=True)["input_ids"][:1] == [bos]


def tokenize_prompts(tokenizer, prompts: list[str], max_prompt_len: int, device) -> tuple[torch.Tensor, torch.Tensor]:
    """Left-padded prompt ids and attention mask, (B, P) each; prompts over the limit lose their start.

    Exactly one BOS, if the tokenizer adds one: a prompt from a chat template that already starts with it
    (Llama 3's does) is not given a second.
    """
    tokenizer.padding_side, tokenizer.truncation_side = "left", "left"
    if _adds_bos(tokenizer):  # a chat template that writes BOS itself: the tokenizer adds it again, so drop one
        bos = tokenizer.bos_token
        prompts = [p[len(bos) :] if p.startswith(bos) else p for p in prompts]
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
    dtype: torch.dtype | None = None,
) -> Rollout:
    """Generate one response per prompt (``temperature=None``: greedy). Returns a Rollout without scores.

    The draw depends on the arguments only, never on ``lm.generation_config`` (see ``sampling_config``);
    a response ends at the first of ``stop_token_ids`` (the model's EOS ids and the tokenizer's).
    ``dtype``: the compute dtype (bf16/fp16 run ``generate`` under autocast; None or float32: as the weights are).
    ``keep_cache``: keep generate's key/value caches in the Rollout for ``score`` (float32 compute only);
    the trainer sets it, callers that never score (evaluation) leave it off and hold no cache.
    """
    device = next(lm.parameters()).device
    ids, attn = tokenize_prompts(tokenizer, prompts, max_prompt_len, device)  # (B, P)
    P = ids.shape[1]
    stops = stop_token_ids(lm, tokenizer)
    gen_cfg = sampling_config(tokenizer, max_new_tokens, temperature, stops)
    gen_cfg.return_dict_in_generate = True
    chunks, caches = [], []
    step = batch_size or len(prompts)
    with autocast(device, dtype), _own_generation_config(lm, gen_cfg):
        keep_cache = keep_cache and compute_dtype(lm) == torch.float32
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
    # counts, even one that happens to be the pad id (pad_token_id=-1 matches nothing). Every stop id
    # is mapped to the first one for the mask.
    stop = torch.isin(response, torch.tensor(stops, device=response.device))
    mask = response_mask(torch.where(stop, stops[0], response), stops[0], pad_token_id=-1)  # (B, T)
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
        values.append(v.float())
    return torch.cat(logprobs), torch.cat(values)


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
            values.append(v.float())
        ref_logits, _ = lm_logits(ref_lm, ids, attn, pos, keep=ro.keep)
        ref_logprobs.append(logprobs_from_logits(ref_logits, tokens, temperature))
    if not reuse:
        ro.logprobs, ro.values = torch.cat(logprobs), torch.cat(values)
    ro.ref_logprobs = torch.cat(ref_logprobs)
    ro.caches = ro.cache_lm = None  # used once; free the memory
    return ro
