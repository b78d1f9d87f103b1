"""Which critic can the real-model preset have? Critics fitted offline on one fixed set of episodes, and the ceiling.

    .venv/bin/python benchmarks/critic_real.py [--prompts 96] [--group 4] [--train-steps 0] [--lora-passes 2]
                                               [--mc 0] [--save PATH] [key=value ...]

The ``cpu-smollm`` preset's critic explains little of the return's variance (book/measurements/real_llm.md). This
asks why, on data that stays still: it builds the preset's trainer (``build_trainer``), optionally trains it
``--train-steps`` PPO steps with the preset's own settings (the policy of the run's last steps), then samples
``--group`` replies to each of ``--prompts`` training prompts with the trainer's own ``collect`` (the preset's
temperature, length limit and reward) and computes every token's Monte-Carlo return (``ppo.lam_value`` 1: the
score at the end minus ``ppo.kl_coef`` times the KL still to come). The prompts are split in two halves: critics
are fitted on the episodes of one half and scored on the other's, with the token-level explained variance
(``ppo_core.gae.explained_variance``) that training logs.

The critics:

- ``ridge``: a linear value head on the policy trunk's final hidden states, frozen, fitted to convergence
  (closed-form ridge, its penalty chosen by cross-validation over the fit half's prompts); ``ridge_mid``: the
  same on a middle layer's hidden states; ``ridge_prompt``: on the prompt's last hidden state alone, so one value
  for the whole reply. With ``--train-steps``, ``ridge_base`` reads the base model (adapters off) instead.
- ``mlp``: a two-layer head (ReLU) on the same final hidden states, stopped early on a part of the fit half.
- ``lora``: a critic of its own, LoRA adapters (the preset's rank) on the same frozen base plus the head, the
  head started from ``ridge``'s solution and both trained on the value loss alone for ``--lora-passes`` passes.
- ``online:...``: the preset's own head as training updates it, replayed on the frozen final hidden states: the
  fit half in rounds of ``rollout.batch_size`` episodes, each round scored by the head before it learns from it
  (the ``value/explained_variance`` that training logs, mean of the last rounds) and then ``ppo.value_epochs``
  passes in minibatches of ``ppo.minibatch_size`` with the clipped value loss at ``ppo.value_lr``; then scored on
  the held-out half. Variants change one of those keys.

The ceiling: ``oracle_prompt`` gives every token of a reply the mean return of its prompt's other replies (what a
value that sees only the prompt can know, estimated from ``--group`` - 1 samples), and ``ceiling_prompt`` the
same bound without that sampling noise: the variance of the prompts' true means (the between-prompt variance
less its share of the within-prompt variance) over the variance of the return, per episode. A token-level critic
can pass it only by reading the reply itself (whether the number it wrote is right).

``--mc K``: the critic that reads the reply, at its best. ``mc_values`` gives every held-out token the value of
its state estimated by sampling (``ppo_core.rollout.monte_carlo_values``, VinePPO's estimate): ``K``
continuations from the state before the token, at the preset's temperature and up to the same length limit,
scored by the task's reward. It leaves out the KL part of the return, so it explains the return a little less
than the exact value would. ``K`` samples add their own noise; the estimate is made twice with ``K`` / 2 each,
and ``ev_noise_removed`` subtracts the noise variance that the two halves' difference shows.
"""

import argparse
import json
import os
import sys
import tempfile
import time

# Busy-waiting OpenMP threads collapse on a shared machine (see ppo_core/run/cli.py); set before torch loads.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
from pathlib import Path

import torch

from ppo_core.gae import compute_gae, explained_variance, token_rewards
from ppo_core.kl import kl_penalty
from ppo_core.losses import value_loss
from ppo_core.model import position_ids_from_mask

RIDGE_PENALTIES = [10.0**k for k in range(-1, 6)]


def ev(values: torch.Tensor, returns: torch.Tensor) -> float:
    """Token-level explained variance of flat (N,) tensors, as training logs it."""
    return explained_variance(values[None], returns[None], torch.ones(1, len(returns), dtype=torch.bool))


