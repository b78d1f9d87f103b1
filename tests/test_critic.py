"""The critic's mechanisms: decoupled and length-adaptive GAE lambda, the value head's own learning rate,
the value warm-up (policy untouched, resume-safe), and today's behaviour when they are set back."""

import json

import pytest
import torch

from ppo_core.gae import compute_gae
from ppo_core.run.config import ConfigError, derive, load_config
from ppo_core.run.metrics import ev_by_success, explained_variance, last_mean, read_metrics
from ppo_core.run.runner import RunTrainer
from ppo_core.run.setup import build_optimizer, param_groups


def _batch(seed=0, B=5, T=7):
    g = torch.Generator().manual_seed(seed)
    rewards = torch.randn(B, T, generator=g)
    values = torch.randn(B, T, generator=g)
    lengths = torch.tensor([7, 1, 4, 6, 3])[:B]
    mask = torch.arange(T)[None] < lengths[:, None]
    return rewards, values, mask


def test_per_sequence_lambda_equals_running_each_row_with_its_own_float():
    rewards, values, mask = _batch()
    lam = torch.tensor([0.0, 0.5, 0.9, 0.95, 1.0])
    for shape in ((5,), (5, 1)):
        adv, ret = compute_gae(rewards, values, mask, 0.99, lam.reshape(shape))
        for b in range(5):
            a_b, r_b = compute_gae(rewards[b : b + 1], values[b : b + 1], mask[b : b + 1], 0.99, float(lam[b]))
            torch.testing.assert_close(adv[b : b + 1], a_b)
            torch.testing.assert_close(ret[b : b + 1], r_b)


def test_float_lambda_path_is_unchanged():
    """A float lambda runs the original recursion: compare with a plain re-implementation, bit for bit."""
    rewards, values, mask = _batch(1)
    adv, ret = compute_gae(rewards, values, mask, 1.0, 0.95)
    B, T = rewards.shape
    want = torch.zeros(B, T)
    for b in range(B):
        idx = torch.nonzero(mask[b]).squeeze(-1).tolist()
        nxt_v, nxt_a = 0.0, 0.0
        for t in reversed(idx):
            delta = rewards[b, t] + 1.0 * nxt_v - values[b, t]
            want[b, t] = delta + 1.0 * 0.95 * nxt_a
            nxt_v, nxt_a = values[b, t], want[b, t]
    assert torch.equal(adv, want)
    assert torch.equal(ret, torch.where(mask, want + values, torch.zeros(())))


def test_lambda_one_targets_are_monte_carlo_returns_whatever_the_values():
    rewards, values, mask = _batch(2)
    _, ret = compute_gae(rewards, values, mask, 1.0, 1.0)
    _, ret_zero_critic = compute_gae(rewards, torch.zeros_like(values), mask, 1.0, 1.0)
    r = torch.where(mask, rewards, torch.zeros(()))
    mc = r.flip(1).cumsum(1).flip(1) * mask  # sum of the rewards still to come
    torch.testing.assert_close(ret, mc)
    torch.testing.assert_close(ret_zero_critic, mc)


def test_first_token_credit_of_a_zero_critic_is_lambda_to_the_t_minus_1():
    """The decay chapter 03 states: with V = 0 and only a final score, A_0 = lam^(T-1) * score."""
    T = 100
    rewards = torch.zeros(1, T)
    rewards[0, -1] = 1.0
    mask = torch.ones(1, T, dtype=torch.bool)
    adv, _ = compute_gae(rewards, torch.zeros(1, T), mask, 1.0, 0.95)
    assert adv[0, 0].item() == pytest.approx(0.95 ** (T - 1), rel=1e-5)


def _cfg(tiny_model_path, tmp_path, steps=1, *extra):
    from ppo_test_support import _tiny_overrides

    return load_config("cpu", _tiny_overrides(tiny_model_path, tmp_path / "run", steps, "train.tensorboard=false",
                                              *extra))  # fmt: skip


