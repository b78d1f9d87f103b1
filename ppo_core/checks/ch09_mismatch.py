"""Checkers for chapter 09 (the sampler is not the learner): ``check_truncated_weights``, ``check_icepop_weights``.

Each runs the learner's function on small (B, T) cases (ragged masks, a token far off the sampler, junk
and huge log-ratios on padding), compares with ``ppo_core.correction`` and names the typical mistake.
"""

import torch

from ..correction import icepop_weights, importance_weights, truncated_weights
from ._common import CheckFailure, call, checker, expect_close

__all__ = ["check_truncated_weights", "check_icepop_weights"]


def _case(seed: int = 0, B: int = 3, T: int = 5, scale: float = 0.8):
    """old and behaviour logprobs (B, T) and a ragged bool mask; padding holds junk and one huge log-ratio."""
    g = torch.Generator().manual_seed(seed)
    old = -torch.rand(B, T, generator=g) * 2 - 0.05
    beh = old + scale * torch.randn(B, T, generator=g)
    lengths = torch.tensor([T, 2, T - 1][:B])
    mask = torch.arange(T)[None, :] < lengths[:, None]
    old = torch.where(mask, old, 100.0)  # junk off the mask: exp(100) is inf in float32, and inf * 0 is NaN
    return old, beh, mask


def _rho(old, beh, mask):
    return torch.where(mask, torch.exp(old - beh), 0.0)


def _weights(log_r, mask, level, sum_mask=None):
    """exp of the token log-ratios, or of their sum over ``sum_mask`` (default ``mask``) per row; 0 off the mask."""
    summed = torch.where(mask if sum_mask is None else sum_mask, log_r, 0.0)
    if level == "sequence":
        summed = summed.sum(1, keepdim=True).expand_as(log_r)
    return torch.where(mask, summed.exp(), 0.0)


def _truncation_mistakes(old, beh, mask, level, C):
    rho = _rho(old, beh, mask)
    out = {
        "inverted the weight: it is pi_old / mu = exp(old_logprobs - behaviour_logprobs), not mu / pi_old": _weights(
            beh - old, mask, level
        ).clamp(max=C),
        "forgot to truncate: TIS caps the weight at min(rho, threshold)": importance_weights(old, beh, mask, level),
        "clipped from below too: truncated IS caps large weights only, small ones stay (clamp(max=threshold))": (
            torch.where(mask, truncated_weights(old, beh, mask, level).clamp(min=1 / C), 0.0)
        ),
    }
    if level == "sequence":
        log_r = torch.where(mask, old - beh, 0.0)
        geo = (log_r.sum(1, keepdim=True) / mask.sum(1, keepdim=True)).exp().clamp(max=C)
        out["averaged the log-ratios (a geometric mean): a sequence's weight is their sum, exp(sum_t log rho_t)"] = (
            torch.where(mask, geo.expand_as(rho), 0.0)
        )
        per_token = torch.where(mask, rho.clamp(max=C).log(), 0.0).sum(1, keepdim=True).exp()
        out["summed the log-ratios over the padding too: a sequence's weight sums its masked tokens only"] = _weights(
            old - beh, mask, level, torch.ones_like(mask)
        ).clamp(max=C)
        out["truncated each token, then multiplied: the cap is on the product, min(prod_t rho_t, threshold)"] = (
            torch.where(mask, per_token.expand_as(rho), 0.0)
        )
    return out


def _check_truncated_case(fn, old, beh, mask, level, C, case):
    want = truncated_weights(old, beh, mask, level, C)
    got = call(fn, old.clone(), beh.clone(), mask.clone(), level=level, threshold=C)
    if not isinstance(got, torch.Tensor) or got.shape != want.shape:
        shape = tuple(got.shape) if isinstance(got, torch.Tensor) else type(got).__name__
        raise CheckFailure(f"return the (B, T) weights, one per token, got {shape}. Case: {case}")
    if not torch.isfinite(got).all():
        raise CheckFailure(
            "the weights hold NaN or inf: off the mask the log-ratios are junk, and exp(junk) * 0 is NaN once exp "
            "overflows. Select with torch.where(mask, ..., 0.0) and sum only the masked log-ratios. "
            f"Case: {case}\n  got: {got.tolist()}"
        )
    if got[~mask].abs().max() > 0 if (~mask).any() else False:
        raise CheckFailure(f"the weights off the mask must be 0 (those tokens are padding). Case: {case}")
    expect_close(got, want, what="the weights", mistakes=_truncation_mistakes(old, beh, mask, level, C), case=case)


@checker
def check_truncated_weights(fn):
    """Check ``fn(old_logprobs, behaviour_logprobs, mask, level="token", threshold=2.0) -> (B, T)``."""
    old, beh, mask = _case(0)
    for level in ("token", "sequence"):
        _check_truncated_case(fn, old, beh, mask, level, 2.0, f"3 rows of lengths 5, 2, 4, level={level!r}, C=2")
        _check_truncated_case(fn, old, beh, mask, level, 1.2, f"the same rows, level={level!r}, C=1.2")
    old, beh, mask = _case(1, scale=0.3)
    _check_truncated_case(fn, old, old.clone(), mask, "sequence", 2.0, "mu = pi_old: every weight on the mask is 1")


def _icepop_mistakes(old, beh, mask, lo, hi):
    rho = _rho(old, beh, mask)
    inv = torch.where(mask, torch.exp(beh - old), 0.0)
    keep = mask & (rho >= lo) & (rho <= hi)
    return {
        "kept only the upper bound: IcePop's mask is two-sided, tokens with rho < lower go too": torch.where(
            mask & (rho <= hi), rho, 0.0
        ),
        "returned the mask alone: IcePop weights each kept token by rho_t (a mask times the weight)": keep.float(),
        "truncated instead of masking: an outlier's weight is 0, not the bound (no clamp(rho, lower, upper))": (
            torch.where(mask, rho.clamp(lo, hi), 0.0)
        ),
        "inverted the weight: it is pi_old / mu = exp(old_logprobs - behaviour_logprobs)": torch.where(
            mask & (inv >= lo) & (inv <= hi), inv, 0.0
        ),
    }


@checker
def check_icepop_weights(fn):
    """Check ``fn(old_logprobs, behaviour_logprobs, mask, lower=0.5, upper=5.0) -> (B, T)``."""
    for seed, lo, hi in ((2, 0.5, 2.0), (3, 0.8, 1.25), (2, 0.5, 5.0)):
        old, beh, mask = _case(seed, scale=1.0)
        case = f"3 rows of lengths 5, 2, 4, rho in [{lo}, {hi}] kept"
        want = icepop_weights(old, beh, mask, lo, hi)
        got = call(fn, old.clone(), beh.clone(), mask.clone(), lower=lo, upper=hi)
        if not isinstance(got, torch.Tensor) or got.shape != want.shape:
            raise CheckFailure(f"return the (B, T) weights, one per token. Case: {case}")
        if not torch.isfinite(got).all() or ((~mask).any() and got[~mask].abs().max() > 0):
            raise CheckFailure(
                f"the weights must be finite and 0 off the mask: select with torch.where(mask, ..., 0.0). Case: {case}"
            )
        expect_close(got, want, what="the IcePop weights", mistakes=_icepop_mistakes(old, beh, mask, lo, hi), case=case)
