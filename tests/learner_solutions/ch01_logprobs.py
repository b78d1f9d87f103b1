"""Second solutions for chapter 01: a loop over positions, float64 logsumexp; entropy as logsumexp - E[z]."""

import torch


def gather_response_logprobs(logits, response_ids, prompt_len, temperature=1.0):
    # one response position at a time, in float64: log p(y) = z_y - logsumexp(z)
    n_rows, n_tokens = response_ids.shape
    out = torch.empty(n_rows, n_tokens, dtype=torch.float32)
    for t in range(n_tokens):
        z = logits[:, prompt_len - 1 + t, :].to(torch.float64) / temperature  # (B, V): predicts token t
        chosen = z.gather(1, response_ids[:, t : t + 1]).squeeze(1)  # (B,)
        out[:, t] = (chosen - torch.logsumexp(z, dim=-1)).to(torch.float32)
    return out


def compute_entropy(logits, temperature=1.0):
    # H = logsumexp(z) - sum_v p_v z_v, in float64, back to float32
    z = logits.to(torch.float64) / temperature
    p = torch.softmax(z, dim=-1)
    return (torch.logsumexp(z, dim=-1) - (p * z).sum(dim=-1)).to(torch.float32)