@pytest.mark.parametrize("optimizer", ["adamw", "adamw8bit"])
def test_value_head_gets_its_own_parameter_group_and_learning_rate(tiny_model_path, tmp_path, optimizer):
    cfg = _cfg(
        tiny_model_path,
        tmp_path,
        1,
        "ppo.lr=1e-4",
        "ppo.value_lr=3e-3",
        f"ppo.optimizer={optimizer}",
        "ppo.separate_critic=false",
    )  # the head on the policy's trunk (tests/test_separate_critic.py: the other)
    tr = RunTrainer(cfg)
    groups = tr.optimizer.param_groups
    assert [g["lr"] for g in groups] == [1e-4, 3e-3]
    head = {id(p) for p in tr.actor.critic_parameters()}  # the head
    assert {id(p) for p in groups[1]["params"]} == head
    assert not head & {id(p) for p in groups[0]["params"]}
    n_all = sum(1 for p in tr.actor.parameters() if p.requires_grad)
    assert len(groups[0]["params"]) + len(groups[1]["params"]) == n_all
    cfg = derive(cfg, {"ppo.value_lr": 0.0})  # set back: one group, at ppo.lr, as before
    assert [g["lr"] for g in build_optimizer(tr.actor, cfg.ppo).param_groups] == [1e-4]
    assert isinstance(param_groups(tr.actor, cfg.ppo), list) and torch.is_tensor(param_groups(tr.actor, cfg.ppo)[0])


def test_without_a_critic_value_lr_and_lam_value_are_ignored_and_warmup_refused(tiny_model_path, tmp_path):
    """No value head (chapter 07's critic-free estimators): one parameter group whatever ppo.value_lr says, the
    step runs with the cpu preset's value_lr and lam_value set, and a value warm-up is a one-line config error."""
    from ppo_core.model import ActorWithValueHead
    from ppo_core.tasks.tiny import build_char_tokenizer, build_tiny_model

    lm = build_tiny_model(build_char_tokenizer("ab"))
    actor = ActorWithValueHead(lm, with_value_head=False)
    ppo = load_config("cpu").ppo
    assert ppo.value_lr > 0 and ppo.lam_value == 1.0  # the preset sets both
    groups = param_groups(actor, ppo)
    assert all(torch.is_tensor(p) for p in groups) and len(groups) == len(list(actor.parameters()))
    assert [g["lr"] for g in build_optimizer(actor, ppo).param_groups] == [ppo.lr]
    grpo = ("algo.adv_estimator=grpo", "rollout.group_size=4")
    tr = RunTrainer(_cfg(tiny_model_path, tmp_path, 1, *grpo))
    assert tr.actor.value_head is None and len(tr.optimizer.param_groups) == 1
    m = tr.step()
    assert tr.last_step.returns is None and not [k for k in m if k.startswith("value/")]
    with pytest.raises(ConfigError, match="set ppo.value_warmup_steps=0") as err:
        load_config("cpu", [*grpo, "ppo.value_warmup_steps=2"])
    assert "\n" not in str(err.value)


def test_the_optimizer_is_torch_s_fused_adamw_and_steps_as_its_loop():
    """build_optimizer's AdamW runs fused on the CPU, with the groups, learning rates and weight decay of the loop
    version: three steps on the same gradients move every weight the same, up to float rounding."""
    import copy

    from ppo_core.model import ActorWithValueHead
    from ppo_core.tasks.tiny import build_char_tokenizer, build_tiny_model

    torch.manual_seed(0)
    actor = ActorWithValueHead(build_tiny_model(build_char_tokenizer("ab")))
    twin, start = copy.deepcopy(actor), copy.deepcopy(actor)
    ppo = load_config("cpu", ["ppo.weight_decay=0.1"]).ppo
    fused = build_optimizer(actor, ppo)
    assert fused.defaults["fused"] and ppo.value_lr > 0 and len(fused.param_groups) == 2
    loop = torch.optim.AdamW(param_groups(twin, ppo), lr=ppo.lr, weight_decay=ppo.weight_decay, foreach=False)
    for _ in range(3):
        for a, b in zip(actor.parameters(), twin.parameters()):
            a.grad = torch.randn_like(a)
            b.grad = a.grad.clone()
        fused.step()
        loop.step()
    moved = [(a - b).abs().max().item() for a, b in zip(actor.parameters(), twin.parameters())]
    assert max(moved) < 1e-6, max(moved)
    steps = [(a - b).abs().max().item() for a, b in zip(actor.parameters(), start.parameters())]
    assert min(steps) > ppo.lr  # every weight moved (Adam: about lr per step)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])  # bfloat16: the trunk under autocast, as on the cuda preset
