"""Tests for ppo_core.logprobs (chapter 01): token logprobs, the response slice, entropy."""

import math
from pathlib import Path

import pytest
import reference_impls as ref
import torch
from torch.testing import assert_close

from ppo_core import logprobs as logprobs_module
from ppo_core.logprobs import entropy_from_logits, logprobs_from_logits, response_logits

SHAPES = [(1, 1, 2), (2, 5, 7), (3, 8, 11), (4, 3, 32)]  # (B, T, V)
DTYPES = [torch.float32, torch.float64]


def _random_logits(B, T, V, dtype, seed=0, scale=3.0):
    gen = torch.Generator().manual_seed(seed)
    logits = (torch.randn(B, T, V, generator=gen, dtype=torch.float64) * scale).to(dtype)
    tokens = torch.randint(0, V, (B, T), generator=gen)
    return logits, tokens


# --- logprobs_from_logits --------------------------------------------------------------------


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("temperature", [1.0, 0.7, 2.5])
def test_logprobs_match_naive_loop(shape, dtype, temperature):
    logits, tokens = _random_logits(*shape, dtype)
    got = logprobs_from_logits(logits, tokens, temperature)
    assert got.shape == shape[:2]
    assert got.dtype == dtype  # float32 stays float32, float64 stays float64
    assert_close(got, ref.as_tensor(ref.ref_logprobs(logits, tokens, temperature), got))


def test_logprobs_hand_computed():
    # logits [0, ln 3] -> softmax [1/4, 3/4]: log p(token 1) = ln(3/4) = -0.28768, log p(token 0) = ln(1/4).
    # With temperature 2 the logits become [0, ln(3)/2] = [0, ln sqrt(3)] -> p = [1, sqrt 3] / (1 + sqrt 3),
    # so log p(token 0) = -ln(1 + sqrt 3) = -1.00505.
    logits = torch.tensor([[[0.0, math.log(3.0)], [0.0, math.log(3.0)]]])  # (1, 2, 2)
    tokens = torch.tensor([[1, 0]])
    assert_close(logprobs_from_logits(logits, tokens), torch.tensor([[math.log(0.75), math.log(0.25)]]))
    got_t2 = logprobs_from_logits(logits, tokens, temperature=2.0)
    want_t2 = torch.tensor([[math.log(math.sqrt(3.0) / (1 + math.sqrt(3.0))), -math.log(1 + math.sqrt(3.0))]])
    assert_close(got_t2, want_t2)


@pytest.mark.parametrize("temperature", [0.5, 1.0, 1.7])
def test_logprobs_temperature_is_log_softmax_of_scaled_logits(temperature):
    logits, tokens = _random_logits(3, 6, 9, torch.float32, seed=1)
    want = torch.log_softmax(logits / temperature, dim=-1).gather(-1, tokens.unsqueeze(-1)).squeeze(-1)
    assert_close(logprobs_from_logits(logits, tokens, temperature), want)


def test_logprobs_temperature_changes_the_answer():
    # Guards against an implementation that silently ignores the temperature argument.
    logits, tokens = _random_logits(2, 4, 6, torch.float32, seed=2)
    assert not torch.allclose(logprobs_from_logits(logits, tokens, 0.5), logprobs_from_logits(logits, tokens, 1.0))


@pytest.mark.parametrize("bad_temperature", [0.0, -1.0])
def test_logprobs_rejects_non_positive_temperature(bad_temperature):
    logits, tokens = _random_logits(1, 2, 3, torch.float32)
    with pytest.raises(ValueError):
        logprobs_from_logits(logits, tokens, bad_temperature)


def test_logprobs_stable_for_logits_times_100():
    # Logits of size ~300: a naive exp() overflows float32 (e^89 already does). log_softmax must stay finite
    # and match the float64 naive reference (which subtracts the max first).
    logits, tokens = _random_logits(3, 7, 13, torch.float32, seed=3, scale=300.0)
    got = logprobs_from_logits(logits, tokens)
    assert torch.isfinite(got).all()
    assert (got <= 0).all()
    assert_close(got, ref.as_tensor(ref.ref_logprobs(logits, tokens), got))


