"""Chapter 08 - DAPO's data side (Yu et al. 2025, arXiv 2503.14476): which samples reach the loss, and their scores.

With G samples per prompt (``rollout.group_size``), scores R_i, response lengths n_i, the limit L
(``rollout.max_new_tokens``) and a buffer of b tokens before it:

    dynamic sampling     a group whose G scores all agree has advantage 0 on every row (GRPO/RLOO): it
                         teaches nothing; drop it and sample more prompts until the batch is full again
    overlong filtering   a response cut at L (no EOS) has its tokens masked out of the loss
    soft overlong        R_i += min(0, (L - b - n_i) / b) * penalty: 0 up to L - b, down to -penalty at L
    missing EOS          R_i -= penalty for a response without EOS (TRL's missing_eos_penalty)

Pure functions on tensors, and ``dynamic_sampling``, the trainer's refill loop.
"""

from dataclasses import fields, replace

import torch

__all__ = [
    "ended_with_eos",
    "overlong_penalty",
    "shape_scores",
    "shape_rollout",
    "agreeing_groups",
    "select_rows",
    "concat_rollouts",
    "dynamic_sampling",
]


def ended_with_eos(response_ids: torch.Tensor, mask: torch.Tensor, stop_ids) -> torch.Tensor:
    """(B, T) ids and mask -> (B,) bool: the response holds one of ``stop_ids`` on a counted token."""
    stops = torch.as_tensor(list(stop_ids), device=response_ids.device)
    return (torch.isin(response_ids, stops) & mask.to(torch.bool)).any(dim=1)


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
    ended = ended_with_eos(ro.response_ids, ro.mask, stop_ids)  # (B,)
    lengths = ro.mask.sum(1)  # (B,)
    ro.scores = shape_scores(ro.scores, lengths, ended, r.max_new_tokens, rw.overlong_buffer_len, rw.overlong_penalty,
                             rw.missing_eos_penalty)  # fmt: skip
    if r.overlong_filter:
        ro.mask = ro.mask & ended[:, None]  # (B, T)


def agreeing_groups(scores: torch.Tensor, group_size: int, tol: float = 1e-6) -> torch.Tensor:
    """(B,) scores in contiguous groups of G -> (B / G,) bool: True where every score of the group agrees."""
    groups = scores.reshape(-1, group_size)  # (B / G, G)
    return (groups.max(dim=1).values - groups.min(dim=1).values) <= tol


def select_rows(ro, idx: torch.Tensor):
    """The rollout's rows ``idx`` (a 1-d index tensor), completions included."""
    picked = {f.name: getattr(ro, f.name) for f in fields(ro)}
    for name, v in picked.items():
        if torch.is_tensor(v) and v.dim() > 0:
            picked[name] = v[idx.to(v.device)]
    picked["completions"] = [ro.completions[i] for i in idx.tolist()] if ro.completions else []
    return replace(ro, **picked)


def _padded(ro, P: int, T: int, pad_id: int) -> dict:
    """The rollout's tensors with the prompt left-padded to P and the response right-padded to T (pad ids, 0
    elsewhere: positions no mask counts and nothing attends to)."""
    dp, dt = P - ro.prompt_len, T - ro.response_ids.shape[1]
    out = {}
    for f in fields(ro):
        v = getattr(ro, f.name)
        if not (torch.is_tensor(v) and v.dim() >= 2):
            continue
        fill = pad_id if f.name in ("input_ids", "response_ids") else 0
        if v.shape[1] == ro.prompt_len + ro.response_ids.shape[1]:  # (B, P + T)
            v = torch.nn.functional.pad(v, (dp, dt), value=fill)
        else:  # (B, T) or (B, T, F)
            v = torch.nn.functional.pad(v, (0, 0) * (v.dim() - 2) + (0, dt), value=fill)
        out[f.name] = v
    return out


def concat_rollouts(ros: list, pad_id: int):
    """Rollouts of different prompt and response lengths as one, padded as the data-parallel gather pads them."""
    if len(ros) == 1:
        return ros[0]
    P = max(r.prompt_len for r in ros)
    T = max(r.response_ids.shape[1] for r in ros)
    parts = [_padded(r, P, T, pad_id) for r in ros]
    joined = {k: torch.cat([p[k] for p in parts]) for k in parts[0]}
    joined["scores"] = torch.cat([r.scores for r in ros])
    return replace(ros[0], **joined, prompt_len=P, completions=[c for r in ros for c in r.completions])


def _extra_records(trainer, step: int, round_: int) -> list[dict]:
    """Another batch of prompts for step ``step``'s refill round ``round_`` (a seeded draw, G copies each)."""
    G, n = trainer.cfg.rollout.group_size, len(trainer.train_records)
    gen = torch.Generator().manual_seed(trainer.cfg.train.seed * 1_000_033 + step * 1_009 + round_)
    picks = torch.randperm(n, generator=gen)[: trainer.cfg.rollout.batch_size // G].tolist()
    return [trainer.train_records[i] for i in picks for _ in range(G)]


def dynamic_sampling(trainer, records: list[dict], ro):
    """Drop the groups whose scores all agree and sample more prompts until ``rollout.batch_size`` rows are
    kept or ``algo.max_sampling_rounds`` rounds are spent; returns (records, rollout, metrics). If no group
    survives, the first batch is kept as it was. metrics: ``rollout/dropped_groups``, ``rollout/extra_samples``."""
    cfg, step = trainer.cfg, trainer.step_count + 1
    G, B = cfg.rollout.group_size, cfg.rollout.batch_size
    kept_ro, kept_rec, dropped, drawn, round_ = [], [], 0, 0, 0
    first, times = (records, ro), dict(trainer.times)
    while True:
        drawn += len(records)
        keep = ~agreeing_groups(ro.scores, G)  # (B_round / G,)
        dropped += int((~keep).sum())
        rows = torch.arange(len(records)).reshape(-1, G)[keep.cpu()].flatten()
        kept_ro.append(select_rows(ro, rows))
        kept_rec += [records[i] for i in rows.tolist()]
        round_ += 1
        if len(kept_rec) >= B or round_ >= cfg.algo.max_sampling_rounds:
            break
        records = _extra_records(trainer, step, round_)
        ro = trainer.collect(records)
        times = {k: times.get(k, 0.0) + v for k, v in trainer.times.items()}
    trainer.times = times
    metrics = {"rollout/dropped_groups": float(dropped), "rollout/extra_samples": float(drawn - B)}
    if not kept_rec:  # every group agreed in every round: train on the first batch (its advantages are 0)
        return *first, metrics
    full = concat_rollouts([r for r in kept_ro if r.response_ids.shape[0]], trainer.tokenizer.pad_token_id)
    n = min(len(kept_rec), B)
    return kept_rec[:n], select_rows(full, torch.arange(n)), metrics
