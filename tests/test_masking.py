"""Tests for ppo_core.masking (chapter 02): the response mask and masked mean / var / whiten."""

import pytest
import reference_impls as ref
import torch
from torch.testing import assert_close

from ppo_core.masking import masked_mean, masked_sum, masked_var, masked_whiten, response_mask

SHAPES = [(1, 1), (1, 6), (3, 5), (4, 12), (8, 3)]  # (B, T)
DTYPES = [torch.float32, torch.float64]
MASK_KINDS = ["prefix", "arbitrary"]


def _case(shape, dtype, kind, seed=0):
    """Random x (B, T) with a nonzero mean (so shift_mean matters) and a random mask of the given kind."""
    gen = torch.Generator().manual_seed(seed)
    x = (torch.randn(shape, generator=gen, dtype=torch.float64) * 2.0 + 1.5).to(dtype)
    mask = ref.MASK_KINDS[kind](*shape, gen)
    return x, mask, gen


# --- response_mask -----------------------------------------------------------------------------

EOS, PAD = 2, 0


def test_response_mask_hand_computed():
    ids = torch.tensor(
        [
            [5, 6, 2, 0, 0],  # EOS at 2: tokens 0..2 count (EOS included), padding after does not
            [5, 2, 7, 2, 0],  # junk after the first EOS (even another EOS) does not count
            [5, 6, 7, 8, 9],  # no EOS (truncated at the length limit): everything counts
            [2, 0, 0, 0, 0],  # EOS at position 0: only the EOS counts
            [5, 6, 7, 0, 0],  # no EOS but padded: the padding does not count
        ]
    )
    want = torch.tensor(
        [
            [1, 1, 1, 0, 0],
            [1, 1, 0, 0, 0],
            [1, 1, 1, 1, 1],
            [1, 0, 0, 0, 0],
            [1, 1, 1, 0, 0],
        ],
        dtype=torch.bool,
    )
    got = response_mask(ids, EOS, PAD)
    assert got.dtype == torch.bool
    assert torch.equal(got, want)


def test_response_mask_pad_equals_eos():
    # Many tokenizers use EOS as the pad token: the first EOS still counts, the padding after it does not.
    ids = torch.tensor([[5, 6, 0, 0, 0], [5, 6, 7, 8, 9], [0, 0, 0, 0, 0]])
    want = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1], [1, 0, 0, 0, 0]], dtype=torch.bool)
    assert torch.equal(response_mask(ids, eos_token_id=0, pad_token_id=0), want)


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("pad_is_eos", [False, True])
def test_response_mask_matches_naive_loop(shape, pad_is_eos):
    gen = torch.Generator().manual_seed(shape[0] * 31 + shape[1])
    eos, pad = (1, 1) if pad_is_eos else (1, 0)
    ids = torch.randint(0, 5, shape, generator=gen)  # a small vocabulary: EOS and pad are frequent
    got = response_mask(ids, eos, pad)
    assert torch.equal(got, torch.tensor(ref.ref_response_mask(ids, eos, pad), dtype=torch.bool))


def test_response_mask_ignores_tokens_after_eos():
    gen = torch.Generator().manual_seed(1)
    ids = torch.tensor([[7, 8, EOS, 3, 4, 5]])
    for _ in range(5):
        ids2 = ids.clone()
        ids2[0, 3:] = torch.randint(0, 10, (3,), generator=gen)
        assert torch.equal(response_mask(ids2, EOS, PAD), response_mask(ids, EOS, PAD))


# --- masked_sum / masked_mean ----------------------------------------------------------------


def test_masked_mean_var_whiten_hand_computed():
    # Selected entries 1, 2, 3 (the 100 is masked out): mean 2, squared deviations 1, 0, 1 -> sum 2,
    # unbiased var 2 / (3 - 1) = 1, biased var 2 / 3. Whitened: (x - 2) / sqrt(1 + eps) ~ [-1, 0, 1], 0 outside.
    x = torch.tensor([[1.0, 2.0], [3.0, 100.0]])
    mask = torch.tensor([[True, True], [True, False]])
    assert_close(masked_sum(x, mask), torch.tensor(6.0))
    assert_close(masked_mean(x, mask), torch.tensor(2.0))
    assert_close(masked_mean(x, mask, dim=1), torch.tensor([1.5, 3.0]))
    assert_close(masked_var(x, mask), torch.tensor(1.0))
    assert_close(masked_var(x, mask, unbiased=False), torch.tensor(2.0 / 3.0))
    assert_close(masked_whiten(x, mask), torch.tensor([[-1.0, 0.0], [1.0, 0.0]]))
    # shift_mean=False adds the mean (2) back to the selected entries: [1, 2, 3], still 0 outside.
    assert_close(masked_whiten(x, mask, shift_mean=False), torch.tensor([[1.0, 2.0], [3.0, 0.0]]))


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("kind", MASK_KINDS)
def test_masked_sum_and_mean_match_naive_loop(shape, dtype, kind):
    x, mask, _ = _case(shape, dtype, kind)
    got_sum, got_mean, got_rows = masked_sum(x, mask), masked_mean(x, mask), masked_mean(x, mask, dim=1)
    assert got_mean.dtype == dtype and got_mean.shape == ()
    assert_close(got_sum, ref.as_tensor(ref.ref_masked_sum(x, mask), got_sum))
    assert_close(got_mean, ref.as_tensor(ref.ref_masked_mean(x, mask), got_mean))
    assert_close(got_rows, ref.as_tensor(ref.ref_masked_mean_rows(x, mask), got_rows))


