"""The chapter 04 checkers accept the package's losses and name the typical mistakes."""

import pytest
import torch

from ppo_core import checks
from ppo_core.checks import CheckFailure, NotImplementedYet
from ppo_core.logprobs import entropy_from_logits
from ppo_core.losses import entropy_loss, policy_loss, value_loss
from ppo_core.masking import masked_mean

# ---------------------------------------------------------------- the package passes


@pytest.mark.parametrize(
    "check, fn",
    [
        (checks.check_policy_loss, policy_loss),
        (checks.check_value_loss, value_loss),
        (checks.check_entropy_loss, entropy_loss),
    ],
)
def test_package_passes(check, fn, capsys):
    assert check(fn) is True
    assert "passed" in capsys.readouterr().out


@pytest.mark.parametrize("check", [checks.check_policy_loss, checks.check_value_loss, checks.check_entropy_loss])
def test_stub_is_not_implemented(check):
    def stub(*args, **kwargs):
        raise NotImplementedError("exercise")

    with pytest.raises(NotImplementedYet, match="not implemented yet"):
        check(stub)
    assert checks.RESULTS[check.__name__] == "not implemented"


# ---------------------------------------------------------------- 4.1 policy_loss: wrong versions


def _pl_stats(ratio, log_ratio, clipped, unclipped, mask):
    return {
        "clipfrac": masked_mean((clipped > unclipped).float(), mask).item(),
        "approx_kl": masked_mean((ratio - 1) - log_ratio, mask).item(),
        "ratio_mean": masked_mean(ratio, mask).item(),
    }


def pl_sign_flipped(logprobs, old_logprobs, advantages, mask, clip_eps=0.2):
    loss, stats = policy_loss(logprobs, old_logprobs, advantages, mask, clip_eps)
    return -loss, stats


def pl_min_instead_of_max(logprobs, old_logprobs, advantages, mask, clip_eps=0.2):
    log_ratio = logprobs - old_logprobs
    ratio = torch.exp(log_ratio)
    unclipped, clipped = -advantages * ratio, -advantages * ratio.clamp(1 - clip_eps, 1 + clip_eps)
    loss = masked_mean(torch.minimum(unclipped, clipped), mask)
    return loss, _pl_stats(ratio, log_ratio, clipped, unclipped, mask)


def pl_clipped_advantages(logprobs, old_logprobs, advantages, mask, clip_eps=0.2):
    log_ratio = logprobs - old_logprobs
    ratio = torch.exp(log_ratio)
    unclipped, clipped = -advantages * ratio, -advantages.clamp(1 - clip_eps, 1 + clip_eps) * ratio
    loss = masked_mean(torch.maximum(unclipped, clipped), mask)
    return loss, _pl_stats(ratio, log_ratio, clipped, unclipped, mask)


def pl_clipped_log_ratio(logprobs, old_logprobs, advantages, mask, clip_eps=0.2):
    log_ratio = logprobs - old_logprobs
    ratio = torch.exp(log_ratio)
    unclipped, clipped = -advantages * ratio, -advantages * torch.exp(log_ratio.clamp(-clip_eps, clip_eps))
    loss = masked_mean(torch.maximum(unclipped, clipped), mask)
    return loss, _pl_stats(ratio, log_ratio, clipped, unclipped, mask)


def pl_no_mask(logprobs, old_logprobs, advantages, mask, clip_eps=0.2):
    return policy_loss(logprobs, old_logprobs, advantages, torch.ones_like(mask), clip_eps)


def pl_inverted_ratio(logprobs, old_logprobs, advantages, mask, clip_eps=0.2):
    return policy_loss(old_logprobs, logprobs, advantages, mask, clip_eps)


def pl_no_exp(logprobs, old_logprobs, advantages, mask, clip_eps=0.2):
    log_ratio = logprobs - old_logprobs
    ratio = log_ratio  # the bug: a log-ratio used as a ratio
    unclipped, clipped = -advantages * ratio, -advantages * ratio.clamp(1 - clip_eps, 1 + clip_eps)
    loss = masked_mean(torch.maximum(unclipped, clipped), mask)
    return loss, _pl_stats(torch.exp(log_ratio), log_ratio, clipped, unclipped, mask)


def pl_stats_are_tensors(logprobs, old_logprobs, advantages, mask, clip_eps=0.2):
    loss, stats = policy_loss(logprobs, old_logprobs, advantages, mask, clip_eps)
    return loss, {k: torch.tensor(v) for k, v in stats.items()}


def pl_clipfrac_abs(logprobs, old_logprobs, advantages, mask, clip_eps=0.2):
    loss, stats = policy_loss(logprobs, old_logprobs, advantages, mask, clip_eps)
    ratio = torch.exp(logprobs - old_logprobs).detach()
    stats["clipfrac"] = masked_mean(((ratio - 1).abs() > clip_eps).float(), mask).item()
    return loss, stats


