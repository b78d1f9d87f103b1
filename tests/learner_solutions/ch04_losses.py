"""Second solutions for chapter 04: the objective's min written as a maximisation, sums over the selected tokens
divided by their count, the value clip as min/max bounds, the entropy as logsumexp - E[z] in float64."""

import torch


def policy_loss(logprobs, old_logprobs, advantages, mask, clip_eps=0.2):
    # maximise min(r A, clip(r) A), i.e. minimise its negative; r from float64 log-ratios
    m = mask.to(torch.bool)
    log_r = torch.where(m, logprobs.to(torch.float64) - old_logprobs.to(torch.float64), torch.zeros(()))
    r = log_r.exp()
    r_clipped = torch.minimum(torch.maximum(r, torch.tensor(1.0 - clip_eps)), torch.tensor(1.0 + clip_eps))
    a = advantages.to(torch.float64)
    objective = torch.minimum(r * a, r_clipped * a)  # (B, T)
    n = m.sum().clamp(min=1)
    loss = -(objective[m].sum() / n)
    with torch.no_grad():
        stats = {
            "clipfrac": ((r_clipped * a < r * a) & m).sum().item() / n.item(),
            "approx_kl": (r - 1 - log_r)[m].sum().item() / n.item(),  # k3 of KL(old || new)
            "ratio_mean": r[m].sum().item() / n.item(),
        }
    return loss.to(logprobs.dtype), stats


def value_loss(values, old_values, returns, mask, clip_eps=0.2):
    # V may move at most clip_eps from the old values: bounds, then the larger of the two squared errors
    m = mask.to(torch.bool)
    lower, upper = old_values - clip_eps, old_values + clip_eps
    v_clipped = torch.maximum(torch.minimum(values, upper), lower)
    err = (values - returns).square()
    err_clipped = (v_clipped - returns).square()
    worst = torch.where(err_clipped > err, err_clipped, err)
    n = m.sum().clamp(min=1)
    loss = worst[m].sum() / n / 2
    with torch.no_grad():
        clipfrac = (err_clipped > err)[m].sum().item() / n.item()
    return loss, {"clipfrac": clipfrac}


def entropy_loss(logits, mask, temperature=1.0):
    # H = logsumexp(z) - sum_v p_v z_v per token, in float64; the loss is minus its token mean
    m = mask.to(torch.bool)
    z = logits.to(torch.float64) / temperature
    entropy = torch.logsumexp(z, dim=-1) - (torch.softmax(z, dim=-1) * z).sum(dim=-1)  # (B, T)
    mean_entropy = entropy[m].sum() / m.sum().clamp(min=1)
    return (-mean_entropy).to(torch.float32), {"entropy": mean_entropy.item()}