def test_logprobs_bf16_input_computed_in_float32():
    # bf16 keeps 8 significant bits (7 stored): a log-softmax computed in bf16 is off by ~1e-2. The package must
    # upcast first, so it agrees (to float32 precision) with the exact reference on the same bf16 values.
    logits, tokens = _random_logits(3, 7, 50, torch.float32, seed=4, scale=10.0)
    logits_bf16 = logits.to(torch.bfloat16)
    got = logprobs_from_logits(logits_bf16, tokens)
    assert got.dtype == torch.float32
    assert torch.isfinite(got).all()
    assert_close(got, ref.as_tensor(ref.ref_logprobs(logits_bf16, tokens), got))
    # Also stable for large bf16 logits.
    got_big = logprobs_from_logits(logits_bf16 * 100, tokens)
    assert torch.isfinite(got_big).all()
    assert_close(got_big, ref.as_tensor(ref.ref_logprobs(logits_bf16 * 100, tokens), got_big))


def test_logprobs_gradient_is_onehot_minus_softmax():
    # d log softmax(z)[a] / dz = onehot(a) - softmax(z): gradients reach the logits.
    logits, tokens = _random_logits(2, 3, 5, torch.float64, seed=5)
    logits.requires_grad_(True)
    logprobs_from_logits(logits, tokens).sum().backward()
    want = torch.nn.functional.one_hot(tokens, 5).double() - torch.softmax(logits.detach(), dim=-1)
    assert_close(logits.grad, want)


# --- response_logits ---------------------------------------------------------------------------


@pytest.mark.parametrize("B,P,T,V", [(1, 1, 1, 3), (2, 3, 4, 5), (3, 6, 2, 4), (2, 4, 5, 3)])
@pytest.mark.parametrize("dtype", DTYPES)
def test_response_logits_match_naive_loop_3d_and_2d(B, P, T, V, dtype):
    gen = torch.Generator().manual_seed(B * 100 + P * 10 + T)
    extra = 1  # the model's last output (predicting past the end) is not used
    logits = torch.randn(B, P + T + extra, V, generator=gen, dtype=torch.float64).to(dtype)
    values = torch.randn(B, P + T + extra, generator=gen, dtype=torch.float64).to(dtype)
    got_logits = response_logits(logits, P, T)  # (B, T, V)
    got_values = response_logits(values, P, T)  # (B, T)
    assert got_logits.shape == (B, T, V) and got_values.shape == (B, T)
    assert_close(got_logits, ref.as_tensor(ref.ref_response_slice(logits, P, T), got_logits))
    assert_close(got_values, ref.as_tensor(ref.ref_response_slice(values, P, T), got_values))


def test_response_logits_hand_computed():
    # Sequence p0 p1 p2 r0 r1 (P=3, T=2): outputs at positions 2 and 3 predict r0 and r1.
    values = torch.arange(10.0).reshape(2, 5)  # row 0: 0..4, row 1: 5..9
    assert_close(response_logits(values, 3, 2), torch.tensor([[2.0, 3.0], [7.0, 8.0]]))
    # Full-length sequence (no spare output): P=2, T=3 in a length-5 sequence -> positions 1, 2, 3.
    assert_close(response_logits(values, 2, 3), torch.tensor([[1.0, 2.0, 3.0], [6.0, 7.0, 8.0]]))


def test_response_logits_alignment_scores_the_response():
    # A "model" whose output at every position puts all its mass on the *next* token of the sequence:
    # sliced with response_logits, it must give log-prob ~0 to every response token. An off-by-one
    # slice scores the wrong tokens and gives log-probs of about -1000.
    gen = torch.Generator().manual_seed(6)
    B, P, T, V = 3, 4, 5, 7
    seq = torch.randint(0, V, (B, P + T), generator=gen)  # (B, P+T) prompt then response
    logits = torch.zeros(B, P + T, V)  # (B, P+T, V)
    logits[:, :-1].scatter_(-1, seq[:, 1:].unsqueeze(-1), 1000.0)  # output i predicts token i+1
    response_ids = seq[:, P:]  # (B, T)
    logp = logprobs_from_logits(response_logits(logits, P, T), response_ids)
    assert_close(logp, torch.zeros(B, T))


def test_response_logits_rejects_bad_lengths():
    logits = torch.zeros(2, 5, 3)
    with pytest.raises(ValueError):
        response_logits(logits, 0, 2)  # nothing predicts r0
    with pytest.raises(ValueError):
        response_logits(logits, 3, 3)  # 3 + 3 > 5


