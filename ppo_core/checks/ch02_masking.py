"""Checkers for chapter 02 (masking): ``check_masked_whiten`` and ``check_response_mask``.

Each checker runs the learner's function on tiny hand-made batches, compares with the package
(``ppo_core.masking``) and, when the answer is wrong, names the typical mistake whose output matches.
"""

import itertools

import torch

from ..masking import masked_whiten, response_mask
from ._common import CheckFailure, call, checker, expect_close

__all__ = ["check_masked_whiten", "check_response_mask"]


# --------------------------------------------------------------------------- masked_whiten

_NAN_POISON = (
    "used x * mask (or the like) to hide the masked entries: NaN * 0 = NaN, so a NaN sitting in a masked "
    "position poisons the mean and the variance. Select instead: torch.where(mask, x, 0) or x[mask]"
)
_FORGOT_EPS = (
    "forgot eps: a constant input has variance 0, so (x - mean) / sqrt(var) is 0 / 0 = NaN. Divide by sqrt(var + eps)"
)


def _whiten_variant(x, mask, *, stats="mask", unbiased=True, zero=True, shift="sub", eps_mode="in", eps=1e-8):
    """One way of whitening, right or wrong; every argument names a design choice a learner can get wrong."""
    x64, mask = x.to(torch.float64), mask.to(torch.bool)
    if stats == "row":  # statistics per row instead of over the batch
        sel = mask
        n = sel.sum(dim=-1, keepdim=True).clamp(min=1)
        mean = torch.where(sel, x64, 0.0).sum(dim=-1, keepdim=True) / n
        sq = torch.where(sel, (x64 - mean) ** 2, 0.0).sum(dim=-1, keepdim=True)
    else:
        sel = mask if stats == "mask" else torch.ones_like(mask)
        n = sel.sum().clamp(min=1)
        mean = torch.where(sel, x64, 0.0).sum() / n
        sq = torch.where(sel, (x64 - mean) ** 2, 0.0).sum()
    var = sq / (n - 1).clamp(min=1) if unbiased else sq / n
    scale = torch.sqrt(var + eps) if eps_mode == "in" else torch.sqrt(var) + eps
    if shift == "sub":
        out = (x64 - mean) / scale
    elif shift == "add":
        out = (x64 - mean) / scale + mean
    else:  # "none": never centred
        out = x64 / scale
    if zero:
        out = torch.where(mask, out, 0.0)
    return out.to(x.dtype)


def _whiten_mistakes(x, mask, shift_mean=True, eps=1e-8):
    """{description: output} for single mistakes and their combinations, simplest first."""
    right_shift = "sub" if shift_mean else "add"
    shift_desc = {
        (True, "add"): "added the mean back although shift_mean=True",
        (True, "none"): "forgot to subtract the mean",
        (
            False,
            "sub",
        ): "ignored shift_mean=False (the mean must be added back after scaling, so the output keeps the input's mean)",
        (
            False,
            "none",
        ): "divided x by the std without centring it (shift_mean=False means (x - mean) / std + mean, not x / std)",
    }
    options = {
        "stats": {
            "mask": None,
            "all": "forgot the mask (the mean and variance were taken over all entries, padding included)",
            "row": "whitened each row separately (the statistics are over all True entries of the batch)",
        },
        "unbiased": {
            True: None,
            False: "used the biased variance (divide by n) instead of the Bessel-corrected one (divide by n - 1)",
        },
        "zero": {True: None, False: "left the masked entries non-zero (they must come back 0)"},
        "shift": {s: (None if s == right_shift else shift_desc[(shift_mean, s)]) for s in ("sub", "add", "none")},
        "eps_mode": {
            "in": None,
            "out": "put eps outside the sqrt ((x - mean) / (std + eps)) or left it out; it belongs inside: "
            "sqrt(var + eps)",
        },
    }
    variants = []
    for combo in itertools.product(*(d.items() for d in options.values())):
        descs = [desc for _, desc in combo if desc is not None]
        if descs:
            kwargs = {key: value for key, (value, _) in zip(options, combo)}
            variants.append((len(descs), " and ".join(descs), _whiten_variant(x, mask, eps=eps, **kwargs)))
    variants.sort(key=lambda v: v[0])
    return {desc: out for _, desc, out in variants}


