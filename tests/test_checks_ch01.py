"""The chapter 01 checkers: they pass the package's functions and name the typical mistakes."""

import pytest
import torch

from ppo_core import checks
from ppo_core.checks import CheckFailure, NotImplementedYet
from ppo_core.logprobs import entropy_from_logits, logprobs_from_logits, response_logits

# --- Exercise 1.1: gather_response_logprobs(logits, response_ids, prompt_len, temperature) ------------


def correct_logprobs(logits, response_ids, prompt_len, temperature=1.0):
    """The package's two functions composed: what the learner should write."""
    aligned = response_logits(logits, prompt_len, response_ids.shape[1])  # (B, T, V)
    return logprobs_from_logits(aligned, response_ids, temperature)  # (B, T)


def _gather(logp, ids):
    return logp.gather(-1, ids.unsqueeze(-1)).squeeze(-1)


def off_by_one(logits, response_ids, prompt_len, temperature=1.0):
    T = response_ids.shape[1]
    return _gather(torch.log_softmax(logits[:, prompt_len : prompt_len + T].float() / temperature, -1), response_ids)


def no_temperature(logits, response_ids, prompt_len, temperature=1.0):
    return correct_logprobs(logits, response_ids, prompt_len, 1.0)


def times_temperature(logits, response_ids, prompt_len, temperature=1.0):
    aligned = response_logits(logits, prompt_len, response_ids.shape[1]).float()
    return _gather(torch.log_softmax(aligned * temperature, -1), response_ids)


def probabilities(logits, response_ids, prompt_len, temperature=1.0):
    aligned = response_logits(logits, prompt_len, response_ids.shape[1]).float()
    return _gather(torch.softmax(aligned / temperature, -1), response_ids)


def log_of_softmax(logits, response_ids, prompt_len, temperature=1.0):
    aligned = response_logits(logits, prompt_len, response_ids.shape[1]).float()
    return _gather(torch.log(torch.softmax(aligned / temperature, -1)), response_ids)


def full_distribution(logits, response_ids, prompt_len, temperature=1.0):
    aligned = response_logits(logits, prompt_len, response_ids.shape[1]).float()
    return torch.log_softmax(aligned / temperature, -1)  # (B, T, V): never gathered


def wrong_dim_softmax(logits, response_ids, prompt_len, temperature=1.0):
    aligned = response_logits(logits, prompt_len, response_ids.shape[1]).float()
    return _gather(torch.log_softmax(aligned / temperature, dim=1), response_ids)


def index_not_gather(logits, response_ids, prompt_len, temperature=1.0):
    aligned = response_logits(logits, prompt_len, response_ids.shape[1]).float()
    return torch.log_softmax(aligned / temperature, -1)[:, :, response_ids]  # (B, T, B, T)


def in_bf16(logits, response_ids, prompt_len, temperature=1.0):
    aligned = response_logits(logits, prompt_len, response_ids.shape[1])  # stays in the input dtype
    return _gather(torch.log_softmax(aligned / temperature, -1), response_ids)


def cast_back_to_bf16(logits, response_ids, prompt_len, temperature=1.0):
    return correct_logprobs(logits, response_ids, prompt_len, temperature).to(logits.dtype)  # float32 math, bf16 out


def not_implemented(*args, **kwargs):
    raise NotImplementedError("fill in the exercise")


def test_logprobs_checker_passes_the_package():
    assert checks.check_gather_response_logprobs(correct_logprobs, verbose=False)


def test_logprobs_checker_prints_a_pass_line(capsys):
    checks.check_gather_response_logprobs(correct_logprobs)
    assert "check_gather_response_logprobs passed" in capsys.readouterr().out


