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


def logprobs_from_logits(logits: torch.Tensor, tokens: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """log pi(token | context) under the distribution that sampled it, softmax(logits / temperature).

    Args:
        logits: (B, T, V) next-token logits, already aligned with ``tokens`` (see ``response_logits``).
        tokens: (B, T) token ids whose log-probabilities we want.
        temperature: the sampling temperature; PPO's logprobs must come from the same distribution.

    Returns:
        (B, T) log-probabilities, float32 (float64 if the logits are float64).
    """
    z = _scaled_float(logits, temperature)  # (B, T, V)
    # log_softmax subtracts the max before exponentiating: stable for logits x 100.
    logp = torch.log_softmax(z, dim=-1)  # (B, T, V)
    return logp.gather(-1, tokens.long().unsqueeze(-1)).squeeze(-1)  # (B, T)


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
    """
    z = _scaled_float(logits, temperature)  # (B, T, V)
    p = torch.softmax(z, dim=-1)
    pz = torch.where(p > 0, p * z, torch.zeros((), dtype=z.dtype))
    return torch.logsumexp(z, dim=-1) - pz.sum(dim=-1)  # (B, T)
