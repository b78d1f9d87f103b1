"""The chapter 05 checker accepts the package's minibatch update and names the typical mistakes.

The wrong versions below are written the way a learner would write the exercise (one forward on the
whole minibatch split into contiguous micro-batches, the chapter 01-04 functions), each with one
mistake, independently of the checker's own buggy variants.
"""

import pytest
import torch

from ppo_core import checks
from ppo_core.checks import CheckFailure, NotImplementedYet
from ppo_core.logprobs import logprobs_from_logits
from ppo_core.losses import entropy_loss, loss_units, policy_loss, value_loss
from ppo_core.model import position_ids_from_mask
from ppo_core.update import RatioCheckError, minibatch_update


def learner_update(
    actor,
    optimizer,
    mb,
    *,
    clip_eps=0.2,
    vf_clip_eps=0.2,
    vf_coef=0.1,
    ent_coef=0.0,
    temperature=1.0,
    grad_accum_steps=1,
    max_grad_norm=1.0,
    ratio_tol=None,
    bug=None,
):
    """A learner-style solution of exercise 5.1; ``bug`` switches on one mistake."""
    if bug != "no_zero_grad":
        optimizer.zero_grad()
    totals = {}
    n = mb["input_ids"].shape[0]
    size = n // grad_accum_steps
    units = None if bug == "own_count" else loss_units(mb["mask"])  # the whole minibatch's counts
    for start in range(0, n, size):  # contiguous micro-batches
        part = {k: (v[start : start + size] if torch.is_tensor(v) else v) for k, v in mb.items()}
        attn = part["attention_mask"]
        pos = torch.arange(attn.shape[1]).expand_as(attn) if bug == "arange_positions" else position_ids_from_mask(attn)
        keep = slice(part["keep"].start + 1, part["keep"].stop + 1) if bug == "slice" else part["keep"]
        logits, values = actor(part["input_ids"], attn, pos, keep=keep)
        t = 1.0 if bug == "no_temperature" else temperature
        logprobs = logprobs_from_logits(logits, part["response_ids"], t)
        if ratio_tol is not None and bug != "ignore_ratio_tol":
            if (logprobs - part["old_logprobs"]).abs()[part["mask"]].max() > ratio_tol:
                raise RatioCheckError("ratio is not 1 before the first update")
        if bug == "old_logprobs":
            logprobs = part["old_logprobs"]
        pg, pg_stats = policy_loss(
            logprobs, part["old_logprobs"], part["advantages"], part["mask"], clip_eps, units=units
        )
        vf_eps = clip_eps if bug == "vf_clip_is_clip_eps" else vf_clip_eps
        vf, vf_stats = value_loss(values, part["old_values"], part["returns"], part["mask"], vf_eps, units=units)
        ent, ent_stats = entropy_loss(logits, part["mask"], t, units=units)
        if bug == "entropy_sign":
            loss = pg + vf_coef * vf - ent_coef * ent
        elif bug == "no_vf_coef":
            loss = pg + vf + ent_coef * ent
        else:
            loss = pg + vf_coef * vf + ent_coef * ent
        divided = bug in ("own_count", "accum_divide")
        (loss / grad_accum_steps if divided else loss).backward()
        if bug == "step_per_micro":
            grad_norm = torch.nn.utils.clip_grad_norm_(actor.parameters(), max_grad_norm)
            optimizer.step()
        stats = {
            "policy/loss": pg.item(),
            "value/loss": vf.item(),
            "policy/entropy_loss": ent.item(),
            "loss/total": loss.item(),
            "policy/clipfrac": pg_stats["clipfrac"],
            "value/clipfrac": vf_stats["clipfrac"],
            "policy/approx_kl": pg_stats["approx_kl"],
            "policy/ratio_mean": pg_stats["ratio_mean"],
            "policy/entropy": ent_stats["entropy"],
        }
        for k, v in stats.items():  # shares of the minibatch's: they add up
            averaged = divided or bug == "averaged_stats"
            totals[k] = totals.get(k, 0.0) + (v / grad_accum_steps if averaged else v)
    if bug != "step_per_micro":
        grad_norm = torch.nn.utils.clip_grad_norm_(actor.parameters(), max_grad_norm)
        if bug == "norm_after_clip":
            grad_norm = torch.norm(torch.stack([p.grad.norm() for p in actor.parameters() if p.grad is not None]))
        optimizer.step()
    if bug != "no_zero_grad":
        optimizer.zero_grad()
    totals["train/grad_norm"] = grad_norm.item()
    if bug == "tensor_stats":
        totals = {k: torch.tensor(v) for k, v in totals.items()}
    return totals


