"""Checkers for chapter 08: ``check_dapo_policy_loss`` (clip-higher and dual-clip) and ``check_cispo_loss``.

Each runs the learner's function on small seeded cases (ratios inside and beyond both ends of the clip
range, both signs of the advantage, a padded batch), compares the loss and its gradient with
``ppo_core.objectives.compute_policy_loss`` and names the typical mistake when one matches. For CISPO the
gradient is what counts: its loss value is only a vehicle for it.

No test ratio sits on a kink (1 - eps_low, 1 + eps_high, or c): there the clipped losses have two one-sided
derivatives and a correct function may return either (``tests/test_checks_ch08.py`` checks the distance).
Capping the ratio itself at c in the unclipped term (TRL's ``delta``, INTELLECT-2's two-sided clip) is *not* a mistake:
for c > 1 + eps_high it is the same loss as the dual clip, so the checker accepts it.
"""

import torch

from ..masking import masked_mean
from ..objectives import compute_policy_loss
from ._common import CheckFailure, call, checker, expect_close

__all__ = ["check_dapo_policy_loss", "check_cispo_loss"]


RATIOS = (0.45, 0.85, 1.15, 1.6, 2.7)  # below, inside and beyond the clip ranges and c of every case, on no kink
DAPO_CASES = ((0, (3, 12), (0.2, 0.28, 2.0)), (1, (4, 10), (0.1, 0.4, 1.5)), (2, (2, 3), (0.2, 0.2, 3.0)))
CISPO_CASES = ((3, (3, 12), (0.2, 0.28)), (4, (4, 10), (1.0, 0.3)), (5, (2, 4), (0.1, 0.1)))


def _case(seed: int, B: int, T: int, kinks=()):
    """logprobs, old_logprobs, advantages, mask; row 0 holds the ``RATIOS`` for A = +1 and -1. The random
    ratios within 0.03 of a kink are moved to 0.04 from it, on their side."""
    g = torch.Generator().manual_seed(seed)
    old = -3.0 * torch.rand(B, T, generator=g, dtype=torch.float64) - 0.05
    ratio = torch.exp(0.5 * torch.randn(B, T, generator=g, dtype=torch.float64))
    for k in kinks:
        near = (ratio - k).abs() < 0.03
        ratio = torch.where(near, torch.where(ratio < k, k - 0.04, k + 0.04), ratio)
    log_ratio = ratio.log()
    adv = torch.randn(B, T, generator=g, dtype=torch.float64)
    if T >= 10:
        r = torch.tensor(RATIOS, dtype=torch.float64)
        log_ratio[0, :10] = torch.cat([r, r]).log()
        adv[0, :10] = torch.tensor([1.0] * 5 + [-1.0] * 5, dtype=torch.float64)
    lengths = torch.randint(1, T + 1, (B,), generator=g)
    lengths[0] = T
    mask = torch.arange(T)[None, :] < lengths[:, None]
    log_ratio = torch.where(mask, log_ratio, torch.full_like(log_ratio, 1.5))  # padding: finite junk
    return old + log_ratio, old, adv, mask


def _grad(loss, x):
    if not (isinstance(loss, torch.Tensor) and loss.requires_grad):
        return torch.zeros_like(x)
    (g,) = torch.autograd.grad(loss, x, allow_unused=True, retain_graph=True)
    return torch.zeros_like(x) if g is None else g


def _scalar(out, name):
    loss = out[0] if isinstance(out, tuple) else out
    if not isinstance(loss, torch.Tensor) or loss.dim() != 0:
        raise CheckFailure(
            f"{name} must return a scalar tensor loss (or a pair (loss, stats)), got {type(loss).__name__}."
        )
    return loss


def _dapo_mistakes(lp, old, adv, mask, lo, hi, c):
    ratio = torch.exp(lp - old)

    def loss(low, high, dual=True):  # the clipped loss with a range, with or without the dual clip, a token mean
        clipped = torch.maximum(-adv * ratio, -adv * torch.clamp(ratio, 1 - low, 1 + high))
        return masked_mean(torch.where(adv < 0, torch.minimum(clipped, -adv * c), clipped) if dual else clipped, mask)

    clipped = torch.maximum(-adv * ratio, -adv * torch.clamp(ratio, 1 - lo, 1 + hi))
    return {
        "clipped both sides with clip_eps_low (clip-higher raises only the upper bound: clamp(r, 1 - eps_low, "
        "1 + eps_high))": loss(lo, lo),
        "clipped both sides with clip_eps_high": loss(hi, hi),
        "swapped the two bounds (1 - eps_high .. 1 + eps_low)": loss(hi, lo),
        "left out the dual clip": loss(lo, hi, dual=False),
        "applied the dual clip to every token (it bounds only A < 0: for A > 0, -A * c is below the loss)": masked_mean(
            torch.minimum(clipped, -adv * c), mask
        ),
        "took the max with -A * c instead of the min (the dual clip caps the loss from above)": masked_mean(
            torch.where(adv < 0, torch.maximum(clipped, -adv * c), clipped), mask
        ),
        "took the min of the two PPO terms instead of the max (the clipped loss is the pessimistic one, the max of "
        "-A r and -A clip(r))": masked_mean(
            torch.where(
                adv < 0,
                torch.minimum(torch.minimum(-adv * ratio, -adv * torch.clamp(ratio, 1 - lo, 1 + hi)), -adv * c),
                torch.minimum(-adv * ratio, -adv * torch.clamp(ratio, 1 - lo, 1 + hi)),
            ),
            mask,
        ),
    }


