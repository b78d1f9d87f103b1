"""The PPO step as a whole against a naive reference (tests/reference_ppo_step.py), and its orchestration.

The package's step runs on a fixed scored rollout (sampling and scoring stubbed out) on the course's tiny
model; every intermediate (KL, rewards, raw and whitened advantages, returns, the minibatch schedule, the
gradient norms, the parameters after the update, the KL coefficient before and after the controller)
must equal the reference's, for several configs. Then properties of the orchestration, one test each.
The old logprobs and values are perturbed away from the model's, so the policy and value clipping
are active from the first minibatch (the ratio check is off for that reason).
"""

import pytest
import torch
from reference_ppo_step import reference_step

from ppo_core.rollout import Rollout
from ppo_core.run.config import load_config
from ppo_core.run.runner import RunTrainer

B, P, T = 8, 5, 6


# ---- the one adapter to the package's step -------------------------------------------------------
def run_package_step(trainer: RunTrainer, fixed: dict, monkeypatch) -> dict:
    """Run steps 3-6 of the package's PPO step (``trainer.learn``) on the scored rollout ``fixed``.

    ``learn`` takes the rollout ``collect`` would have sampled and scored, so nothing is stubbed; spies
    record what the minibatch update and the KL controller received. Returned keys (tensors (B, T)
    unless said): from ``trainer.last_step``: kl, kl_coef_used, rewards, advantages_raw, returns,
    advantages, schedule (per epoch, lists of row indices), kl_for_controller; update_batches (the
    minibatch dicts the update received, with the ``rows`` they hold), grad_norms (one per minibatch),
    controller_inputs (what ``kl_ctl.update`` was called with), kl_coef_after, logged_kl and logged_kl_coef
    (what ``learn`` logged), metrics (learn's).
    """
    seen: dict = {"batches": [], "controller": []}
    ro = Rollout(
        input_ids=fixed["input_ids"].clone(),
        attention_mask=fixed["attention_mask"].clone(),
        prompt_len=fixed["prompt_len"],
        response_ids=fixed["response_ids"].clone(),
        mask=fixed["mask"].clone(),
        scores=fixed["scores"].clone(),
        logprobs=fixed["logprobs"].clone(),
        values=fixed["values"].clone(),
        ref_logprobs=fixed["ref_logprobs"].clone(),
        behaviour_logprobs=fixed["behaviour_logprobs"].clone(),  # read only with a correction (chapter 09)
    )
    update = trainer.ppo.minibatch_update

    def update_spy(actor, optimizer, mb, **kwargs):
        stats = update(actor, optimizer, mb, **kwargs)
        seen["batches"].append({**{k: v.clone() for k, v in mb.items() if torch.is_tensor(v)}, "stats": stats})
        return stats

    monkeypatch.setattr(trainer.ppo, "minibatch_update", update_spy)
    import ppo_core.trainer as trainer_module

    value_update = trainer_module.value_update

    def value_update_spy(actor, optimizer, mb, **kwargs):  # a value warm-up step's updates
        stats = value_update(actor, optimizer, mb, **kwargs)
        seen["batches"].append({**{k: v.clone() for k, v in mb.items() if torch.is_tensor(v)}, "stats": stats})
        return stats

    monkeypatch.setattr(trainer_module, "value_update", value_update_spy)
    controller_update = trainer.kl_ctl.update
    monkeypatch.setattr(
        trainer.kl_ctl, "update", lambda kl, n: seen["controller"].append((kl, n)) or controller_update(kl, n)
    )
    metrics = trainer.learn(ro)
    record = trainer.last_step
    for mb in seen["batches"]:  # which rollout rows each minibatch holds (every input row is unique)
        same = (mb["input_ids"][:, None, :] == fixed["input_ids"][None, :, :]).all(-1)  # (b, B)
        assert (same.sum(1) == 1).all()
        mb["rows"] = same.int().argmax(1).tolist()
    return {
        "kl": record.kl,
        "kl_coef_used": record.kl_coef_used,
        "rewards": record.rewards,
        "advantages_raw": record.advantages_raw,
        "returns": record.returns,
        "advantages": record.advantages,
        "schedule": [[idx.tolist() for idx in epoch] for epoch in record.schedule],
        "kl_for_controller": record.kl_for_controller,
        "update_batches": seen["batches"],
        "grad_norms": [mb["stats"]["train/grad_norm"] for mb in seen["batches"]],
        "controller_inputs": seen["controller"],
        "kl_coef_after": trainer.kl_ctl.value,
        "logged_kl": metrics["kl/to_ref"],
        "logged_kl_coef": metrics["kl/coef"],
        "metrics": metrics,
    }