def test_value_warmup_fits_the_critic_and_leaves_the_policy_untouched(tiny_model_path, tmp_path, dtype):
    extra = ("ppo.value_warmup_steps=2", "ppo.adaptive_kl=true", f"model.dtype={dtype}", "train.check_ratio=false")
    tr = RunTrainer(_cfg(tiny_model_path, tmp_path, 1, *extra))
    tr.reward_fn = lambda completion, answer: float(len(completion) % 3)  # an untrained model scores 0: give it signal
    lm_before = {k: v.clone() for k, v in tr.actor.lm.state_dict().items()}
    head_before = tr.actor.value_head.weight.detach().clone()
    kl_before = tr.kl_ctl.value
    for n in (1, 2):
        m = tr.step()
        assert m["value/warmup"] == 1.0 and "policy/loss" not in m and m["value/loss"] > 0
        assert all(torch.equal(v, lm_before[k]) for k, v in tr.actor.lm.state_dict().items()), f"step {n}"
        assert tr.kl_ctl.value == kl_before
    assert not torch.equal(tr.actor.value_head.weight, head_before)  # the critic moved
    m = tr.step()  # then PPO proper: the policy moves
    assert "value/warmup" not in m and "policy/loss" in m
    assert any(not torch.equal(v, lm_before[k]) for k, v in tr.actor.lm.state_dict().items())


def test_value_warmup_steps_come_on_top_of_train_steps_and_resume_exactly(tiny_model_path, tmp_path):
    """2 warm-up + 2 PPO steps; stopped after step 1 (inside the warm-up) and resumed, the metrics repeat."""
    extra = ("ppo.value_warmup_steps=2", "train.save_every=1", "train.keep_last=5")
    full = RunTrainer(_cfg(tiny_model_path, tmp_path / "a", 2, *extra))
    full.train()
    steps = [r for r in read_metrics(full.out) if "rollout/reward_mean" in r]
    assert [r["step"] for r in steps] == [1, 2, 3, 4]
    assert [bool(r.get("value/warmup")) for r in steps] == [True, True, False, False]
    stopped = RunTrainer(_cfg(tiny_model_path, tmp_path / "b", 2, *extra))
    stopped.step()  # one warm-up step, then "killed"
    stopped.save_checkpoint("step_1")
    stopped.logger.close()
    again = RunTrainer(_cfg(tiny_model_path, tmp_path / "b", 2, *extra, f"train.resume={stopped.out / 'step_1'}"))
    again.train()
    got = [r for r in read_metrics(again.out) if "rollout/reward_mean" in r]
    drop = ("time/",)
    strip = lambda rs: [{k: v for k, v in r.items() if not k.startswith(drop)} for r in rs]  # noqa: E731
    assert strip(got) == strip(steps)


def test_decoupled_lambda_trains_the_critic_on_compute_gae_with_lam_value(tiny_model_path, tmp_path):
    tr = RunTrainer(
        _cfg(tiny_model_path, tmp_path, 1, "ppo.lam=0.9", "ppo.lam_value=1.0", "ppo.whiten_advantages=false")
    )
    tr.reward_fn = lambda completion, answer: float(len(completion) % 3)  # an untrained model scores 0
    seen = {}
    real_data = tr.ppo.minibatch_data

    def spy(ro, advantages, returns):  # what step 5 cuts into minibatches
        seen.update(ro=ro, advantages=advantages, returns=returns)
        return real_data(ro, advantages, returns)

    tr.ppo.minibatch_data = spy
    tr.step()
    ro, rewards = seen["ro"], tr.last_step.rewards
    want_adv, _ = compute_gae(rewards, ro.values, ro.mask, 1.0, 0.9)
    _, want_ret = compute_gae(rewards, ro.values, ro.mask, 1.0, 1.0)
    assert torch.equal(seen["advantages"], want_adv) and torch.equal(tr.last_step.advantages_raw, want_adv)
    assert torch.equal(seen["returns"], want_ret) and torch.equal(tr.last_step.returns, want_ret)
    assert not torch.equal(want_ret, compute_gae(rewards, ro.values, ro.mask, 1.0, 0.9)[1])  # the lambdas differ here


