"""The chapter 08 checkers accept the package's objectives and name the typical mistakes."""

import pytest
import torch

from ppo_core import checks
from ppo_core.checks import CheckFailure
from ppo_core.masking import masked_mean
from ppo_core.objectives import compute_policy_loss


def package_dapo(lp, old, adv, mask, lo, hi, c):
    return compute_policy_loss("vanilla", lp, old, adv, mask, clip_eps_low=lo, clip_eps_high=hi, dual_clip_c=c)


def package_cispo(lp, old, adv, mask, lo, hi):
    return compute_policy_loss("cispo", lp, old, adv, mask, clip_eps_low=lo, clip_eps_high=hi)[0]


def test_package_passes():
    assert checks.check_dapo_policy_loss(package_dapo, verbose=False) is True
    assert checks.check_cispo_loss(package_cispo, verbose=False) is True


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
}


@pytest.mark.parametrize(
    "bug, match",
    [
        ("clipped both sides with clip_eps_low", "clipped both sides with clip_eps_low"),
        ("applied the dual clip to every token", "applied the dual clip to every token"),
        ("left out the dual clip", "left out the dual clip"),
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