# ---- fixtures ----------------------------------------------------------------------------------------
BASE = dict(
    gamma=1.0, lam=0.95, whiten=True, kl_estimator="k1", kl_coef=0.1, adaptive_kl=False, kl_target=1.0,
    kl_horizon=100, clip_eps=0.2, vf_clip_eps=0.2, vf_coef=0.5, ent_coef=0.01, temperature=0.9, ppo_epochs=1,
    minibatch_size=8, grad_accum_steps=1, max_grad_norm=1.0, lr=3e-3, weight_decay=0.0,
    lam_value=None, value_lr=0.0, warmup=False, separate_critic=False, value_epochs=0, correction=None,
)  # fmt: skip
"""The critic keys are spelled out (the cpu preset sets value_lr, lam_value and separate_critic);
``warmup``: a value warm-up step."""


def make_trainer(model_path, out_dir, cfg: dict, seed: int = 0, check_ratio: bool = False) -> RunTrainer:
    """A trainer on the tiny test model whose step settings are ``cfg`` (keys of reference_step)."""
    keys = ["gamma", "lam", "kl_estimator", "kl_coef", "adaptive_kl", "kl_target", "kl_horizon", "clip_eps",
            "vf_clip_eps", "vf_coef", "ent_coef", "ppo_epochs", "minibatch_size", "grad_accum_steps",
            "max_grad_norm", "lr", "weight_decay", "value_lr", "separate_critic", "value_epochs"]  # fmt: skip
    overrides = [
        f"model.name_or_path={model_path}",
        f"train.output_dir={out_dir}",
        "train.steps=1",
        f"train.seed={seed}",
        f"rollout.batch_size={B}",
        f"rollout.temperature={cfg['temperature']}",
        f"ppo.whiten_advantages={cfg['whiten']}",
        *[f"ppo.{k}={cfg[k]}" for k in keys],
        f"ppo.lam_value={'null' if cfg['lam_value'] is None else cfg['lam_value']}",
        f"ppo.value_warmup_steps={1 if cfg['warmup'] else 0}",  # step 1 of the trainer is then a warm-up step
        "data.n_train=16",
        "data.n_test=8",
        f"train.check_ratio={check_ratio}",  # off by default: the fixed rollout's old logprobs are perturbed
        "train.tensorboard=false",
        "train.log_every=0",
        "train.progress=false",
        *[f"correction.{k}={v}" for k, v in (cfg.get("correction") or {}).items()],
    ]
    return RunTrainer(load_config("cpu", overrides))


@pytest.fixture(scope="module")
def fixed_rollout(tiny_model_path, tmp_path_factory, one_thread):
    """A scored rollout of B=8 rows: left-padded prompts, responses of 1..T tokens, old logprobs and values
    off the model's by noise (ratios away from 1, value clipping active), scores in [-1, 2]."""
    tr = make_trainer(tiny_model_path, tmp_path_factory.mktemp("fixture"), BASE)
    gen = torch.Generator().manual_seed(1234)
    V = tr.actor.lm.get_input_embeddings().num_embeddings
    prompt_lens = torch.tensor([5, 3, 4, 5, 2, 5, 1, 4])
    resp_lens = torch.tensor([6, 1, 3, 6, 5, 2, 4, 6])
    prompt_mask = torch.arange(P)[None, :] >= (P - prompt_lens)[:, None]  # left padding
    mask = torch.arange(T)[None, :] < resp_lens[:, None]
    pad = tr.tokenizer.pad_token_id
    prompt = torch.where(prompt_mask, torch.randint(3, V, (B, P), generator=gen), pad)
    response = torch.where(mask, torch.randint(3, V, (B, T), generator=gen), pad)
    ids = torch.cat([prompt, response], 1)
    attn = torch.cat([prompt_mask, mask], 1).long()
    with torch.no_grad():
        pos = (attn.cumsum(-1) - 1).clamp(min=0)
        logits, _ = tr.actor(ids, attn, pos, keep=slice(P - 1, P + T - 1))
        true_logp = torch.log_softmax(logits.float() / BASE["temperature"], -1).gather(-1, response[..., None])[..., 0]
    noise = lambda scale: scale * torch.randn(B, T, generator=gen)  # noqa: E731
    out = {
        "input_ids": ids,
        "attention_mask": attn,
        "prompt_len": P,
        "response_ids": response,
        "mask": mask,
        "logprobs": torch.where(mask, true_logp + noise(0.3), 0.0),
        "true_logprobs": torch.where(mask, true_logp, 0.0),
        "values": torch.where(mask, noise(0.5), 0.0),
        "ref_logprobs": torch.where(mask, true_logp + noise(0.4) - 0.2, 0.0),
        "scores": torch.rand(B, generator=gen) * 3 - 1,
    }
    out["behaviour_logprobs"] = torch.where(mask, out["logprobs"] + noise(0.4), 0.0)  # the sampler's (chapter 09)
    return out