def episodes(tr, records: list[dict], group: int) -> list[dict]:
    """``group`` replies to each record, collected and scored by the trainer in chunks of one rollout batch; per chunk
    the rollout, the Monte-Carlo returns (B, T) and each row's prompt index."""
    cfg, p = tr.cfg, tr.cfg.ppo
    rows = [(i, r) for i, r in enumerate(records) for _ in range(group)]
    out = []
    for s in range(0, len(rows), cfg.rollout.batch_size):
        chunk = rows[s : s + cfg.rollout.batch_size]
        ro = tr.collect([r for _, r in chunk])
        kl = kl_penalty(ro.logprobs, ro.ref_logprobs, p.kl_estimator)
        rewards = token_rewards(ro.scores, kl, ro.mask, tr.kl_ctl.value)
        _, returns = compute_gae(rewards, torch.zeros_like(rewards), ro.mask, p.gamma, 1.0)
        out.append({"ro": ro, "returns": returns, "prompt": torch.tensor([i for i, _ in chunk])})
        print(f"  collected {s + len(chunk)}/{len(rows)} episodes, {time.strftime('%H:%M:%S')}", flush=True)
    return out


@torch.no_grad()
def hidden_states(lm, ro, layers: list[int]) -> tuple[list[torch.Tensor], torch.Tensor]:
    """The trunk's hidden states at the response positions (one (B, T, H) per entry of ``layers``; -1 is the final,
    normed one the value head reads) and at the prompt's last position (B, H) from the final layer."""
    pos = position_ids_from_mask(ro.attention_mask)
    out = lm.base_model(input_ids=ro.input_ids, attention_mask=ro.attention_mask, position_ids=pos,
                        output_hidden_states=True)  # fmt: skip
    hs = out.hidden_states
    return [hs[k][:, ro.keep].float() for k in layers], hs[-1][:, ro.prompt_len - 1].float()


class Tokens:
    """The episodes flattened to their response tokens: features by name (N, H), return, episode, prompt."""

    def __init__(self, chunks: list[dict], feats: list[dict]):
        self.x, ret, ep, prompt, score = {}, [], [], [], []
        n_ep = 0
        for c, f in zip(chunks, feats):
            m = c["ro"].mask.bool()
            B = m.shape[0]
            for name, h in f.items():
                h = h if h.dim() == 3 else h[:, None].expand(-1, m.shape[1], -1)  # a prompt feature: every token
                self.x.setdefault(name, []).append(h[m])
            ret.append(c["returns"][m])
            ep.append((torch.arange(B)[:, None].expand_as(m) + n_ep)[m])
            prompt.append(c["prompt"][:, None].expand_as(m)[m])
            score.append(c["ro"].scores.float())
            n_ep += B
        self.x = {k: torch.cat(v) for k, v in self.x.items()}
        self.ret, self.ep, self.prompt = torch.cat(ret), torch.cat(ep), torch.cat(prompt)
        self.ep_score = torch.cat(score)
        self.ep_prompt = torch.cat([c["prompt"] for c in chunks])
        self.ep_return = torch.zeros(n_ep)
        first = torch.ones_like(self.ep, dtype=torch.bool)
        first[1:] = self.ep[1:] != self.ep[:-1]
        self.ep_return[self.ep[first]] = self.ret[first]  # the return from the reply's first token

    def rows(self, prompts: torch.Tensor) -> torch.Tensor:
        """Token rows of the episodes of these prompts."""
        return torch.isin(self.prompt, prompts)


def ridge_fit(x: torch.Tensor, y: torch.Tensor, penalty: float) -> tuple[torch.Tensor, torch.Tensor, tuple]:
    """Closed-form ridge on standardised features (float64); returns (w, b) on the raw features and the scaling."""
    x, y = x.double(), y.double()
    mu, sd = x.mean(0), x.std(0).clamp_min(1e-6)
    z = (x - mu) / sd
    ym = y.mean()
    w = torch.linalg.solve(z.T @ z + penalty * torch.eye(z.shape[1], dtype=z.dtype), z.T @ (y - ym))
    w_raw = w / sd
    return w_raw.float(), (ym - (w_raw * mu).sum()).float(), (mu, sd)


