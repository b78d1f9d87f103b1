"""A naive reference for one PPO step (the algorithm box of chapter 05, steps 3-6), written from the formulas.

Independent of ``ppo_core`` on purpose: plain Python loops over sequences and tokens, Python floats
(float64) for every per-token quantity, nothing from the trainer or chapters 01-04. Only the model's
forward pass is borrowed (``actor(ids, attention_mask, position_ids, keep=...)`` -> logits, values),
and the update steps a real ``torch.optim.AdamW`` on a deep copy of the actor with a loss built
token by token. ``tests/test_algorithm_box.py`` compares the package's step against it.

Shapes: B sequences, P prompt tokens (left-padded), T response tokens, V vocab. The rollout is a dict:
``input_ids``, ``attention_mask`` (B, P+T); ``prompt_len`` P; ``response_ids``, ``mask`` (bool),
``logprobs`` (old policy), ``values`` (old critic), ``ref_logprobs`` (B, T); ``scores`` (B,).

The semantics it pins down (chapters 03-05):

* reward:      r_t = -kl_coef * KL_t on every response token, + score on the row's LAST response token;
               KL_t = l (k1) or e^-l - 1 + l (k3), with l = old logprob - reference logprob.
* GAE:         delta_t = r_t + gamma V_{t+1} - V_t, A_t = delta_t + gamma lam A_{t+1}, V = A = 0 after the
               last response token, with the policy's lambda lam.
* returns:     the critic's targets R_t = A'_t + V_t from the RAW advantages A' of a second GAE pass with
               lam_value (None: lam); with lam_value equal to the policy's lambda,
               R_t = A_t + V_t.
* whitening:   (A - mean) / sqrt(var + 1e-8) over every response token of the batch, var with Bessel's
               correction (n - 1), then 0 off the mask.
* schedule:    one generator seeded once; every epoch a fresh ``torch.randperm(B)`` from it, cut into
               consecutive minibatches of ``minibatch_size`` rows.
* update:      per minibatch: zero the gradients; micro-batch i holds rows i, i+g, i+2g, ... of the minibatch
               (g = grad_accum_steps); each micro-batch's loss is the sum over its response tokens of
               pg + vf_coef * vf - ent_coef * H divided by the MINIBATCH's response token count (so the
               micro-batches' gradients add up to the minibatch's), backward on each; then clip the global
               gradient norm to max_grad_norm (0 = no clipping) and take one optimizer step.
               AdamW at lr, except the value head's parameters at value_lr when value_lr > 0.
               pg = max(-A r, -A clip(r, 1 - eps, 1 + eps)), r = exp(logp - old logp);
               vf = 1/2 max((V - R)^2, (V_old + clip(V - V_old, -eps_v, eps_v) - R)^2);
               H  = entropy of softmax(logits / temperature).
* correction:  (chapter 09, optional cfg["correction"]) with mu = ro["behaviour_logprobs"] and rho = pi_old / mu:
               decoupled mode weights token t's pg by w_t = min(rho_t, C) (token) or min(prod_s rho_s, C)
               (sequence), and keeps only tokens whose rho_t (token), prod_s rho_s (sequence) or
               exp(mean_s log rho_s) (geometric) lies in [lo, hi]; the pg term is then the mean over the
               minibatch's KEPT tokens, vf and H stay means over all its response tokens. Bypass mode:
               the ratio is exp(logp - log mu), no weights.
* controller:  KL = mean over sequences of the summed k1 KL of each response (the one logged);
               adaptive: kl_coef <- kl_coef (1 + clip(KL / target - 1, -0.2, 0.2) B / horizon); fixed: unchanged.
* critic:      the value head's parameters, plus with ``separate_critic`` its own trunk's; those of the policy
               are the rest. With ``separate_critic`` the two sets' gradient norms are clipped apart (each to
               max_grad_norm) and the norm recorded is that of all gradients together.
* value epochs: with ``value_epochs`` > ppo_epochs, that many minus ppo_epochs more passes follow the update, each
               a fresh permutation from the same generator, with the warm-up's value-only minibatch steps.
* warm-up:     a value warm-up step (``warmup=True``) replaces the update by value-only updates on the same
               schedule: per minibatch (no micro-batches) the loss is the mean over its response tokens of vf
               alone; every gradient but the value head's is dropped, the head's norm clipped, one optimizer
               step. The policy does not move, and the controller does not run (kl_coef unchanged).
"""