@pytest.mark.parametrize(
    "wrong, named",
    [
        (off_by_one, r"off by one"),
        (no_temperature, r"forgot the temperature"),
        (times_temperature, r"multiplied the logits by the temperature"),
        (probabilities, r"probabilities \(softmax\) instead of log-probabilities"),
        (log_of_softmax, r"log\(softmax\(\.\.\.\)\).*log_softmax"),
        (full_distribution, r"returned the full \(B, T, V\) distribution"),
        (wrong_dim_softmax, r"over the positions \(log_softmax over dim=1\)"),
        (index_not_gather, r"indexed with the ids directly"),
        (in_bf16, r"in bfloat16"),
        (cast_back_to_bf16, r"cast the logprobs back to bfloat16"),
    ],
)
def test_logprobs_checker_names_the_mistake(wrong, named):
    with pytest.raises(CheckFailure, match=named):
        checks.check_gather_response_logprobs(wrong, verbose=False)


def test_logprobs_checker_says_not_implemented_yet():
    with pytest.raises(NotImplementedYet):
        checks.check_gather_response_logprobs(not_implemented)
    assert checks.RESULTS["check_gather_response_logprobs"] == "not implemented"


def test_logprobs_checker_catches_the_bug_only_on_the_right_case():
    """log(softmax) is right on mild logits: only the x100 case can catch it, so that case must exist."""
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(2, 5, 7, generator=g)
    ids = torch.randint(0, 7, (2, 3), generator=g)
    assert torch.allclose(log_of_softmax(logits, ids, 2, 0.7), correct_logprobs(logits, ids, 2, 0.7), atol=1e-6)


# --- Exercise 1.2: entropy(logits, temperature) ---------------------------------------------------------


def correct_entropy(logits, temperature=1.0):
    return entropy_from_logits(logits, temperature)


def entropy_wrong_sign(logits, temperature=1.0):
    logp = torch.log_softmax(logits.float() / temperature, -1)
    return (logp.exp() * logp).sum(-1)


def entropy_no_temperature(logits, temperature=1.0):
    return entropy_from_logits(logits, 1.0)


def entropy_argmax_surprisal(logits, temperature=1.0):
    logp = torch.log_softmax(logits.float() / temperature, -1)
    return -logp.max(-1).values


def entropy_log_of_softmax(logits, temperature=1.0):
    p = torch.softmax(logits.float() / temperature, -1)
    return -(p * torch.log(p)).sum(-1)


def entropy_mean_not_sum(logits, temperature=1.0):
    logp = torch.log_softmax(logits.float() / temperature, -1)
    return -(logp.exp() * logp).mean(-1)


def entropy_no_weights(logits, temperature=1.0):
    return -torch.log_softmax(logits.float() / temperature, -1).sum(-1)  # sum of -log p, no p in front


def entropy_not_reduced(logits, temperature=1.0):
    logp = torch.log_softmax(logits.float() / temperature, -1)
    return -(logp.exp() * logp)  # (B, T, V)


def entropy_in_bf16(logits, temperature=1.0):
    z = logits / temperature
    return -(torch.softmax(z, -1) * torch.log_softmax(z, -1)).sum(-1)


def test_entropy_checker_passes_the_package():
    assert checks.check_entropy_from_logits(correct_entropy, verbose=False)


def test_entropy_checker_passes_torch_distributions():
    """An independent correct implementation also passes (the checker is not tied to one formula)."""

    def categorical_entropy(logits, temperature=1.0):
        return torch.distributions.Categorical(logits=logits.float() / temperature).entropy()

    assert checks.check_entropy_from_logits(categorical_entropy, verbose=False)


@pytest.mark.parametrize(
    "wrong, named",
    [
        (entropy_wrong_sign, r"sign wrong"),
        (entropy_no_temperature, r"forgot the temperature"),
        (entropy_argmax_surprisal, r"most likely token"),
        (entropy_log_of_softmax, r"NaN.*0 \* \(-inf\)"),
        (entropy_mean_not_sum, r"averaged -p log p"),
        (entropy_no_weights, r"forgot the probability weights"),
        (entropy_not_reduced, r"forgot to sum -p log p over the vocabulary"),
        (entropy_in_bf16, r"in bfloat16"),
    ],
)
def test_entropy_checker_names_the_mistake(wrong, named):
    with pytest.raises(CheckFailure, match=named):
        checks.check_entropy_from_logits(wrong, verbose=False)


def test_entropy_checker_says_not_implemented_yet():
    with pytest.raises(NotImplementedYet):
        checks.check_entropy_from_logits(not_implemented)
