"""Chapter 03 checkers: ``check_compute_gae`` (Exercise 3.1), ``check_token_rewards`` (Exercise 3.2) and
``check_kl_penalty`` (Exercise 3.3).

Each checker runs the learner's function on tiny hand-made cases and on random batches of rows of
different lengths, and compares with ``ppo_core.gae``. When the output is wrong, it is compared with
what typical mistakes produce (each computed here by a small, deliberately buggy loop), so the
failure message can say which mistake it was.
"""

import torch

from ..gae import compute_gae, token_rewards
from ..kl import kl_penalty
from ..masking import masked_whiten
from ._common import CheckFailure, _fmt, call, checker, expect_close

__all__ = ["check_compute_gae", "check_token_rewards", "check_kl_penalty"]


# --------------------------------------------------------------------------------------------
# GAE: a naive per-row loop with switches that reproduce the common mistakes.
# --------------------------------------------------------------------------------------------
def _gae_loop(
    rewards,
    values,
    mask,
    gamma,
    lam,
    *,
    forwards=False,
    gamma_in_delta=True,
    gamma_in_rec=True,
    use_lam=True,
    bootstrap="zero",
    ignore_mask=False,
):
    """Advantages (B, T) from a plain Python loop over each row's response tokens.

    ``bootstrap`` says what the last response token uses as V(s_{t+1}): ``"zero"`` (right),
    ``"next_position"`` (the value at index t+1 even if it is padding) or ``"roll"`` (torch.roll's
    wrap-around: index t+1, or index 0 at the end of the row).
    """
    B, T = rewards.shape
    advantages = torch.zeros(B, T, dtype=torch.float64)
    r, v = rewards.double(), values.double()
    g_delta = gamma if gamma_in_delta else 1.0
    g_rec = (gamma if gamma_in_rec else 1.0) * (lam if use_lam else 1.0)
    for b in range(B):
        idx = list(range(T)) if ignore_mask else torch.nonzero(mask[b]).flatten().tolist()
        n = len(idx)
        deltas = []
        for k, t in enumerate(idx):
            if k + 1 < n and bootstrap == "zero":
                next_value = v[b, idx[k + 1]]
            elif bootstrap == "zero":
                next_value = 0.0
            else:  # the buggy bootstraps look at position t + 1 whatever the mask says
                next_value = v[b, t + 1] if t + 1 < T else (v[b, 0] if bootstrap == "roll" else 0.0)
            deltas.append(r[b, t] + g_delta * next_value - v[b, t])
        carry = 0.0
        for k in range(n) if forwards else reversed(range(n)):
            carry = deltas[k] + g_rec * carry
            advantages[b, idx[k]] = carry
    return advantages.to(rewards.dtype)


def _gae_leaky(rewards, values, mask, gamma, lam, *, mask_output):
    """The recursion over every position, bootstrapping from masked values but never resetting the
    carried advantage on padding; ``mask_output`` zeroes padding at the end."""
    B, T = rewards.shape
    m = mask.to(torch.float64)
    v = values.double()
    next_values = torch.cat([v[:, 1:] * m[:, 1:], torch.zeros(B, 1, dtype=torch.float64)], dim=1)  # (B, T)
    deltas = rewards.double() + gamma * next_values - v  # (B, T), padding included
    advantages = torch.zeros(B, T, dtype=torch.float64)
    carry = torch.zeros(B, dtype=torch.float64)
    for t in reversed(range(T)):
        carry = deltas[:, t] + gamma * lam * carry
        advantages[:, t] = carry
    return (advantages * m if mask_output else advantages).to(rewards.dtype)


def _rewards_to_go(rewards, mask, gamma):
    """(B, T) discounted sum of the rewards from t to the end of the row's response (0 on padding)."""
    B, T = rewards.shape
    out = torch.zeros(B, T, dtype=torch.float64)
    for b in range(B):
        carry = 0.0
        for t in reversed(range(T)):
            if mask[b, t]:
                carry = rewards[b, t].double() + gamma * carry
                out[b, t] = carry
    return out.to(rewards.dtype)


