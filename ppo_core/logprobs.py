"""Chapter 01 - from logits to the log-probabilities PPO needs.

A causal LM's output at position t is a distribution over the token at position t+1. For a batch of
prompts (left-padded to P tokens) followed by T response tokens, the outputs that score the response
are the ones at positions P-1 .. P+T-2::

    position      0    1   ...  P-1   P    ...  P+T-2  P+T-1
    input        p0   p1   ...  p_P-1 r0   ...  r_T-2  r_T-1
    output       ->p1 ->p2 ...  ->r0  ->r1 ...  ->r_T-1 (unused: predicts past the end)
                                 ^------ response_logits: [P-1 : P+T-1] ------^

The same slice applies to per-token values: ``values[:, P-1]`` is the value of the state "whole
prompt seen, no response token yet", the state in which r0 is chosen.
"""

import torch

__all__ = ["logprobs_from_logits", "response_slice", "response_logits", "entropy_from_logits"]


def _scaled_float(logits: torch.Tensor, temperature: float) -> torch.Tensor:
    """``logits / temperature`` in at least float32 (bf16/fp16 lose too much in a log-softmax)."""
    if temperature <= 0:
        raise ValueError(
            f"temperature must be > 0, got {temperature}; use a small positive value for near-greedy sampling"
        )
    dtype = torch.promote_types(logits.dtype, torch.float32)
    return logits.to(dtype) / temperature


CHUNK_BYTES = 64 * 2**20
"""The float32 logits that ``logprobs_from_logits`` and ``entropy_from_logits`` take at a time: the whole batch of
a small vocabulary, one sequence (or a few) of a real one."""


def logprobs_from_logits(logits: torch.Tensor, tokens: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """log pi(token | context) under the distribution that sampled it, softmax(logits / temperature).

    Args:
        logits: (B, T, V) next-token logits, already aligned with ``tokens`` (see ``response_logits``).
        tokens: (B, T) token ids whose log-probabilities we want.
        temperature: the sampling temperature; PPO's logprobs must come from the same distribution.

    Returns:
        (B, T) log-probabilities, float32 (float64 if the logits are float64).

    A few sequences at a time (``CHUNK_BYTES``): the float32 log-softmax of a whole batch is B * T * V * 4
    bytes, 2.3 GiB for 16 x 256 tokens of Qwen2.5's 151,936-token vocabulary. Each row's numbers are the
    same whatever the chunk; ``benchmarks/memory.py --logprobs`` measures the memory.
    """
    if tokens.shape != logits.shape[:-1]:
        raise ValueError(
            f"tokens {tuple(tokens.shape)} must have the logits' shape without the vocabulary, "
            f"{tuple(logits.shape[:-1])}: align the logits with response_logits(logits, P, T) first"
        )
    if logits.dim() < 2:  # a single position: (V,) logits, one token id
        return logprobs_from_logits(logits[None], tokens[None], temperature)[0]
    rows, out = _rows_per_chunk(logits), []
    for chunk, chunk_tokens in zip(logits.split(rows), tokens.split(rows)):  # (b, T, V), (b, T)
        z = _scaled_float(chunk, temperature)
        # log_softmax subtracts the max before exponentiating: stable for logits x 100.
        logp = torch.log_softmax(z, dim=-1)  # (b, T, V)
        out.append(logp.gather(-1, chunk_tokens.long().unsqueeze(-1)).squeeze(-1))  # (b, T)
        del z, logp  # before the next chunk allocates its own: one chunk's copies at a time, not two
    return torch.cat(out)  # (B, T)


def _rows_per_chunk(logits: torch.Tensor) -> int:
    """How many rows (along dim 0) of ``logits`` make ``CHUNK_BYTES`` in float32; at least one."""
    return max(1, CHUNK_BYTES // (4 * max(1, logits.shape[1:].numel())))


def response_slice(prompt_len: int, response_len: int) -> slice:
    """The positions whose outputs predict the T response tokens: ``[P-1 : P+T-1]``."""
    return slice(prompt_len - 1, prompt_len + response_len - 1)


def response_logits(logits: torch.Tensor, prompt_len: int, response_len: int) -> torch.Tensor:
    """The outputs that predict the response tokens: ``logits[:, P-1 : P+T-1]``.

    Works for (B, P+T, V) logits and for (B, P+T) per-token values alike.
    """
    if prompt_len < 1:
        raise ValueError(
            f"prompt_len must be >= 1 (the first response token is predicted by the last prompt token), got "
            f"{prompt_len}"
        )
    if prompt_len + response_len > logits.shape[1]:
        raise ValueError(
            f"prompt_len + response_len = {prompt_len + response_len} exceeds the sequence length {logits.shape[1]}"
        )
    return logits[:, response_slice(prompt_len, response_len)]


def entropy_from_logits(logits: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """Entropy of the full next-token distribution softmax(logits / temperature), per position.

    H = -sum_v p_v log p_v = logsumexp(z) - sum_v p_v z_v, which never evaluates log 0; tokens with
    p = 0 (e.g. logits set to -inf by a filter) contribute 0, not 0 * -inf. (B, T, V) -> (B, T).
    A few sequences at a time, as ``logprobs_from_logits`` (it takes three float32 copies of what it reads).
    """
    if logits.dim() < 2:  # a single position
        return entropy_from_logits(logits[None], temperature)[0]
    out = []
    for chunk in logits.split(_rows_per_chunk(logits)):  # (b, T, V)
        z = _scaled_float(chunk, temperature)
        p = torch.softmax(z, dim=-1)
        pz = torch.where(p > 0, p * z, torch.zeros((), dtype=z.dtype))
        out.append(torch.logsumexp(z, dim=-1) - pz.sum(dim=-1))  # (b, T)
        del z, p, pz  # before the next chunk allocates its own: one chunk's copies at a time, not two
    return torch.cat(out)  # (B, T)