def test_old_settings_reproduce_the_old_run(tiny_model_path, tmp_path):
    """lam_value = null and lam_value = ppo.lam (a float equal to it) take the old code path: identical metrics.

    (Against the code before these keys existed, the same 3-step run with these settings gave identical
    metrics.jsonl files, times aside.)"""
    runs = []
    old = ("ppo.value_lr=0", "ppo.value_warmup_steps=0")
    for i, extra in enumerate([(*old, "ppo.lam_value=null"), (*old, "ppo.lam_value=0.95", "ppo.lam=0.95")]):
        tr = RunTrainer(_cfg(tiny_model_path, tmp_path / str(i), 2, *extra))
        tr.reward_fn = lambda completion, answer: float(len(completion) % 3)
        runs.append([{k: v for k, v in tr.step().items() if not k.startswith("time/")} for _ in range(2)])
    assert runs[0][1]["value/loss"] > 0
    assert json.dumps(runs[0]) == json.dumps(runs[1])  # bit for bit (json: NaN equals NaN)
    assert "value/warmup" not in runs[0][0]


def test_last_mean_skips_warmup_and_nan():
    recs = [{"step": 1, "x": 5.0, "value/warmup": 1.0}] + [{"step": s, "x": float(s)} for s in range(2, 14)]
    recs.append({"step": 14, "x": float("nan")})
    assert last_mean(recs, "x") == pytest.approx(sum(range(4, 14)) / 10)
    assert last_mean(recs, "missing") != last_mean(recs, "missing")  # nan


def test_bad_critic_settings_are_one_line_errors():
    for item, fix in [("ppo.lam_value=1.5", "lam_value"), ("ppo.value_lr=-1", "value_lr"),
                      ("ppo.value_warmup_steps=-2", "value_warmup_steps"),
                      ("ppo.value_epochs=1", "at least ppo.ppo_epochs")]:  # fmt: skip
        with pytest.raises(ConfigError, match=fix):
            load_config("cpu", [item])


def test_summary_reports_last_ten_step_explained_variance(tiny_model_path, tmp_path, capsys):
    from ppo_test_support import _tiny_overrides

    from ppo_core.train import main

    out = tmp_path / "run"
    assert main(_tiny_overrides(tiny_model_path, out, 2, "train.tensorboard=false")) == 0
    summary = json.loads((out / "summary.json").read_text())
    evs = [r["value/explained_variance"] for r in read_metrics(out) if "value/explained_variance" in r]
    evs = [v for v in evs if v == v]  # an all-zero-reward step has no variance to explain (NaN): skipped
    assert evs and summary["last10/value/explained_variance"] == pytest.approx(sum(evs) / len(evs))
    assert "explained variance, mean of the last 10 steps" in capsys.readouterr().out


def test_monte_carlo_values_know_what_the_prefix_decides(tiny_model_path, tmp_path):
    """Score = 1 when the response's first token is that of row 0: once token 0 is written, V* is exactly 0 or 1."""
    from ppo_core.rollout import monte_carlo_values, sample

    tr = RunTrainer(_cfg(tiny_model_path, tmp_path, 1))
    records = tr.test_records[:4]
    torch.manual_seed(0)
    ro = sample(tr.actor.lm, tr.tokenizer, tr.prompts(records), 6, 1.0)
    first = ro.completions[0][:1]
    v = monte_carlo_values(tr.actor.lm, tr.tokenizer, tr.prompts(records), ro, lambda b, text: text[:1] == first, k=4)
    decided = torch.tensor([float(c[:1] == first) for c in ro.completions])
    later = ro.mask.clone()
    later[:, 0] = False
    assert torch.equal(v[later], decided[:, None].expand_as(v)[later])
    assert ((v[:, 0] >= 0) & (v[:, 0] <= 1)).all() and v[0, 1] == 1.0
    assert (v[~ro.mask] == 0).all()