def _gae_mistakes(rewards, values, mask, gamma, lam):
    """{description: advantages that mistake produces}; order matters when two coincide."""
    loop = lambda **kw: _gae_loop(rewards, values, mask, gamma, lam, **kw)  # noqa: E731
    right = compute_gae(rewards, values, mask, gamma=gamma, lam=lam)[0]
    return {
        "ran the recursion forwards (A_t = delta_t + gamma*lam*A_{t-1}); it must run backwards, from the last "
        "token to the first, because A_t needs A_{t+1}": loop(forwards=True),
        "forgot lam in the recursion (A_t = delta_t + gamma*A_{t+1}, which is lam = 1)": loop(use_lam=False),
        "forgot gamma in the recursion (A_t = delta_t + lam*A_{t+1})": loop(gamma_in_rec=False),
        "forgot gamma in the TD error (delta_t = r_t + V_{t+1} - V_t)": loop(gamma_in_delta=False),
        "forgot gamma everywhere": loop(gamma_in_delta=False, gamma_in_rec=False),
        "bootstrapped the last response token from the value at the next position (a padded position) instead "
        "of 0: after the last True token of the mask, V = 0": loop(bootstrap="next_position"),
        "took V(s_{t+1}) with torch.roll, which wraps around: the last token bootstraps from V of the first "
        "token instead of 0": loop(bootstrap="roll"),
        "forgot the mask altogether (padding was treated as more response tokens)": loop(ignore_mask=True),
        "let the padding leak into the recursion: the carried advantage A_{t+1} must be 0 after the last "
        "response token (multiply it by the mask inside the loop)": _gae_leaky(
            rewards, values, mask, gamma, lam, mask_output=True
        ),
        "let the padding leak into the recursion (the carried advantage A_{t+1} must be 0 after the last "
        "response token) and left nonzero advantages on padding": _gae_leaky(
            rewards, values, mask, gamma, lam, mask_output=False
        ),
        "whitened the advantages inside compute_gae (whitening belongs in the trainer; compute_gae returns "
        "raw advantages)": masked_whiten(right, mask),
    }


def _returns_mistakes(rewards, values, mask, gamma, lam):
    advantages = compute_gae(rewards, values, mask, gamma=gamma, lam=lam)[0]
    zeros = torch.zeros_like(values)
    return {
        "computed returns as the rewards-to-go (discounted sum of rewards) instead of advantages + values "
        "(the lambda-return, the value target)": _rewards_to_go(rewards, mask, gamma),
        "returned the advantages as the returns; the value target is returns = advantages + values": advantages,
        "computed returns = advantages - values; it is advantages + values": torch.where(
            mask, advantages - values, zeros
        ),
    }


def _as_pair(out, name):
    if not (isinstance(out, (tuple, list)) and len(out) == 2 and all(isinstance(x, torch.Tensor) for x in out)):
        raise CheckFailure(
            f"{name} should return a tuple (advantages, returns) of two tensors; got {type(out).__name__}."
        )
    return out


def _check_padding_zero(got, want, mask, what, case):
    """A named failure for 'right on response tokens, not 0 on padding'."""
    on = mask.to(torch.bool)
    if got.shape != want.shape or not torch.isfinite(got[on]).all():
        return
    if torch.allclose(got[on].double(), want[on].double(), atol=1e-5, rtol=1e-4) and not torch.all(got[~on] == 0):
        raise CheckFailure(
            f"{what} are right on the response tokens but not 0 on padding: forgot the mask on the output "
            f"(use torch.where(mask, ..., 0)).\n  case:     {case}\n  expected: {_fmt(want)}\n  got:      {_fmt(got)}"
        )


def _expect(got, want, *, what, case, mistakes):
    """expect_close, building the (slow, loop-based) ``mistakes()`` only when the answer is wrong."""
    try:
        expect_close(got, want, what=what, case=case)
    except CheckFailure:
        expect_close(got, want, what=what, case=case, mistakes=mistakes())