def _check_whiten_case(fn, x, mask, case, **kwargs):
    want = masked_whiten(x, mask, **kwargs)
    x_before = x.clone()
    got = call(fn, x, mask, **kwargs)
    if not torch.equal(torch.nan_to_num(x, nan=1234.5), torch.nan_to_num(x_before, nan=1234.5)):
        raise CheckFailure(f"your function modified its input x in place; compute a new tensor instead. Case: {case}")
    try:
        expect_close(got, want, what="whitened x", case=case)
    except CheckFailure:  # wrong: now work out which mistake it was (about 70 candidates, so only on failure)
        mistakes = _whiten_mistakes(x, mask, shift_mean=kwargs.get("shift_mean", True), eps=kwargs.get("eps", 1e-8))
        if "eps" in kwargs:  # the eps argument must be used, not a hard-coded value
            mistakes["ignored the eps argument (used a hard-coded 1e-8)"] = masked_whiten(
                x, mask, shift_mean=kwargs.get("shift_mean", True)
            )
        expect_close(got, want, what="whitened x", mistakes=mistakes, case=case)


@checker
def check_masked_whiten(fn):
    """Check ``fn(x, mask, shift_mean=True, eps=1e-8)`` against ``ppo_core.masking.masked_whiten``."""
    T, F = True, False
    # A: padding holds garbage; 7 True entries, so n vs n - 1 differ visibly; default shift_mean.
    x = torch.tensor([[1.0, 2.0, 4.0, 9.0, -5.0], [0.5, -1.0, 3.0, 6.0, 6.0]])
    mask = torch.tensor([[T, T, T, F, F], [T, T, T, T, F]])
    _check_whiten_case(
        fn,
        x,
        mask,
        "x=[[1,2,4,9,-5],[0.5,-1,3,6,6]], mask=[[T,T,T,F,F],[T,T,T,T,F]] (9 and -5 and the last 6 are padding), "
        "default shift_mean",
    )
    _check_whiten_case(fn, x, mask, "the same x and mask, shift_mean=True", shift_mean=True)
    # B: shift_mean=False on data whose mean is far from 0.
    x = torch.tensor([[3.0, 5.0, 4.0, 0.0], [6.0, 2.0, 0.0, 0.0]])
    mask = torch.tensor([[T, T, T, F], [T, T, F, F]])
    _check_whiten_case(
        fn, x, mask, "x=[[3,5,4,0],[6,2,0,0]], mask=[[T,T,T,F],[T,T,F,F]], shift_mean=False", shift_mean=False
    )
    # C: random float64 batch, random mask (at least two True entries), both settings of shift_mean.
    gen = torch.Generator().manual_seed(2)
    x = torch.randn(4, 7, generator=gen, dtype=torch.float64) * 3 + 1
    mask = torch.rand(4, 7, generator=gen) < 0.6
    mask[:, 0] = True
    for shift_mean in (True, False):
        _check_whiten_case(
            fn, x, mask, f"random (4, 7) float64 batch, random mask, shift_mean={shift_mean}", shift_mean=shift_mean
        )
    # D: a constant input: variance 0, the answer is all zeros, not NaN.
    x = torch.tensor([[3.0, 3.0, 3.0, -1.0], [3.0, 3.0, 8.0, 8.0]])
    mask = torch.tensor([[T, T, T, F], [T, T, F, F]])
    got = call(fn, x, mask)
    if isinstance(got, torch.Tensor) and not torch.isfinite(got).all():
        raise CheckFailure(
            f"whitened x contains NaN or inf on a constant input (x = 3 at every True entry). It looks like you "
            f"{_FORGOT_EPS}.\n  got: {got.tolist()}"
        )
    _check_whiten_case(fn, x, mask, "constant x = 3 on the True entries (variance 0): the answer is all zeros")
    # E: a tiny spread, where eps sits matters (var = 1e-8, eps = 1e-8).
    x = torch.tensor([[0.0, 1e-4, 2e-4, 5.0]])
    mask = torch.tensor([[T, T, T, F]])
    _check_whiten_case(fn, x, mask, "x=[[0, 1e-4, 2e-4, 5]], mask=[[T,T,T,F]] (var = 1e-8, the size of eps)")
    x = torch.tensor([[1.0, 2.0, 3.0, 0.0]])
    _check_whiten_case(fn, x, mask, "x=[[1, 2, 3, 0]], mask=[[T,T,T,F]], eps=1.0", eps=1.0)
    # F: NaN in the masked positions must not matter.
    x = torch.tensor([[1.0, 2.0, float("nan")], [4.0, float("nan"), float("nan")]])
    mask = torch.tensor([[T, T, F], [T, F, F]])
    got = call(fn, x, mask)
    if isinstance(got, torch.Tensor) and got.shape == x.shape:
        if torch.isnan(got[mask]).any():
            raise CheckFailure(
                f"a NaN in a masked position made the True entries NaN. It looks like you {_NAN_POISON}.\n  got: "
                f"{got.tolist()}"
            )
        if torch.isnan(got[~mask]).any():
            raise CheckFailure(
                f"the NaN from the padding came straight through: you left the masked entries non-zero (they "
                f"must come back 0).\n  got: {got.tolist()}"
            )
    _check_whiten_case(
        fn, x, mask, "x=[[1,2,nan],[4,nan,nan]], mask=[[T,T,F],[T,F,F]] (masked entries never matter, even NaN)"
    )
    # G: a 1-D input with every entry True.
    x = torch.tensor([2.0, -1.0, 0.5, 4.0, 1.5, 3.0])
    _check_whiten_case(fn, x, torch.ones(6, dtype=torch.bool), "1-D x=[2,-1,0.5,4,1.5,3], every entry True")


