"""Checkers for chapter 04: the clipped policy loss, the clipped value loss and the entropy loss.

Each checker runs the learner's function on small seeded cases (both signs of the advantage, ratios
on both sides of the clip range, a padded batch), compares the loss, its gradient and the ``stats``
the contract requires with the package's answer, and names the typical mistake when one matches.
"""

import functools

import torch

from ..logprobs import entropy_from_logits
from ..losses import entropy_loss, policy_loss, value_loss
from ..masking import masked_mean, masked_sum
from ._common import CheckFailure, call, checker, expect_close

__all__ = ["check_policy_loss", "check_value_loss", "check_entropy_loss"]


# ----------------------------------------------------------------------------------------------
# shared helpers
# ----------------------------------------------------------------------------------------------


def _padded_mask(B: int, T: int, g: torch.Generator) -> torch.Tensor:
    """(B, T) bool mask with random response lengths; row 0 is full, the others are padded."""
    lengths = torch.randint(1, T + 1, (B,), generator=g)
    lengths[0] = T
    if B > 1 and T > 1:
        lengths[1] = max(1, T // 2)  # at least one padded row
    return torch.arange(T)[None, :] < lengths[:, None]


def _unpack(out, name: str, stat_keys: tuple[str, ...]):
    """Check the ``(loss, stats)`` contract and return the pair."""
    if not (isinstance(out, tuple) and len(out) == 2 and isinstance(out[1], dict)):
        raise CheckFailure(f"{name} must return a pair (loss, stats) with stats a dict; got {type(out).__name__}.")
    loss, stats = out
    if not isinstance(loss, torch.Tensor) or loss.dim() != 0:
        shape = tuple(loss.shape) if isinstance(loss, torch.Tensor) else type(loss).__name__
        raise CheckFailure(f"{name}'s loss must be a scalar tensor (shape ()), got {shape}.")
    missing = [k for k in stat_keys if k not in stats]
    if missing:
        raise CheckFailure(f"{name}'s stats dict lacks {missing}; the contract asks for {list(stat_keys)}.")
    for k in stat_keys:
        if isinstance(stats[k], torch.Tensor) or not isinstance(stats[k], (int, float)):
            raise CheckFailure(
                f"stats[{k!r}] must be a plain Python float (use .item()), got {type(stats[k]).__name__}: "
                "a tensor kept in a log holds on to the graph and the device memory."
            )
    return loss, stats


def _expect_grad(loss: torch.Tensor, x: torch.Tensor, want_grad: torch.Tensor, what: str, case: str):
    """The learner's loss must backpropagate into ``x`` with the package's gradient."""
    if not loss.requires_grad:
        raise CheckFailure(
            f"the loss does not depend on {what} through autograd: did you detach something, or build the "
            f"loss from .item() / numpy values? Case: {case}"
        )
    (grad,) = torch.autograd.grad(loss, x, allow_unused=True)
    if grad is None:
        raise CheckFailure(f"the loss has no gradient with respect to {what}. Case: {case}")
    expect_close(grad, want_grad, what=f"the gradient of the loss with respect to {what}", case=case)


# ----------------------------------------------------------------------------------------------
# 4.1 policy_loss
# ----------------------------------------------------------------------------------------------


def _policy_case(seed: int, B: int, T: int):
    """logprobs, old_logprobs, advantages, mask with ratios on both sides of 1 +- eps, both signs of A."""
    g = torch.Generator().manual_seed(seed)
    old_logprobs = -3.0 * torch.rand(B, T, generator=g) - 0.05  # (B, T), log-probs < 0
    log_ratio = 0.35 * torch.randn(B, T, generator=g)
    advantages = torch.randn(B, T, generator=g)
    if T >= 4:  # row 0 covers the four cases of the case analysis for sure
        log_ratio[0, :4] = torch.tensor([0.5, -0.5, 0.5, -0.5])
        advantages[0, :4] = torch.tensor([1.0, 1.0, -1.0, -1.0])
    mask = _padded_mask(B, T, g)
    # padding carries garbage that must not matter (finite, so "forgot the mask" is recognisable)
    log_ratio = torch.where(mask, log_ratio, torch.full_like(log_ratio, 1.5))
    advantages = torch.where(mask, advantages, torch.full_like(advantages, 4.0))
    return old_logprobs + log_ratio, old_logprobs, advantages, mask


def _surrogate(ratio, ratio_clipped, advantages):
    """Per-token loss max(-A r, -A clip(r)) for given (possibly wrong) ratio and clipped ratio."""
    return torch.maximum(-advantages * ratio, -advantages * ratio_clipped)


def _policy_mistakes(logprobs, old_logprobs, advantages, mask, clip_eps):
    """{mistake: the loss it produces}: small buggy formulas on the same inputs."""
    A, lo, hi = advantages, 1.0 - clip_eps, 1.0 + clip_eps
    log_ratio = logprobs - old_logprobs
    ratio = torch.exp(log_ratio)
    ratio_c = ratio.clamp(lo, hi)
    mm = functools.partial(masked_mean, mask=mask)
    inv = torch.exp(-log_ratio)
    per_row = masked_sum(_surrogate(ratio, ratio_c, A), mask, dim=1) / mask.sum(1).clamp(min=1)
    return {
        "flipped the sign (returned the objective to maximise instead of the loss to minimise)": -mm(
            _surrogate(ratio, ratio_c, A)
        ),
        "took min instead of max of the two loss terms (the optimistic bound; the loss must be the pessimistic "
        "max(-A*r, -A*clip(r)))": mm(torch.minimum(-A * ratio, -A * ratio_c)),
        "clipped the advantages instead of the ratio": mm(torch.maximum(-A * ratio, -A.clamp(lo, hi) * ratio)),
        "clipped the advantages (to +-eps) instead of the ratio": mm(
            torch.maximum(-A * ratio, -A.clamp(-clip_eps, clip_eps) * ratio)
        ),
        "clipped the log-ratio to +-eps instead of the ratio to 1 +- eps": mm(
            _surrogate(ratio, torch.exp(log_ratio.clamp(-clip_eps, clip_eps)), A)
        ),
        "forgot the mask (took a plain mean over all tokens, padding included)": _surrogate(ratio, ratio_c, A).mean(),
        "averaged over each sequence first, then over sequences (the contract is a mean over all response "
        "tokens)": per_row.mean(),
        "computed the ratio the wrong way round, old / new = exp(old_logprobs - logprobs)": mm(
            _surrogate(inv, inv.clamp(lo, hi), A)
        ),
        "used the log-ratio logprobs - old_logprobs as the ratio (forgot the exp)": mm(
            _surrogate(log_ratio, log_ratio.clamp(lo, hi), A)
        ),
        "divided the log-probabilities (logprobs / old_logprobs) instead of exponentiating their difference": mm(
            _surrogate(logprobs / old_logprobs, (logprobs / old_logprobs).clamp(lo, hi), A)
        ),
        "forgot the clipping (the plain surrogate -A * r)": mm(-A * ratio),
        "ignored clip_eps and hard-coded 0.2": policy_loss(logprobs, old_logprobs, advantages, mask, 0.2)[0],
    }


def _policy_stat_mistakes(logprobs, old_logprobs, advantages, mask, clip_eps):
    log_ratio = logprobs - old_logprobs
    ratio = torch.exp(log_ratio)
    clipped_active = (-advantages * ratio.clamp(1 - clip_eps, 1 + clip_eps) > -advantages * ratio).float()
    mm = functools.partial(masked_mean, mask=mask)
    return {
        "clipfrac": {
            "counted every token with |ratio - 1| > eps; on the pessimistic side (A > 0 and r < 1 - eps, or A < 0 and "
            "r > 1 + eps) the unclipped term is the active one, so those tokens are not clipped": mm(
                ((ratio - 1).abs() > clip_eps).float()
            ),
            "forgot the mask": clipped_active.mean(),
            "reported the share of tokens that are NOT clipped": 1 - mm(clipped_active),
        },
        "approx_kl": {
            "used k1, the mean of old_logprobs - logprobs (unbiased but noisy, and can be negative)": mm(-log_ratio),
            "used the mean of logprobs - old_logprobs (k1 with the sign flipped)": mm(log_ratio),
            "used k2 = 1/2 (log ratio)^2 instead of k3": mm(0.5 * log_ratio**2),
            "used k3 with the ratio inverted, (old/new - 1) - log(old/new): with tokens sampled from pi_old that "
            "does not estimate KL(old || new)": mm(torch.exp(-log_ratio) - 1 + log_ratio),
            "forgot the mask": ((ratio - 1) - log_ratio).mean(),
        },
        "ratio_mean": {
            "forgot the mask": ratio.mean(),
            "reported the mean of the clipped ratio": mm(ratio.clamp(1 - clip_eps, 1 + clip_eps)),
            "reported the mean log-ratio": mm(log_ratio),
        },
    }


@checker
def check_policy_loss(fn):
    """Check ``fn(logprobs, old_logprobs, advantages, mask, clip_eps=0.2) -> (loss, stats)`` (exercise 4.1)."""
    keys = ("clipfrac", "approx_kl", "ratio_mean")
    for seed, (B, T), clip_eps in [(0, (3, 6), 0.2), (1, (4, 9), 0.1), (2, (2, 5), 0.3), (3, (1, 1), 0.2)]:
        logprobs, old_logprobs, advantages, mask = _policy_case(seed, B, T)
        case = f"B={B}, T={T}, clip_eps={clip_eps}, some rows padded, advantages of both signs"
        want, want_stats = policy_loss(logprobs, old_logprobs, advantages, mask, clip_eps)
        x = logprobs.clone().requires_grad_(True)
        loss, stats = _unpack(call(fn, x, old_logprobs, advantages, mask, clip_eps=clip_eps), "policy_loss", keys)
        mistakes = _policy_mistakes(logprobs, old_logprobs, advantages, mask, clip_eps)
        expect_close(loss.detach(), want, what="the policy loss", mistakes=mistakes, case=case)
        x_ref = logprobs.clone().requires_grad_(True)
        (want_grad,) = torch.autograd.grad(policy_loss(x_ref, old_logprobs, advantages, mask, clip_eps)[0], x_ref)
        _expect_grad(loss, x, want_grad, "logprobs", case)
        stat_mistakes = _policy_stat_mistakes(logprobs, old_logprobs, advantages, mask, clip_eps)
        for k in keys:
            expect_close(stats[k], want_stats[k], what=f"stats[{k!r}]", mistakes=stat_mistakes[k], case=case)

    # The first minibatch of every rollout: the policy has not moved yet, so logprobs == old_logprobs.
    _, old_logprobs, advantages, mask = _policy_case(4, 3, 5)
    loss, stats = _unpack(
        call(fn, old_logprobs.clone(), old_logprobs, advantages, mask, clip_eps=0.2), "policy_loss", keys
    )
    case = "logprobs == old_logprobs (the first minibatch after a rollout): the ratio must be exactly 1"
    expect_close(loss.detach(), -masked_mean(advantages, mask), what="the policy loss", case=case)
    expect_close(stats["ratio_mean"], 1.0, what="stats['ratio_mean']", case=case, atol=1e-6)
    expect_close(stats["clipfrac"], 0.0, what="stats['clipfrac']", case=case, atol=0)
    expect_close(stats["approx_kl"], 0.0, what="stats['approx_kl']", case=case, atol=1e-6)


# ----------------------------------------------------------------------------------------------
# 4.2 value_loss
# ----------------------------------------------------------------------------------------------


def _value_case(seed: int, B: int, T: int):
    """values, old_values, returns, mask; values moved beyond V_old +- eps both towards and away from R."""
    g = torch.Generator().manual_seed(seed)
    old_values = torch.randn(B, T, generator=g)
    values = old_values + 0.4 * torch.randn(B, T, generator=g)
    returns = old_values + torch.randn(B, T, generator=g)
    if T >= 3:  # moved past R's side of the clip range / moved away from R / stayed inside
        returns[0, :3] = old_values[0, :3] + torch.tensor([1.0, 1.0, 0.1])
        values[0, :3] = old_values[0, :3] + torch.tensor([0.5, -0.5, 0.05])
    mask = _padded_mask(B, T, g)
    values = torch.where(mask, values, torch.full_like(values, 3.0))
    returns = torch.where(mask, returns, torch.full_like(returns, -2.0))
    return values, old_values, returns, mask


def _value_mistakes(values, old_values, returns, mask, clip_eps):
    mm = functools.partial(masked_mean, mask=mask)
    err = (values - returns) ** 2
    err_c = (old_values + (values - old_values).clamp(-clip_eps, clip_eps) - returns) ** 2
    err_c_around_r = (returns + (values - returns).clamp(-clip_eps, clip_eps) - returns) ** 2
    err_c_abs = (values.clamp(-clip_eps, clip_eps) - returns) ** 2
    return {
        "forgot the 1/2": mm(torch.maximum(err, err_c)),
        "took min instead of max of the two squared errors (the clipped value loss is the pessimistic max)": 0.5
        * mm(torch.minimum(err, err_c)),
        "clipped V to [-eps, eps] instead of to [V_old - eps, V_old + eps]": 0.5 * mm(torch.maximum(err, err_c_abs)),
        "forgot the mask (took a plain mean over all tokens, padding included)": 0.5 * torch.maximum(err, err_c).mean(),
        # clipping around R clips nothing, since (clip(V, R +- eps) - R)^2 <= (V - R)^2: same output as no clipping
        "did not clip at all (plain 1/2 squared error), or clipped V around the returns instead of around V_old, "
        "which clips nothing because (clip(V, R +- eps) - R)^2 <= (V - R)^2": 0.5
        * mm(torch.maximum(err, err_c_around_r)),
        "did not clip and forgot the 1/2 (plain squared error)": mm(err),
        "used only the clipped squared error (dropped the max with the unclipped one)": 0.5 * mm(err_c),
        "ignored clip_eps and hard-coded 0.2": value_loss(values, old_values, returns, mask, 0.2)[0],
    }


@checker
def check_value_loss(fn):
    """Check ``fn(values, old_values, returns, mask, clip_eps=0.2) -> (loss, stats)`` (exercise 4.2)."""
    for seed, (B, T), clip_eps in [(0, (3, 6), 0.2), (1, (4, 8), 0.1), (2, (2, 5), 0.5), (3, (1, 1), 0.2)]:
        values, old_values, returns, mask = _value_case(seed, B, T)
        case = f"B={B}, T={T}, clip_eps={clip_eps}, some rows padded"
        want, want_stats = value_loss(values, old_values, returns, mask, clip_eps)
        x = values.clone().requires_grad_(True)
        loss, stats = _unpack(call(fn, x, old_values, returns, mask, clip_eps=clip_eps), "value_loss", ("clipfrac",))
        expect_close(
            loss.detach(),
            want,
            what="the value loss",
            mistakes=_value_mistakes(values, old_values, returns, mask, clip_eps),
            case=case,
        )
        x_ref = values.clone().requires_grad_(True)
        (want_grad,) = torch.autograd.grad(value_loss(x_ref, old_values, returns, mask, clip_eps)[0], x_ref)
        _expect_grad(loss, x, want_grad, "values", case)
        err = (values - returns) ** 2
        err_c = (old_values + (values - old_values).clamp(-clip_eps, clip_eps) - returns) ** 2
        clip_mistakes = {
            "counted every token with |V - V_old| > eps (the clipped error is the active one only when it is the "
            "larger)": masked_mean(((values - old_values).abs() > clip_eps).float(), mask),
            "forgot the mask": (err_c > err).float().mean(),
        }
        expect_close(
            stats["clipfrac"], want_stats["clipfrac"], what="stats['clipfrac']", mistakes=clip_mistakes, case=case
        )

    values, _, returns, mask = _value_case(4, 3, 5)
    case = "values == old_values (the first minibatch): no clipping, the loss is 1/2 the masked mean squared error"
    loss, stats = _unpack(call(fn, values.clone(), values, returns, mask, clip_eps=0.2), "value_loss", ("clipfrac",))
    expect_close(loss.detach(), 0.5 * masked_mean((values - returns) ** 2, mask), what="the value loss", case=case)
    expect_close(stats["clipfrac"], 0.0, what="stats['clipfrac']", case=case, atol=0)


# ----------------------------------------------------------------------------------------------
# 4.3 entropy_loss
# ----------------------------------------------------------------------------------------------


def _entropy_case(seed: int, B: int, T: int, V: int, scale: float = 2.0):
    g = torch.Generator().manual_seed(seed)
    logits = scale * torch.randn(B, T, V, generator=g)  # (B, T, V)
    mask = _padded_mask(B, T, g)
    # padding rows get a much peakier distribution, so forgetting the mask shows
    logits = torch.where(mask[..., None], logits, 8.0 * logits)
    return logits, mask


def _entropy_mistakes(logits, mask, temperature):
    mm = functools.partial(masked_mean, mask=mask)
    H = entropy_from_logits(logits, temperature)  # (B, T)
    logp = torch.log_softmax(logits.double() / temperature, dim=-1)  # (B, T, V)
    return {
        "flipped the sign (returned +entropy as the loss: minimising it would lower the entropy)": mm(H),
        "used -log p of a single token (here the most likely one) instead of the full distribution": -mm(
            -logp.max(-1).values
        ),
        "averaged -log p over the vocabulary (uniform weights) instead of weighting each term by p": -mm(
            -logp.mean(-1)
        ),
        "forgot the temperature (entropy of softmax(logits) instead of softmax(logits / temperature))": -mm(
            entropy_from_logits(logits)
        ),
        "multiplied the logits by the temperature instead of dividing": -mm(entropy_from_logits(logits * temperature)),
        "forgot the mask (took a plain mean over all tokens, padding included)": -H.mean(),
        "summed the entropy over tokens instead of averaging it": -masked_sum(H, mask),
    }


@checker
def check_entropy_loss(fn):
    """Check ``fn(logits, mask, temperature=1.0) -> (loss, stats)`` (exercise 4.3)."""
    cases = [
        (0, (3, 5, 7), 1.0, 2.0, "B=3, T=5, V=7, temperature=1.0"),
        (1, (2, 6, 11), 0.7, 2.0, "B=2, T=6, V=11, temperature=0.7"),
        (2, (2, 4, 5), 1.5, 2.0, "B=2, T=4, V=5, temperature=1.5"),
        (
            3,
            (2, 4, 9),
            1.0,
            200.0,
            "B=2, T=4, V=9, logits x 100 (very peaked distributions; p log p must not give NaN)",
        ),
    ]
    for seed, (B, T, V), temperature, scale, case in cases:
        logits, mask = _entropy_case(seed, B, T, V, scale)
        want, want_stats = entropy_loss(logits, mask, temperature)
        x = logits.clone().requires_grad_(True)
        loss, stats = _unpack(call(fn, x, mask, temperature=temperature), "entropy_loss", ("entropy",))
        expect_close(
            loss.detach(),
            want,
            what="the entropy loss",
            mistakes=_entropy_mistakes(logits, mask, temperature),
            case=case,
        )
        x_ref = logits.clone().requires_grad_(True)
        (want_grad,) = torch.autograd.grad(entropy_loss(x_ref, mask, temperature)[0], x_ref)
        _expect_grad(loss, x, want_grad, "logits", case)
        H = entropy_from_logits(logits, temperature)
        stat_mistakes = {
            "reported the loss (-entropy) as the entropy": -want_stats["entropy"],
            "forgot the mask": H.mean(),
        }
        expect_close(
            stats["entropy"], want_stats["entropy"], what="stats['entropy']", mistakes=stat_mistakes, case=case
        )

    V = 6
    logits, mask = torch.zeros(2, 3, V), torch.ones(2, 3, dtype=torch.bool)
    loss, _ = _unpack(call(fn, logits, mask), "entropy_loss", ("entropy",))
    case = f"uniform logits over V={V} tokens: the entropy is log V = {torch.log(torch.tensor(float(V))).item():.4f}"
    expect_close(loss.detach(), -torch.log(torch.tensor(float(V))), what="the entropy loss", case=case)
