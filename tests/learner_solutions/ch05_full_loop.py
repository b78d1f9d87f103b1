"""Second solution for chapter 05: contiguous micro-batches, every loss written out by hand (logprobs by
logsumexp, the objective's min, the entropy as logsumexp - E[z]) over the minibatch's token count, and the
gradient clipped by hand."""

import torch

from ppo_core.update import RatioCheckError


def minibatch_update(
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
):
    params = [p for p in actor.parameters() if p.requires_grad]
    for p in params:
        p.grad = None
    n_tokens = mb["mask"].sum().clamp(min=1)  # every micro-batch divides by the whole minibatch's count
    totals = dict.fromkeys(
        [
            "policy/loss",
            "value/loss",
            "policy/entropy_loss",
            "loss/total",
            "policy/clipfrac",
            "value/clipfrac",
            "policy/approx_kl",
            "policy/ratio_mean",
            "policy/entropy",
        ],
        0.0,
    )
    for rows in torch.arange(mb["input_ids"].shape[0]).tensor_split(grad_accum_steps):  # contiguous parts
        if len(rows) == 0:
            continue
        m = mb["mask"][rows].to(torch.bool)
        attention_mask = mb["attention_mask"][rows]
        positions = (attention_mask.long().cumsum(dim=1) - 1).clamp(min=0)  # 0 at each row's first real token
        logits, values = actor(mb["input_ids"][rows], attention_mask, positions, keep=mb["keep"])
        z = logits.float() / temperature  # (b, T, V)
        log_norm = torch.logsumexp(z, dim=-1)  # (b, T)
        logprobs = z.gather(-1, mb["response_ids"][rows].unsqueeze(-1)).squeeze(-1) - log_norm
        log_r = torch.where(m, logprobs - mb["old_logprobs"][rows], torch.zeros(()))
        if ratio_tol is not None and log_r.abs().max().item() > ratio_tol:
            raise RatioCheckError(f"max |log ratio| {log_r.abs().max().item():.2e} > ratio_tol {ratio_tol}")

        def token_sum(x, m=m):
            return torch.where(m, x, torch.zeros((), dtype=x.dtype)).sum() / n_tokens

        r, adv = log_r.exp(), mb["advantages"][rows]
        r_clip = r.clamp(1 - clip_eps, 1 + clip_eps)
        pg_loss = -token_sum(torch.minimum(r * adv, r_clip * adv))
        old_v, ret = mb["old_values"][rows], mb["returns"][rows]
        v = values.float()
        v_clip = torch.maximum(torch.minimum(v, old_v + vf_clip_eps), old_v - vf_clip_eps)
        err, err_clip = (v - ret) ** 2, (v_clip - ret) ** 2
        vf_loss = token_sum(torch.maximum(err, err_clip)) / 2
        entropy = log_norm - (torch.softmax(z, dim=-1) * z).sum(dim=-1)  # (b, T)
        ent_loss = -token_sum(entropy)
        loss = pg_loss + vf_coef * vf_loss + ent_coef * ent_loss
        loss.backward()
        with torch.no_grad():
            parts = {
                "policy/loss": pg_loss,
                "value/loss": vf_loss,
                "policy/entropy_loss": ent_loss,
                "loss/total": loss,
                "policy/clipfrac": token_sum((r_clip * adv < r * adv).float()),
                "value/clipfrac": token_sum((err_clip > err).float()),
                "policy/approx_kl": token_sum(r - 1 - log_r),
                "policy/ratio_mean": token_sum(r),
                "policy/entropy": token_sum(entropy),
            }
        for key, value in parts.items():
            totals[key] += value.item()
    grads = [p.grad for p in params if p.grad is not None]
    norm = torch.sqrt(sum((g.double() ** 2).sum() for g in grads))  # the global norm, before clipping
    scale = max_grad_norm / (norm.item() + 1e-6)
    if scale < 1.0:
        for g in grads:
            g.mul_(scale)
    optimizer.step()
    for p in params:
        p.grad = None
    totals["train/grad_norm"] = norm.item()
    return totals
