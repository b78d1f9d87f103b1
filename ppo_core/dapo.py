"""Chapter 08 - DAPO's data side (Yu et al. 2025, arXiv 2503.14476): which samples reach the loss, and their scores.

With G samples per prompt (``rollout.group_size``), scores R_i, response lengths n_i, the limit L
(``rollout.max_new_tokens``) and a buffer of b tokens before it:

    dynamic sampling     a group whose G scores all agree has advantage 0 on every row (GRPO/RLOO): it
                         teaches nothing; drop it and sample more prompts until the batch is full again
    overlong filtering   a response cut at L (no EOS) has its tokens masked out of the loss
    soft overlong        R_i += min(0, (L - b - n_i) / b) * penalty: 0 up to L - b, down to -penalty at L
    missing EOS          R_i -= penalty for a response without EOS (TRL's missing_eos_penalty)

Pure functions on tensors, and ``DynamicSampling``, the rows a step keeps: given each round's rollout it returns
the prompts it needs next, and ``PPOTrainer.refill`` samples them (the trainer never hands itself down here).
"""

import torch

from .rollout import Rollout, ended_with_eos
from .utils import stream_seed

__all__ = [
    "ended_with_eos",
    "overlong_penalty",
    "shape_scores",
    "shape_rollout",
    "agreeing_groups",
    "select_rows",
    "concat_rollouts",
    "extra_records",
    "DynamicSampling",
]


def overlong_penalty(lengths: torch.Tensor, max_len: int, buffer_len: int, penalty: float = 1.0) -> torch.Tensor:
    """DAPO's soft overlong punishment, (B,) lengths -> (B,) <= 0: 0 for n <= L - b, linear down to -penalty at L."""
    if buffer_len <= 0:
        return torch.zeros(lengths.shape, dtype=torch.float32, device=lengths.device)
    exceed = lengths.float() - (max_len - buffer_len)
    return torch.clamp(-exceed / buffer_len * penalty, min=-penalty, max=0.0)


def shape_scores(scores, lengths, ended, max_len: int, buffer_len=0, overlong=1.0, missing_eos=0.0):
    """(B,) scores plus the soft overlong penalty and minus ``missing_eos`` where ``ended`` is False."""
    out = scores + overlong_penalty(lengths, max_len, buffer_len, overlong).to(scores.dtype)
    return out - missing_eos * (~ended).to(scores.dtype)


def shape_rollout(ro, cfg, stop_ids) -> None:
    """The config's overlong and missing-EOS penalties on ``ro.scores``, and with ``rollout.overlong_filter`` the
    truncated responses out of ``ro.mask``; in place, nothing when all are off (the defaults)."""
    rw, r = cfg.reward, cfg.rollout
    if not (rw.overlong_buffer_len or rw.missing_eos_penalty or r.overlong_filter):
        return
    ended = ro.ended_with_eos(stop_ids)  # (B,)
    lengths = ro.mask.sum(1)  # (B,)
    ro.scores = shape_scores(ro.scores, lengths, ended, r.max_new_tokens, rw.overlong_buffer_len, rw.overlong_penalty,
                             rw.missing_eos_penalty)  # fmt: skip
    if r.overlong_filter:
        ro.mask = ro.mask & ended[:, None]  # (B, T)


def agreeing_groups(scores: torch.Tensor, group_size: int, tol: float = 1e-6) -> torch.Tensor:
    """(B,) scores in contiguous groups of G -> (B / G,) bool: True where every score of the group agrees."""
    groups = scores.reshape(-1, group_size)  # (B / G, G)
    return (groups.max(dim=1).values - groups.min(dim=1).values) <= tol


def select_rows(ro: Rollout, idx: torch.Tensor) -> Rollout:
    """The rollout's rows ``idx`` (a 1-d index tensor), completions included (``Rollout.select``)."""
    return ro.select(idx)


def concat_rollouts(ros: list, pad_id: int) -> Rollout:
    """Rollouts of different prompt and response lengths as one, padded as the data-parallel gather pads them
    (``Rollout.concat``)."""
    return Rollout.concat(ros, pad_id)


def extra_records(train_records: list, seed: int, step: int, round_: int, batch_size: int, group_size: int) -> list:
    """Another batch of prompts for step ``step``'s refill round ``round_`` (a seeded draw, G copies each)."""
    gen = torch.Generator().manual_seed(stream_seed(seed, "refill", step, round_))
    picks = torch.randperm(len(train_records), generator=gen)[: batch_size // group_size].tolist()
    return [train_records[i] for i in picks for _ in range(group_size)]


class DynamicSampling:
    """The rows step ``step`` keeps: ``add(records, rollout)`` drops the groups whose scores all agree and returns
    the records to sample next (``extra_records`` from ``train_records``), or None when ``batch_size`` rows are
    kept or no rounds are left; ``batch(pad_id)`` then gives (records, rollout, metrics): the first
    ``batch_size`` kept rows, or, if no group survived, the first batch as it was.
    metrics: ``rollout/dropped_groups``, ``rollout/extra_samples``."""

    def __init__(self, group_size: int, batch_size: int, max_rounds: int, train_records: list, seed: int, step: int):
        self.G, self.B, self.max_rounds = group_size, batch_size, max_rounds
        self.train_records, self.seed, self.step = train_records, seed, step
        self.rollouts, self.records, self.first = [], [], None
        self.dropped = self.drawn = self.rounds = 0

    def add(self, records: list, ro: Rollout) -> list | None:
        self.first = self.first or (records, ro)
        self.drawn += len(records)
        keep = ~agreeing_groups(ro.scores, self.G)  # (B_round / G,)
        self.dropped += int((~keep).sum())
        rows = torch.arange(len(records)).reshape(-1, self.G)[keep.cpu()].flatten()
        self.rollouts.append(ro.select(rows))
        self.records += [records[i] for i in rows.tolist()]
        self.rounds += 1
        if len(self.records) >= self.B or self.rounds >= self.max_rounds:
            return None
        return extra_records(self.train_records, self.seed, self.step, self.rounds, self.B, self.G)

    def batch(self, pad_id: int) -> tuple[list, Rollout, dict]:
        metrics = {"rollout/dropped_groups": float(self.dropped), "rollout/extra_samples": float(self.drawn - self.B)}
        if not self.records:  # every group agreed in every round: train on the first batch (its advantages are 0)
            return *self.first, metrics
        full = Rollout.concat([r for r in self.rollouts if r.response_ids.shape[0]], pad_id)
        n = min(len(self.records), self.B)
        return self.records[:n], full.select(torch.arange(n)), metrics