import copy
import math

import torch

__all__ = ["reference_step"]


def _rows(t: torch.Tensor) -> list:
    return t.detach().double().tolist()


def reference_step(actor, ro: dict, cfg: dict, kl_coef: float, shuffle_seed: int) -> dict:
    """Run steps 3-6 of the algorithm box on a scored rollout. ``actor`` is not modified.

    cfg keys: gamma, lam, whiten, kl_estimator ('k1' | 'k3'), adaptive_kl, kl_target, kl_horizon, clip_eps,
    vf_clip_eps, vf_coef, ent_coef, temperature, ppo_epochs, minibatch_size, grad_accum_steps,
    max_grad_norm, lr, weight_decay; optional: lam_value (None), value_lr (0),
    warmup (False: a PPO step; True: a value warm-up step).

    Returns a dict of plain Python lists (B x T nested lists for per-token quantities):
    kl (per token, the reward's estimator), rewards, advantages_raw, returns, advantages (used by the
    update), schedule (per epoch, a list of minibatches, each a list of row indices), grad_norms (one per
    minibatch update, before clipping), kl_for_controller, kl_coef_used, kl_coef_after, and ``model`` (the
    updated deep copy of ``actor``).
    """
    mask = ro["mask"].tolist()
    logp, ref_logp, values = _rows(ro["logprobs"]), _rows(ro["ref_logprobs"]), _rows(ro["values"])
    scores = ro["scores"].double().tolist()
    B, T = len(mask), len(mask[0])

    # 3. rewards: -kl_coef * KL on every response token, the score on the last response token
    kl = [[0.0] * T for _ in range(B)]
    rewards = [[0.0] * T for _ in range(B)]
    for b in range(B):
        last = None
        for t in range(T):
            if not mask[b][t]:
                continue
            log_ratio = logp[b][t] - ref_logp[b][t]
            if cfg["kl_estimator"] == "k1":
                kl[b][t] = log_ratio
            elif cfg["kl_estimator"] == "k3":
                kl[b][t] = math.exp(-log_ratio) - 1.0 + log_ratio
            else:
                raise ValueError(cfg["kl_estimator"])
            rewards[b][t] = -kl_coef * kl[b][t]
            last = t
        if last is not None:
            rewards[b][last] += scores[b]

    # 4. GAE backwards over each row's response tokens with the policy's lambda; the critic's targets from a
    # second pass with lam_value; then whitening
    gamma, lam = cfg["gamma"], cfg["lam"]
    lam_value = lam if cfg.get("lam_value") is None else cfg["lam_value"]
    adv_raw = [[0.0] * T for _ in range(B)]
    returns = [[0.0] * T for _ in range(B)]
    for b in range(B):
        next_value, next_adv, next_target_adv = 0.0, 0.0, 0.0
        for t in reversed([t for t in range(T) if mask[b][t]]):
            delta = rewards[b][t] + gamma * next_value - values[b][t]
            adv_raw[b][t] = delta + gamma * lam * next_adv
            target_adv = delta + gamma * lam_value * next_target_adv
            returns[b][t] = target_adv + values[b][t]
            next_value, next_adv, next_target_adv = values[b][t], adv_raw[b][t], target_adv
    if cfg["whiten"]:
        flat = [adv_raw[b][t] for b in range(B) for t in range(T) if mask[b][t]]
        n = len(flat)
        mean = sum(flat) / n
        var = sum((a - mean) ** 2 for a in flat) / (n - 1 if n > 1 else 1)
        advantages = [[(adv_raw[b][t] - mean) / math.sqrt(var + 1e-8) if mask[b][t] else 0.0 for t in range(T)]
                      for b in range(B)]  # fmt: skip
    else:
        advantages = [row[:] for row in adv_raw]

    # chapter 09: the sampler's logprobs, the correction's weights and kept tokens, the ratio's anchor
    corr = cfg.get("correction")
    weights, old_for_ratio = _naive_correction(logp, ro, mask, corr) if corr else (None, logp)

    # 5. update epochs over shuffled minibatches
    gen = torch.Generator().manual_seed(shuffle_seed)
    schedule = []
    m = cfg["minibatch_size"]
    for _ in range(cfg["ppo_epochs"]):
        perm = torch.randperm(B, generator=gen).tolist()
        schedule.append([perm[i : i + m] for i in range(0, B, m)])

    model = copy.deepcopy(actor)
    model.train()
    params = [p for p in model.parameters() if p.requires_grad]
    head = [p for p in model.value_head.parameters()]
    if cfg.get("separate_critic"):  # the critic's own trunk learns with the head
        head = [p for p in model.critic_trunk.parameters()] + head
    if cfg.get("value_lr", 0.0) > 0:  # the value head in its own group, at its own learning rate
        groups = [{"params": [p for p in params if all(p is not h for h in head)], "lr": cfg["lr"]},
                  {"params": head, "lr": cfg["value_lr"]}]  # fmt: skip
    else:
        groups = [{"params": params, "lr": cfg["lr"]}]
    opt = torch.optim.AdamW(groups, lr=cfg["lr"], weight_decay=cfg["weight_decay"])
    P = ro["prompt_len"]
    keep = slice(P - 1, P + T - 1)
    warmup = cfg.get("warmup", False)
    g = 1 if warmup else cfg["grad_accum_steps"]
    grad_norms = []
    extra = []  # ppo.value_epochs: value-only passes after the update, on fresh permutations
    for _ in range(max(cfg.get("value_epochs", 0) - cfg["ppo_epochs"], 0) if not warmup else 0):
        perm = torch.randperm(B, generator=gen).tolist()
        extra.append([perm[i : i + m] for i in range(0, B, m)])
    passes = [(epoch, warmup) for epoch in schedule] + [(epoch, True) for epoch in extra]
    for epoch, value_only in passes:
        for minibatch in epoch:
            opt.zero_grad(set_to_none=True)
            gm = 1 if value_only else g
            n_tokens = sum(int(ro["mask"][b].sum()) for b in minibatch)  # the whole minibatch's
            kept = [(b, t) for b in minibatch for t in range(len(mask[b])) if mask[b][t]]
            n_kept = sum(1 for b, t in kept if weights[b][t] > 0) if weights else 0  # chapter 09's kept tokens
            for i in range(gm):
                rows = minibatch[i::gm]
                loss, pg = _micro_batch_loss(
                    model, ro, rows, keep, advantages, returns, values, old_for_ratio, cfg, value_only, weights
                )
                (loss / max(n_tokens, 1) + pg / max(n_kept, 1)).backward()
            if value_only:  # the critic alone learns: drop every other gradient
                for p in params:
                    if all(p is not h for h in head):
                        p.grad = None
            if cfg.get("separate_critic") and not value_only:  # policy and critic clipped apart
                sets = [[p for p in params if all(p is not h for h in head)], head]
            else:
                sets = [params]
            norms = []
            for group in sets:
                grads = [p.grad for p in group if p.grad is not None]
                norm = math.sqrt(sum(float((gr.double() ** 2).sum()) for gr in grads))
                norms.append(norm)
                if cfg["max_grad_norm"] > 0:
                    factor = min(1.0, cfg["max_grad_norm"] / (norm + 1e-6))
                    for gr in grads:
                        gr.mul_(factor)
            grad_norms.append(math.sqrt(sum(n * n for n in norms)))
            opt.step()

    # 6. KL controller: the summed k1 KL of each response, averaged over the batch
    kl_seq = [sum(logp[b][t] - ref_logp[b][t] for t in range(T) if mask[b][t]) for b in range(B)]
    kl_for_controller = sum(kl_seq) / B
    kl_coef_after = kl_coef
    if cfg["adaptive_kl"] and not warmup:
        error = min(max(kl_for_controller / cfg["kl_target"] - 1.0, -0.2), 0.2)
        kl_coef_after = kl_coef * (1.0 + error * B / cfg["kl_horizon"])

    return {
        "weights": weights,
        "kl": kl,
        "rewards": rewards,
        "advantages_raw": adv_raw,
        "returns": returns,
        "advantages": advantages,
        "schedule": schedule,
        "grad_norms": grad_norms,
        "kl_for_controller": kl_for_controller,
        "kl_coef_used": kl_coef,
        "kl_coef_after": kl_coef_after,
        "model": model,
    }


