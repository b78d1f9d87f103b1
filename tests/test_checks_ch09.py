"""Tests for the chapter 09 checkers: they pass the package's functions and a learner-style solution, and name
the mistake in typical wrong implementations (written the way a learner would)."""

import pytest
import torch

from ppo_core import checks
from ppo_core.checks import CheckFailure, NotImplementedYet
from ppo_core.correction import icepop_weights, truncated_weights


def _learner_tis(old_logprobs, behaviour_logprobs, mask, level="token", threshold=2.0, *, mistake=None):
    """A typical learner version of exercise 9.1; ``mistake`` switches on one error."""
    diff = behaviour_logprobs - old_logprobs if mistake == "inverted" else old_logprobs - behaviour_logprobs
    log_rho = diff if mistake == "padding" else torch.where(mask, diff, 0.0)  # (B, T)
    if level == "sequence":
        if mistake == "per_token_cap":
            log_rho = log_rho.clamp(max=torch.log(torch.tensor(threshold)))
        if mistake == "geometric":
            log_rho = log_rho.sum(1, keepdim=True) / mask.sum(1, keepdim=True)
        else:
            log_rho = log_rho.sum(1, keepdim=True)
        log_rho = log_rho.expand_as(diff)
    w = torch.exp(log_rho)
    if mistake == "times_mask":
        return (torch.exp(diff) * mask).clamp(max=threshold)  # exp overflows on padding: inf * 0
    if mistake != "no_cap":
        w = w.clamp(min=1 / threshold, max=threshold) if mistake == "two_sided" else w.clamp(max=threshold)
    return torch.where(mask, w, 0.0)


def _learner_icepop(old_logprobs, behaviour_logprobs, mask, lower=0.5, upper=5.0, *, mistake=None):
    """A typical learner version of exercise 9.2."""
    sign = -1 if mistake == "inverted" else 1
    rho = torch.exp(sign * torch.where(mask, old_logprobs - behaviour_logprobs, 0.0))
    if mistake == "clamp":
        return torch.where(mask, rho.clamp(lower, upper), 0.0)
    keep = mask & (rho <= upper) if mistake == "upper_only" else mask & (rho >= lower) & (rho <= upper)
    return keep.float() if mistake == "mask_only" else torch.where(keep, rho, 0.0)


def test_accept_the_package_and_learner_solutions():
    assert checks.check_truncated_weights(truncated_weights, verbose=False)
    assert checks.check_truncated_weights(_learner_tis, verbose=False)
    assert checks.check_icepop_weights(icepop_weights, verbose=False)
    assert checks.check_icepop_weights(_learner_icepop, verbose=False)


@pytest.mark.parametrize(
    "mistake,message",
    [
        ("inverted", "inverted the weight"),
        ("no_cap", "forgot to truncate"),
        ("two_sided", "clipped from below too"),
        ("geometric", "averaged the log-ratios"),
        ("per_token_cap", "truncated each token, then multiplied"),
        ("padding", "over the padding too"),
        ("times_mask", "NaN or inf: off the mask"),
    ],
)
def test_truncated_weights_checker_names_the_mistake(mistake, message):
    def wrong(old_logprobs, behaviour_logprobs, mask, level="token", threshold=2.0):
        return _learner_tis(old_logprobs, behaviour_logprobs, mask, level, threshold, mistake=mistake)

    with pytest.raises(CheckFailure, match=message):
        checks.check_truncated_weights(wrong)


@pytest.mark.parametrize(
    "mistake,message",
    [
        ("upper_only", "kept only the upper bound"),
        ("mask_only", "returned the mask alone"),
        ("clamp", "truncated instead of masking"),
        ("inverted", "inverted the weight"),
    ],
)
def test_icepop_checker_names_the_mistake(mistake, message):
    def wrong(old_logprobs, behaviour_logprobs, mask, lower=0.5, upper=5.0):
        return _learner_icepop(old_logprobs, behaviour_logprobs, mask, lower, upper, mistake=mistake)

    with pytest.raises(CheckFailure, match=message):
        checks.check_icepop_weights(wrong)


def test_stubs_are_reported_as_not_implemented():
    def stub(*args, **kwargs):
        raise NotImplementedError

    for check in (checks.check_truncated_weights, checks.check_icepop_weights):
        with pytest.raises(NotImplementedYet):
            check(stub)


def test_catalog_rows():
    for name, ex_id in (("check_truncated_weights", "9.1"), ("check_icepop_weights", "9.2")):
        ex = checks.catalog.exercise_for_checker(name)
        assert ex.id == ex_id and ex.chapter == "09_sampler_mismatch"
