"""Checkers for chapter 01 (logprob alignment): the response logprobs and the entropy of the policy.

Each checker computes the right answer with ``ppo_core.logprobs`` and the outputs of the typical
mistakes with small deliberately buggy formulas, so that a wrong answer is named.
"""

import torch

from ..logprobs import entropy_from_logits, logprobs_from_logits, response_logits
from ._common import CheckFailure, call, checker, expect_close

__all__ = ["check_gather_response_logprobs", "check_entropy_from_logits"]

_OFF_BY_ONE = (
    "sliced the logits [P : P+T] instead of [P-1 : P+T-1] (off by one: the output at position t predicts token t+1)"
)
_NO_TEMPERATURE = (
    "forgot the temperature (PPO's logprobs must come from logits / temperature, the distribution that sampled)"
)
_TIMES_TEMPERATURE = "multiplied the logits by the temperature instead of dividing by it"
_UNSTABLE = (
    "took log(softmax(...)), which underflows to log(0) = -inf for large logits; "
    "use torch.log_softmax (it subtracts the max first)"
)
_BF16 = "computed the log-softmax in bfloat16: upcast the logits with .float() first"


def _case(B: int, P: int, T: int, V: int, scale: float = 3.0, seed: int = 0):
    """Random (B, P+T, V) logits and (B, T) response ids."""
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(B, P + T, V, generator=g) * scale  # (B, P+T, V)
    response_ids = torch.randint(0, V, (B, T), generator=g)  # (B, T)
    return logits, response_ids


