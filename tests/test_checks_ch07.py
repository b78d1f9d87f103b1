"""Tests for the chapter 07 checker: it passes the package's function and a learner-style correct
solution, and names the mistake in typical wrong implementations (written the way a learner would)."""

import pytest
import torch

from ppo_core import checks
from ppo_core.advantages import group_relative_advantages
from ppo_core.checks import CheckFailure, NotImplementedYet


def _learner(scores, group_size, norm_by_std=True, eps=1e-6, *, mistake=None):
    """A typical learner version; ``mistake`` switches on one error."""
    if mistake == "strided":
        g = scores.view(group_size, -1).T  # (n, G), but the wrong rows
    elif mistake == "batch":
        g = scores.view(1, -1)  # one "group": the whole batch
    else:
        g = scores.view(-1, group_size)  # (n, G)
    adv = g - g.mean(dim=1, keepdim=True)
    divide = {"no_std": False, "always_std": True}.get(mistake, norm_by_std)
    if divide:
        std = g.std(dim=1, keepdim=True, unbiased=mistake != "biased")
        adv = adv / std if mistake == "no_eps" else adv / (std + eps)
    if mistake == "strided":
        adv = adv.T
    if mistake == "shape":
        return adv  # (n, G), not flattened
    return adv.reshape(-1)


def test_accepts_the_package_and_a_learner_solution():
    assert checks.check_group_relative_advantages(group_relative_advantages, verbose=False)
    assert checks.check_group_relative_advantages(_learner, verbose=False)


@pytest.mark.parametrize(
    "mistake,message",
    [
        ("batch", "whole batch instead of over each prompt's group"),
        ("strided", "grouped the wrong rows"),
        ("no_eps", "0 / 0"),
        ("no_std", "forgot to divide by the group's std"),
        ("always_std", "divided by the std although norm_by_std=False"),
        ("biased", "biased std"),
        ("shape", "one advantage per sequence"),
    ],
)
def test_names_the_mistake(mistake, message):
    def wrong(scores, group_size, norm_by_std=True, eps=1e-6):
        return _learner(scores, group_size, norm_by_std, eps, mistake=mistake)

    with pytest.raises(CheckFailure, match=message):
        checks.check_group_relative_advantages(wrong)


def test_ignoring_eps_is_caught():
    def wrong(scores, group_size, norm_by_std=True, eps=1e-6):
        return _learner(scores, group_size, norm_by_std, 1e-6)  # the argument is ignored

    with pytest.raises(CheckFailure, match="eps=0.5"):
        checks.check_group_relative_advantages(wrong)


def test_stub_is_reported_as_not_implemented():
    def stub(scores, group_size, norm_by_std=True, eps=1e-6):
        raise NotImplementedError

    with pytest.raises(NotImplementedYet):
        checks.check_group_relative_advantages(stub)


def test_catalog_row():
    ex = checks.catalog.exercise_for_checker("check_group_relative_advantages")
    assert ex.id == "7.1" and ex.chapter == "07_beyond_ppo"
    assert torch.equal(group_relative_advantages(torch.tensor([1.0, 1.0]), 2), torch.zeros(2))
