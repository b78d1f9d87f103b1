"""Steps 3-5 of the critic-free methods (chapter 07) against naive loops, on the fixed rollout of
tests/test_algorithm_box.py: where the KL goes, the advantage of each estimator, no returns, and what the
update receives.
"""

import math

import pytest
import torch
from test_algorithm_box import BASE, B, fixed_rollout, make_trainer, run_package_step  # noqa: F401

from ppo_core.rollout import Rollout
from ppo_core.run.config import load_config
from ppo_core.run.runner import RunTrainer

G = 4  # two groups of four rows in the fixed rollout of B = 8


def naive_advantages(estimator: str, fixed: dict, kl_coef: float, gamma: float, norm: bool) -> torch.Tensor:
    """(B, T) advantages written out from the papers' formulas, one row and one token at a time."""
    mask, scores = fixed["mask"], fixed["scores"].double()
    lengths = [int(m.sum()) for m in mask]
    out = torch.zeros(mask.shape, dtype=torch.float64)
    if estimator == "reinforce_plus_plus":  # KL in the reward (k1), returns-to-go, whitened over all tokens
        k1 = (fixed["logprobs"] - fixed["ref_logprobs"]).double()
        values = []
        for i, n in enumerate(lengths):
            for t in range(n):
                ret = 0.0
                for u in range(t, n):
                    r = -kl_coef * float(k1[i, u]) + (float(scores[i]) if u == n - 1 else 0.0)
                    ret += gamma ** (u - t) * r
                out[i, t] = ret
                values.append(ret)
        mean = sum(values) / len(values)
        std = math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1))
        for i, n in enumerate(lengths):
            for t in range(n):
                out[i, t] = (out[i, t] - mean) / math.sqrt(std**2 + 1e-8)
        return out
    for g in range(B // G):
        rows = list(range(g * G, g * G + G))
        group = [float(scores[i]) for i in rows]  # the KL is in the loss: the return is the score
        mean = sum(group) / G
        std = math.sqrt(sum((x - mean) ** 2 for x in group) / (G - 1))
        for i, x in zip(rows, group):
            if estimator == "grpo":
                a = (x - mean) / (std + 1e-6) if norm else x - mean
            else:  # rloo: minus the mean of the other G - 1
                a = x - (sum(group) - x) / (G - 1)
            out[i, : lengths[i]] = a
    return out


def naive_loss(actor, mb: dict, agg: str, kl_type: str, kl_coef: float, ent_coef: float, norm_len: int) -> tuple:
    """(total loss, KL term) of one minibatch from the formulas: clipped surrogate, KL estimator, entropy bonus."""
    P = mb["keep"].start + 1
    T = mb["mask"].shape[1]
    pos = (mb["attention_mask"].cumsum(-1) - 1).clamp(min=0)
    logits, _ = actor(mb["input_ids"], mb["attention_mask"], pos, keep=slice(P - 1, P + T - 1))
    logp_all = torch.log_softmax(logits.double() / BASE["temperature"], -1)
    rows = range(mb["mask"].shape[0])
    per_tok, kl_tok, ent_tok = {}, {}, []
    for i in rows:
        for t in range(T):
            if not mb["mask"][i, t]:
                continue
            lp = logp_all[i, t, mb["response_ids"][i, t]]
            ratio = torch.exp(lp - mb["old_logprobs"][i, t])
            adv = mb["advantages"][i, t]
            per_tok[i, t] = torch.maximum(-adv * ratio, -adv * ratio.clamp(1 - 0.2, 1 + 0.2))
            lr = lp - mb["ref_logprobs"][i, t] if "ref_logprobs" in mb else lp * 0
            kl_tok[i, t] = {"k1": lr, "k2": lr**2 / 2, "k3": torch.exp(-lr) - 1 + lr}[kl_type]
            ent_tok.append(-(logp_all[i, t].exp() * logp_all[i, t]).sum())

    def aggregate(x: dict):
        if agg == "token-mean":
            return sum(x.values()) / len(x)
        if agg == "seq-mean-token-mean":
            means = [sum(v for (r, _), v in x.items() if r == i) / sum(1 for r, _ in x if r == i) for i in rows]
            return sum(means) / len(means)
        return sum(x.values()) / (len(rows) * norm_len)  # seq-mean-token-sum-norm

    total = aggregate(per_tok)
    kl_total = aggregate(kl_tok)
    total = total + kl_coef * kl_total - ent_coef * sum(ent_tok) / len(ent_tok)
    return float(total), float(kl_total)


CASES = {
    "grpo": dict(adv_estimator="grpo", group_size=G, norm=True, in_reward=False, kl_loss=True,
                 agg="seq-mean-token-mean", kl_type="k3"),
    "drgrpo": dict(adv_estimator="grpo", group_size=G, norm=False, in_reward=False, kl_loss=True,
                   agg="seq-mean-token-sum-norm", kl_type="k2"),
    "rloo": dict(adv_estimator="rloo", group_size=G, norm=True, in_reward=False, kl_loss=False, agg="token-mean",
                 kl_type="k3"),
    "reinforce_plus_plus": dict(adv_estimator="reinforce_plus_plus", group_size=1, norm=True, in_reward=True,
                                kl_loss=False, agg="token-mean", kl_type="k3"),
}  # fmt: skip


def critic_free_trainer(model_path, out_dir, case: dict, gamma: float, kl_coef: float) -> RunTrainer:
    overrides = [
        f"model.name_or_path={model_path}",
        f"train.output_dir={out_dir}",
        "train.steps=1",
        f"rollout.batch_size={B}",
        f"rollout.group_size={case['group_size']}",
        f"rollout.temperature={BASE['temperature']}",
        f"ppo.minibatch_size={B // 2}",
        "ppo.ppo_epochs=1",
        f"ppo.gamma={gamma}",
        f"ppo.kl_coef={kl_coef}",
        "ppo.adaptive_kl=false",
        f"algo.adv_estimator={case['adv_estimator']}",
        f"algo.norm_adv_by_std_in_grpo={case['norm']}",
        f"algo.use_kl_in_reward={case['in_reward']}",
        f"algo.use_kl_loss={case['kl_loss']}",
        f"algo.loss_agg_mode={case['agg']}",
        f"algo.kl_loss_type={case['kl_type']}",
        "data.n_train=16",
        "data.n_test=8",
        "train.check_ratio=false",
        "train.tensorboard=false",
        "train.log_every=0",
        "train.progress=false",
    ]
    return RunTrainer(load_config("cpu-grpo", overrides))


@pytest.mark.parametrize("name", list(CASES))
def test_critic_free_step_against_naive_loops(name, tiny_model_path, tmp_path, fixed_rollout, monkeypatch):  # noqa: F811
    case, gamma, kl_coef = CASES[name], 0.9, 0.3
    tr = critic_free_trainer(tiny_model_path, tmp_path / "run", case, gamma, kl_coef)
    assert tr.actor.value_head is None
    seen, losses = [], []
    update = tr.ppo.minibatch_update
    a = tr.cfg.algo
    kl_coef_loss = a.kl_loss_coef if case["kl_loss"] else 0.0

    def spy(actor, optimizer, mb, **kwargs):
        seen.append({k: v.clone() for k, v in mb.items() if torch.is_tensor(v)})
        with torch.no_grad():  # the loss of this minibatch, from the formulas, before the update moves the actor
            want = naive_loss(actor, mb, case["agg"], case["kl_type"], kl_coef_loss, tr.cfg.ppo.ent_coef,
                              tr.cfg.rollout.max_new_tokens)  # fmt: skip
        stats = update(actor, optimizer, mb, **kwargs)
        losses.append((want, stats))
        return stats

    monkeypatch.setattr(tr.ppo, "minibatch_update", spy)
    f = fixed_rollout
    keys = ["input_ids", "attention_mask", "response_ids", "mask", "scores", "logprobs", "ref_logprobs"]
    ro = Rollout(prompt_len=f["prompt_len"], values=None, **{k: f[k].clone() for k in keys})
    metrics = tr.learn(ro)
    rec = tr.last_step
    # 3. the KL in the reward only where the method puts it there
    assert rec.kl_coef_used == (kl_coef if case["in_reward"] else 0.0)
    if not case["in_reward"]:
        last = f["mask"].long().cumsum(1).argmax(1)
        want = torch.zeros_like(rec.rewards)
        want[torch.arange(B), last] = f["scores"].to(want.dtype)
        torch.testing.assert_close(rec.rewards, want)
    # 4. the estimator's advantage, no whitening on top, no returns
    want = naive_advantages(case["adv_estimator"], f, kl_coef, gamma, case["norm"])
    torch.testing.assert_close(rec.advantages_raw.double(), want, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(rec.advantages, rec.advantages_raw)
    assert rec.returns is None
    assert "value/explained_variance" not in metrics
    # 5. the update's loss is the formulas' (aggregation, KL term), and it gets the reference's logprobs exactly
    # when the KL is in the loss, and nothing of a critic
    assert kl_coef_loss == (0.04 if case["kl_loss"] else 0.0)  # the cpu-grpo preset's kl_loss_coef
    for (want_total, want_kl), stats in losses:
        assert stats["loss/total"] == pytest.approx(want_total, rel=1e-5, abs=1e-6)
        if case["kl_loss"]:
            assert stats["kl/loss"] == pytest.approx(want_kl, rel=1e-5, abs=1e-7) and want_kl > 1e-3
        else:
            assert "kl/loss" not in stats
    assert len(seen) == 2
    for mb in seen:
        assert "old_values" not in mb and "returns" not in mb
        assert ("ref_logprobs" in mb) == case["kl_loss"]
        if case["kl_loss"]:
            rows = [int((f["input_ids"] == r).all(1).nonzero()) for r in mb["input_ids"]]
            torch.testing.assert_close(mb["ref_logprobs"], f["ref_logprobs"][rows])