@checker
def check_dapo_policy_loss(fn):
    """Check ``fn(logprobs, old_logprobs, advantages, mask, clip_eps_low, clip_eps_high, dual_clip_c) -> loss``
    (exercise 8.1): PPO's clipped loss with an asymmetric range and the dual clip, a token mean."""
    for seed, (B, T), (lo, hi, c) in DAPO_CASES:
        lp, old, adv, mask = _case(seed, B, T, kinks=(1 - lo, 1 + hi, c))
        case = f"B={B}, T={T}, clip_eps_low={lo}, clip_eps_high={hi}, dual_clip_c={c}, ratios {RATIOS}, A of both signs"
        x = lp.clone().requires_grad_(True)
        loss = _scalar(call(fn, x, old, adv, mask, lo, hi, c), "dapo_policy_loss")
        want, _ = compute_policy_loss("vanilla", lp, old, adv, mask, clip_eps_low=lo, clip_eps_high=hi, dual_clip_c=c)
        expect_close(
            loss.detach(), want, what="the loss", mistakes=_dapo_mistakes(lp, old, adv, mask, lo, hi, c), case=case
        )
        y = lp.clone().requires_grad_(True)
        want_loss, _ = compute_policy_loss(
            "vanilla", y, old, adv, mask, clip_eps_low=lo, clip_eps_high=hi, dual_clip_c=c
        )
        got_grad = _grad(loss, x)
        if not got_grad.abs().sum():
            raise CheckFailure(
                f"the loss sends no gradient to logprobs: did you detach them or use .item()? Case: {case}"
            )
        expect_close(got_grad, _grad(want_loss, y), what="the gradient with respect to logprobs", case=case)


def _cispo_mistake_grads(lp, old, adv, mask, lo, hi):
    """{mistake: the gradient w.r.t. logprobs it produces}."""
    out = {}
    ratio_const = torch.exp(lp - old)

    def grad_of(build):
        x = lp.clone().requires_grad_(True)
        return _grad(build(x), x)

    def w(x):
        return torch.clamp(torch.exp(x - old), 1 - lo, 1 + hi)

    out["forgot the stop-gradient on the clipped weight (detach it: the weight scales the gradient, it is not "
        "differentiated)"] = grad_of(lambda x: masked_mean(-w(x) * adv * x, mask))  # fmt: skip
    out["wrote PPO's clipped surrogate (CISPO keeps every token's gradient and clips only its weight)"] = grad_of(
        lambda x: masked_mean(torch.maximum(-adv * torch.exp(x - old), -adv * w(x)), mask)
    )
    out[
        "multiplied the detached weight by the ratio instead of the log-probability (the gradient of r is "
        "r * grad log pi: the weight then counts twice)"
    ] = grad_of(  # fmt: skip
        lambda x: masked_mean(-w(x).detach() * adv * torch.exp(x - old), mask)
    )
    out["forgot the clip (an unclipped importance weight: plain off-policy REINFORCE)"] = grad_of(
        lambda x: masked_mean(-ratio_const * adv * x, mask)
    )
    out["forgot the mask"] = grad_of(lambda x: (-w(x).detach() * adv * x).mean())
    return out


@checker
def check_cispo_loss(fn):
    """Check ``fn(logprobs, old_logprobs, advantages, mask, clip_eps_low, clip_eps_high) -> loss`` (exercise 8.2):
    CISPO's loss, a token mean whose gradient is clip(r) * A * grad log pi on every token."""
    for seed, (B, T), (lo, hi) in CISPO_CASES:
        lp, old, adv, mask = _case(seed, B, T, kinks=(1 - lo, 1 + hi))
        case = f"B={B}, T={T}, clip_eps_low={lo}, clip_eps_high={hi}, ratios {RATIOS}, A of both signs"
        x = lp.clone().requires_grad_(True)
        loss = _scalar(call(fn, x, old, adv, mask, lo, hi), "cispo_loss")
        y = lp.clone().requires_grad_(True)
        want, _ = compute_policy_loss("cispo", y, old, adv, mask, clip_eps_low=lo, clip_eps_high=hi)
        got_grad = _grad(loss, x)
        if not got_grad.abs().sum():
            raise CheckFailure(f"the loss sends no gradient to logprobs: did you detach them too? Case: {case}")
        expect_close(
            got_grad,
            _grad(want, y),
            what="the gradient with respect to logprobs",
            mistakes=_cispo_mistake_grads(lp, old, adv, mask, lo, hi),
            case=case,
        )