def pl_approx_kl_k1(logprobs, old_logprobs, advantages, mask, clip_eps=0.2):
    loss, stats = policy_loss(logprobs, old_logprobs, advantages, mask, clip_eps)
    stats["approx_kl"] = masked_mean(old_logprobs - logprobs.detach(), mask).item()
    return loss, stats


def pl_detached(logprobs, old_logprobs, advantages, mask, clip_eps=0.2):
    return policy_loss(logprobs.detach(), old_logprobs, advantages, mask, clip_eps)


def pl_per_sequence_mean(logprobs, old_logprobs, advantages, mask, clip_eps=0.2):
    _, stats = policy_loss(logprobs, old_logprobs, advantages, mask, clip_eps)
    ratio = torch.exp(logprobs - old_logprobs)
    per_token = torch.maximum(-advantages * ratio, -advantages * ratio.clamp(1 - clip_eps, 1 + clip_eps))
    per_row = (per_token * mask).sum(dim=1) / mask.sum(dim=1)  # each sequence's mean, then the mean of those
    return per_row.mean(), stats


def pl_ratio_mean_clipped(logprobs, old_logprobs, advantages, mask, clip_eps=0.2):
    loss, stats = policy_loss(logprobs, old_logprobs, advantages, mask, clip_eps)
    ratio = torch.exp(logprobs - old_logprobs).detach()
    stats["ratio_mean"] = masked_mean(ratio.clamp(1 - clip_eps, 1 + clip_eps), mask).item()
    return loss, stats


@pytest.mark.parametrize(
    "wrong, match",
    [
        (pl_sign_flipped, "flipped the sign"),
        (pl_min_instead_of_max, "took min instead of max"),
        (pl_clipped_advantages, "clipped the advantages instead of the ratio"),
        (pl_clipped_log_ratio, "clipped the log-ratio"),
        (pl_no_mask, "forgot the mask"),
        (pl_inverted_ratio, "wrong way round"),
        (pl_no_exp, "forgot the exp"),
        (pl_stats_are_tensors, "plain Python float"),
        (pl_clipfrac_abs, r"clipfrac.*\|ratio - 1\| > eps"),
        (pl_approx_kl_k1, r"approx_kl.*used k1"),
        (pl_detached, "does not depend on logprobs"),
        (pl_per_sequence_mean, "averaged over each sequence first"),
        (pl_ratio_mean_clipped, r"ratio_mean.*mean of the clipped ratio"),
    ],
)
def test_policy_checker_names_the_mistake(wrong, match):
    with pytest.raises(CheckFailure, match=match):
        checks.check_policy_loss(wrong)
    assert checks.RESULTS["check_policy_loss"] == "failed"


def test_policy_checker_rejects_a_hardcoded_clip_eps():
    def hardcoded(logprobs, old_logprobs, advantages, mask, clip_eps=0.2):
        return policy_loss(logprobs, old_logprobs, advantages, mask, 0.2)

    with pytest.raises(CheckFailure, match="hard-coded 0.2"):
        checks.check_policy_loss(hardcoded)


def test_a_failure_wraps_to_the_page_width_with_nothing_lost():
    """``wrapped()`` (what the chapters print) keeps every word and each label's alignment, in lines of <= 76."""
    from ppo_core.checks._common import expect_close

    want = torch.linspace(-1, 1, 15).reshape(3, 5)
    with pytest.raises(CheckFailure) as info:
        expect_close(
            want.flip(1),
            want,
            what="the loss",
            mistakes={"reversed every row of the batch": want.flip(1)},
            case="B=3, T=5, a ramp from -1 to 1 over the whole batch, no padding, advantages of both signs",
        )
    message, wrapped = str(info.value), info.value.wrapped()
    assert max(map(len, message.splitlines())) > 76  # unwrapped, it runs past a page's column
    assert max(map(len, wrapped.splitlines())) <= 76
    assert wrapped.split() == message.split()
    lines = wrapped.splitlines()
    assert all(line.startswith("  ") for line in lines[1:])  # continuations are indented
    for label in ("  case:     ", "  expected: "):  # ... under their label's text
        at = next(i for i, line in enumerate(lines) if line.startswith(label))
        assert lines[at + 1].startswith(" " * len(label)) and not lines[at + 1][len(label)].isspace()


# ---------------------------------------------------------------- 4.2 value_loss: wrong versions


def _vl(values, old_values, returns, mask, clip_eps, *, half=True, reduce=torch.maximum, center=None, clip=True):
    center = old_values if center is None else center
    err = (values - returns) ** 2
    err_c = (center + (values - center).clamp(-clip_eps, clip_eps) - returns) ** 2
    per_token = reduce(err, err_c) if clip else err
    loss = (0.5 if half else 1.0) * masked_mean(per_token, mask)
    return loss, {"clipfrac": masked_mean((err_c > err).float(), mask).item()}


def vl_no_half(values, old_values, returns, mask, clip_eps=0.2):
    return _vl(values, old_values, returns, mask, clip_eps, half=False)


def vl_min(values, old_values, returns, mask, clip_eps=0.2):
    return _vl(values, old_values, returns, mask, clip_eps, reduce=torch.minimum)


