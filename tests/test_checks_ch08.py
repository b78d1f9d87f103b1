"""The chapter 08 checkers accept the package's objectives and correct versions written otherwise, name the
typical mistakes, and test no ratio on a kink of the clipped losses."""

import pytest
import torch

from ppo_core import checks
from ppo_core.checks import CheckFailure
from ppo_core.checks import ch08_objectives as ch08
from ppo_core.masking import masked_mean
from ppo_core.objectives import compute_policy_loss


def package_dapo(lp, old, adv, mask, lo, hi, c):
    return compute_policy_loss("vanilla", lp, old, adv, mask, clip_eps_low=lo, clip_eps_high=hi, dual_clip_c=c)


def package_cispo(lp, old, adv, mask, lo, hi):
    return compute_policy_loss("cispo", lp, old, adv, mask, clip_eps_low=lo, clip_eps_high=hi)[0]


def test_package_passes():
    assert checks.check_dapo_policy_loss(package_dapo, verbose=False) is True
    assert checks.check_cispo_loss(package_cispo, verbose=False) is True


def dapo_piecewise(lp, old, adv, mask, lo, hi, c):
    """The dual-clipped loss written case by case, summed over the mask and divided by its count."""
    r = (lp - old).exp()
    pos = torch.where(r > 1 + hi, -adv * (1 + hi), -adv * r)  # A > 0: the gradient stops above 1 + eps_high
    neg = torch.where(r < 1 - lo, -adv * (1 - lo), torch.where(r > c, -adv * c, -adv * r))  # A < 0
    per_token = torch.where(adv > 0, pos, torch.where(adv < 0, neg, torch.zeros_like(r)))
    return (per_token * mask).sum() / mask.sum()


def dapo_trl_delta(lp, old, adv, mask, lo, hi, c):
    """TRL's two-sided clip (``delta``): the ratio capped at c in the unclipped term, then PPO's pessimistic max.
    For c > 1 + eps_high it is the dual clip: the checker must accept it."""
    r = (lp - old).exp()
    loss = torch.maximum(-adv * r.clamp(max=c), -adv * r.clamp(1 - lo, 1 + hi))
    return loss[mask].mean()


def cispo_value_free(lp, old, adv, mask, lo, hi):
    """CISPO through lp - sg(lp): the value is 0, the gradient is CISPO's."""
    w = torch.clamp(torch.exp(lp.detach() - old), 1 - lo, 1 + hi)
    return (-(w * adv) * (lp - lp.detach()))[mask].sum() / mask.sum()


@pytest.mark.parametrize("fn", [dapo_piecewise, dapo_trl_delta])
def test_other_correct_dapo_versions_pass(fn):
    assert checks.check_dapo_policy_loss(fn, verbose=False) is True


def test_other_correct_cispo_version_passes():
    assert checks.check_cispo_loss(cispo_value_free, verbose=False) is True


def _kinks(lo, hi, c=None):
    return [1 - lo, 1 + hi] + ([c] if c is not None else [])


@pytest.mark.parametrize(
    "cases, kinks",
    [(ch08.DAPO_CASES, lambda p: _kinks(*p)), (ch08.CISPO_CASES, lambda p: _kinks(*p))],
    ids=["dapo", "cispo"],
)
def test_no_test_ratio_sits_on_a_kink(cases, kinks):
    """Where a clip starts, the two one-sided derivatives differ and a correct function may return either."""
    for seed, (B, T), params in cases:
        lp, old, _, mask = ch08._case(seed, B, T, kinks(params))
        ratios = (lp - old).exp()[mask]
        gap = min((ratios - k).abs().min().item() for k in kinks(params))
        assert gap > 0.02, f"case {seed}: a test ratio lies {gap:.2g} from a kink"


def _ppo(lp, old, adv, mask, lo, hi):
    r = torch.exp(lp - old)
    return torch.maximum(-adv * r, -adv * torch.clamp(r, 1 - lo, 1 + hi))


DAPO_BUGS = {
    "clipped both sides with clip_eps_low": lambda lp, old, adv, mask, lo, hi, c: masked_mean(
        torch.where(
            adv < 0, torch.minimum(_ppo(lp, old, adv, mask, lo, lo), -adv * c), _ppo(lp, old, adv, mask, lo, lo)
        ),
        mask,
    ),
    "applied the dual clip to every token": lambda lp, old, adv, mask, lo, hi, c: masked_mean(
        torch.minimum(_ppo(lp, old, adv, mask, lo, hi), -adv * c), mask
    ),
    "left out the dual clip": lambda lp, old, adv, mask, lo, hi, c: masked_mean(_ppo(lp, old, adv, mask, lo, hi), mask),
    "swapped the two bounds": lambda lp, old, adv, mask, lo, hi, c: masked_mean(
        torch.where(
            adv < 0, torch.minimum(_ppo(lp, old, adv, mask, hi, lo), -adv * c), _ppo(lp, old, adv, mask, hi, lo)
        ),
        mask,
    ),
    "took the max with -A * c": lambda lp, old, adv, mask, lo, hi, c: masked_mean(
        torch.where(
            adv < 0, torch.maximum(_ppo(lp, old, adv, mask, lo, hi), -adv * c), _ppo(lp, old, adv, mask, lo, hi)
        ),
        mask,
    ),
}


@pytest.mark.parametrize(
    "bug, match",
    [
        ("clipped both sides with clip_eps_low", "clipped both sides with clip_eps_low"),
        ("applied the dual clip to every token", "applied the dual clip to every token"),
        ("left out the dual clip", "left out the dual clip"),
        ("swapped the two bounds", "swapped the two bounds"),
        ("took the max with -A * c", "took the max with -A"),
    ],
)
def test_dapo_checker_names_the_mistake(bug, match):
    with pytest.raises(CheckFailure, match=match):
        checks.check_dapo_policy_loss(DAPO_BUGS[bug], verbose=False)


def _w(lp, old, lo, hi):
    return torch.clamp(torch.exp(lp - old), 1 - lo, 1 + hi)


CISPO_BUGS = {
    "forgot the stop-gradient": lambda lp, old, adv, mask, lo, hi: masked_mean(-_w(lp, old, lo, hi) * adv * lp, mask),
    "wrote PPO's clipped surrogate": lambda lp, old, adv, mask, lo, hi: masked_mean(
        _ppo(lp, old, adv, mask, lo, hi), mask
    ),
    "multiplied the detached weight by the ratio": lambda lp, old, adv, mask, lo, hi: masked_mean(
        -_w(lp, old, lo, hi).detach() * adv * torch.exp(lp - old), mask
    ),
    "forgot the mask": lambda lp, old, adv, mask, lo, hi: (-_w(lp, old, lo, hi).detach() * adv * lp).mean(),
}


@pytest.mark.parametrize(
    "bug, match",
    [
        ("forgot the stop-gradient", "forgot the stop-gradient"),
        ("wrote PPO's clipped surrogate", "wrote PPO's clipped surrogate"),
        ("multiplied the detached weight by the ratio", "multiplied the detached weight by the ratio"),
        ("forgot the mask", "forgot the mask"),
    ],
)
def test_cispo_checker_names_the_mistake(bug, match):
    with pytest.raises(CheckFailure, match=match):
        checks.check_cispo_loss(CISPO_BUGS[bug], verbose=False)


def test_a_detached_loss_is_rejected():
    with pytest.raises(CheckFailure, match="no gradient"):
        checks.check_cispo_loss(lambda lp, old, adv, mask, lo, hi: package_cispo(lp.detach(), old, adv, mask, lo, hi))