def _naive_correction(logp, ro, mask, corr) -> tuple:
    """Per-token weights (0 on a rejected token; None in bypass mode) and the ratio's anchor, by loops."""
    beh = _rows(ro["behaviour_logprobs"])
    if corr.get("mode", "decoupled") == "bypass":
        return None, beh
    B, T = len(mask), len(mask[0])
    weights = [[0.0] * T for _ in range(B)]
    for b in range(B):
        logs = [logp[b][t] - beh[b][t] for t in range(T) if mask[b][t]]
        for t in range(T):
            if not mask[b][t]:
                continue
            tok = logp[b][t] - beh[b][t]
            level_log = {"token": tok, "sequence": sum(logs), "geometric": sum(logs) / len(logs)}
            w = 1.0
            if corr.get("is_level"):
                w = min(math.exp(level_log[corr["is_level"]]), corr["is_threshold"])
            if corr.get("rs_level"):
                hi = corr["rs_threshold"]
                lo = corr.get("rs_threshold_lower") or 1.0 / hi
                if not lo <= math.exp(level_log[corr["rs_level"]]) <= hi:
                    w = 0.0
            weights[b][t] = w
    return weights, logp


def _micro_batch_loss(model, ro, rows, keep, advantages, returns, old_values, old_logp, cfg, warmup=False, w=None):
    """(Sum over the micro-batch's response tokens of pg + vf_coef * vf - ent_coef * entropy (a 0-dim tensor),
    0.0); of vf alone for a value warm-up step. With weights ``w``: pg leaves the sum for the second value, the sum
    of w * pg."""
    ids, attn = ro["input_ids"][rows], ro["attention_mask"][rows]
    positions = torch.zeros_like(attn)
    for j in range(len(rows)):  # position ids count only real tokens (0 at the first one of a left-padded row)
        seen = 0
        for k in range(attn.shape[1]):
            positions[j, k] = max(seen - 1, 0) if attn[j, k] == 0 else seen
            seen += int(attn[j, k])
    logits, values = model(ids, attn, positions, keep=keep)  # (b, T, V), (b, T)
    eps, eps_v, temp = cfg["clip_eps"], cfg["vf_clip_eps"], cfg["temperature"]
    total, pg_total = 0.0, 0.0
    for j, b in enumerate(rows):
        for t in range(logits.shape[1]):
            if not ro["mask"][b, t]:
                continue
            z = logits[j, t].float() / temp
            log_p = z - torch.logsumexp(z, dim=0)  # (V,)
            ratio = torch.exp(log_p[ro["response_ids"][b, t]] - old_logp[b][t])
            a = advantages[b][t]
            pg = torch.maximum(-a * ratio, -a * torch.clamp(ratio, 1.0 - eps, 1.0 + eps))
            v, v_old, ret = values[j, t].float(), old_values[b][t], returns[b][t]
            v_clipped = v_old + torch.clamp(v - v_old, -eps_v, eps_v)
            vf = 0.5 * torch.maximum((v - ret) ** 2, (v_clipped - ret) ** 2)
            entropy = -(torch.exp(log_p) * log_p).sum()
            if w is not None and not warmup:  # decoupled correction: pg apart, weighted (0 on a rejected token)
                pg_total, pg = pg_total + w[b][t] * pg, 0.0
            total = total + (vf if warmup else pg + cfg["vf_coef"] * vf - cfg["ent_coef"] * entropy)
    return total, pg_total