# --- entropy_from_logits -----------------------------------------------------------------------


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("temperature", [1.0, 0.6, 2.0])
def test_entropy_matches_naive_loop(shape, dtype, temperature):
    logits, _ = _random_logits(*shape, dtype, seed=7)
    got = entropy_from_logits(logits, temperature)
    assert got.shape == shape[:2]
    assert got.dtype == dtype
    assert_close(got, ref.as_tensor(ref.ref_entropy(logits, temperature), got))


def test_entropy_hand_computed():
    # Uniform over 4 tokens: H = ln 4 = 1.38629. p = [1/4, 3/4]: H = -(1/4 ln 1/4 + 3/4 ln 3/4) = 0.56233.
    logits = torch.tensor([[[0.0, 0.0, 0.0, 0.0]], [[0.0, math.log(3.0), -1e4, -1e4]]])  # (2, 1, 4)
    want = torch.tensor([[math.log(4.0)], [-(0.25 * math.log(0.25) + 0.75 * math.log(0.75))]])
    assert_close(entropy_from_logits(logits), want)


@pytest.mark.parametrize("scale", [1.0, 10.0, 100.0])
def test_entropy_bounds(scale):
    V = 11
    logits, _ = _random_logits(4, 6, V, torch.float32, seed=8, scale=scale)
    h = entropy_from_logits(logits)
    assert torch.isfinite(h).all()
    assert (h >= -1e-6).all()
    assert (h <= math.log(V) + 1e-6).all()


def test_entropy_one_hot_ish_is_zero_and_uniform_is_log_v():
    V = 9
    one_hot_ish = torch.full((2, 3, V), -50.0)
    one_hot_ish[..., 4] = 50.0
    assert_close(entropy_from_logits(one_hot_ish), torch.zeros(2, 3), atol=1e-6, rtol=0)
    assert_close(entropy_from_logits(torch.zeros(2, 3, V)), torch.full((2, 3), math.log(V)))
    # Huge logits (one entry 1000 above the rest) must not give NaN.
    assert torch.isfinite(entropy_from_logits(one_hot_ish * 20)).all()


def test_entropy_temperature_is_entropy_of_scaled_logits():
    logits, _ = _random_logits(2, 4, 6, torch.float64, seed=9)
    assert_close(entropy_from_logits(logits, 0.5), entropy_from_logits(logits / 0.5))
    # Higher temperature flattens the distribution: entropy goes up.
    assert (entropy_from_logits(logits, 3.0) > entropy_from_logits(logits, 1.0)).all()


def test_entropy_bf16_input():
    logits, _ = _random_logits(2, 4, 20, torch.float32, seed=10, scale=5.0)
    logits_bf16 = logits.to(torch.bfloat16)
    got = entropy_from_logits(logits_bf16)
    assert got.dtype == torch.float32
    assert_close(got, ref.as_tensor(ref.ref_entropy(logits_bf16), got))


def test_entropy_with_filtered_logits_is_finite():
    """Logits set to -inf (a top-k filter) have p = 0 and contribute 0 entropy, not 0 * -inf = NaN."""
    logits = torch.tensor([[[2.0, 1.0, float("-inf"), float("-inf")]]])
    got = entropy_from_logits(logits)
    p = torch.softmax(torch.tensor([2.0, 1.0]), -1)
    torch.testing.assert_close(got, -(p * p.log()).sum().reshape(1, 1))


# --- a few sequences at a time (memory) ------------------------------------------------------


def _whole_batch_logprobs(logits, tokens, temperature):
    """The one-shot form the package used before: one float32 (B, T, V) log-softmax."""
    z = logits.to(torch.promote_types(logits.dtype, torch.float32)) / temperature
    return torch.log_softmax(z, dim=-1).gather(-1, tokens.long().unsqueeze(-1)).squeeze(-1)


def _whole_batch_entropy(logits, temperature):
    z = logits.to(torch.promote_types(logits.dtype, torch.float32)) / temperature
    p = torch.softmax(z, dim=-1)
    return torch.logsumexp(z, dim=-1) - torch.where(p > 0, p * z, torch.zeros((), dtype=z.dtype)).sum(-1)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64])