def step_both(model_path, tmp_path, monkeypatch, fixed, cfg: dict, seed: int = 0):
    """(package's step record, reference record, actor before the step, trainer after it)."""
    tr = make_trainer(model_path, tmp_path / "run", cfg, seed)
    before = {k: v.detach().clone() for k, v in tr.actor.state_dict().items()}
    ref = reference_step(tr.actor, fixed, cfg, cfg["kl_coef"], seed)
    got = run_package_step(tr, fixed, monkeypatch)
    return got, ref, before, tr


def as_tensor(rows) -> torch.Tensor:
    return torch.tensor(rows, dtype=torch.float64)


# ---- the step equals the reference ----------------------------------------------------------------
CONFIGS = {
    "default": {},
    "no-whiten-k3-gamma0.9": dict(whiten=False, kl_estimator="k3", gamma=0.9, lam=0.8, adaptive_kl=True),
    "2epochs-2minibatches": dict(
        ppo_epochs=2, minibatch_size=4, kl_estimator="k3", adaptive_kl=True, kl_target=9.0, vf_clip_eps=0.1
    ),
    "accum2-no-clip-no-entropy": dict(
        minibatch_size=4, grad_accum_steps=2, max_grad_norm=0.0, ent_coef=0.0, gamma=0.9, lam=0.8, whiten=False
    ),
    "2epochs-accum2-adaptive": dict(ppo_epochs=2, grad_accum_steps=2, adaptive_kl=True, lam=1.0, max_grad_norm=0.3),
    "lam_value1-lam0.9": dict(lam=0.9, lam_value=1.0),
    "lam_value0.8-no-whiten": dict(lam_value=0.8, whiten=False, ppo_epochs=2, minibatch_size=4),
    "value_lr": dict(value_lr=3e-2, minibatch_size=4, adaptive_kl=True, lam_value=1.0),
    "warmup": dict(warmup=True, adaptive_kl=True, lam_value=1.0, value_lr=1e-2, ppo_epochs=2, minibatch_size=4),
    "value_epochs": dict(value_epochs=3, value_lr=1e-2, minibatch_size=4, lam_value=1.0, grad_accum_steps=2),
    "separate-critic": dict(separate_critic=True, value_lr=1e-2, minibatch_size=4, lam_value=1.0, max_grad_norm=0.5),
    "separate-critic-warmup": dict(separate_critic=True, warmup=True, value_lr=1e-2, minibatch_size=4),
    "separate-critic-value-epochs": dict(
        separate_critic=True, value_epochs=2, value_lr=1e-2, minibatch_size=4, grad_accum_steps=2, max_grad_norm=0.3
    ),
    # chapter 09: the sampler mu is not pi_old (fixed_rollout's behaviour_logprobs)
    "decoupled-token-tis": dict(correction=dict(is_level="token", is_threshold=1.5)),
    "decoupled-seq-tis-geometric-rs": dict(
        correction=dict(is_level="sequence", is_threshold=2.0, rs_level="geometric", rs_threshold=1.3),
        minibatch_size=4,
        ppo_epochs=2,
    ),
    "decoupled-icepop-accum2": dict(
        correction=dict(is_level="token", is_threshold=2.0, rs_level="token", rs_threshold=2.0, rs_threshold_lower=0.5),
        minibatch_size=4,
        grad_accum_steps=2,
    ),
    "bypass": dict(correction=dict(mode="bypass"), minibatch_size=4),
}