def ridge(tok: Tokens, name: str, fit_prompts: torch.Tensor, folds: int = 4) -> tuple[torch.Tensor, torch.Tensor, dict]:
    """Ridge on ``tok.x[name]``, the penalty chosen by ``folds``-fold cross-validation over the fit prompts' groups."""
    parts = fit_prompts[torch.randperm(len(fit_prompts), generator=torch.Generator().manual_seed(0))].chunk(folds)
    cv = {}
    for pen in RIDGE_PENALTIES:
        preds, targets = [], []
        for k in range(folds):
            val = tok.rows(parts[k])
            tr_rows = tok.rows(torch.cat([parts[j] for j in range(folds) if j != k]))
            w, b, _ = ridge_fit(tok.x[name][tr_rows], tok.ret[tr_rows], pen)
            preds.append(tok.x[name][val] @ w + b)
            targets.append(tok.ret[val])
        cv[pen] = ev(torch.cat(preds), torch.cat(targets))
    best = max(cv, key=cv.get)
    rows = tok.rows(fit_prompts)
    w, b, _ = ridge_fit(tok.x[name][rows], tok.ret[rows], best)
    return w, b, {"penalty": best, "cv_ev": round(cv[best], 4)}


def mlp(tok: Tokens, name: str, fit_prompts: torch.Tensor, width: int = 256, seed: int = 0):
    """A two-layer head on standardised features, AdamW full-batch, stopped at its best EV on a fifth of the fit
    prompts; returns a predict function and its details."""
    g = torch.Generator().manual_seed(seed)
    perm = fit_prompts[torch.randperm(len(fit_prompts), generator=g)]
    stop, train = perm[: max(1, len(perm) // 5)], perm[max(1, len(perm) // 5) :]
    x = tok.x[name]
    mu, sd = x[tok.rows(train)].mean(0), x[tok.rows(train)].std(0).clamp_min(1e-6)
    torch.manual_seed(seed)
    net = torch.nn.Sequential(torch.nn.Linear(x.shape[1], width), torch.nn.ReLU(), torch.nn.Linear(width, 1))
    opt = torch.optim.AdamW(net.parameters(), lr=1e-3, weight_decay=1e-2)
    xt, yt = (x[tok.rows(train)] - mu) / sd, tok.ret[tok.rows(train)]
    xs, ys = (x[tok.rows(stop)] - mu) / sd, tok.ret[tok.rows(stop)]
    best, best_state, best_epoch = -float("inf"), None, 0
    for epoch in range(300):
        opt.zero_grad()
        torch.nn.functional.mse_loss(net(xt).squeeze(-1), yt).backward()
        opt.step()
        with torch.no_grad():
            score = ev(net(xs).squeeze(-1), ys)
        if score > best:
            best, best_state, best_epoch = score, {k: v.clone() for k, v in net.state_dict().items()}, epoch + 1
    net.load_state_dict(best_state)

    def predict(rows):
        with torch.no_grad():
            return net((x[rows] - mu) / sd).squeeze(-1)

    return predict, {"width": width, "epochs": best_epoch, "stop_ev": round(best, 4)}


def online(tok: Tokens, fit_prompts: torch.Tensor, ep_rows: int, minibatch: int, value_lr: float, epochs: int,
           clip: float, last: int = 5) -> tuple[torch.Tensor, torch.Tensor, dict]:  # fmt: skip
    """The preset's head updated as training updates it, on frozen final hidden states (see the module's doc)."""
    x = tok.x["final"]
    head = torch.nn.Linear(x.shape[1], 1)
    torch.nn.init.zeros_(head.weight), torch.nn.init.zeros_(head.bias)
    opt = torch.optim.AdamW(head.parameters(), lr=value_lr, weight_decay=0.0)
    eps = torch.unique(tok.ep[tok.rows(fit_prompts)])
    eps = eps[torch.randperm(len(eps), generator=torch.Generator().manual_seed(0))]  # rounds of mixed prompts
    logged, g = [], torch.Generator().manual_seed(1)
    for s in range(0, len(eps) - ep_rows + 1, ep_rows):
        round_eps = eps[s : s + ep_rows]
        with torch.no_grad():
            old = head(x).squeeze(-1)
        rows = torch.isin(tok.ep, round_eps)
        logged.append(ev(old[rows], tok.ret[rows]))
        for _ in range(epochs):
            for mb in round_eps[torch.randperm(len(round_eps), generator=g)].split(minibatch):
                r = torch.isin(tok.ep, mb)
                opt.zero_grad()
                ones = torch.ones(1, int(r.sum()), dtype=torch.bool)
                loss, _ = value_loss(head(x[r]).squeeze(-1)[None], old[r][None], tok.ret[r][None], ones, clip)
                loss.backward()
                torch.nn.utils.clip_grad_norm_(head.parameters(), 1.0)
                opt.step()
    detail = {"rounds": len(logged), "logged_ev": [round(v, 4) for v in logged],
              f"logged_ev_last{last}": round(sum(logged[-last:]) / len(logged[-last:]), 4)}  # fmt: skip
    return head.weight.detach()[0], head.bias.detach()[0], detail


def lora_critic(tr, chunks: list[dict], fit_prompts, held_prompts, w0, b0, passes: int, minibatch: int, lr: float,
                value_lr: float) -> tuple[list[float], dict]:  # fmt: skip
    """A LoRA critic of its own: a second adapter on the frozen base (the preset's rank) under a value head started
    at (w0, b0); value loss alone; held-out EV before training and after each pass."""
    from ppo_core.utils import quiet_peft

    peft = quiet_peft()
    lora = tr.cfg.model.lora
    pm, lm = tr.actor.peft_model, tr.actor.lm
    targets = pm.peft_config["default"].target_modules
    pm.add_adapter("critic", peft.LoraConfig(r=lora.r, lora_alpha=lora.alpha, target_modules=targets, bias="none"))
    pm.set_adapter("critic")
    params = [p for n, p in lm.named_parameters() if ".critic." in n]
    for p in params:
        p.requires_grad_(True)
    head = torch.nn.Linear(w0.numel(), 1)
    with torch.no_grad():
        head.weight.copy_(w0[None]), head.bias.fill_(float(b0))
    opt = torch.optim.AdamW([{"params": params, "lr": lr}, {"params": head.parameters(), "lr": value_lr}],
                            weight_decay=0.0)  # fmt: skip

    def values(ro, rows):
        pos = position_ids_from_mask(ro.attention_mask[rows])
        h = lm.base_model(input_ids=ro.input_ids[rows], attention_mask=ro.attention_mask[rows], position_ids=pos)
        return head(h.last_hidden_state[:, ro.keep].float()).squeeze(-1)

    def held_ev():
        v, r = [], []
        with torch.no_grad():
            for c in chunks:
                rows = torch.isin(c["prompt"], held_prompts)
                if rows.any():
                    m = c["ro"].mask[rows].bool()
                    v.append(values(c["ro"], rows)[m])
                    r.append(c["returns"][rows][m])
        return ev(torch.cat(v), torch.cat(r))

    curve, t0, g = [held_ev()], time.perf_counter(), torch.Generator().manual_seed(2)
    lm.train()
    for _ in range(passes):
        for ci in torch.randperm(len(chunks), generator=g).tolist():
            c = chunks[ci]
            idx = torch.nonzero(torch.isin(c["prompt"], fit_prompts)).squeeze(-1)
            for rows in idx[torch.randperm(len(idx), generator=g)].split(minibatch):
                m = c["ro"].mask[rows].bool()
                opt.zero_grad()
                loss = 0.5 * ((values(c["ro"], rows) - c["returns"][rows])[m] ** 2).mean()
                loss.backward()
                torch.nn.utils.clip_grad_norm_(params + list(head.parameters()), 1.0)
                opt.step()
        lm.eval()
        curve.append(held_ev())
        lm.train()
        print(f"  lora critic pass {len(curve) - 1}: held-out EV {curve[-1]:+.3f}", flush=True)
    lm.eval()
    pm.set_adapter("default")
    return curve, {"passes": passes, "s": round(time.perf_counter() - t0, 1)}


def mc_values(tr, chunks: list[dict], records: list[dict], held_p: torch.Tensor, k: int, y: torch.Tensor):
    """Every held-out token's value estimated from ``k`` sampled continuations (two halves of ``k`` / 2), in the
    order of ``Tokens.rows(held_p)``; the EV with the sampling noise removed."""
    from ppo_core.rollout import monte_carlo_values

    tr.actor.eval()
    halves = ([], [])
    for c in chunks:
        idx = torch.isin(c["prompt"], held_p).nonzero().squeeze(1)
        if len(idx) == 0:
            continue
        ro = c["ro"].select(idx)
        recs = [records[int(c["prompt"][i])] for i in idx]
        prompts = tr.prompts(recs)

        def score(b, text, recs=recs):
            return float(tr.reward_fn(text, recs[b]["answer"]))

        for half in halves:
            v = monte_carlo_values(tr.actor.lm, tr.tokenizer, prompts, ro, score, k=k // 2,
                                   temperature=tr.cfg.rollout.temperature)  # fmt: skip
            half.append(v[ro.mask.bool()])
        print(f"  mc_values: {sum(len(h) for h in halves[0])} tokens, {time.strftime('%H:%M:%S')}", flush=True)
    v1, v2 = torch.cat(halves[0]), torch.cat(halves[1])
    pred = (v1 + v2) / 2
    noise = float((v1 - v2).var()) / 4  # Var of the mean of two independent halves' errors
    resid = float((pred - y).var())  # as explained_variance measures it
    return pred, {"k": k, "ev_noise_removed": round(1 - (resid - noise) / float(y.var()), 4)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--prompts", type=int, default=96)
    ap.add_argument("--group", type=int, default=4, help="replies per prompt")
    ap.add_argument("--train-steps", type=int, default=0, help="PPO steps of the preset before sampling")
    ap.add_argument("--lora-passes", type=int, default=2, help="passes of the LoRA critic over the fit half (0: none)")
    ap.add_argument("--mc", type=int, default=0, help="continuations per state for mc_values (0: not measured)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--save", help="write the result here (save_result), e.g. benchmarks/results/real_llm/critic.json")
    ap.add_argument("overrides", nargs="*")
    args = ap.parse_args()
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from results_meta import save_result

    from ppo_core.run.config import load_config
    from ppo_core.run.runner import build_trainer

    torch.set_num_threads(2)
    t0, load_before = time.perf_counter(), os.getloadavg()
    tmp = tempfile.TemporaryDirectory()
    cfg = load_config("cpu-smollm", [f"train.seed={args.seed}", f"train.output_dir={tmp.name}", "train.progress=false",
                                     "train.overwrite=true", *args.overrides])  # fmt: skip
    tr = build_trainer(cfg)
    times, logged = {}, []
    for _ in range(args.train_steps):
        logged.append(tr.step())
        print(f"  PPO step {tr.step_count}: reward {logged[-1]['rollout/reward_mean']:.3f}, "
              f"EV {logged[-1]['value/explained_variance']:+.3f}", flush=True)  # fmt: skip
    times["train_s"] = time.perf_counter() - t0
    g = torch.Generator().manual_seed(1000 + args.seed)
    pick = torch.randperm(len(tr.train_records), generator=g)[: args.prompts].tolist()
    records = [tr.train_records[i] for i in pick]
    t1 = time.perf_counter()
    chunks = episodes(tr, records, args.group)
    times["collect_s"] = time.perf_counter() - t1
    n_layers = tr.actor.lm.config.num_hidden_layers
    layers = {"final": -1, "mid": n_layers // 2}
    t1, feats = time.perf_counter(), []
    for c in chunks:
        hs, prompt_h = hidden_states(tr.actor.lm, c["ro"], list(layers.values()))
        f = dict(zip(layers, hs)) | {"prompt": prompt_h}
        if args.train_steps:  # the base model's own features: the adapters off
            with tr.actor.peft_model.disable_adapter():
                f["base"] = hidden_states(tr.actor.lm, c["ro"], [-1])[0][0]
        feats.append(f)
    times["features_s"] = time.perf_counter() - t1
    tok = Tokens(chunks, feats)

    split = torch.randperm(args.prompts, generator=torch.Generator().manual_seed(7))
    fit_p, held_p = split[: args.prompts // 2], split[args.prompts // 2 :]
    held = tok.rows(held_p)
    y = tok.ret[held]
    rows, fitted = [], {}

    def add(name, pred, **detail):
        rows.append({"critic": name, "ev_held": round(ev(pred, y), 4), **detail})
        print(f"  {name:<28} held-out EV {rows[-1]['ev_held']:+.3f} {detail}", flush=True)

    # The ceiling of a value that sees the prompt only
    G = args.group
    ep_mean = torch.zeros(args.prompts).index_add_(0, tok.ep_prompt, tok.ep_return) / G
    loo = (ep_mean[tok.prompt] * G - tok.ep_return[tok.ep]) / (G - 1)
    add("oracle_prompt", loo[held], what="mean return of the prompt's other replies")
    er, ep_p = tok.ep_return, tok.ep_prompt
    ep_held = torch.isin(ep_p, held_p)
    within = ((er - ep_mean[ep_p]) ** 2)[ep_held].sum() / (int(ep_held.sum()) - len(held_p))
    between = ep_mean[held_p].var()
    ceiling = max(0.0, float(between - within / G)) / float(er[ep_held].var())
    rows.append({"critic": "ceiling_prompt", "ev_held": round(ceiling, 4), "level": "episode"})
    print(f"  ceiling_prompt (episode level) {ceiling:+.3f}", flush=True)
    add("constant", torch.full_like(y, float(tok.ret[tok.rows(fit_p)].mean())))

    t1 = time.perf_counter()
    names = {"ridge": "final", "ridge_mid": "mid", "ridge_prompt": "prompt"} | (
        {"ridge_base": "base"} if args.train_steps else {}
    )
    for name, feat in names.items():
        w, b, detail = ridge(tok, feat, fit_p)
        fitted[name] = (w, b)
        add(name, tok.x[feat][held] @ w + b, **detail)
    predict, detail = mlp(tok, "final", fit_p)
    add("mlp", predict(held), **detail)
    p = cfg.ppo
    variants = {
        "online:preset": (p.value_lr or p.lr, max(p.value_epochs, p.ppo_epochs), p.vf_clip_eps),
        "online:value_epochs=4": (p.value_lr or p.lr, 4, p.vf_clip_eps),
        "online:value_lr=1e-4": (1e-4, max(p.value_epochs, p.ppo_epochs), p.vf_clip_eps),
        "online:value_lr=1e-2": (1e-2, max(p.value_epochs, p.ppo_epochs), p.vf_clip_eps),
        "online:vf_clip_eps=10": (p.value_lr or p.lr, max(p.value_epochs, p.ppo_epochs), 10.0),
    }
    for name, (lr, epochs, clip) in variants.items():
        w, b, detail = online(tok, fit_p, cfg.rollout.batch_size, p.minibatch_size, lr, epochs, clip)
        add(name, tok.x["final"][held] @ w + b, value_lr=lr, value_epochs=epochs, vf_clip_eps=clip, **detail)
    times["heads_s"] = time.perf_counter() - t1
    if args.lora_passes:
        t1 = time.perf_counter()
        curve, detail = lora_critic(tr, chunks, fit_p, held_p, *fitted["ridge"], args.lora_passes,
                                    p.minibatch_size, p.lr, p.value_lr or p.lr)  # fmt: skip
        rows.append({"critic": "lora", "ev_held": round(curve[-1], 4), "curve": [round(v, 4) for v in curve], **detail})
        times["lora_s"] = time.perf_counter() - t1
    if args.mc:
        t1 = time.perf_counter()
        pred, detail = mc_values(tr, chunks, records, held_p, args.mc, y)
        add("mc_values", pred, **detail)
        times["mc_s"] = time.perf_counter() - t1
    times = {k: round(v, 1) for k, v in times.items()} | {"total_s": round(time.perf_counter() - t0, 1)}

    stats = {
        "prompts": args.prompts,
        "group": G,
        "episodes": len(tok.ep_score),
        "tokens": len(tok.ret),
        "held_tokens": int(held.sum()),
        "correct_rate": round(float((tok.ep_score >= 1).float().mean()), 4),
        "format_rate": round(float((tok.ep_score > 0).float().mean()), 4),
        "mean_return": round(float(tok.ep_return.mean()), 4),
        "return_var_token": round(float(tok.ret.var()), 5),
        "kl_coef": tr.kl_ctl.value,
    }
    print(json.dumps(stats), times, flush=True)
    if args.save:
        load = {"before": [round(x, 2) for x in load_before], "after": [round(x, 2) for x in os.getloadavg()]}
        evs = [round(r.get("value/explained_variance", float("nan")), 4) for r in logged]
        data = {"train_steps": args.train_steps, "seed": args.seed, "overrides": args.overrides, "data": stats,
                "rows": rows, "times": times, "load_avg": load, "train_logged_ev": evs}  # fmt: skip
        save_result(args.save, data, command=" ".join(["python", *sys.argv]))
    tmp.cleanup()


if __name__ == "__main__":
    main()
