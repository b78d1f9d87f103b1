"""Chapter 05 - rollouts: sample responses, then score them with one forward pass per model.

    prompts (left-padded, P tokens) --generate--> responses (T tokens, stop at EOS)
    prompt + response --actor forward--> old logprobs, values        (B, T) each
    prompt + response --reference forward--> reference logprobs      (B, T)

All three come from forward passes with position ids from the attention mask and at the sampling
temperature, so that the training forward reproduces them exactly (ratio = 1 before the first update).

A ``Rollout`` is plain data: tensors, the decoded responses and, once the trainer has scored them,
their task scores. (``fastpaths.py`` can let ``score`` take the policy's numbers from what ``generate``
computed; that record travels beside the rollout, never inside it.)
"""

import contextlib
import warnings
from dataclasses import dataclass, field, fields, replace

import torch
from transformers import GenerationConfig

from .fastpaths import PromptCache, cat_values
from .logprobs import logprobs_from_logits, response_slice
from .masking import response_mask
from .model import lm_logits, position_ids_from_mask
from .precision import autocast
from .sampler import apply_sampling_mask

__all__ = [
    "Rollout",
    "tokenize_prompts",
    "sample",
    "score",
    "sampling_config",
    "complete",
    "stop_token_ids",
    "ended_with_eos",
    "monte_carlo_values",
]


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
    behaviour_logprobs: torch.Tensor | None = None  # (B, T) the sampler's own, from generate's scores (chapter 09)
    sampling_mask: torch.Tensor | None = None  # (B, T, V) bool: the tokens top-k/top-p let the sampler draw (ch. 09)

    @property
    def keep(self) -> slice:
        """The positions whose outputs predict the response tokens: [P-1 : P+T-1]."""
        return response_slice(self.prompt_len, self.response_ids.shape[1])

    def select(self, idx: torch.Tensor) -> "Rollout":
        """The rows ``idx`` (a 1-d index tensor), completions included."""
        picked = {f.name: getattr(self, f.name) for f in fields(self)}
        for name, v in picked.items():
            if torch.is_tensor(v) and v.dim() > 0:
                picked[name] = v[idx.to(v.device)]
        picked["completions"] = [self.completions[i] for i in idx.tolist()] if self.completions else []
        return replace(self, **picked)

    def padded(self, P: int, T: int, pad_id: int) -> dict:
        """The (B, P + T) and (B, T, ...) tensors with the prompt left-padded to ``P`` and the response right-padded
        to ``T``: pad ids in the ids, 0 (False) elsewhere, positions no mask counts and nothing attends to. A field
        that is None stays None; ``scores`` (B,) as they are."""
        dp, dt = P - self.prompt_len, T - self.response_ids.shape[1]
        out = {}
        for f in fields(self):
            v = getattr(self, f.name)
            if not (torch.is_tensor(v) and v.dim() >= 2):
                if f.name == "scores" or (v is None and f.name not in ("completions",)):
                    out[f.name] = v
                continue
            fill = pad_id if f.name in ("input_ids", "response_ids") else 0
            if v.shape[1] == self.prompt_len + self.response_ids.shape[1]:  # (B, P + T)
                v = torch.nn.functional.pad(v, (dp, dt), value=fill)
            else:  # (B, T) or (B, T, F)
                v = torch.nn.functional.pad(v, (0, 0) * (v.dim() - 2) + (0, dt), value=fill)
            out[f.name] = v
        return out

    @staticmethod
    def concat(rollouts: list, pad_id: int) -> "Rollout":
        """Rollouts of different prompt and response lengths as one, each padded to the longest (``padded``)."""
        if len(rollouts) == 1:
            return rollouts[0]
        P = max(r.prompt_len for r in rollouts)
        T = max(r.response_ids.shape[1] for r in rollouts)
        parts = [r.padded(P, T, pad_id) for r in rollouts]
        joined = {k: None if parts[0][k] is None else torch.cat([p[k] for p in parts]) for k in parts[0]}
        return replace(rollouts[0], **joined, prompt_len=P, completions=[c for r in rollouts for c in r.completions])

    def ended_with_eos(self, stop_ids) -> torch.Tensor:
        """(B,) bool: the response holds one of ``stop_ids`` on a counted token (``ended_with_eos``)."""
        return ended_with_eos(self.response_ids, self.mask, stop_ids)