@pytest.mark.parametrize("arch", ["llama", "gpt2"])
def test_monte_carlo_values_draw_as_k_separate_prompts_would(arch):
    """monte_carlo_values runs each prompt + prefix once and shares its keys and values among its k continuations:
    the same draws as k separate copies of the text through ``sample`` (a naive loop written here), on a rotary
    and an absolute-position model, left-padded rows included."""
    from ppo_core.rollout import monte_carlo_values, sample
    from ppo_core.tasks.tiny import build_char_tokenizer, build_tiny_model

    tok = build_char_tokenizer("abc +=")
    torch.manual_seed(0)
    size = {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 2}
    lm = build_tiny_model(tok, arch, **(size if arch == "llama" else {"n_embd": 32, "n_layer": 2, "n_head": 2}))
    prompts = ["ab+c=", "a=", "cab+ba+c="]  # unequal lengths: left padding
    score = lambda b, text: float(text.count("a") + b)  # noqa: E731
    ro = sample(lm, tok, prompts, 5, 1.0)
    k, T = 3, ro.mask.shape[1]
    torch.manual_seed(7)
    got = monte_carlo_values(lm, tok, prompts, ro, score, k=k)
    torch.manual_seed(7)
    want = torch.zeros_like(got)
    for t in range(T):
        rows = [b for b in range(len(prompts)) if ro.mask[b, t]]
        prefixes = [tok.decode(ro.response_ids[b, :t], skip_special_tokens=True) for b in rows]
        out = sample(lm, tok, [prompts[b] + pre for b, pre in zip(rows, prefixes) for _ in range(k)], T - t, 1.0,
                     max_prompt_len=10**6)  # fmt: skip
        for j, (b, pre) in enumerate(zip(rows, prefixes)):
            want[b, t] = sum(score(b, pre + c) for c in out.completions[j * k : (j + 1) * k]) / k
    assert got[ro.mask].sum() > 0 and (got[~ro.mask] == 0).all()
    torch.testing.assert_close(got, want, rtol=0, atol=1e-6)


def test_value_updates_raise_explained_variance_on_a_fixed_rollout(tiny_model_path, tmp_path):
    """The critic can learn: value-head updates on one rollout with Monte-Carlo targets raise its explained variance.

    (An end-to-end "explained variance rises during a real run" test would take minutes: the critic needs tens of
    steps, which benchmarks/critic.py runs and chapter 05 prints.)
    """
    from ppo_core.gae import token_rewards
    from ppo_core.kl import kl_penalty
    from ppo_core.update import value_update

    tr = RunTrainer(_cfg(tiny_model_path, tmp_path, 1, "ppo.value_lr=1e-2", "ppo.vf_clip_eps=10"))
    records = tr.prompt_batch(1)
    torch.manual_seed(0)
    ro = tr.collect(records)  # steps 1-2: sample and score
    scores = torch.tensor([float(c[:1] < "P") for c in ro.completions])  # decided by the first token
    rewards = token_rewards(scores, kl_penalty(ro.logprobs, ro.ref_logprobs, "k1"), ro.mask, 0.0)
    _, returns = compute_gae(rewards, ro.values, ro.mask, 1.0, 1.0)
    mb = {"input_ids": ro.input_ids, "attention_mask": ro.attention_mask, "mask": ro.mask,
          "old_values": ro.values, "returns": returns}  # fmt: skip
    mb = {k: v.clone() for k, v in mb.items()} | {"keep": ro.keep}  # rollout tensors are inference-mode tensors
    ev = [explained_variance(ro.values, returns, ro.mask)]
    for _ in range(30):
        value_update(tr.actor, tr.optimizer, mb, vf_clip_eps=10.0)
    with torch.no_grad():
        _, values = tr.actor(ro.input_ids, ro.attention_mask, keep=ro.keep)
    ev.append(explained_variance(values, returns, ro.mask))
    assert scores.var() > 0 and ev[0] <= 0.01 and ev[1] > 0.5, ev