def _gae_case(fn, rewards, values, mask, gamma, lam, case):
    inputs = (rewards.clone(), values.clone(), mask.clone())
    advantages, returns = _as_pair(call(fn, rewards, values, mask, gamma=gamma, lam=lam), "compute_gae")
    for before, after, name in zip(inputs, (rewards, values, mask), ("rewards", "values", "mask")):
        if not torch.equal(before, after):
            raise CheckFailure(f"compute_gae changed its input `{name}` in place; work on new tensors. Case: {case}")
    want_adv, want_ret = compute_gae(rewards, values, mask, gamma=gamma, lam=lam)
    _check_padding_zero(advantages, want_adv, mask, "advantages", case)
    _expect(
        advantages,
        want_adv,
        what="advantages",
        case=case,
        mistakes=lambda: _gae_mistakes(rewards, values, mask, gamma, lam),
    )
    _check_padding_zero(returns, want_ret, mask, "returns", case)
    _expect(
        returns,
        want_ret,
        what="returns",
        case=case,
        mistakes=lambda: _returns_mistakes(rewards, values, mask, gamma, lam),
    )
    return advantages, returns


def _lengths_mask(lengths, T):
    return torch.arange(T).expand(len(lengths), T) < torch.tensor(lengths).unsqueeze(1)  # (B, T) bool


@checker
def check_compute_gae(fn):
    """Exercise 3.1: ``fn(rewards, values, mask, gamma=1.0, lam=0.95) -> (advantages, returns)``, both (B, T)."""
    # 1. One row, sparse reward at the end, gamma = 1.
    rewards = torch.tensor([[0.0, 0.0, 1.0]])
    values = torch.tensor([[0.5, 0.6, 0.7]])
    mask = torch.ones(1, 3, dtype=torch.bool)
    _gae_case(
        fn,
        rewards,
        values,
        mask,
        1.0,
        0.95,
        "rewards [[0, 0, 1]], values [[0.5, 0.6, 0.7]], no padding, gamma=1, lam=0.95",
    )

    # 2. gamma < 1 and a reward on every token, so every gamma and lam mistake shows.
    rewards = torch.tensor([[0.1, -0.2, 0.0, 1.0]])
    values = torch.tensor([[0.4, 0.3, 0.6, 0.8]])
    mask = torch.ones(1, 4, dtype=torch.bool)
    _gae_case(
        fn,
        rewards,
        values,
        mask,
        0.9,
        0.8,
        "rewards [[0.1, -0.2, 0, 1]], values [[0.4, 0.3, 0.6, 0.8]], no padding, gamma=0.9, lam=0.8",
    )

    # 3. Rows of different lengths; padding holds junk values and rewards that must never be read.
    mask = _lengths_mask([3, 1, 4], 4)
    rewards = torch.tensor([[0.0, 0.0, 1.0, 5.0], [-1.0, 7.0, 7.0, 7.0], [0.0, 0.5, 0.0, 2.0]])
    values = torch.tensor([[0.2, 0.4, 0.6, 9.0], [0.3, 9.0, 9.0, 9.0], [0.1, 0.2, 0.3, 0.4]])
    _gae_case(
        fn,
        rewards,
        values,
        mask,
        0.95,
        0.9,
        "3 rows of lengths 3, 1, 4 (padding holds junk 5, 7 and 9), gamma=0.95, lam=0.9",
    )

    # 4. Random batches of several shapes, including a length-1 row and a full row.
    gen = torch.Generator().manual_seed(3)
    for B, T, gamma, lam in [(1, 1, 1.0, 0.95), (2, 7, 1.0, 1.0), (5, 16, 0.99, 0.95), (3, 33, 0.9, 0.0)]:
        lengths = torch.randint(1, T + 1, (B,), generator=gen).tolist()
        lengths[0] = T
        lengths[-1] = 1 if B > 1 else lengths[-1]
        mask = _lengths_mask(lengths, T)
        rewards = torch.randn(B, T, generator=gen)
        values = torch.randn(B, T, generator=gen)
        _gae_case(
            fn,
            rewards,
            values,
            mask,
            gamma,
            lam,
            f"random (B, T)=({B}, {T}), row lengths {lengths}, gamma={gamma}, lam={lam}",
        )

    # 5. Large rewards stay finite; float64 in, float64 out.
    mask = _lengths_mask([6, 4], 6)
    rewards = 1e4 * torch.randn(2, 6, generator=gen, dtype=torch.float64)
    values = 1e4 * torch.randn(2, 6, generator=gen, dtype=torch.float64)
    advantages, _ = _gae_case(fn, rewards, values, mask, 1.0, 0.95, "float64, rewards and values ~1e4")
    if advantages.dtype != torch.float64:
        raise CheckFailure(f"advantages came back as {advantages.dtype} for float64 inputs; keep the input dtype.")