@pytest.mark.parametrize("name", CONFIGS)
def test_step_matches_naive_reference(name, tiny_model_path, tmp_path, monkeypatch, fixed_rollout, one_thread):
    cfg = {**BASE, **CONFIGS[name]}
    got, ref, before, tr = step_both(tiny_model_path, tmp_path, monkeypatch, fixed_rollout, cfg)
    mask = fixed_rollout["mask"]
    for key in ("kl", "rewards", "advantages_raw", "returns", "advantages"):
        torch.testing.assert_close(
            torch.where(mask, got[key].double(), 0.0), as_tensor(ref[key]), atol=2e-6, rtol=1e-5, msg=key
        )
    assert got["schedule"] == ref["schedule"]
    assert got["grad_norms"] == pytest.approx(ref["grad_norms"], rel=1e-4)
    assert got["kl_coef_used"] == pytest.approx(ref["kl_coef_used"], rel=1e-12)
    assert got["kl_for_controller"] == pytest.approx(ref["kl_for_controller"], rel=1e-5)
    assert got["kl_coef_after"] == pytest.approx(ref["kl_coef_after"], rel=1e-6)
    # parameters after the update: compare the change each one made (about lr per Adam step). Adam divides
    # by sqrt(v) + 1e-8, so a gradient entry at rounding level can move by a little; every entry within
    # 5 % of the largest learning rate, and all the changes together within 0.1 % of their norm.
    after_ref = ref["model"].state_dict()
    moved = torch.cat([(v - before[k]).flatten() for k, v in tr.actor.state_dict().items()])
    moved_ref = torch.cat([(after_ref[k] - before[k]).flatten() for k in before])
    lr = max(cfg["lr"], cfg["value_lr"])
    torch.testing.assert_close(moved, moved_ref, atol=lr * 0.05, rtol=0)
    assert (moved - moved_ref).norm() <= 1e-3 * moved_ref.norm()
    assert moved_ref.abs().max() > min(cfg["lr"], cfg["value_lr"] or cfg["lr"]) / 2  # the update did move
    # the value head's own learning rate: the head moves by about value_lr per Adam step, the trunk by lr
    head = torch.cat([(v - before[f"value_head.{k}"]).flatten() for k, v in tr.actor.value_head.state_dict().items()])
    head_lr = cfg["value_lr"] or cfg["lr"]
    epochs = max(cfg["ppo_epochs"], cfg["value_epochs"])
    assert head_lr / 2 < head.abs().max() <= head_lr * (epochs * B // cfg["minibatch_size"]) * 2
    if cfg["separate_critic"]:  # the critic's trunk moved, at the critic's learning rate
        trunk = torch.cat([(v - before[f"critic_trunk.{k}"]).flatten()
                           for k, v in tr.actor.critic_trunk.state_dict().items()])  # fmt: skip
        assert head_lr / 2 < trunk.abs().max() <= head_lr * (epochs * B // cfg["minibatch_size"]) * 2


def test_value_head_group_has_its_own_learning_rate(tiny_model_path, tmp_path):
    """ppo.value_lr: two AdamW groups, the value head's parameters (exactly) at value_lr, the rest at lr."""
    tr = make_trainer(tiny_model_path, tmp_path / "run", {**BASE, "value_lr": 3e-2})
    groups = tr.optimizer.param_groups
    assert [g["lr"] for g in groups] == [BASE["lr"], 3e-2]
    assert [id(p) for p in groups[1]["params"]] == [id(p) for p in tr.actor.value_head.parameters()]
    one = make_trainer(tiny_model_path, tmp_path / "one", BASE).optimizer.param_groups  # value_lr 0: one group
    assert [g["lr"] for g in one] == [BASE["lr"]]


def test_warmup_step_moves_only_the_critic(tiny_model_path, tmp_path, monkeypatch, fixed_rollout):
    """A value warm-up step: policy weights bit for bit unchanged, the value head moved, no KL controller
    update (the adaptive controller would have moved kl_coef: the fixture's KL is far from the target),
    ``value/warmup`` logged; the next step is a PPO step again."""
    cfg = {**BASE, "warmup": True, "adaptive_kl": True, "kl_target": 0.01, "value_lr": 1e-2}
    tr = make_trainer(tiny_model_path, tmp_path / "run", cfg)
    lm_before = {k: v.clone() for k, v in tr.actor.lm.state_dict().items()}
    head_before = tr.actor.value_head.weight.detach().clone()
    got = run_package_step(tr, fixed_rollout, monkeypatch)
    assert all(torch.equal(v, lm_before[k]) for k, v in tr.actor.lm.state_dict().items())
    assert not torch.equal(tr.actor.value_head.weight, head_before)
    assert got["controller_inputs"] == [] and got["kl_coef_after"] == cfg["kl_coef"] == got["logged_kl_coef"]
    assert got["metrics"]["value/warmup"] == 1.0 and "policy/loss" not in got["metrics"]
    assert got["metrics"]["value/loss"] > 0 and got["metrics"]["train/skipped"] == 0.0
    tr.ppo.step_count = 1  # step 2: past the warm-up, PPO proper
    got = run_package_step(tr, fixed_rollout, monkeypatch)
    assert "value/warmup" not in got["metrics"] and "policy/loss" in got["metrics"]
    assert len(got["controller_inputs"]) == 1 and got["kl_coef_after"] != cfg["kl_coef"]
    assert any(not torch.equal(v, lm_before[k]) for k, v in tr.actor.lm.state_dict().items())


# ---- properties of the orchestration --------------------------------------------------------------
def test_fresh_permutation_every_epoch_each_row_once(tiny_model_path, tmp_path, monkeypatch, fixed_rollout):
    cfg = {**BASE, "ppo_epochs": 3, "minibatch_size": 2, "lr": 1e-4}
    got = run_package_step(make_trainer(tiny_model_path, tmp_path / "run", cfg), fixed_rollout, monkeypatch)
    epochs = got["schedule"]
    assert len(epochs) == 3 and all(len(e) == 4 for e in epochs)
    for epoch in epochs:
        assert sorted(r for mb in epoch for r in mb) == list(range(B))  # every row exactly once
    orders = [[r for mb in epoch for r in mb] for epoch in epochs]
    assert orders[0] != orders[1] and orders[1] != orders[2] and orders[0] != orders[2]  # a fresh permutation


def test_returns_come_from_raw_advantages(tiny_model_path, tmp_path, monkeypatch, fixed_rollout):
    got = run_package_step(make_trainer(tiny_model_path, tmp_path / "run", BASE), fixed_rollout, monkeypatch)
    mask, values = fixed_rollout["mask"], fixed_rollout["values"]
    torch.testing.assert_close(got["returns"], torch.where(mask, got["advantages_raw"] + values, 0.0))
    whitened_based = torch.where(mask, got["advantages"] + values, 0.0)
    assert (got["returns"] - whitened_based).abs().max() > 0.1  # whitening did change them: the check can fail
    for mb in got["update_batches"]:  # and the update trains the critic on exactly these
        torch.testing.assert_close(mb["returns"], got["returns"][mb["rows"]], rtol=0, atol=0)


@pytest.mark.parametrize(("ratio", "expected_error"), [(3.0, 0.2), (1.1, 0.1), (0.95, -0.05), (0.2, -0.2)])
def test_adaptive_controller_direction_and_exact_size(
    ratio, expected_error, tiny_model_path, tmp_path, monkeypatch, fixed_rollout
):
    """KL / target = ratio: kl_coef grows above the target and shrinks below, by the clipped formula."""
    kl = (
        sum(
            (fixed_rollout["logprobs"][b] - fixed_rollout["ref_logprobs"][b])[fixed_rollout["mask"][b]].sum().item()
            for b in range(B)
        )
        / B
    )
    assert kl > 0.5  # the fixture's KL to the reference is positive, so the target below is too
    cfg = {**BASE, "adaptive_kl": True, "kl_target": kl / ratio, "kl_horizon": 40, "lr": 1e-4}
    got = run_package_step(make_trainer(tiny_model_path, tmp_path / "run", cfg), fixed_rollout, monkeypatch)
    measured = got["logged_kl"]
    assert measured == pytest.approx(kl, rel=1e-5)
    assert got["kl_coef_used"] == cfg["kl_coef"]
    expected = cfg["kl_coef"] * (1 + min(max(measured / cfg["kl_target"] - 1, -0.2), 0.2) * B / cfg["kl_horizon"])
    assert got["kl_coef_after"] == pytest.approx(expected, rel=1e-12)
    assert (got["kl_coef_after"] - cfg["kl_coef"]) / cfg["kl_coef"] == pytest.approx(expected_error * B / 40, rel=1e-4)


def test_fixed_controller_keeps_kl_coef(tiny_model_path, tmp_path, monkeypatch, fixed_rollout):
    got = run_package_step(make_trainer(tiny_model_path, tmp_path / "run", BASE), fixed_rollout, monkeypatch)
    assert got["kl_coef_after"] == BASE["kl_coef"] == got["logged_kl_coef"]


def test_controller_gets_the_logged_kl(tiny_model_path, tmp_path, monkeypatch, fixed_rollout):
    cfg = {**BASE, "adaptive_kl": True, "kl_estimator": "k3"}
    got = run_package_step(make_trainer(tiny_model_path, tmp_path / "run", cfg), fixed_rollout, monkeypatch)
    assert got["controller_inputs"] == [(got["logged_kl"], B)]  # once, with the logged KL and the batch size
    assert got["kl_for_controller"] == got["logged_kl"]
    assert got["logged_kl_coef"] == got["kl_coef_used"] == cfg["kl_coef"]  # logged: the coef the reward used


def test_update_sees_the_steps_tensors(tiny_model_path, tmp_path, monkeypatch, fixed_rollout):
    """Value targets are the step's returns, old values/logprobs the rollout's, advantages the whitened ones."""
    cfg = {**BASE, "ppo_epochs": 2, "minibatch_size": 4}
    got = run_package_step(make_trainer(tiny_model_path, tmp_path / "run", cfg), fixed_rollout, monkeypatch)
    assert len(got["update_batches"]) == 4
    assert [mb["rows"] for mb in got["update_batches"]] == [rows for epoch in got["schedule"] for rows in epoch]
    for mb in got["update_batches"]:
        rows = mb["rows"]
        assert torch.equal(mb["returns"], got["returns"][rows])
        assert torch.equal(mb["old_values"], fixed_rollout["values"][rows])
        assert torch.equal(mb["old_logprobs"], fixed_rollout["logprobs"][rows])
        assert torch.equal(mb["advantages"], got["advantages"][rows])
        assert torch.equal(mb["mask"], fixed_rollout["mask"][rows])


def test_ratio_check_on_the_first_minibatch_only(tiny_model_path, tmp_path, monkeypatch, fixed_rollout):
    """Old logprobs off the policy's: caught before any update. Exact ones: the later minibatches, where the
    policy has moved (ratio != 1), are not checked."""
    from ppo_core.update import RatioCheckError

    cfg = {**BASE, "ppo_epochs": 2, "minibatch_size": 4}
    exact = {**fixed_rollout, "logprobs": fixed_rollout["true_logprobs"]}
    got = run_package_step(make_trainer(tiny_model_path, tmp_path / "a", cfg, check_ratio=True), exact, monkeypatch)
    assert len(got["update_batches"]) == 4
    assert max(mb["stats"]["policy/max_abs_log_ratio"] for mb in got["update_batches"][1:]) > 1e-3
    with pytest.raises(RatioCheckError):
        run_package_step(
            make_trainer(tiny_model_path, tmp_path / "b", cfg, check_ratio=True), fixed_rollout, monkeypatch
        )


def test_logged_update_stats_average_the_minibatch_updates(tiny_model_path, tmp_path, monkeypatch, fixed_rollout):
    cfg = {**BASE, "ppo_epochs": 2, "minibatch_size": 4}
    got = run_package_step(make_trainer(tiny_model_path, tmp_path / "run", cfg), fixed_rollout, monkeypatch)
    stats = [mb["stats"] for mb in got["update_batches"]]
    for key in ("policy/loss", "value/loss", "loss/total", "train/grad_norm"):
        assert got["metrics"][key] == pytest.approx(sum(s[key] for s in stats) / len(stats), rel=1e-12), key
    assert got["metrics"]["train/skipped"] == 0.0
    mask, values = fixed_rollout["mask"], fixed_rollout["values"]
    returns = got["returns"][mask].double()
    explained = 1 - (returns - values[mask].double()).var() / returns.var()
    assert got["metrics"]["value/explained_variance"] == pytest.approx(explained.item(), rel=1e-5)