@pytest.mark.parametrize("shape", [(5, 7, 11), (16, 24, 48), (3, 9, 5000)])
@pytest.mark.parametrize("rows_per_chunk", [1, 2, None])  # None: the package's CHUNK_BYTES
def test_chunked_gives_the_whole_batch_numbers_to_the_last_bit(dtype, shape, rows_per_chunk, monkeypatch):
    """Chunking the batch only saves memory: values and gradients are bit for bit the one-shot form's, so
    every saved run of the course repeats exactly."""
    if rows_per_chunk is not None:
        monkeypatch.setattr(logprobs_module, "CHUNK_BYTES", rows_per_chunk * shape[1] * shape[2] * 4)
    logits, tokens = _random_logits(*shape, dtype, seed=11)
    logits[0, 0, :2] = float("-inf")  # a filtered token
    for temperature in (1.0, 0.7):
        assert torch.equal(logprobs_from_logits(logits, tokens, temperature),
                           _whole_batch_logprobs(logits, tokens, temperature))  # fmt: skip
        assert torch.equal(entropy_from_logits(logits, temperature), _whole_batch_entropy(logits, temperature))
    weights = torch.randn(shape[:2], dtype=torch.float64).float()
    grads = []
    for fn in (logprobs_from_logits, _whole_batch_logprobs):
        x = logits.float().clone().requires_grad_(True)
        (fn(x, tokens, 0.7) * weights).sum().backward()
        grads.append(x.grad)
    assert torch.equal(*grads)
    grads = []
    for fn in (entropy_from_logits, _whole_batch_entropy):
        x = logits.float()[:, :, 2:].clone().requires_grad_(True)  # no -inf: their entropy gradient is NaN
        (fn(x, 0.7) * weights).sum().backward()
        grads.append(x.grad)
    assert torch.equal(*grads)


def test_chunks_follow_the_vocabulary():
    """A small vocabulary goes in one piece (the CPU run's speed); a real one a sequence at a time."""
    assert logprobs_module._rows_per_chunk(torch.empty(128, 24, 64, device="meta")) >= 128
    assert logprobs_module._rows_per_chunk(torch.empty(16, 256, 151936, device="meta")) == 1


def test_one_sequence_one_position_and_an_empty_batch():
    logits, tokens = _random_logits(3, 4, 6, torch.float32, seed=12)
    assert torch.equal(logprobs_from_logits(logits[1, 2], tokens[1, 2]), logprobs_from_logits(logits, tokens)[1, 2])
    assert torch.equal(entropy_from_logits(logits[1, 2]), entropy_from_logits(logits)[1, 2])
    assert torch.equal(logprobs_from_logits(logits[1], tokens[1]), logprobs_from_logits(logits, tokens)[1])
    assert torch.equal(entropy_from_logits(logits[1]), entropy_from_logits(logits)[1])
    assert logprobs_from_logits(logits[:0], tokens[:0]).shape == (0, 4)
    assert entropy_from_logits(logits[:0]).shape == (0, 4)


@pytest.mark.parametrize("tokens_shape", [(2, 4), (3, 5), (3,)])
def test_logprobs_rejects_tokens_that_do_not_match_the_logits(tokens_shape):
    """gather alone would quietly score a smaller token tensor, and the chunks would quietly drop rows."""
    logits = torch.randn(3, 4, 6)
    with pytest.raises(ValueError, match="response_logits"):
        logprobs_from_logits(logits, torch.zeros(tokens_shape, dtype=torch.long))


@pytest.mark.skipif(not Path("/proc/self/clear_refs").exists(), reason="measures peak RSS through Linux's /proc/self")
@pytest.mark.slow  # two processes each on a 150k-token vocabulary
@pytest.mark.parametrize("what", ["logprobs", "entropy"])
def test_logprobs_and_entropy_take_a_sequence_at_a_time_on_a_real_vocabulary(what):
    """On Qwen2.5's vocabulary, the one-shot forms take two (logprobs) or three (entropy) float32 copies of the
    logits; the package's, as many of one sequence's (tools/memory_peaks.py, ``benchmarks/memory.py --logprobs``
    at the cuda preset's)."""
    from tools.memory_peaks import row_wise_peaks

    peaks = row_wise_peaks(what, 12, 64, 151936)  # one float32 (B, T, V) tensor: 467 MB, a sequence 39 MB
    one = 12 * 64 * 151936 * 4
    assert peaks[True] > 1.5 * one, f"the one-shot reference should take two or more (B, T, V) float32 tensors: {peaks}"
    assert peaks[False] < 0.45 * one, f"{what} should take a few sequences' worth, not the batch's: {peaks}"
