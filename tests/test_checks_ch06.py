"""The chapter 06 checker accepts the package's pairwise loss and names the typical mistakes."""

import pytest
import torch
import torch.nn.functional as F

from ppo_core import checks
from ppo_core.checks import CheckFailure, NotImplementedYet
from ppo_core.reward_model import pairwise_accuracy, pairwise_loss


def test_package_passes(capsys):
    assert checks.check_pairwise_loss(pairwise_loss) is True
    assert "passed" in capsys.readouterr().out


def test_stub_is_not_implemented():
    def stub(*args):
        raise NotImplementedError("exercise")

    with pytest.raises(NotImplementedYet, match="not implemented yet"):
        checks.check_pairwise_loss(stub)


def _stats(rc, rr):
    return {"accuracy": pairwise_accuracy(rc.detach(), rr.detach()), "margin": (rc - rr).mean().item()}


def _last(values, mask):
    return values.gather(1, ((torch.arange(mask.shape[1]) * mask).argmax(-1))[:, None]).squeeze(1)


def sign_flipped(cv, cm, rv, rm):
    rc, rr = _last(cv, cm), _last(rv, rm)
    return -F.logsigmoid(rr - rc).mean(), _stats(rc, rr)


def index_minus_one(cv, cm, rv, rm):
    rc, rr = cv[:, -1], rv[:, -1]
    return -F.logsigmoid(rc - rr).mean(), _stats(rc, rr)


def count_minus_one(cv, cm, rv, rm):
    rc, rr = cv.gather(1, (cm.sum(-1) - 1)[:, None]).squeeze(1), rv.gather(1, (rm.sum(-1) - 1)[:, None]).squeeze(1)
    return -F.logsigmoid(rc - rr).mean(), _stats(rc, rr)


def no_pair_structure(cv, cm, rv, rm):
    rc, rr = _last(cv, cm), _last(rv, rm)
    return -F.logsigmoid(rc.mean() - rr.mean()), _stats(rc, rr)


def log_of_sigmoid(cv, cm, rv, rm):
    rc, rr = _last(cv, cm), _last(rv, rm)
    return -torch.log(torch.sigmoid(rc - rr)).mean(), _stats(rc, rr)


def accuracy_reversed(cv, cm, rv, rm):
    rc, rr = _last(cv, cm), _last(rv, rm)
    return -F.logsigmoid(rc - rr).mean(), {**_stats(rc, rr), "accuracy": (rr > rc).float().mean().item()}


def margin_reversed(cv, cm, rv, rm):
    rc, rr = _last(cv, cm), _last(rv, rm)
    return -F.logsigmoid(rc - rr).mean(), {**_stats(rc, rr), "margin": (rr - rc).mean().item()}


def margin_summed(cv, cm, rv, rm):
    rc, rr = _last(cv, cm), _last(rv, rm)
    return -F.logsigmoid(rc - rr).mean(), {**_stats(rc, rr), "margin": (rc - rr).sum().item()}


def detached(cv, cm, rv, rm):
    rc, rr = _last(cv, cm).detach(), _last(rv, rm)
    return -F.logsigmoid(rc - rr).mean(), _stats(rc, rr)


@pytest.mark.parametrize(
    "wrong, message",
    [
        (sign_flipped, "flipped the sign"),
        (index_minus_one, "read the score at index -1"),
        (count_minus_one, r"read the score at mask.sum\(-1\) - 1"),
        (no_pair_structure, "ignored the pair structure"),
        (log_of_sigmoid, "use F.logsigmoid"),
        (detached, "no gradient"),
        (accuracy_reversed, r"accuracy.*counted r_rejected > r_chosen as right"),
        (margin_reversed, r"stats\['margin'\].*took r_rejected - r_chosen"),
        (margin_summed, r"stats\['margin'\].*summed the margins over the pairs"),
    ],
)
def test_wrong_version_names_the_mistake(wrong, message):
    with pytest.raises(CheckFailure, match=message):
        checks.check_pairwise_loss(wrong)