# --------------------------------------------------------------------------- response_mask


def _mask_mistakes(ids, eos_token_id, pad_token_id):
    """{description: mask} for the typical wrong response masks, most specific first."""
    is_eos = ids == eos_token_id  # (B, T)
    eos_upto = torch.cumsum(is_eos.long(), dim=1)  # EOS tokens at or before t
    not_pad = ids != pad_token_id
    pos = torch.arange(ids.shape[1]).expand_as(ids)
    first = is_eos.long().argmax(dim=1, keepdim=True)  # 0 for a row without EOS!
    mistakes = {}
    if pad_token_id == eos_token_id:
        mistakes[
            "used `ids != pad_token_id` only: with pad == EOS (what many tokenizers are set up to do) that drops "
            "the EOS the model really produced, so it never learns to stop"
        ] = not_pad
        mistakes[
            "dropped the real EOS when pad == EOS: the `ids != pad_token_id` part of your mask also removes the "
            "EOS (an EOS counts even when it has the pad id)"
        ] = (eos_upto == 0) & not_pad
    else:
        mistakes[
            "used `ids != pad_token_id` only: that counts whatever was generated after the first EOS (junk, a "
            "second EOS)"
        ] = not_pad
    mistakes["excluded the EOS token itself (it is the model's action of stopping: it must count)"] = (
        eos_upto == 0
    ) & not_pad
    mistakes["counted tokens after the first EOS (every later EOS was counted too)"] = ((eos_upto == 0) | is_eos) & (
        not_pad | is_eos
    )
    mistakes["counted tokens after the first EOS (everything up to the second EOS, `cumsum(eos) <= 1`)"] = (
        eos_upto <= 1
    ) & (not_pad | is_eos)
    mistakes[
        "found the first EOS with argmax without handling rows that have no EOS (argmax of an all-False row is "
        "0, so such a row keeps only its first token)"
    ] = (pos <= first) & (not_pad | is_eos)
    mistakes[
        "found the first EOS with argmax without handling rows that have no EOS, and excluded the EOS token itself"
    ] = pos < first
    return mistakes


def _check_mask_case(fn, ids, eos_token_id, pad_token_id, case):
    want = response_mask(ids, eos_token_id, pad_token_id)
    got = call(fn, ids, eos_token_id, pad_token_id)
    expect_close(got, want, what="response mask", mistakes=_mask_mistakes(ids, eos_token_id, pad_token_id), case=case)
    if got.dtype != torch.bool:
        raise CheckFailure(
            f"the values are right but you returned a non-bool dtype ({got.dtype}). Masks are bool tensors in this "
            "course (True where a token counts): build it from comparisons and & / |, or call .bool()."
        )


@checker
def check_response_mask(fn):
    """Check ``fn(response_ids, eos_token_id, pad_token_id)`` against ``ppo_core.masking.response_mask``."""
    ids = torch.tensor(
        [
            [5, 6, 2, 0],  # stops at EOS, then padding
            [5, 2, 7, 8],  # the batch kept generating after EOS: junk
            [5, 6, 7, 8],  # no EOS: truncated at the length limit
            [2, 0, 0, 0],  # EOS straight away
            [5, 2, 6, 2],  # a second EOS later on
        ]
    )
    _check_mask_case(fn, ids, 2, 0, "eos=2, pad=0, rows [5,6,2,0] [5,2,7,8] [5,6,7,8] [2,0,0,0] [5,2,6,2]")
    ids = torch.tensor(
        [
            [5, 6, 2, 2, 2, 2],
            [2, 2, 2, 2, 2, 2],
            [5, 6, 7, 8, 9, 4],
            [5, 2, 7, 2, 2, 2],
        ]
    )
    _check_mask_case(fn, ids, 2, 2, "pad == eos == 2, rows [5,6,2,2,2,2] [2,2,2,2,2,2] [5,6,7,8,9,4] [5,2,7,2,2,2]")
    gen = torch.Generator().manual_seed(2)
    ids = torch.randint(0, 6, (6, 10), generator=gen)
    _check_mask_case(fn, ids, 1, 0, "random (6, 10) ids in 0..5, eos=1, pad=0")
    _check_mask_case(fn, ids.to(torch.int32), 3, 3, "random (6, 10) int32 ids in 0..5, eos=pad=3")