def _with_bug(bug):
    def update(*args, **kwargs):
        return learner_update(*args, **kwargs, bug=bug)

    update.__name__ = f"minibatch_update_{bug}"
    return update


def test_package_passes(capsys):
    assert checks.check_minibatch_update(minibatch_update) is True
    assert "passed" in capsys.readouterr().out
    assert checks.RESULTS["check_minibatch_update"] == "passed"


def test_learner_style_solution_passes():
    """Contiguous micro-batches, zero_grad() without set_to_none, its own ratio check: all fine."""
    assert checks.check_minibatch_update(learner_update, verbose=False) is True


def test_checker_variants_without_a_bug_are_the_package():
    """The checker's written-out update (no mistake switched on) agrees with ppo_core.update on every case."""
    from ppo_core.checks import ch05_loop

    for i, spec in enumerate(ch05_loop._CASES):
        actor, _, mbs, _ = ch05_loop._build_case(i)
        mine = ch05_loop._run(ch05_loop._variant(None), actor, mbs, spec["kw"], learner=False)
        assert ch05_loop._full_match(mine, ch05_loop._outcome(i, None))


def test_cases_are_not_degenerate():
    """Clipping of the ratio, of the values and of the gradient norm really happens in the cases."""
    from ppo_core.checks import ch05_loop

    q = ch05_loop._outcome(0, None)["q"]
    assert q["stats['policy/clipfrac'] (call 1)"] > 0 and q["stats['value/clipfrac'] (call 1)"] > 0
    assert q["stats['train/grad_norm'] (call 1)"] > ch05_loop._CASES[0]["kw"]["max_grad_norm"]
    assert abs(q["stats['policy/ratio_mean'] (call 1)"] - 1) > 1e-3


def test_stub_is_not_implemented():
    def stub(actor, optimizer, mb, **kwargs):
        raise NotImplementedError("exercise 5.1")

    with pytest.raises(NotImplementedYet, match="not implemented yet"):
        checks.check_minibatch_update(stub)
    assert checks.RESULTS["check_minibatch_update"] == "not implemented"


@pytest.mark.parametrize(
    "bug, match",
    [
        ("no_temperature", "forgot the temperature"),
        ("slice", r"\[P : P\+T\] instead of \[P-1 : P\+T-1\]"),
        ("arange_positions", "position ids that count the left padding"),
        ("old_logprobs", "used old_logprobs where the new logprobs belong"),
        ("no_zero_grad", "never zeroed the gradients"),
        ("entropy_sign", "flipped the sign of the entropy term"),
        ("no_vf_coef", "forgot vf_coef"),
        ("own_count", "divided each micro-batch's loss by its own token count"),
        ("accum_divide", "divided the loss by grad_accum_steps although"),
        ("norm_after_clip", "gradient norm after clipping"),
        ("vf_clip_is_clip_eps", "clipped the values with clip_eps instead of vf_clip_eps"),
        ("averaged_stats", "averaged the stats over the micro-batches"),
        ("step_per_micro", "stepped once per micro-batch"),
        ("tensor_stats", "plain Python float"),
        ("ignore_ratio_tol", "ignored ratio_tol"),
    ],
)
def test_checker_names_the_mistake(bug, match):
    with pytest.raises(CheckFailure, match=match):
        checks.check_minibatch_update(_with_bug(bug))
    assert checks.RESULTS["check_minibatch_update"] == "failed"
