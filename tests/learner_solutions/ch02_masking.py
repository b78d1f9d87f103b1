"""Second solutions for chapter 02: statistics by boolean indexing in float64; the mask by a loop over tokens."""

import torch


def masked_whiten(x, mask, shift_mean=True, eps=1e-8):
    # the batch statistics from the selected entries, in float64
    m = mask.to(torch.bool)
    xd = x.to(torch.float64)
    chosen = xd[m]
    n = chosen.numel()
    mean = chosen.sum() / max(n, 1)
    var = ((chosen - mean) ** 2).sum() / (n - 1) if n > 1 else torch.zeros((), dtype=torch.float64)
    out = (xd - mean) / torch.sqrt(var + eps)
    if not shift_mean:
        out = out + mean
    return out.masked_fill(~m, 0.0).to(x.dtype)


def response_mask(response_ids, eos_token_id, pad_token_id):
    # walk each row: count tokens until the first EOS (included), skip padding
    n_rows, n_tokens = response_ids.shape
    keep = torch.zeros(n_rows, n_tokens, dtype=torch.bool)
    for b in range(n_rows):
        for t in range(n_tokens):
            token = int(response_ids[b, t])
            if token == eos_token_id:
                keep[b, t] = True
                break
            keep[b, t] = token != pad_token_id
    return keep