def test_ev_by_success_pools_explained_variance_by_success_band():
    """run.metrics.ev_by_success (benchmarks/critic.py's table): each step in the band of its sampled success rate,
    runs pooled, 0.9 and 1.0 in the top band, empty bands reported with 0 steps."""
    rows = [
        {"ev_curve": [0.1, 0.3, -0.2], "correct_curve": [0.2, 0.85, 0.9]},
        {"ev_curve": [0.2, 0.0], "correct_curve": [0.4, 1.0]},
    ]
    got = {band: (n, ev) for band, n, ev in ev_by_success(rows)}
    assert got["[0.0, 0.5)"] == (2, pytest.approx(0.15))
    assert got["[0.5, 0.8)"][0] == 0
    assert got["[0.8, 0.9)"] == (1, pytest.approx(0.3))
    assert got["[0.9, 1.0]"] == (2, pytest.approx(-0.1))


def test_last_mean_leaves_out_warmup_steps_inside_the_window():
    recs = [{"step": 1, "x": 100.0, "value/warmup": 1.0}, {"step": 2, "x": 1.0}, {"step": 3, "x": 3.0}]
    assert last_mean(recs, "x") == pytest.approx(2.0)


def test_monte_carlo_continuations_stop_at_the_response_limit(tiny_model_path, tmp_path):
    """The continuation of a prefix of t tokens gets at most T - t tokens: every scored text fits in T."""
    from ppo_core.rollout import monte_carlo_values, sample

    tr = RunTrainer(_cfg(tiny_model_path, tmp_path, 1))
    records = tr.test_records[:3]
    torch.manual_seed(0)
    ro = sample(tr.actor.lm, tr.tokenizer, tr.prompts(records), 5, 1.0)
    T, lengths = ro.mask.shape[1], []

    def length(b, text):
        lengths.append(len(tr.tokenizer(text, add_special_tokens=False)["input_ids"]))
        return 0.0

    monte_carlo_values(tr.actor.lm, tr.tokenizer, tr.prompts(records), ro, length, k=2)
    assert lengths and max(lengths) <= T


def test_resuming_with_value_lr_switched_on_or_off_is_a_one_line_error(tiny_model_path, tmp_path):
    """value_lr 0 builds one optimizer group, > 0 two: a checkpoint of the other kind names the setting to use."""
    from ppo_test_support import resuming_with_the_other_setting_fails

    make = lambda out, *more: RunTrainer(_cfg(tiny_model_path, out, 1, *more))  # noqa: E731
    errors = resuming_with_the_other_setting_fails(make, tmp_path, "ppo.value_lr", values=("0.0", "0.001"))
    for e, saved, groups in zip(errors, ("0.0", "0.001"), (1, 2), strict=True):
        assert e.endswith(f"resume it with ppo.value_lr={saved}") and f"optimizer has {groups} parameter group(s)" in e


def test_a_resumed_run_trains_at_this_run_s_learning_rates_with_the_saved_moments(tiny_model_path, tmp_path):
    tr = RunTrainer(_cfg(tiny_model_path, tmp_path / "saved", 2, "ppo.lr=1e-4", "ppo.value_lr=1e-3"))
    tr.train()
    path = tr.out / "final"
    moments = {k: v["exp_avg"].clone() for k, v in tr.optimizer.state_dict()["state"].items()}
    tr.logger.close()
    again = _cfg(tiny_model_path, tmp_path / "resumed", 3, "ppo.lr=5e-5", "ppo.value_lr=2e-3", f"train.resume={path}")
    with pytest.warns(UserWarning, match="differ from its run"):
        resumed = RunTrainer(again)
    assert [g["lr"] for g in resumed.optimizer.param_groups] == [5e-5, 2e-3]  # not the checkpoint's 1e-4, 1e-3
    state = resumed.optimizer.state_dict()["state"]
    assert moments and all(torch.equal(state[k]["exp_avg"], v) for k, v in moments.items())