# --------------------------------------------------------------------------------------------
# Per-token rewards.
# --------------------------------------------------------------------------------------------
def _rewards_variant(scores, kl, mask, kl_coef, *, score_at="last_true", sign=-1.0, use_mask=True, use_coef=True):
    B, T = kl.shape
    coef = kl_coef if use_coef else 1.0
    out = sign * coef * kl.double()
    if use_mask:
        out = torch.where(mask, out, torch.zeros_like(out))
    lengths = mask.sum(dim=1)
    for b in range(B):
        if score_at == "every":
            out[b] += scores[b].double() * mask[b]
            continue
        t = {"last_true": lengths[b] - 1, "first": 0, "row_end": T - 1, "one_past": lengths[b]}[score_at]
        if t < T:
            out[b, t] += scores[b].double()
    return out.to(kl.dtype)


def _token_rewards_mistakes(scores, kl, mask, kl_coef):
    v = lambda **kw: _rewards_variant(scores, kl, mask, kl_coef, **kw)  # noqa: E731
    return {
        "put the score on the first response token; it belongs on the last True token of the mask": v(score_at="first"),
        "put the score on the last position of the row (index T-1), which is padding for a short response; it "
        "belongs on the last True token of the mask": v(score_at="row_end"),
        "put the score one position too far (index mask.sum()); the last response token is mask.sum() - 1": v(
            score_at="one_past"
        ),
        "flipped the sign of the KL penalty (+kl_coef*kl rewards drifting away from the reference); the "
        "reward gets -kl_coef*kl": v(sign=1.0),
        "forgot the mask: the KL penalty landed on padding too": v(use_mask=False),
        "forgot kl_coef (the penalty is -kl_coef*kl)": v(use_coef=False),
        "added the score to every response token; it is one number for the whole sequence, on its last token": v(
            score_at="every"
        ),
    }


def _rewards_case(fn, scores, kl, mask, kl_coef, case):
    inputs = (scores.clone(), kl.clone(), mask.clone())
    got = call(fn, scores, kl, mask, kl_coef)
    for before, after, name in zip(inputs, (scores, kl, mask), ("scores", "kl", "mask")):
        if not torch.equal(before, after):
            raise CheckFailure(f"token_rewards changed its input `{name}` in place; work on a new tensor. Case: {case}")
    if not isinstance(got, torch.Tensor):
        raise CheckFailure(f"token_rewards should return one (B, T) tensor; got {type(got).__name__}.")
    _expect(
        got,
        token_rewards(scores, kl, mask, kl_coef),
        what="rewards",
        case=case,
        mistakes=lambda: _token_rewards_mistakes(scores, kl, mask, kl_coef),
    )


