"""Naive reference implementations of the ``ppo_core`` math, for the unit tests.

Every function here loops over ``b`` and ``t`` with plain Python floats and the ``math`` module:
no vectorisation, no torch arithmetic, so that a bug in the package cannot be repeated here by
sharing code. Each returns a nested Python list (or a float); the tests turn it into a tensor with
``as_tensor`` and compare with ``torch.testing.assert_close``.

Also here: the random masks and junk-filling helpers that several test files share.
"""

import math

import torch

# --------------------------------------------------------------------------------------------
# Small helpers
# --------------------------------------------------------------------------------------------


def as_tensor(nested, like: torch.Tensor) -> torch.Tensor:
    """A nested list of Python floats as a tensor with the dtype (and device) of ``like``."""
    return torch.tensor(nested, dtype=torch.float64).to(dtype=like.dtype, device=like.device)


def random_prefix_mask(B: int, T: int, gen: torch.Generator) -> torch.Tensor:
    """(B, T) bool, each row True on a prefix (a response followed by padding).

    Row 0 is always full (a response that hit the length limit) so that at least one entry is True.
    Other rows have a random length in 0..T (0: an empty response).
    """
    lengths = torch.randint(0, T + 1, (B,), generator=gen)
    lengths[0] = T
    return torch.arange(T).unsqueeze(0) < lengths.unsqueeze(1)


def random_arbitrary_mask(B: int, T: int, gen: torch.Generator) -> torch.Tensor:
    """(B, T) bool with independent random entries (holes anywhere); at least one True entry."""
    mask = torch.rand(B, T, generator=gen) < 0.6
    mask[0, 0] = True
    return mask


MASK_KINDS = {"prefix": random_prefix_mask, "arbitrary": random_arbitrary_mask}


