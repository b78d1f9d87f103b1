"""Second solutions for chapter 08: the objective maximised (min, then max with c A where A < 0); the CISPO weight
built under no_grad and the mean taken over the selected tokens."""

import torch


def dapo_policy_loss(logprobs, old_logprobs, advantages, mask, clip_eps_low, clip_eps_high, dual_clip_c):
    m = mask.to(torch.bool)
    r = torch.where(m, logprobs - old_logprobs, torch.zeros((), dtype=logprobs.dtype)).exp()
    objective = torch.minimum(r * advantages, r.clamp(1 - clip_eps_low, 1 + clip_eps_high) * advantages)
    floor = dual_clip_c * advantages  # for A < 0 the objective may not go below c A
    objective = torch.where(advantages < 0, torch.maximum(objective, floor), objective)
    return -objective[m].sum() / m.sum().clamp(min=1)


def cispo_loss(logprobs, old_logprobs, advantages, mask, clip_eps_low, clip_eps_high):
    m = mask.to(torch.bool)
    with torch.no_grad():  # the weight is a constant: its gradient is not taken
        weight = (logprobs - old_logprobs).exp().clamp(min=1 - clip_eps_low, max=1 + clip_eps_high)
    per_token = -(advantages * weight) * logprobs
    return per_token[m].mean()