@checker
def check_token_rewards(fn):
    """Exercise 3.2: ``fn(scores, kl, mask, kl_coef) -> rewards`` (B, T)."""
    # 1. Two padded rows; the KL on padding is junk that must not land in the rewards.
    mask = _lengths_mask([3, 2], 4)
    scores = torch.tensor([1.0, -0.5])
    kl = torch.tensor([[0.2, -0.1, 0.3, 4.0], [0.5, 0.1, 4.0, 4.0]])
    _rewards_case(
        fn,
        scores,
        kl,
        mask,
        0.1,
        "scores [1, -0.5], row lengths 3 and 2 of T=4, kl [[0.2, -0.1, 0.3, 4], [0.5, 0.1, 4, 4]], kl_coef=0.1",
    )
    # 2. A full row, a length-1 row and a padded row.
    mask = _lengths_mask([4, 1, 2], 4)
    scores = torch.tensor([0.0, 2.0, 1.0])
    kl = torch.tensor([[0.1, 0.2, 0.3, 0.4], [0.3, 9.0, 9.0, 9.0], [-0.2, 0.2, 9.0, 9.0]])
    _rewards_case(fn, scores, kl, mask, 0.05, "scores [0, 2, 1], row lengths 4, 1, 2 of T=4, kl_coef=0.05")
    # 3. Random shapes.
    gen = torch.Generator().manual_seed(3)
    for B, T in [(1, 1), (4, 9), (6, 24)]:
        lengths = torch.randint(1, T + 1, (B,), generator=gen).tolist()
        mask = _lengths_mask(lengths, T)
        scores = torch.randn(B, generator=gen)
        kl = torch.randn(B, T, generator=gen).abs()
        _rewards_case(fn, scores, kl, mask, 0.02, f"random (B, T)=({B}, {T}), row lengths {lengths}, kl_coef=0.02")


# --------------------------------------------------------------------------------------------
# Per-token KL estimates.
# --------------------------------------------------------------------------------------------
def _kl_mistakes(logprobs, ref_logprobs, estimator):
    """{description: what that mistake gives} for one estimator; order matters when two coincide."""
    lp, ref = logprobs.double(), ref_logprobs.double()
    log_ratio = lp - ref  # log pi - log pi_ref
    k3_flipped = torch.expm1(log_ratio) - log_ratio  # rho = pi / pi_ref: the k3 of KL(pi_ref || pi)
    probs = lp.exp() - ref.exp()
    mistakes = {
        "k1": {
            "flipped the log-ratio (ref_logprobs - logprobs): on the policy's samples that is minus "
            "KL(pi || pi_ref), a bonus for drifting away; k1 = logprobs - ref_logprobs": -log_ratio,
            "used probabilities instead of log-probabilities (exp(logprobs) - exp(ref_logprobs)); k1 is the "
            "log-ratio logprobs - ref_logprobs": probs,
            "computed the ratio pi / pi_ref instead of its log; k1 = logprobs - ref_logprobs": log_ratio.exp(),
        },
        "k2": {
            "forgot the 1/2 in k2 = (logprobs - ref_logprobs)**2 / 2": log_ratio**2,
            "used probabilities instead of log-probabilities in k2; it is (logprobs - ref_logprobs)**2 / 2": 0.5
            * probs**2,
        },
        "k3": {
            "used rho = pi / pi_ref in k3 (the other direction, an estimate of KL(pi_ref || pi) that is biased on "
            "the policy's samples); rho = pi_ref / pi = exp(ref_logprobs - logprobs)": k3_flipped,
            "flipped the sign of log rho in k3: (rho - 1) + log rho; k3 = (rho - 1) - log rho with "
            "log rho = ref_logprobs - logprobs": torch.expm1(-log_ratio) - log_ratio,
            "negated k3 (it is never negative: (rho - 1) - log rho >= 0)": -(torch.expm1(-log_ratio) + log_ratio),
            "returned k1 (the plain log-ratio) for k3; k3 = (rho - 1) - log rho with rho = exp(ref_logprobs - "
            "logprobs)": log_ratio,
            "used probabilities instead of log-probabilities in k3 (rho = exp(ref_logprobs) / exp(logprobs) "
            "is right, but log rho must be ref_logprobs - logprobs)": torch.expm1(-log_ratio) - (ref.exp() - lp.exp()),
        },
    }[estimator]
    return {desc: wrong.to(logprobs.dtype) for desc, wrong in mistakes.items()}