def test_masked_mean_of_empty_selection_is_zero():
    x = torch.randn(2, 3)
    empty = torch.zeros(2, 3, dtype=torch.bool)
    assert masked_mean(x, empty).item() == 0.0
    assert masked_sum(x, empty).item() == 0.0
    mask = torch.tensor([[True, False, False], [False, False, False]])
    assert_close(masked_mean(x, mask, dim=1), torch.stack([x[0, 0], torch.tensor(0.0)]))


def test_masked_mean_weighs_tokens_not_rows():
    # One global mean over tokens: a 1-token row and a 3-token row do not get equal weight.
    x = torch.tensor([[0.0, 9.0, 9.0, 9.0], [4.0, 4.0, 4.0, 9.0]])
    mask = torch.tensor([[True, False, False, False], [True, True, True, False]])
    assert_close(masked_mean(x, mask), torch.tensor(3.0))  # (0 + 4 + 4 + 4) / 4, not (0 + 4) / 2


# --- masked_var ----------------------------------------------------------------------------------


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("kind", MASK_KINDS)
@pytest.mark.parametrize("unbiased", [True, False])
def test_masked_var_matches_naive_loop(shape, dtype, kind, unbiased):
    x, mask, _ = _case(shape, dtype, kind, seed=1)
    got = masked_var(x, mask, unbiased=unbiased)
    assert got.dtype == dtype
    assert_close(got, ref.as_tensor(ref.ref_masked_var(x, mask, unbiased), got))


def test_masked_var_default_is_unbiased_like_torch_var():
    x, mask, _ = _case((4, 9), torch.float64, "arbitrary", seed=2)
    assert_close(masked_var(x, mask), torch.var(x[mask]))  # torch.var: Bessel-corrected by default
    assert_close(masked_var(x, mask, unbiased=False), torch.var(x[mask], correction=0))


def test_masked_var_single_entry_is_zero():
    x = torch.tensor([[3.0, 5.0]])
    mask = torch.tensor([[False, True]])
    assert masked_var(x, mask).item() == 0.0


# --- masked_whiten -----------------------------------------------------------------------------


@pytest.mark.parametrize("shape", [(1, 6), (3, 5), (4, 12), (8, 3)])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("kind", MASK_KINDS)
@pytest.mark.parametrize("shift_mean", [True, False])
def test_masked_whiten_matches_naive_loop(shape, dtype, kind, shift_mean):
    x, mask, _ = _case(shape, dtype, kind, seed=3)
    mask[0, :2] = True  # at least two selected entries, so the variance is not 0
    got = masked_whiten(x, mask, shift_mean=shift_mean)
    assert got.dtype == dtype
    assert_close(got, ref.as_tensor(ref.ref_masked_whiten(x, mask, shift_mean), got))


@pytest.mark.parametrize("kind", MASK_KINDS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_masked_whiten_moments(kind, dtype):
    x, mask, _ = _case((6, 10), dtype, kind, seed=4)
    w = masked_whiten(x, mask)
    assert_close(masked_mean(w, mask), torch.tensor(0.0, dtype=dtype), atol=1e-5, rtol=0)
    assert_close(masked_var(w, mask), torch.tensor(1.0, dtype=dtype), atol=1e-5, rtol=0)  # unbiased var 1
    assert (w[~mask] == 0).all()
    # shift_mean=False keeps the original mean (here about 1.5) and the unit variance.
    w_keep = masked_whiten(x, mask, shift_mean=False)
    assert_close(masked_mean(w_keep, mask), masked_mean(x, mask), atol=1e-5, rtol=1e-5)
    assert_close(masked_var(w_keep, mask), torch.tensor(1.0, dtype=dtype), atol=1e-5, rtol=0)
    assert (w_keep[~mask] == 0).all()


# --- masked positions never matter -------------------------------------------------------------


@pytest.mark.parametrize("kind", MASK_KINDS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_masked_positions_never_matter(kind, dtype):
    x, mask, gen = _case((5, 9), dtype, kind, seed=5)
    for _ in range(3):
        junk = ref.fill_masked(x, mask, gen)  # NaN, inf, -inf, 1e30 where the mask is False
        exact = dict(rtol=0, atol=0)
        assert_close(masked_sum(junk, mask), masked_sum(x, mask), **exact)
        assert_close(masked_mean(junk, mask), masked_mean(x, mask), **exact)
        assert_close(masked_mean(junk, mask, dim=1), masked_mean(x, mask, dim=1), **exact)
        assert_close(masked_var(junk, mask), masked_var(x, mask), **exact)
        for shift_mean in (True, False):
            assert_close(masked_whiten(junk, mask, shift_mean), masked_whiten(x, mask, shift_mean), **exact)


def test_masked_mean_gradient_ignores_masked_positions():
    x, mask, gen = _case((3, 7), torch.float64, "arbitrary", seed=6)
    x = ref.fill_masked(x, mask, gen).requires_grad_(True)
    masked_mean(x, mask).backward()
    want = mask.double() / mask.sum()
    assert_close(x.grad, want)