def ended_with_eos(response_ids: torch.Tensor, mask: torch.Tensor, stop_ids) -> torch.Tensor:
    """(B, T) ids and mask -> (B,) bool: the response holds one of ``stop_ids`` on a counted token."""
    stops = torch.as_tensor(list(stop_ids), device=response_ids.device)
    return (torch.isin(response_ids, stops) & mask.to(torch.bool)).any(dim=1)


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


def sampling_config(
    tokenizer, max_new_tokens: int, temperature: float | None, stop_ids=None, top_k: int = 0, top_p: float = 1.0
) -> GenerationConfig:
    """Plain ancestral sampling from softmax(logits / temperature): no top-k, top-p, penalties or bans.

    Every field that changes which token is drawn is set, to its neutral value, because ``generate``
    fills each field left unset from the model's own ``generation_config`` (transformers 5,
    ``_prepare_generation_config``), and chat models ship top-k, top-p, a temperature and a repetition
    penalty there. PPO's logprobs must be those of the distribution that really sampled. ``sample``
    also hides the model's own config during the call (``_own_generation_config``).
    ``temperature=None`` means greedy decoding (for evaluation). ``stop_ids``: every EOS id
    (``stop_token_ids``); default the tokenizer's one. ``top_k``/``top_p``: a truncated sampler on purpose
    (chapter 09's mismatch; the trainer still scores the full softmax).
    """
    greedy = temperature is None

    def warper(neutral):  # the warpers act only when sampling; greedy leaves them unset (no warnings)
        return None if greedy else neutral

    return GenerationConfig(
        do_sample=not greedy,
        temperature=warper(temperature),
        top_k=warper(top_k),
        top_p=warper(top_p),
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
    dtype: torch.dtype | None = None,
    behaviour: bool = False,
    top_k: int = 0,
    top_p: float = 1.0,
    keep_sampling_mask: bool = False,
    prompt_past: list | None = None,
) -> Rollout:
    """Generate one response per prompt (``temperature=None``: greedy). Returns a Rollout without scores.

    The draw depends on the arguments only, never on ``lm.generation_config`` (see ``sampling_config``);
    a response ends at the first of ``stop_token_ids`` (the model's EOS ids and the tokenizer's).
    ``batch_size``: prompts per ``generate`` call (0: all at once). ``prompt_cache``: a
    ``fastpaths.PromptCache`` that keeps generate's key/value caches and the logprobs and hidden states it
    computed, for ``score`` (None: keep none; it keeps them for float32 compute only). ``dtype``: the
    compute dtype (bf16/fp16 run ``generate`` under autocast; None or float32: as the weights are).
    ``behaviour``: also keep the sampler's logprob of each token, log softmax of generate's scores (logits /
    temperature after top-k/top-p), chapter 09; it holds the (b, T, V) scores of one generate call.
    ``top_k``, ``top_p``: see ``sampling_config``.
    ``keep_sampling_mask``: also keep which tokens top-k/top-p left drawable, (B, T, V) bool (True off the mask).
    ``prompt_past``: the prompts' keys and values from an earlier draw from the same prompts and weights, one cache
    per generate call (``fastpaths.PromptCache.prompt_caches``): generate then runs only the last prompt token before
    drawing, instead of the whole prompt again (the same numbers up to float rounding).
    """
    device = next(lm.parameters()).device
    ids, attn = tokenize_prompts(tokenizer, prompts, max_prompt_len, device)  # (B, P)
    P = ids.shape[1]
    stops = stop_token_ids(lm, tokenizer)
    gen_cfg = sampling_config(tokenizer, max_new_tokens, temperature, stops, top_k, top_p)
    gen_cfg.return_dict_in_generate = True
    gen_cfg.output_scores = behaviour or keep_sampling_mask
    chunks, beh, kept = [], [], []
    step = batch_size or len(prompts)
    with autocast(device, dtype), _own_generation_config(lm, gen_cfg):
        for i in range(0, len(prompts), step):
            past = {} if prompt_past is None else {"past_key_values": prompt_past[i // step]}
            record = contextlib.nullcontext() if prompt_cache is None else prompt_cache.recording(lm, temperature)
            with record as processors:
                out = lm.generate(input_ids=ids[i : i + step], attention_mask=attn[i : i + step],
                                  generation_config=gen_cfg, logits_processor=processors, **past)  # fmt: skip
            chunks.append(out.sequences[:, P:])  # (b, T_i) generate pads finished rows with pad_token_id
            if behaviour:  # the sampler's logprob of each drawn token, (b, T_i)
                scores = torch.stack(out.scores, dim=1).float()  # (b, T_i, V)
                beh.append(torch.log_softmax(scores, -1).gather(-1, chunks[-1].unsqueeze(-1)).squeeze(-1))
            if keep_sampling_mask:  # the warpers set the logits outside the nucleus to -inf
                kept.append(torch.isfinite(torch.stack(out.scores, dim=1)))  # (b, T_i, V)
            if prompt_cache is not None:
                prompt_cache.keep(lm, i, out)
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
    if behaviour:  # a row's tokens after its EOS have -inf scores: 0 there (off the mask)
        width = max(b.shape[1] for b in beh)
        beh = torch.cat([torch.nn.functional.pad(b, (0, width - b.shape[1])) for b in beh])[:, :T]
        beh = torch.where(mask, beh, 0.0)
    if keep_sampling_mask:  # every token drawable off the response mask: no all -inf row anywhere
        width = max(k.shape[1] for k in kept)
        kept = torch.cat([torch.nn.functional.pad(k, (0, 0, 0, width - k.shape[1])) for k in kept])[:, :T]
        kept = kept | ~mask.unsqueeze(-1)
    return Rollout(
        input_ids=torch.cat([ids, response], dim=1),
        attention_mask=torch.cat([attn, mask.long()], dim=1),
        prompt_len=P,
        response_ids=response,
        mask=mask,
        completions=completions,
        behaviour_logprobs=beh if behaviour else None,
        sampling_mask=kept if keep_sampling_mask else None,
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
    dtype: torch.dtype | None = None,
    also_greedy: bool = False,
) -> list[str] | tuple[list[str], list[str]]:
    """The decoded response to each prompt (``temperature=None``: greedy), ``batch_size`` prompts per ``sample``.

    For evaluation: runs in eval mode (restored after), and with a ``seed`` inside a forked RNG, so it
    is reproducible and leaves the run's randomness where it was. The fork saves and restores the CPU
    generator and, for a model on a GPU, that GPU's generator, and only those two are seeded
    (``torch.manual_seed`` would reseed every GPU, which a CPU-only fork would not restore).
    ``dtype``: the compute dtype, as in ``sample``. ``also_greedy``: return ``(texts, greedy texts)``, the greedy
    draw of each batch reusing the first draw's prompt keys and values (float32 compute; otherwise it runs the prompts
    again); greedy draws use no randomness, so the first draw's texts are those of a call without it.
    """
    was_training, texts, greedy = lm.training, [], []
    lm.eval()
    device = next(lm.parameters()).device
    gpus = [device.index if device.index is not None else torch.cuda.current_device()] if device.type == "cuda" else []
    with torch.random.fork_rng(devices=gpus, enabled=seed is not None):
        if seed is not None:
            torch.default_generator.manual_seed(seed)
            if gpus:
                with torch.cuda.device(gpus[0]):
                    torch.cuda.manual_seed(seed)  # the model's GPU only
        for i in range(0, len(prompts), batch_size):
            chunk = prompts[i : i + batch_size]
            cache = PromptCache(scores=False) if also_greedy else None  # for the prompts' keys and values
            ro = sample(
                lm, tokenizer, chunk, max_new_tokens, temperature, max_prompt_len, prompt_cache=cache, dtype=dtype
            )
            texts += ro.completions
            if also_greedy:
                past = cache.prompt_caches(ro.prompt_len)
                greedy += sample(lm, tokenizer, chunk, max_new_tokens, None, max_prompt_len, dtype=dtype,
                                 prompt_past=past).completions  # fmt: skip
    lm.train(was_training)
    return (texts, greedy) if also_greedy else texts


@torch.inference_mode()
def score(actor, ref_lm, ro: Rollout, temperature: float, batch_size: int, prompt_cache=None) -> Rollout:
    """Fill in the old logprobs and values (actor) and the reference logprobs, in chunks of ``batch_size``.

    ``prompt_cache``: the ``fastpaths.PromptCache`` that ``sample`` filled: the old logprobs and the shared head's
    values it recorded while sampling, or else a forward that reuses the prompt's keys and values (same numbers
    up to float rounding). None: full forwards.
    ``ro.sampling_mask`` (chapter 09's Keep Sampling Mask): pi_old is scored on the sampler's top-k/top-p support.
    """
    keep_mask = ro.sampling_mask is not None
    cached = prompt_cache.actor_scores(actor, ro, temperature) if prompt_cache is not None and not keep_mask else None
    logprobs, values, ref_logprobs = [], [], []
    for i in range(0, ro.input_ids.shape[0], batch_size):
        ids, attn = ro.input_ids[i : i + batch_size], ro.attention_mask[i : i + batch_size]
        tokens = ro.response_ids[i : i + batch_size]
        pos = position_ids_from_mask(attn)
        if cached is None:
            logits, v = actor(ids, attn, pos, keep=ro.keep)  # (b, T, V), (b, T)
            if keep_mask:
                logits = apply_sampling_mask(logits, ro.sampling_mask[i : i + batch_size])
            logprobs.append(logprobs_from_logits(logits, tokens, temperature))
            values.append(v)
        ref_logits, _ = lm_logits(ref_lm, ids, attn, pos, keep=ro.keep)
        ref_logprobs.append(logprobs_from_logits(ref_logits, tokens, temperature))
    if cached is None:
        cached = torch.cat(logprobs), cat_values(values)
    ro.logprobs, ro.values = cached
    ro.ref_logprobs = torch.cat(ref_logprobs)
    return ro


@torch.inference_mode()
def monte_carlo_values(lm, tokenizer, prompts: list[str], ro: Rollout, score_fn, k: int = 16,
                       temperature: float = 1.0) -> torch.Tensor:  # fmt: skip
    """The best any critic can do, estimated by sampling: V*(s_t) = E[score | prompt, response[:t]].

    For every prefix of every response of ``ro`` (the state before response token t), sample ``k``
    continuations of at most T - t tokens from ``lm`` at ``temperature`` and average
    ``score_fn(b, full_completion)`` over them. Returns (B, T), 0 off the mask. The KL part of the
    return is left out. Cost: k * (sum of the response lengths) short generations; each prompt + prefix is
    run through ``lm`` once, and its keys and values are shared by its k continuations.
    """
    B, T = ro.mask.shape
    lengths = ro.mask.sum(1).tolist()
    v = torch.zeros(B, T)
    device = next(lm.parameters()).device
    for t in range(T):
        rows = [b for b in range(B) if lengths[b] > t]
        prefixes = [tokenizer.decode(ro.response_ids[b, :t], skip_special_tokens=True) for b in rows]
        starts = [prompts[b] + pre for b, pre in zip(rows, prefixes)]
        ids, attn = tokenize_prompts(tokenizer, starts, 10**6, device)  # (rows, P), as ``sample`` pads them
        past = None
        if ids.shape[1] > 1:  # all but the last token, which generate runs itself: once per start, then k copies
            attn = attn[:, :-1]
            past = lm(input_ids=ids[:, :-1], attention_mask=attn, position_ids=position_ids_from_mask(attn),
                      use_cache=True, logits_to_keep=1).past_key_values  # fmt: skip
            past.batch_repeat_interleave(k)
        texts = [start for start in starts for _ in range(k)]
        out = sample(lm, tokenizer, texts, T - t, temperature, max_prompt_len=10**6,
                     prompt_past=None if past is None else [past])  # fmt: skip
        pairs = [(b, pre) for b, pre in zip(rows, prefixes) for _ in range(k)]
        scores = torch.tensor([float(score_fn(b, pre + c)) for (b, pre), c in zip(pairs, out.completions)])
        v[rows, t] = scores.view(len(rows), k).mean(1)
    return v