def _kl_case(fn, logprobs, ref_logprobs, estimator, case):
    inputs = (logprobs.clone(), ref_logprobs.clone())
    got = call(fn, logprobs, ref_logprobs, estimator=estimator)
    for before, after, name in zip(inputs, (logprobs, ref_logprobs), ("logprobs", "ref_logprobs")):
        if not torch.equal(before, after):
            raise CheckFailure(f"kl_penalty changed its input `{name}` in place; work on a new tensor. Case: {case}")
    if not isinstance(got, torch.Tensor):
        raise CheckFailure(f"kl_penalty should return one tensor of the inputs' shape; got {type(got).__name__}.")
    want = kl_penalty(logprobs, ref_logprobs, estimator=estimator)
    if got.shape != want.shape and got.numel() in (1, want.shape[0]):
        raise CheckFailure(
            f"kl_penalty({estimator!r}) returned shape {tuple(got.shape)} for inputs of shape {tuple(want.shape)}: "
            "it reduced over tokens. Return one estimate per token; token_rewards and the trainer take the "
            f"masked sums and means. Case: {case}"
        )
    _expect(
        got,
        want,
        what=f"kl_penalty(..., estimator={estimator!r})",
        case=case,
        mistakes=lambda: _kl_mistakes(logprobs, ref_logprobs, estimator),
    )


@checker
def check_kl_penalty(fn):
    """Exercise 3.3: ``fn(logprobs, ref_logprobs, estimator="k1") -> (B, T)`` per-token estimates of
    KL(pi || pi_ref), for the estimators "k1", "k2" and "k3"."""
    logprobs = torch.tensor([[-0.5, -2.0, -1.0], [-0.1, -3.0, -0.7]])
    ref_logprobs = torch.tensor([[-1.5, -1.0, -1.0], [-0.3, -0.5, -2.0]])
    for estimator in ("k1", "k2", "k3"):
        _kl_case(
            fn,
            logprobs,
            ref_logprobs,
            estimator,
            "logprobs [[-0.5, -2, -1], [-0.1, -3, -0.7]], ref_logprobs [[-1.5, -1, -1], [-0.3, -0.5, -2]]",
        )
    gen = torch.Generator().manual_seed(3)
    for B, T in [(1, 1), (4, 9)]:
        logprobs = -torch.rand(B, T, generator=gen) * 4
        ref_logprobs = logprobs + torch.randn(B, T, generator=gen)
        for estimator in ("k1", "k2", "k3"):
            _kl_case(fn, logprobs, ref_logprobs, estimator, f"random (B, T)=({B}, {T}), log-ratios ~ N(0, 1)")
    # Float64 in, float64 out; a log-ratio of 1e-6 keeps its precision in k3 (about l**2 / 2 = 5e-13).
    logprobs = torch.tensor([[-1.0, -2.0]], dtype=torch.float64)
    tiny = logprobs - torch.tensor([[1e-6, -1e-6]], dtype=torch.float64)
    got = call(fn, logprobs, tiny, estimator="k3")
    if isinstance(got, torch.Tensor) and got.dtype != torch.float64:
        raise CheckFailure(f"kl_penalty returned {got.dtype} for float64 inputs; keep the input dtype.")
    expect_close(got, kl_penalty(logprobs, tiny, "k3"), what="k3 for log-ratios of 1e-6", atol=1e-15, rtol=1e-3)
    try:
        call(fn, logprobs, tiny, estimator="k4")
    except ValueError:
        return
    raise CheckFailure(
        "kl_penalty(..., estimator='k4') did not raise ValueError: an unknown estimator name must fail loudly "
        "(raise ValueError naming k1, k2, k3) instead of returning something."
    )
