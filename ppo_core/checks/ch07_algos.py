"""Checkers for chapter 07 (PPO's relatives): ``check_group_relative_advantages``.

The checker runs the learner's GRPO advantage on small batches of contiguous groups (one group whose
samples all scored the same, binary and real-valued scores, both settings of ``norm_by_std``), compares
with ``ppo_core.advantages.group_relative_advantages`` and names the typical mistake when one matches.
"""

import torch

from ..advantages import group_relative_advantages
from ._common import CheckFailure, call, checker, expect_close

__all__ = ["check_group_relative_advantages"]


def _variant(scores, G, norm_by_std=True, eps=1e-6, *, over="group", layout="contiguous", std="unbiased", use_std=None):
    """One way of computing the advantage, right or wrong; each keyword names a choice a learner can get wrong."""
    s = scores.to(torch.float64)
    g = s.reshape(-1, G) if layout == "contiguous" else s.reshape(G, -1).T  # (n, G): row k = prompt k's samples
    if over == "batch":
        g = s.reshape(1, -1)
    adv = g - g.mean(dim=1, keepdim=True)
    if norm_by_std if use_std is None else use_std:
        adv = adv / (g.std(dim=1, keepdim=True, unbiased=(std == "unbiased")) + eps)
    out = adv.T if (layout == "strided" and over == "group") else adv
    return out.reshape(-1).to(scores.dtype)


def _mistakes(scores, G, norm_by_std, eps):
    m = {
        "normalised over the whole batch instead of over each prompt's group (the baseline is the mean of the "
        "G samples of the same prompt: scores.view(-1, G).mean(dim=1))": _variant(
            scores, G, norm_by_std, eps, over="batch"
        ),
        "grouped the wrong rows: the G samples of a prompt are adjacent (rows [kG, kG + G)), so the groups are "
        "scores.view(-1, G), not scores.view(G, -1)": _variant(scores, G, norm_by_std, eps, layout="strided"),
        "used the biased std (divide by G); GRPO uses torch.std's default: unbiased, divide by G - 1": _variant(
            scores, G, norm_by_std, eps, std="biased"
        ),
    }
    if norm_by_std:
        m["forgot to divide by the group's std (norm_by_std=True asks for (s - mean) / (std + eps))"] = _variant(
            scores, G, norm_by_std, eps, use_std=False
        )
    else:
        m["divided by the std although norm_by_std=False (Dr. GRPO keeps the plain difference s - mean)"] = _variant(
            scores, G, norm_by_std, eps, use_std=True
        )
    return m


def _check_case(fn, scores, G, case, **kwargs):
    norm_by_std, eps = kwargs.get("norm_by_std", True), kwargs.get("eps", 1e-6)
    want = group_relative_advantages(scores, G, norm_by_std, eps)
    got = call(fn, scores.clone(), G, **kwargs)
    if not isinstance(got, torch.Tensor):
        raise CheckFailure(f"return a tensor of shape ({scores.shape[0]},), got {type(got).__name__}. Case: {case}")
    if got.shape != want.shape:
        raise CheckFailure(
            f"the advantages have shape {tuple(got.shape)}, expected {tuple(want.shape)}: one advantage per sequence, "
            f"in the order of the input (flatten the (n_prompts, G) view back with .reshape(-1)). Case: {case}"
        )
    if not torch.isfinite(got).all():
        raise CheckFailure(
            "the advantages hold NaN or inf: a group whose samples all scored the same has std 0, and "
            "(s - mean) / std is 0 / 0. Divide by (std + eps): that group's advantages are then 0 "
            f"(nothing to learn from it). Case: {case}\n  got: {got.tolist()}"
        )
    expect_close(got, want, what="the advantages", mistakes=_mistakes(scores, G, norm_by_std, eps), case=case)


@checker
def check_group_relative_advantages(fn):
    """Check ``fn(scores, group_size, norm_by_std=True, eps=1e-6) -> (B,)`` against the package."""
    # A: 3 prompts x 4 samples, binary scores; prompt 1 solved by every sample (std 0).
    scores = torch.tensor([1.0, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0, 1.0, 0.0, 0.0, 0.0, 1.0])
    _check_case(fn, scores, 4, "scores=[1,0,0,1 | 1,1,1,1 | 0,0,0,1], group_size=4 (prompt 1: all correct)")
    # B: the same, Dr. GRPO's setting.
    _check_case(fn, scores, 4, "the same scores, norm_by_std=False (Dr. GRPO)", norm_by_std=False)
    # C: real-valued scores, 2 prompts x 3 samples: groups very different in level and spread.
    scores = torch.tensor([0.2, 0.9, 0.4, 5.0, 3.0, 10.0])
    _check_case(fn, scores, 3, "scores=[0.2,0.9,0.4 | 5,3,10], group_size=3", norm_by_std=True)
    _check_case(fn, scores, 3, "scores=[0.2,0.9,0.4 | 5,3,10], group_size=3, norm_by_std=False", norm_by_std=False)
    # D: every group all-equal; a larger eps is respected.
    scores = torch.tensor([0.0, 0.0, 1.0, 1.0])
    _check_case(fn, scores, 2, "scores=[0,0 | 1,1], group_size=2 (every group all-equal)")
    scores = torch.tensor([1.0, 0.0, 1.0, 1.0])
    _check_case(fn, scores, 2, "scores=[1,0 | 1,1], group_size=2, eps=0.5", eps=0.5)