def fill_masked(x: torch.Tensor, mask: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    """A copy of x whose masked-out entries (mask False) hold junk: NaN, +inf, -inf, huge numbers."""
    junk_values = torch.tensor([float("nan"), float("inf"), float("-inf"), 1e30, -1e30, 7.0], dtype=torch.float64)
    if x.dim() > mask.dim():  # (B, T, V) against a (B, T) mask
        mask = mask.unsqueeze(-1).expand_as(x)
    idx = torch.randint(0, len(junk_values), x.shape, generator=gen)
    junk = junk_values[idx].to(x.dtype)
    return torch.where(mask.to(torch.bool), x, junk)


def fill_masked_finite(x: torch.Tensor, mask: torch.Tensor, gen: torch.Generator, scale: float = 50.0) -> torch.Tensor:
    """Like ``fill_masked`` but with finite junk of the given scale (for gradient checks)."""
    junk = (torch.randn(x.shape, generator=gen, dtype=torch.float64) * scale).to(x.dtype)
    return torch.where(mask.to(torch.bool), x, junk)


# --------------------------------------------------------------------------------------------
# Chapter 01: logprobs, response slice, entropy
# --------------------------------------------------------------------------------------------


def _log_softmax_list(row: list[float], temperature: float) -> list[float]:
    """log softmax(row / temperature) of one list of logits, max-subtracted for stability."""
    z = [v / temperature for v in row]
    m = max(z)
    log_norm = m + math.log(sum(math.exp(v - m) for v in z))
    return [v - log_norm for v in z]


def ref_logprobs(logits: torch.Tensor, tokens: torch.Tensor, temperature: float = 1.0) -> list:
    """(B, T, V), (B, T) -> [[log softmax(logits[b, t] / temperature)[tokens[b, t]] for t] for b]."""
    L, tok = logits.double().tolist(), tokens.tolist()
    out = []
    for b in range(len(L)):
        row = []
        for t in range(len(L[b])):
            row.append(_log_softmax_list(L[b][t], temperature)[tok[b][t]])
        out.append(row)
    return out


def ref_response_slice(x: torch.Tensor, prompt_len: int, response_len: int) -> list:
    """out[b][t] = x[b][prompt_len - 1 + t]: the output at position P-1+t predicts response token t."""
    X = x.double().tolist()
    return [[X[b][prompt_len - 1 + t] for t in range(response_len)] for b in range(len(X))]


def ref_entropy(logits: torch.Tensor, temperature: float = 1.0) -> list:
    """(B, T, V) -> [[-sum_v p_v log p_v]], with p = softmax(logits / temperature); terms with p = 0 skipped."""
    L = logits.double().tolist()
    out = []
    for b in range(len(L)):
        row = []
        for t in range(len(L[b])):
            logp = _log_softmax_list(L[b][t], temperature)
            h = 0.0
            for lp in logp:
                p = math.exp(lp)
                if p > 0.0:
                    h -= p * lp
            row.append(h)
        out.append(row)
    return out


# --------------------------------------------------------------------------------------------
# Chapter 02: masks and masked statistics
# --------------------------------------------------------------------------------------------


def ref_response_mask(response_ids: torch.Tensor, eos_token_id: int, pad_token_id: int) -> list:
    """True up to and including the first EOS, False after it; padding (before any EOS) is False."""
    out = []
    for row_ids in response_ids.tolist():
        row, seen_eos = [], False
        for tok in row_ids:
            if seen_eos:
                row.append(False)
            elif tok == eos_token_id:
                row.append(True)
                seen_eos = True
            else:
                row.append(tok != pad_token_id)
        out.append(row)
    return out


def _selected(x: torch.Tensor, mask: torch.Tensor) -> list[float]:
    """The entries of a (B, T) tensor where the mask is True, as Python floats, row by row."""
    X, M = x.double().tolist(), mask.tolist()
    return [X[b][t] for b in range(len(X)) for t in range(len(X[b])) if M[b][t]]


def ref_masked_sum(x: torch.Tensor, mask: torch.Tensor) -> float:
    return math.fsum(_selected(x, mask))


def ref_masked_mean(x: torch.Tensor, mask: torch.Tensor) -> float:
    vals = _selected(x, mask)
    return math.fsum(vals) / len(vals) if vals else 0.0


def ref_masked_mean_rows(x: torch.Tensor, mask: torch.Tensor) -> list[float]:
    """Per-row masked mean (``dim=1``); an empty row gives 0."""
    X, M = x.double().tolist(), mask.tolist()
    out = []
    for b in range(len(X)):
        vals = [X[b][t] for t in range(len(X[b])) if M[b][t]]
        out.append(math.fsum(vals) / len(vals) if vals else 0.0)
    return out


def ref_masked_var(x: torch.Tensor, mask: torch.Tensor, unbiased: bool = True) -> float:
    """Variance over the True entries; divide by n - 1 if unbiased and n > 1, else by n."""
    vals = _selected(x, mask)
    n = len(vals)
    if n == 0:
        return 0.0
    mean = math.fsum(vals) / n
    ss = math.fsum((v - mean) ** 2 for v in vals)
    return ss / (n - 1) if (unbiased and n > 1) else ss / n


def ref_masked_whiten(x: torch.Tensor, mask: torch.Tensor, shift_mean: bool = True, eps: float = 1e-8) -> list:
    mean, var = ref_masked_mean(x, mask), ref_masked_var(x, mask, unbiased=True)
    scale = 1.0 / math.sqrt(var + eps)
    X, M = x.double().tolist(), mask.tolist()
    out = []
    for b in range(len(X)):
        row = []
        for t in range(len(X[b])):
            if not M[b][t]:
                row.append(0.0)
                continue
            w = (X[b][t] - mean) * scale
            row.append(w if shift_mean else w + mean)
        out.append(row)
    return out


# --------------------------------------------------------------------------------------------
# Chapter 03: KL estimators, token rewards, GAE
# --------------------------------------------------------------------------------------------


def ref_kl(logprobs: torch.Tensor, ref_logprobs: torch.Tensor, estimator: str) -> list:
    """Per-token estimate of KL(pi || pi_ref) from log pi(a), log pi_ref(a) of a ~ pi."""
    LP, RLP = logprobs.double().tolist(), ref_logprobs.double().tolist()
    out = []
    for b in range(len(LP)):
        row = []
        for t in range(len(LP[b])):
            log_ratio = LP[b][t] - RLP[b][t]  # log pi - log pi_ref
            if estimator == "k1":
                row.append(log_ratio)
            elif estimator == "k2":
                row.append(0.5 * log_ratio * log_ratio)
            elif estimator == "k3":
                r = math.exp(-log_ratio)  # pi_ref / pi
                row.append(r - 1.0 - math.log(r))
            else:
                raise ValueError(estimator)
        out.append(row)
    return out


def ref_token_rewards(scores: torch.Tensor, kl: torch.Tensor, mask: torch.Tensor, kl_coef: float) -> list:
    S, K, M = scores.double().tolist(), kl.double().tolist(), mask.tolist()
    out = []
    for b in range(len(K)):
        true_positions = [t for t in range(len(K[b])) if M[b][t]]
        row = []
        for t in range(len(K[b])):
            if not M[b][t]:
                row.append(0.0)
                continue
            r = -kl_coef * K[b][t]
            if t == true_positions[-1]:
                r += S[b]
            row.append(r)
        out.append(row)
    return out


def ref_gae(rewards: torch.Tensor, values: torch.Tensor, mask: torch.Tensor, gamma: float, lam: float):
    """(advantages, returns) as nested lists, walking each row's True positions backwards.

    The trajectory of row b is its True positions in order; the state after the last one is terminal.
    """
    R, V, M = rewards.double().tolist(), values.double().tolist(), mask.tolist()
    advantages, returns = [], []
    for b in range(len(R)):
        T = len(R[b])
        steps = [t for t in range(T) if M[b][t]]
        adv_row, ret_row = [0.0] * T, [0.0] * T
        next_value, next_adv = 0.0, 0.0
        for t in reversed(steps):
            delta = R[b][t] + gamma * next_value - V[b][t]
            adv = delta + gamma * lam * next_adv
            adv_row[t], ret_row[t] = adv, adv + V[b][t]
            next_value, next_adv = V[b][t], adv
        advantages.append(adv_row)
        returns.append(ret_row)
    return advantages, returns


def ref_monte_carlo_advantages(rewards: torch.Tensor, values: torch.Tensor, mask: torch.Tensor, gamma: float) -> list:
    """sum_{k >= 0} gamma^k r_{t_k} - V_t over the row's True positions t = t_0 < t_1 < ...: lambda = 1 GAE."""
    R, V, M = rewards.double().tolist(), values.double().tolist(), mask.tolist()
    out = []
    for b in range(len(R)):
        steps = [t for t in range(len(R[b])) if M[b][t]]
        row = [0.0] * len(R[b])
        for i, t in enumerate(steps):
            ret = sum(gamma**k * R[b][s] for k, s in enumerate(steps[i:]))
            row[t] = ret - V[b][t]
        out.append(row)
    return out


def ref_td_errors(rewards: torch.Tensor, values: torch.Tensor, mask: torch.Tensor, gamma: float) -> list:
    """delta_t = r_t + gamma V_next - V_t over the row's True positions: lambda = 0 GAE."""
    R, V, M = rewards.double().tolist(), values.double().tolist(), mask.tolist()
    out = []
    for b in range(len(R)):
        steps = [t for t in range(len(R[b])) if M[b][t]]
        row = [0.0] * len(R[b])
        for i, t in enumerate(steps):
            v_next = V[b][steps[i + 1]] if i + 1 < len(steps) else 0.0
            row[t] = R[b][t] + gamma * v_next - V[b][t]
        out.append(row)
    return out


# --------------------------------------------------------------------------------------------
# Chapter 04: losses
# --------------------------------------------------------------------------------------------


def ref_policy_loss(logprobs, old_logprobs, advantages, mask, clip_eps: float = 0.2) -> dict:
    """Loss, stats and d loss / d logprobs of the clipped surrogate, token by token.

    Per token: ratio r = exp(logp - old); loss term max(-A r, -A clip(r, 1 - eps, 1 + eps)). The term is
    "clipped" when the clipped branch is strictly larger; then it does not depend on logp (gradient 0).
    Otherwise its gradient is d(-A r)/d logp = -A r, divided by the number of True tokens.
    """
    LP, OLD = logprobs.double().tolist(), old_logprobs.double().tolist()
    A, M = advantages.double().tolist(), mask.tolist()
    n = sum(1 for row in M for m in row if m)
    terms, clipped_flags, ratios, kls = [], [], [], []
    grad = []
    for b in range(len(LP)):
        grow = []
        for t in range(len(LP[b])):
            if not M[b][t]:
                grow.append(0.0)
                continue
            log_ratio = LP[b][t] - OLD[b][t]
            r = math.exp(log_ratio)
            r_clip = min(max(r, 1.0 - clip_eps), 1.0 + clip_eps)
            unclipped, clipped = -A[b][t] * r, -A[b][t] * r_clip
            is_clipped = clipped > unclipped
            terms.append(max(unclipped, clipped))
            clipped_flags.append(1.0 if is_clipped else 0.0)
            ratios.append(r)
            kls.append((r - 1.0) - log_ratio)
            grow.append(0.0 if is_clipped else -A[b][t] * r / n)
        grad.append(grow)
    mean = lambda v: math.fsum(v) / len(v) if v else 0.0  # noqa: E731
    return {
        "loss": mean(terms),
        "clipfrac": mean(clipped_flags),
        "approx_kl": mean(kls),
        "ratio_mean": mean(ratios),
        "grad": grad,
    }


def ref_value_loss(values, old_values, returns, mask, clip_eps: float = 0.2) -> dict:
    """Loss, clipfrac and d loss / d values of the clipped value loss, token by token.

    Per token: 1/2 max((V - R)^2, (clip(V, V_old - eps, V_old + eps) - R)^2). When the clipped error is
    strictly larger the clip is saturated, so the term does not depend on V (gradient 0); otherwise
    the gradient is (V - R) / n.
    """
    V, OLD = values.double().tolist(), old_values.double().tolist()
    R, M = returns.double().tolist(), mask.tolist()
    n = sum(1 for row in M for m in row if m)
    terms, flags, grad = [], [], []
    for b in range(len(V)):
        grow = []
        for t in range(len(V[b])):
            if not M[b][t]:
                grow.append(0.0)
                continue
            v_clip = min(max(V[b][t], OLD[b][t] - clip_eps), OLD[b][t] + clip_eps)
            err, err_clip = (V[b][t] - R[b][t]) ** 2, (v_clip - R[b][t]) ** 2
            is_clipped = err_clip > err
            terms.append(0.5 * max(err, err_clip))
            flags.append(1.0 if is_clipped else 0.0)
            grow.append(0.0 if is_clipped else (V[b][t] - R[b][t]) / n)
        grad.append(grow)
    mean = lambda v: math.fsum(v) / len(v) if v else 0.0  # noqa: E731
    return {"loss": mean(terms), "clipfrac": mean(flags), "grad": grad}


def ref_entropy_loss(logits, mask, temperature: float = 1.0) -> dict:
    H, M = ref_entropy(logits, temperature), mask.tolist()
    vals = [H[b][t] for b in range(len(H)) for t in range(len(H[b])) if M[b][t]]
    mean_entropy = math.fsum(vals) / len(vals) if vals else 0.0
    return {"loss": -mean_entropy, "entropy": mean_entropy}
