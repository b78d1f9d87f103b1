"""Chapter 02 - which tokens count, and statistics over only those.

Masks are boolean tensors, True where a response token counts. A response counts up to and
including its first EOS; whatever was generated after it (padding, or junk from a batch that kept
generating for other rows) does not.
"""

import torch

__all__ = ["response_mask", "masked_mean", "masked_sum", "masked_var", "masked_whiten"]


def response_mask(response_ids: torch.Tensor, eos_token_id: int, pad_token_id: int) -> torch.Tensor:
    """(B, T) ids -> (B, T) bool: True up to and including the first EOS, False after it and on padding.

    A row without EOS (truncated at the length limit) counts every non-pad token.
    """
    is_eos = response_ids == eos_token_id  # (B, T)
    eos_before = torch.cumsum(is_eos.long(), dim=1) - is_eos.long()  # EOS tokens strictly before t
    not_pad = (response_ids != pad_token_id) | is_eos  # an EOS counts even if pad == EOS
    return (eos_before == 0) & not_pad


def masked_sum(x: torch.Tensor, mask: torch.Tensor, dim=None) -> torch.Tensor:
    """Sum of x over the True entries; masked entries never matter, even NaN or inf."""
    mask = mask.to(torch.bool)
    zeros = torch.zeros((), dtype=x.dtype, device=x.device)
    picked = torch.where(mask, x, zeros)
    return picked.sum() if dim is None else picked.sum(dim=dim)


def masked_mean(x: torch.Tensor, mask: torch.Tensor, dim=None) -> torch.Tensor:
    """Mean of x over the True entries (over ``dim`` if given). An empty selection gives 0."""
    count = mask.to(torch.bool).sum() if dim is None else mask.to(torch.bool).sum(dim=dim)
    return masked_sum(x, mask, dim) / count.clamp(min=1).to(x.dtype)


def masked_var(x: torch.Tensor, mask: torch.Tensor, unbiased: bool = True) -> torch.Tensor:
    """Variance of x over the True entries.

    ``unbiased=True`` applies Bessel's correction n / (n - 1), as ``torch.var`` does by default.
    With a single True entry the corrected variance is undefined; we return the biased value (0).
    """
    mask = mask.to(torch.bool)
    mean = masked_mean(x, mask)
    var = masked_mean((x - mean) ** 2, mask)
    n = mask.sum()
    if unbiased and n > 1:
        var = var * n / (n - 1)
    return var


def masked_whiten(
    x: torch.Tensor, mask: torch.Tensor, shift_mean: bool = True, eps: float = 1e-8, unbiased: bool = True
) -> torch.Tensor:
    """(x - mean) / sqrt(var + eps) over the True entries; masked-out entries come back 0.

    ``shift_mean=False`` adds the mean back: the scale is normalised but the sign of the average
    survives (useful for rewards, where "better than zero" means something).
    """
    mask = mask.to(torch.bool)
    mean, var = masked_mean(x, mask), masked_var(x, mask, unbiased=unbiased)
    whitened = (x - mean) * torch.rsqrt(var + eps)
    if not shift_mean:
        whitened = whitened + mean
    return torch.where(mask, whitened, torch.zeros((), dtype=whitened.dtype, device=whitened.device))