def _gathered(logp: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    return logp.gather(-1, ids.unsqueeze(-1)).squeeze(-1)  # (B, T)


def _logprob_mistakes(logits, response_ids, P, temperature) -> dict:
    """What the typical mistakes of Exercise 1.1 return on these inputs."""
    T = response_ids.shape[1]
    aligned = response_logits(logits, P, T).float()  # (B, T, V)
    shifted = logits[:, P : P + T].float()  # (B, T, V), one position too late
    return {
        _OFF_BY_ONE: logprobs_from_logits(shifted, response_ids, temperature),
        _NO_TEMPERATURE: logprobs_from_logits(aligned, response_ids, 1.0),
        _TIMES_TEMPERATURE: _gathered(torch.log_softmax(aligned * temperature, -1), response_ids),
        "returned probabilities (softmax) instead of log-probabilities": _gathered(
            torch.softmax(aligned / temperature, -1), response_ids
        ),
        "normalised over the positions (log_softmax over dim=1) instead of over the vocabulary (dim=-1)": _gathered(
            torch.log_softmax(aligned / temperature, dim=1), response_ids
        ),
        f"{_OFF_BY_ONE}, and also {_NO_TEMPERATURE}": logprobs_from_logits(shifted, response_ids, 1.0),
    }


def _check_shape(got, want_shape: tuple, what: str, case: str, hints: dict, default_hint: str):
    """Name the usual shape mistakes (``hints``: wrong shape -> what it suggests) before comparing values."""
    if not isinstance(got, torch.Tensor):
        raise CheckFailure(
            f"{what} should be a torch.Tensor of shape {want_shape}, got {type(got).__name__}. Case: {case}"
        )
    if tuple(got.shape) == tuple(want_shape):
        return
    hint = hints.get(tuple(got.shape), default_hint)
    raise CheckFailure(
        f"{what} has shape {tuple(got.shape)}, expected {tuple(want_shape)}: it looks like you {hint}. Case: {case}"
    )


def _logprob_shape(got, B: int, T: int, V: int, case: str):
    hints = {
        (
            B,
            T,
            V,
        ): "returned the full (B, T, V) distribution: pick each response token's entry with .gather(-1, "
        "ids.unsqueeze(-1)).squeeze(-1)",
        (B, T, 1): "forgot to .squeeze(-1) after the gather",
        (
            B,
            T,
            B,
            T,
        ): "indexed with the ids directly (logp[..., ids] builds every combination): gather along the vocabulary "
        "dim, dim=-1",
        (B, T + 1): "scored one position too many: keep only the T outputs [P-1 : P+T-1]",
    }
    _check_shape(
        got,
        (B, T),
        "logprobs",
        case,
        hints,
        "gathered along the wrong dimension (gather along the vocabulary dim, dim=-1)",
    )


@checker
def check_gather_response_logprobs(fn):
    """Exercise 1.1: ``fn(logits, response_ids, prompt_len, temperature)`` -> (B, T) response logprobs."""
    # 1. small cases, several shapes and temperatures (P = 1 is the edge: the slice starts at 0)
    for B, P, T, V, temperature in [(2, 3, 2, 5, 0.7), (3, 5, 4, 11, 1.3), (1, 1, 1, 4, 0.5)]:
        logits, response_ids = _case(B, P, T, V, seed=B + P + T)
        case = f"B={B}, P={P}, T={T}, V={V}, temperature={temperature}, random logits"
        got = call(fn, logits.clone(), response_ids.clone(), P, temperature)
        _logprob_shape(got, B, T, V, case)
        want = logprobs_from_logits(response_logits(logits, P, T), response_ids, temperature)
        expect_close(
            got, want, what="logprobs", mistakes=_logprob_mistakes(logits, response_ids, P, temperature), case=case
        )

    # 2. stability: logits x 100 make most probabilities underflow to 0
    B, P, T, V, temperature = 2, 3, 3, 6, 1.0
    logits, response_ids = _case(B, P, T, V, scale=100.0, seed=7)
    case = f"B={B}, P={P}, T={T}, V={V}, logits of size ~100"
    got = call(fn, logits.clone(), response_ids.clone(), P, temperature)
    _logprob_shape(got, B, T, V, case)
    if not torch.isfinite(got).all():
        raise CheckFailure(
            f"logprobs contains NaN or -inf for large logits: it looks like you {_UNSTABLE}. Case: {case}\n  "
            f"got: {got.tolist()}"
        )
    want = logprobs_from_logits(response_logits(logits, P, T), response_ids, temperature)
    expect_close(
        got, want, what="logprobs", mistakes=_logprob_mistakes(logits, response_ids, P, temperature), case=case
    )

    # 3. bfloat16 logits (what a bf16 model returns): the answer must be computed in float32
    B, P, T, V, temperature = 2, 4, 5, 50, 0.9
    logits, response_ids = _case(B, P, T, V, scale=4.0, seed=11)
    logits = logits.to(torch.bfloat16)
    case = f"B={B}, P={P}, T={T}, V={V}, temperature={temperature}, bfloat16 logits"
    got = call(fn, logits.clone(), response_ids.clone(), P, temperature)
    _logprob_shape(got, B, T, V, case)
    want = logprobs_from_logits(response_logits(logits, P, T), response_ids, temperature)
    aligned = response_logits(logits, P, T)  # (B, T, V) bf16
    mistakes = _logprob_mistakes(logits, response_ids, P, temperature)
    mistakes[_BF16] = _gathered(torch.log_softmax(aligned / temperature, -1), response_ids).float()
    mistakes[
        "cast the logprobs back to bfloat16 (keep them in float32: PPO's ratio exp(new - old) needs the precision)"
    ] = want.to(torch.bfloat16).float()
    expect_close(
        got.float() if got.dtype == torch.bfloat16 else got, want, what="logprobs", mistakes=mistakes, case=case
    )


_ENT_UNSTABLE = (
    "computed p * log(p) with log(softmax(...)): where p underflows to 0 that is 0 * (-inf) = NaN; "
    "use log_softmax, or H = logsumexp(z) - sum(p * z)"
)


def _entropy_shape(got, B: int, T: int, V: int, case: str):
    hints = {
        (B, T, V): "forgot to sum -p log p over the vocabulary (dim=-1)",
        (B, T, 1): "kept the vocabulary dim (sum(..., keepdim=True)): drop it",
        (B, V): "summed over the positions (dim=1) instead of the vocabulary (dim=-1)",
        (T, V): "summed over the batch (dim=0) instead of the vocabulary (dim=-1)",
    }
    _check_shape(
        got, (B, T), "entropy", case, hints, "reduced over the wrong dimension (sum over the vocabulary, dim=-1)"
    )


def _entropy_mistakes(logits, temperature) -> dict:
    """What the typical mistakes of Exercise 1.2 return on these inputs."""
    z = logits.float() / temperature  # (B, T, V)
    logp = torch.log_softmax(z, -1)
    p = logp.exp()
    H = entropy_from_logits(logits, temperature)  # (B, T)
    return {
        "got the sign wrong (sum p log p is minus the entropy)": -H,
        "forgot the temperature (the entropy of the sampling distribution uses logits / "
        "temperature)": entropy_from_logits(logits, 1.0),
        "multiplied the logits by the temperature instead of dividing by it": entropy_from_logits(
            logits.float() * temperature, 1.0
        ),
        "used one token's surprisal, -log p of the most likely token, instead of the whole distribution's "
        "entropy": -logp.max(-1).values,
        "averaged -p log p over the vocabulary instead of summing it": -(p * logp).mean(-1),
        "forgot the probability weights (summed -log p over the vocabulary)": -logp.sum(-1),
    }


@checker
def check_entropy_from_logits(fn):
    """Exercise 1.2: ``fn(logits, temperature)`` -> (B, T) entropy of softmax(logits / temperature)."""
    for B, T, V, temperature in [(2, 3, 7, 0.8), (1, 4, 13, 1.5), (3, 1, 2, 1.0)]:
        logits, _ = _case(B, 0, T, V, scale=2.0, seed=B * T + V)
        case = f"B={B}, T={T}, V={V}, temperature={temperature}, random logits"
        got = call(fn, logits.clone(), temperature)
        _entropy_shape(got, B, T, V, case)
        want = entropy_from_logits(logits, temperature)
        expect_close(got, want, what="entropy", mistakes=_entropy_mistakes(logits, temperature), case=case)

    # uniform logits: the entropy is log V exactly
    B, T, V = 1, 2, 8
    got = call(fn, torch.zeros(B, T, V), 1.0)
    _entropy_shape(got, B, T, V, "uniform logits")
    expect_close(
        got,
        torch.full((B, T), float(torch.log(torch.tensor(8.0)))),
        what="entropy",
        case=f"all-zero logits, V={V}: H = log V",
    )

    # stability: logits x 100 make most probabilities underflow to 0
    B, T, V = 2, 3, 6
    logits, _ = _case(B, 0, T, V, scale=100.0, seed=5)
    case = f"B={B}, T={T}, V={V}, logits of size ~100"
    got = call(fn, logits.clone(), 1.0)
    _entropy_shape(got, B, T, V, case)
    if not torch.isfinite(got).all():
        raise CheckFailure(
            f"entropy contains NaN or inf for large logits: it looks like you {_ENT_UNSTABLE}. Case: {case}\n  "
            f"got: {got.tolist()}"
        )
    expect_close(
        got,
        entropy_from_logits(logits, 1.0),
        what="entropy",
        mistakes=_entropy_mistakes(logits, 1.0),
        case=case,
        atol=1e-4,
    )

    # bfloat16 logits: the answer must be computed in float32
    B, T, V, temperature = 2, 3, 50, 0.9
    logits, _ = _case(B, 0, T, V, scale=4.0, seed=3)
    logits = logits.to(torch.bfloat16)
    case = f"B={B}, T={T}, V={V}, temperature={temperature}, bfloat16 logits"
    got = call(fn, logits.clone(), temperature)
    _entropy_shape(got, B, T, V, case)
    want = entropy_from_logits(logits, temperature)
    z = logits / temperature  # bf16
    mistakes = _entropy_mistakes(logits, temperature)
    mistakes["computed the entropy in bfloat16: upcast the logits with .float() first"] = (
        -(torch.softmax(z, -1) * torch.log_softmax(z, -1)).sum(-1).float()
    )
    expect_close(
        got.float() if got.dtype == torch.bfloat16 else got, want, what="entropy", mistakes=mistakes, case=case
    )
