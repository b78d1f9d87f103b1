"""Checker for chapter 06: the pairwise (Bradley-Terry) loss of a reward model, read at the last real token.

The cases pad the chosen and rejected rows on different sides (right, left, none), so reading the
score at ``-1`` or at ``mask.sum(-1) - 1`` gives a different number; one case has a margin of
hundreds, where ``log(sigmoid(.))`` underflows to ``-inf``.
"""

import torch
import torch.nn.functional as F

from ..reward_model import last_token_index, pairwise_loss
from ._common import CheckFailure, call, checker, expect_close

__all__ = ["check_pairwise_loss"]


def _padded(N: int, L: int, side: str, g: torch.Generator):
    """(N, L) head outputs and a mask with 2..L real tokens per row, padded on ``side`` (garbage in the pads)."""
    values = 3.0 * torch.randn(N, L, generator=g)
    lengths = torch.randint(2, L + 1, (N,), generator=g)
    lengths[0] = max(2, L - 3)  # at least one padded row
    idx = torch.arange(L)[None, :]
    mask = idx < lengths[:, None] if side == "right" else idx >= (L - lengths)[:, None]
    values = torch.where(mask, values, 50.0 + 10.0 * torch.randn(N, L, generator=g))  # pad positions matter if read
    return values, mask.long()


def _cases():
    g = torch.Generator().manual_seed(6)
    for c_side, r_side in (("right", "right"), ("left", "left"), ("right", "left")):
        cv, cm = _padded(5, 7, c_side, g)
        rv, rm = _padded(5, 7, r_side, g)
        yield f"5 pairs, chosen padded on the {c_side}, rejected on the {r_side}", (cv, cm, rv, rm)


def _at(values, index):
    return values.gather(1, index[:, None]).squeeze(1)


def _mistakes(cv, cm, rv, rm):
    rc, rr = _at(cv, last_token_index(cm)), _at(rv, last_token_index(rm))
    minus1_c, minus1_r = cv[:, -1], rv[:, -1]
    count_c, count_r = _at(cv, cm.sum(-1) - 1), _at(rv, rm.sum(-1) - 1)
    return {
        "flipped the sign (the loss must fall when r_chosen - r_rejected grows)": -F.logsigmoid(rr - rc).mean(),
        "read the score at index -1 (with right padding that is a pad token; use the mask's last real token)": (
            -F.logsigmoid(minus1_c - minus1_r).mean()
        ),
        "read the score at mask.sum(-1) - 1 (the last real token only with right padding; with left padding "
        "it is too early)": -F.logsigmoid(count_c - count_r).mean(),
        "ignored the pair structure (mean of chosen minus mean of rejected, instead of one difference per pair)": (
            -F.logsigmoid(rc.mean() - rr.mean())
        ),
        "forgot the log-sigmoid (the loss is -log sigma(r_c - r_r), not -(r_c - r_r))": -(rc - rr).mean(),
        "summed over the pairs instead of averaging": -F.logsigmoid(rc - rr).sum(),
    }


def _unpack(out):
    if not (isinstance(out, tuple) and len(out) == 2 and isinstance(out[1], dict)):
        raise CheckFailure(
            f"pairwise_loss must return a pair (loss, stats) with stats a dict; got {type(out).__name__}."
        )
    loss, stats = out
    if not isinstance(loss, torch.Tensor) or loss.dim() != 0:
        raise CheckFailure("pairwise_loss's loss must be a scalar tensor (shape ()).")
    for key in ("accuracy", "margin"):
        if not isinstance(stats.get(key), float):
            raise CheckFailure(f"stats[{key!r}] must be a plain Python float (use .item()); the contract asks for it.")
    return loss, stats


@checker
def check_pairwise_loss(fn):
    """Exercise 6.1: ``fn(chosen_values, chosen_mask, rejected_values, rejected_mask) -> (loss, stats)``."""
    for case, (cv, cm, rv, rm) in _cases():
        want, want_stats = pairwise_loss(cv, cm, rv, rm)
        cv_ = cv.clone().requires_grad_(True)
        loss, stats = _unpack(call(fn, cv_, cm, rv, rm))
        expect_close(loss, want, what="the pairwise loss", mistakes=_mistakes(cv, cm, rv, rm), case=case)
        expect_close(stats["accuracy"], want_stats["accuracy"], what="stats['accuracy']", case=case,
                     mistakes={"counted r_rejected > r_chosen as right": 1 - want_stats["accuracy"]})  # fmt: skip
        margin = want_stats["margin"]
        margin_mistakes = {
            "took r_rejected - r_chosen": -margin,
            "summed the margins over the pairs instead of averaging": cv.shape[0] * margin,
        }
        expect_close(stats["margin"], margin, what="stats['margin']", mistakes=margin_mistakes, case=case)
        if not loss.requires_grad:
            raise CheckFailure(f"the loss has no gradient: did you detach the scores or use .item()? Case: {case}")
        (grad,) = torch.autograd.grad(loss, cv_)
        if (grad[~cm.bool()] != 0).any():
            raise CheckFailure(
                f"the loss has a gradient on padding positions: it must read one real token. Case: {case}"
            )
    # a confident reward model: margins of hundreds must give a finite loss (and 0 for the right order)
    cv, cm = torch.tensor([[0.0, -200.0], [0.0, 200.0]]), torch.ones(2, 2, dtype=torch.long)
    rv = torch.tensor([[0.0, 200.0], [0.0, -200.0]])
    loss, _ = _unpack(call(fn, cv, cm, rv, cm))
    if not torch.isfinite(loss):
        raise CheckFailure(
            "the loss is inf/NaN for a margin of -400: log(sigmoid(x)) underflows to log(0); use F.logsigmoid(x)."
        )
    expect_close(loss, torch.tensor(200.0), what="the loss for margins -400 and +400", atol=1e-3,
                 case="two pairs, margins -400 and +400")  # fmt: skip
