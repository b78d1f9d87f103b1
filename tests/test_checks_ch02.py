"""Tests for the chapter 02 checkers: they pass the package's functions and name typical mistakes."""

import pytest
import torch

from ppo_core import checks
from ppo_core.checks import CheckFailure, NotImplementedYet
from ppo_core.masking import masked_mean, masked_var, masked_whiten, response_mask

# --------------------------------------------------------------------------- masked_whiten


def _stats(x, mask, unbiased=True):
    return masked_mean(x, mask), masked_var(x, mask, unbiased=unbiased)


def whiten_no_mask(x, mask, shift_mean=True, eps=1e-8):
    mean, var = x.mean(), x.var()  # statistics over padding too
    out = (x - mean) / torch.sqrt(var + eps)
    out = out if shift_mean else out + mean
    return torch.where(mask, out, 0.0)


def whiten_per_row(x, mask, shift_mean=True, eps=1e-8):
    n = mask.sum(-1, keepdim=True)
    mean = torch.where(mask, x, 0.0).sum(-1, keepdim=True) / n
    var = torch.where(mask, (x - mean) ** 2, 0.0).sum(-1, keepdim=True) / (n - 1)
    out = (x - mean) / torch.sqrt(var + eps)
    out = out if shift_mean else out + mean
    return torch.where(mask, out, 0.0)


def whiten_biased(x, mask, shift_mean=True, eps=1e-8):
    mean, var = _stats(x, mask, unbiased=False)
    out = (x - mean) / torch.sqrt(var + eps)
    out = out if shift_mean else out + mean
    return torch.where(mask, out, 0.0)


def whiten_ignores_shift_mean(x, mask, shift_mean=True, eps=1e-8):
    mean, var = _stats(x, mask)
    return torch.where(mask, (x - mean) / torch.sqrt(var + eps), 0.0)


def whiten_never_centres(x, mask, shift_mean=True, eps=1e-8):
    mean, var = _stats(x, mask)
    out = (x - mean) if shift_mean else x  # "shift_mean=False: don't subtract"
    return torch.where(mask, out / torch.sqrt(var + eps), 0.0)


def whiten_keeps_masked(x, mask, shift_mean=True, eps=1e-8):
    mean, var = _stats(x, mask)
    out = (x - mean) / torch.sqrt(var + eps)
    return out if shift_mean else out + mean


def whiten_eps_outside(x, mask, shift_mean=True, eps=1e-8):
    mean, var = _stats(x, mask)
    out = (x - mean) / (torch.sqrt(var) + eps)
    out = out if shift_mean else out + mean
    return torch.where(mask, out, 0.0)


def whiten_no_eps(x, mask, shift_mean=True, eps=1e-8):
    mean, var = _stats(x, mask)
    out = (x - mean) / torch.sqrt(var)
    out = out if shift_mean else out + mean
    return torch.where(mask, out, 0.0)


def whiten_times_mask(x, mask, shift_mean=True, eps=1e-8):
    m = mask.float()
    n = m.sum()
    mean = (x * m).sum() / n
    var = (((x - mean) ** 2) * m).sum() / (n - 1)
    out = (x - mean) / torch.sqrt(var + eps)
    out = out if shift_mean else out + mean
    return out * m


def whiten_hardcoded_eps(x, mask, shift_mean=True, eps=1e-8):
    return masked_whiten(x, mask, shift_mean=shift_mean)


def whiten_in_place(x, mask, shift_mean=True, eps=1e-8):
    out = masked_whiten(x, mask, shift_mean=shift_mean, eps=eps)
    x.zero_()
    return out


def whiten_stub(x, mask, shift_mean=True, eps=1e-8):
    raise NotImplementedError("Exercise 2.1")


def test_check_masked_whiten_passes_package():
    assert checks.check_masked_whiten(masked_whiten, verbose=False)


@pytest.mark.parametrize(
    ("wrong", "named"),
    [
        (whiten_no_mask, "forgot the mask"),
        (whiten_per_row, "each row separately"),
        (whiten_biased, "biased variance"),
        (whiten_ignores_shift_mean, "ignored shift_mean=False"),
        (whiten_never_centres, "without centring"),
        (whiten_keeps_masked, "left the masked entries non-zero"),
        (whiten_eps_outside, "eps outside the sqrt"),
        (whiten_no_eps, "forgot eps"),
        (whiten_times_mask, r"x \* mask"),
        (whiten_hardcoded_eps, "ignored the eps argument"),
        (whiten_in_place, "in place"),
    ],
)
def test_check_masked_whiten_names_the_mistake(wrong, named):
    with pytest.raises(CheckFailure, match=named):
        checks.check_masked_whiten(wrong, verbose=False)


def test_check_masked_whiten_stub():
    with pytest.raises(NotImplementedYet):
        checks.check_masked_whiten(whiten_stub)


# --------------------------------------------------------------------------- response_mask


def mask_excludes_eos(ids, eos_token_id, pad_token_id):
    is_eos = ids == eos_token_id
    return (torch.cumsum(is_eos.long(), 1) == 0) & (ids != pad_token_id)


def mask_not_pad(ids, eos_token_id, pad_token_id):
    return ids != pad_token_id


def mask_counts_later_eos(ids, eos_token_id, pad_token_id):
    is_eos = ids == eos_token_id
    return ((torch.cumsum(is_eos.long(), 1) == 0) | is_eos) & ((ids != pad_token_id) | is_eos)


def mask_up_to_second_eos(ids, eos_token_id, pad_token_id):
    is_eos = ids == eos_token_id
    return (torch.cumsum(is_eos.long(), 1) <= 1) & ((ids != pad_token_id) | is_eos)


def mask_argmax(ids, eos_token_id, pad_token_id):
    first = (ids == eos_token_id).long().argmax(1, keepdim=True)
    return torch.arange(ids.shape[1]) <= first


def mask_float(ids, eos_token_id, pad_token_id):
    return response_mask(ids, eos_token_id, pad_token_id).float()


def mask_stub(ids, eos_token_id, pad_token_id):
    raise NotImplementedError("Exercise 2.2")


def test_check_response_mask_passes_package():
    assert checks.check_response_mask(response_mask, verbose=False)


@pytest.mark.parametrize(
    ("wrong", "named"),
    [
        (mask_excludes_eos, "excluded the EOS token itself"),
        (mask_not_pad, r"ids != pad_token_id` only"),
        (mask_counts_later_eos, "counted tokens after the first EOS"),
        (mask_up_to_second_eos, "counted tokens after the first EOS"),
        (mask_argmax, "rows that have no EOS"),
        (mask_float, "non-bool dtype"),
    ],
)
def test_check_response_mask_names_the_mistake(wrong, named):
    with pytest.raises(CheckFailure, match=named):
        checks.check_response_mask(wrong, verbose=False)


def test_check_response_mask_names_pad_equals_eos():
    """A mask that is right when pad != EOS but uses `ids != pad` for EOS rows fails on pad == EOS by name."""

    def mask_pad_blind(ids, eos_token_id, pad_token_id):
        is_eos = ids == eos_token_id
        before = torch.cumsum(is_eos.long(), 1) - is_eos.long() == 0
        return before & (ids != pad_token_id)  # drops the EOS when pad == EOS

    with pytest.raises(CheckFailure, match="pad == EOS"):
        checks.check_response_mask(mask_pad_blind, verbose=False)


def test_check_response_mask_stub():
    with pytest.raises(NotImplementedYet):
        checks.check_response_mask(mask_stub)
