"""Chapter 05 - rollouts: sample responses, then score them with one forward pass per model.

    prompts (left-padded, P tokens) --generate--> responses (T tokens, stop at EOS)
    prompt + response --actor forward--> old logprobs, values        (B, T) each
    prompt + response --reference forward--> reference logprobs      (B, T)

All three come from forward passes with position ids from the attention mask and at the sampling
temperature, so that the training forward reproduces them exactly (ratio = 1 before the first update).

A ``Rollout`` is plain data: tensors, the decoded responses and, once the trainer has scored them,
their task scores. (``run/fastpaths.py`` can let ``score`` reuse the prompt's keys and values from
``generate``; that cache travels beside the rollout, never inside it.)
"""

import warnings
from dataclasses import dataclass, field

import torch
from transformers import GenerationConfig

from .logprobs import logprobs_from_logits, response_slice
from .masking import response_mask
from .model import lm_logits, position_ids_from_mask

__all__ = ["Rollout", "tokenize_prompts", "sample", "score", "sampling_config", "complete"]


@dataclass
class Rollout:
    """One batch of experience. Shapes: B sequences, P prompt tokens, T response tokens."""

    input_ids: torch.Tensor  # (B, P + T) prompt then response
    attention_mask: torch.Tensor  # (B, P + T) 1 on real prompt tokens and on counted response tokens
    prompt_len: int  # P
    response_ids: torch.Tensor  # (B, T)
    mask: torch.Tensor  # (B, T) bool response mask
    completions: list = field(default_factory=list)  # decoded responses
    scores: torch.Tensor | None = None  # (B,) task score of each response (the trainer fills it in)
    logprobs: torch.Tensor | None = None  # (B, T) old policy, at the sampling temperature
    values: torch.Tensor | None = None  # (B, T) old values; None for an actor without a value head
    ref_logprobs: torch.Tensor | None = None  # (B, T) frozen reference

    @property
    def keep(self) -> slice:
        """The positions whose outputs predict the response tokens: [P-1 : P+T-1]."""
        return response_slice(self.prompt_len, self.response_ids.shape[1])


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
            f"{n} prompt(s) longer than data.max_prompt_len={max_prompt_len} tokens were truncated from the left",
            stacklevel=2,
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
    prompt_cache=None,
) -> Rollout:
    """Generate one response per prompt (``temperature=None``: greedy). Returns a Rollout without scores.

    ``batch_size``: prompts per ``generate`` call (0: all at once). ``prompt_cache``: a
    ``run.fastpaths.PromptCache`` that keeps generate's key/value caches for ``score`` (None: keep none).
    """
    device = next(lm.parameters()).device
    ids, attn = tokenize_prompts(tokenizer, prompts, max_prompt_len, device)  # (B, P)
    P = ids.shape[1]
    gen_cfg = sampling_config(tokenizer, max_new_tokens, temperature)
    gen_cfg.return_dict_in_generate = True
    chunks = []
    step = batch_size or len(prompts)
    for i in range(0, len(prompts), step):
        out = lm.generate(input_ids=ids[i : i + step], attention_mask=attn[i : i + step], generation_config=gen_cfg)
        chunks.append(out.sequences[:, P:])  # (b, T_i) generate pads finished rows with pad_token_id
        if prompt_cache is not None:
            prompt_cache.keep(lm, i, out)
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
    return Rollout(
        input_ids=torch.cat([ids, response], dim=1),
        attention_mask=torch.cat([attn, mask.long()], dim=1),
        prompt_len=P,
        response_ids=response,
        mask=mask,
        completions=completions,
    )


def complete(
    lm,
    tokenizer,
    prompts: list[str],
    max_new_tokens: int,
    temperature: float | None,
    max_prompt_len: int = 512,
    batch_size: int = 256,
    seed: int | None = None,
) -> list[str]:
    """The decoded response to each prompt (``temperature=None``: greedy), ``batch_size`` prompts per ``sample``.

    For evaluation: runs in eval mode (restored after), and with a ``seed`` inside a forked RNG, so it
    is reproducible and leaves the global RNG where it was.
    """
    was_training, texts = lm.training, []
    lm.eval()
    with torch.random.fork_rng(devices=[], enabled=seed is not None):
        if seed is not None:
            torch.manual_seed(seed)
        for i in range(0, len(prompts), batch_size):
            texts += sample(
                lm, tokenizer, prompts[i : i + batch_size], max_new_tokens, temperature, max_prompt_len
            ).completions
    lm.train(was_training)
    return texts


def _cat_values(values: list) -> torch.Tensor | None:
    """The chunks' values as one float32 (B, T) tensor, or None for an actor without a value head."""
    return None if values[0] is None else torch.cat(values).float()


@torch.inference_mode()
def score(actor, ref_lm, ro: Rollout, temperature: float, batch_size: int, prompt_cache=None) -> Rollout:
    """Fill in the old logprobs and values (actor) and the reference logprobs, in chunks of ``batch_size``.

    ``prompt_cache``: the ``run.fastpaths.PromptCache`` that ``sample`` filled; the actor's forward then
    reuses the prompt's keys and values (same numbers up to float rounding). None: full forwards.
    """
    cached = prompt_cache.actor_scores(actor, ro, temperature) if prompt_cache is not None else None
    logprobs, values, ref_logprobs = [], [], []
    for i in range(0, ro.input_ids.shape[0], batch_size):
        ids, attn = ro.input_ids[i : i + batch_size], ro.attention_mask[i : i + batch_size]
        tokens = ro.response_ids[i : i + batch_size]
        pos = position_ids_from_mask(attn)
        if cached is None:
            logits, v = actor(ids, attn, pos, keep=ro.keep)  # (b, T, V), (b, T)
            logprobs.append(logprobs_from_logits(logits, tokens, temperature))
            values.append(v)
        ref_logits, _ = lm_logits(ref_lm, ids, attn, pos, keep=ro.keep)
        ref_logprobs.append(logprobs_from_logits(ref_logits, tokens, temperature))
    ro.logprobs, ro.values = cached if cached is not None else (torch.cat(logprobs), _cat_values(values))
    ro.ref_logprobs = torch.cat(ref_logprobs)
    return ro