def vl_around_returns(values, old_values, returns, mask, clip_eps=0.2):
    return _vl(values, old_values, returns, mask, clip_eps, center=returns)


def vl_no_mask(values, old_values, returns, mask, clip_eps=0.2):
    return _vl(values, old_values, returns, torch.ones_like(mask), clip_eps)


def vl_no_clip(values, old_values, returns, mask, clip_eps=0.2):
    return _vl(values, old_values, returns, mask, clip_eps, clip=False)


def vl_clipped_to_eps(values, old_values, returns, mask, clip_eps=0.2):
    return _vl(values, old_values, returns, mask, clip_eps, center=torch.zeros_like(values))


def vl_clipfrac_abs(values, old_values, returns, mask, clip_eps=0.2):
    loss, _ = value_loss(values, old_values, returns, mask, clip_eps)
    return loss, {"clipfrac": masked_mean(((values - old_values).abs() > clip_eps).float(), mask).item()}


def vl_missing_stats(values, old_values, returns, mask, clip_eps=0.2):
    return value_loss(values, old_values, returns, mask, clip_eps)[0], {}


def vl_only_clipped(values, old_values, returns, mask, clip_eps=0.2):
    return _vl(values, old_values, returns, mask, clip_eps, reduce=lambda err, err_c: err_c)


def vl_detached(values, old_values, returns, mask, clip_eps=0.2):
    return value_loss(values.detach(), old_values, returns, mask, clip_eps)


@pytest.mark.parametrize(
    "wrong, match",
    [
        (vl_no_half, "forgot the 1/2"),
        (vl_min, "took min instead of max"),
        (vl_around_returns, "clipped V around the returns instead of around V_old"),
        (vl_no_mask, "forgot the mask"),
        (vl_no_clip, "did not clip at all"),
        (vl_clipped_to_eps, r"clipped V to \[-eps, eps\]"),
        (vl_clipfrac_abs, r"clipfrac.*\|V - V_old\| > eps"),
        (vl_missing_stats, "lacks"),
        (vl_only_clipped, "used only the clipped squared error"),
        (vl_detached, "does not depend on values"),
    ],
)
def test_value_checker_names_the_mistake(wrong, match):
    with pytest.raises(CheckFailure, match=match):
        checks.check_value_loss(wrong)


# ---------------------------------------------------------------- 4.3 entropy_loss: wrong versions


def el_sign_flipped(logits, mask, temperature=1.0):
    loss, stats = entropy_loss(logits, mask, temperature)
    return -loss, stats


def el_single_token(logits, mask, temperature=1.0):
    logp = torch.log_softmax(logits / temperature, dim=-1)  # (B, T, V)
    neg_logp = -logp.max(dim=-1).values  # -log p of one token, not the whole distribution
    return -masked_mean(neg_logp, mask), {"entropy": masked_mean(neg_logp, mask).item()}


def el_no_temperature(logits, mask, temperature=1.0):
    return entropy_loss(logits, mask, 1.0)


def el_no_mask(logits, mask, temperature=1.0):
    return entropy_loss(logits, torch.ones_like(mask), temperature)


def el_unstable(logits, mask, temperature=1.0):
    p = torch.softmax(logits / temperature, dim=-1)
    entropy = -(p * torch.log(p)).sum(-1)  # 0 * log 0 = NaN once p underflows
    return -masked_mean(entropy, mask), {"entropy": masked_mean(entropy, mask).item()}


def el_entropy_stat_is_loss(logits, mask, temperature=1.0):
    loss, _ = entropy_loss(logits, mask, temperature)
    return loss, {"entropy": loss.item()}


def el_summed(logits, mask, temperature=1.0):
    _, stats = entropy_loss(logits, mask, temperature)
    H = entropy_from_logits(logits, temperature)  # (B, T)
    return -(H * mask).sum(), stats


@pytest.mark.parametrize(
    "wrong, match",
    [
        (el_sign_flipped, "flipped the sign"),
        (el_single_token, "single token"),
        (el_no_temperature, "forgot the temperature"),
        (el_no_mask, "forgot the mask"),
        (el_unstable, "NaN or inf"),
        (el_entropy_stat_is_loss, r"entropy.*reported the loss"),
        (el_summed, "summed the entropy over tokens"),
    ],
)
def test_entropy_checker_names_the_mistake(wrong, match):
    with pytest.raises(CheckFailure, match=match):
        checks.check_entropy_loss(wrong)


def test_entropy_x100_case_is_not_degenerate():
    """The stability case must have non-trivial entropy, or a flipped sign would pass it unnoticed."""
    from ppo_core.checks.ch04_losses import _entropy_case

    logits, mask = _entropy_case(3, 2, 4, 9, 200.0)
    assert masked_mean(entropy_from_logits(logits), mask) > 1e-3
    p = torch.softmax(logits, dim=-1)
    assert torch.isnan((p * torch.log(p)).sum(-1)).any()  # the naive formula really breaks there
