"""LoRA through peft (run/lora.py): the reference is the base with adapters off, only adapters and the
value head train, checkpoints hold the adapters and resume repeats the run, evaluate merges them."""

import json
import os
import subprocess
import sys
import warnings

import pytest
import torch
from ppo_test_support import skip_module_unless_installed

skip_module_unless_installed("peft")

from transformers import AutoModelForCausalLM  # noqa: E402

from ppo_core.model import ActorWithValueHead, lm_logits  # noqa: E402
from ppo_core.rollout import score  # noqa: E402
from ppo_core.run import evaluation  # noqa: E402
from ppo_core.run.cli import evaluate_main  # noqa: E402
from ppo_core.run.config import ConfigError, LoraConfig, load_config  # noqa: E402
from ppo_core.run.evaluation import evaluate_checkpoint  # noqa: E402
from ppo_core.run.lora import _no_peft_deprecation, _peft, apply_lora, load_actor, load_merged  # noqa: E402
from ppo_core.run.metrics import read_metrics  # noqa: E402
from ppo_core.run.resume import save_checkpoint  # noqa: E402
from ppo_core.run.runner import RunTrainer  # noqa: E402
from ppo_core.train import main  # noqa: E402

LORA = ("model.lora.r=4", "model.lora.alpha=8", "ppo.lr=1e-2", "ppo.separate_critic=false")  # the head on the base


def _trainer(tiny_model_path, tiny_overrides, out, steps=2, *extra):
    return RunTrainer(load_config("cpu", tiny_overrides(tiny_model_path, out, steps, *LORA, *extra)))


@pytest.mark.slow
def test_reference_is_the_base_with_adapters_off_and_stays_frozen(
    tiny_model_path, tiny_overrides, tmp_path, one_thread
):
    tr = _trainer(tiny_model_path, tiny_overrides, tmp_path / "run")
    names = {n for n, p in tr.actor.named_parameters() if p.requires_grad}
    assert names and all("lora_" in n or n.startswith(("value_head.", "policy_reader.")) for n in names)
    assert any(n.startswith("value_head.") for n in names)  # the value head trains in full
    in_opt = {id(p) for g in tr.optimizer.param_groups for p in g["params"]}
    assert in_opt == {id(p) for n, p in tr.actor.named_parameters() if n in names}
    # one copy of the base weights: the reference's parameters are the actor's own tensors
    actor_ids = {id(p) for p in tr.actor.lm.parameters()}
    assert all(id(p) in actor_ids for p in tr.ref.parameters())
    base_before = [p.detach().clone() for p in tr.ref.parameters()]

    ro = tr.collect(tr.prompt_batch(1))  # step 0: B = 0, so the policy is the reference
    torch.testing.assert_close(ro.ref_logprobs[ro.mask], ro.logprobs[ro.mask], rtol=0, atol=1e-6)
    tr.learn(ro)
    score(tr.actor, tr.ref, ro, 0.7, 4)  # after the update
    assert all(torch.equal(a, b) for a, b in zip(base_before, tr.ref.parameters()))
    assert (ro.logprobs - ro.ref_logprobs).abs().max() > 1e-4  # the policy moved, the reference did not
    ref_before = ro.ref_logprobs.clone()
    score(tr.actor, tr.ref, ro, 0.7, 4)
    torch.testing.assert_close(ro.ref_logprobs, ref_before, rtol=0, atol=0)
    # the checkpoint holds the adapters; merged into the base they give the trained policy's logits
    path = save_checkpoint(tr, "step_1")
    merged = load_merged(path)
    ids, attn = ro.input_ids, ro.attention_mask
    with torch.no_grad():
        want, _ = lm_logits(tr.actor.lm, ids, attn, keep=ro.keep)
        got, _ = lm_logits(merged, ids, attn, keep=ro.keep)
        base, _ = lm_logits(tr.ref, ids, attn, keep=ro.keep)
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
    assert (got - base).abs().max() > 1e-3
    tr.logger.close()


@pytest.mark.slow
def test_resume_repeats_the_run_and_evaluate_merges(
    tiny_model_path, tiny_overrides, tmp_path, one_thread, capsys, monkeypatch
):
    whole, split = tmp_path / "whole", tmp_path / "split"
    assert main(tiny_overrides(tiny_model_path, whole, 4, *LORA)) == 0
    assert main(tiny_overrides(tiny_model_path, split, 2, *LORA)) == 0
    assert main(tiny_overrides(tiny_model_path, split, 4, *LORA, "train.resume=auto")) == 0
    steps = lambda run: [  # noqa: E731
        {k: v for k, v in r.items() if not k.startswith("time/")} for r in read_metrics(run) if "kl/to_ref" in r
    ]
    assert [r["step"] for r in steps(whole)] == [1, 2, 3, 4]
    assert steps(split) == steps(whole)
    final = whole / "final"
    assert (final / "adapter_model.safetensors").is_file() and not (final / "model.safetensors").exists()
    assert json.loads((final / "adapter_config.json").read_text())["r"] == 4
    summary = json.loads((whole / "summary.json").read_text())
    scored = []  # the model evaluate scores: the trained policy, i.e. the base with the adapters merged in
    real_accuracies = evaluation.accuracies
    monkeypatch.setattr(evaluation, "accuracies", lambda lm, *a, **k: scored.append(lm) or real_accuracies(lm, *a, **k))
    got = evaluate_checkpoint(str(final))  # base + adapters merged: the run's own final accuracy
    base_path = json.loads((final / "adapter_config.json").read_text())["base_model_name_or_path"]
    with _no_peft_deprecation():  # base + adapters, not merged
        policy = _peft().PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(base_path), str(final))
    ids = torch.randint(3, 30, (2, 12), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        want = policy(ids).logits
        with policy.disable_adapter():
            base = policy(ids).logits
        torch.testing.assert_close(scored[0](ids).logits, want, rtol=1e-4, atol=1e-4)
    assert (want - base).abs().max() > 1e-3  # the adapters moved the policy away from its base
    assert (got["sampled_accuracy"], got["greedy_accuracy"]) == (
        summary["after/sampled_accuracy"],
        summary["after/greedy_accuracy"],
    )
    capsys.readouterr()
    assert evaluate_main([str(final)]) == 0  # the command: python -m ppo_core.evaluate RUN/final
    printed = capsys.readouterr().out
    assert f"sampled accuracy {summary['after/sampled_accuracy']:.3f}" in printed
    assert f"greedy accuracy {summary['after/greedy_accuracy']:.3f}" in printed
    with pytest.warns(UserWarning, match="settings that differ"):  # adapters into a full fine-tuning run: refused
        assert main(tiny_overrides(tiny_model_path, whole, 5, "train.resume=auto")) != 0
    assert "holds LoRA adapters; resume it with the run's model.lora.r" in capsys.readouterr().err


def test_bad_lora_settings_are_refused_with_the_fix():
    with pytest.raises(ConfigError, match="model.lora.dropout"):
        load_config("cpu", ["model.lora.r=4", "model.lora.dropout=1.5"])
    with pytest.raises(ConfigError, match="model.lora.r must be >= 0"):
        load_config("cpu", ["model.lora.r=-1"])


GRPO = ("algo.adv_estimator=grpo", "rollout.group_size=4", "algo.use_kl_in_reward=false", "algo.use_kl_loss=true")


def _update_data(ro) -> dict:
    """One minibatch of the whole rollout, as PPOTrainer.update builds it (no values: no critic)."""
    keys = ("input_ids", "attention_mask", "response_ids", "mask")
    return {
        **{k: getattr(ro, k) for k in keys},
        "old_logprobs": ro.logprobs,
        "advantages": torch.zeros_like(ro.logprobs),
        "ref_logprobs": ro.ref_logprobs,
        "keep": ro.keep,
    }


@pytest.mark.slow
def test_lora_without_a_critic_with_the_kl_in_the_loss(tiny_model_path, tiny_overrides, tmp_path, one_thread):
    """GRPO with LoRA: no value head anywhere (model, optimizer, checkpoint), and the KL in the loss is taken
    against the base with the adapters off: 0 before the update, > 0 after, the reference unchanged."""
    tr = _trainer(tiny_model_path, tiny_overrides, tmp_path / "run", 2, *GRPO, "algo.kl_loss_coef=0.1")
    assert tr.actor.value_head is None
    trained = [p for n, p in tr.actor.named_parameters() if p.requires_grad]
    assert trained and all("lora_" in n for n, p in tr.actor.named_parameters() if p.requires_grad)
    assert sum(len(g["params"]) for g in tr.optimizer.param_groups) == len(trained)
    ro = tr.collect(tr.prompt_batch(1))
    assert ro.values is None
    loss_fn, h = tr.ppo.hparams["loss_fn"], tr.ppo.hparams
    args = (h["clip_eps"], h["vf_clip_eps"], h["vf_coef"], h["ent_coef"], h["temperature"])
    with torch.no_grad():
        _, before = loss_fn(tr.actor, _update_data(ro), *args)
    assert abs(before["kl/loss"]) < 1e-10  # B = 0: the policy is the reference
    metrics = tr.learn(ro)
    assert "kl/loss" in metrics and not any(k.startswith("value/") for k in metrics)
    with torch.no_grad():
        _, after = loss_fn(tr.actor, _update_data(ro), *args)
        ref_now, _ = lm_logits(tr.ref, ro.input_ids, ro.attention_mask, keep=ro.keep)
    assert after["kl/loss"] > 1e-6  # the policy moved away from the reference ...
    ref_lp = torch.log_softmax(ref_now.float() / tr.cfg.rollout.temperature, -1)
    ref_lp = ref_lp.gather(-1, ro.response_ids.unsqueeze(-1)).squeeze(-1)
    torch.testing.assert_close(ref_lp, ro.ref_logprobs, rtol=0, atol=1e-6)  # ... which did not move

    path = save_checkpoint(tr, "step_1")  # adapters, no value head
    assert (path / "adapter_model.safetensors").is_file() and not (path / "value_head.pt").exists()
    tr.logger.close()
    fresh = _trainer(tiny_model_path, tiny_overrides, tmp_path / "fresh", 2, *GRPO)
    load_actor(fresh.actor, path)
    for (name, p), q in zip(tr.actor.named_parameters(), fresh.actor.parameters()):
        assert torch.equal(p, q), name
    fresh.logger.close()


@pytest.mark.slow
def test_lora_with_bf16_compute(tiny_model_path, tiny_overrides, tmp_path, one_thread):
    """model.dtype=bfloat16 with LoRA: the frozen base in bf16 (no float32 copy), the adapters and the value
    head float32 master weights with float32 AdamW state; the reference (adapters off, same autocast) gives
    the policy's logprobs exactly at step 0 and stays bit-identical after the update; evaluate's merge
    returns a bf16 model."""
    tr = _trainer(tiny_model_path, tiny_overrides, tmp_path / "run", 2, "model.dtype=bfloat16")
    for name, p in tr.actor.named_parameters():
        trained = "lora_" in name or name.startswith(("value_head.", "policy_reader."))
        assert p.requires_grad == trained, name
        assert p.dtype == (torch.float32 if trained else torch.bfloat16), name
    base = [p.detach().clone() for p in tr.ref.parameters()]
    lora = {n: p.detach().clone() for n, p in tr.actor.named_parameters() if "lora_" in n}
    ro = tr.collect(tr.prompt_batch(1))
    torch.testing.assert_close(ro.ref_logprobs, ro.logprobs, rtol=0, atol=0)  # the same forward with B A = 0
    tr.learn(ro)
    assert all(torch.equal(a, b) for a, b in zip(base, tr.ref.parameters()))
    assert any(not torch.equal(p, lora[n]) for n, p in tr.actor.named_parameters() if "lora_" in n)
    assert all(s["exp_avg"].dtype == torch.float32 for s in tr.optimizer.state.values())
    path = save_checkpoint(tr, "step_1")
    tr.logger.close()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # none a learner cannot act on
        merged = load_merged(path, dtype=torch.bfloat16)
    assert {p.dtype for p in merged.parameters()} == {torch.bfloat16}
    assert not any("lora_" in n for n, _ in merged.named_parameters())


@pytest.mark.slow
def test_no_peft_in_the_chapters_and_no_bitsandbytes_warning_from_it():
    """The chapters' imports never load peft; a LoRA run's import of it prints nothing (bitsandbytes logs a
    missing-kernel warning when peft imports it on some CPUs)."""
    code = (
        "import sys, ppo_core, ppo_core.trainer, ppo_core.run.cli, ppo_core.run.evaluation\n"
        "assert 'peft' not in sys.modules, 'peft imported without LoRA'\n"
        "from ppo_core.run.lora import _peft\n"
        "_peft()\n"
        "assert 'bitsandbytes' in sys.modules  # the import that would warn did run\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env={**os.environ})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "" and proc.stderr == "", proc.stdout + proc.stderr


def test_apply_lora_warns_nothing(tiny_model_path):
    """No warning a learner cannot act on (peft reads a transformers attribute that is deprecated)."""
    actor = ActorWithValueHead(AutoModelForCausalLM.from_pretrained(tiny_model_path))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        apply_lora(actor, LoraConfig(r=4, alpha=8))
    assert any("lora_" in n for n, _ in actor.named_parameters())


def _adapted(actor) -> dict:
    """{module name: LoRA layer} of the layers that carry an adapter."""
    return {name: m for name, m in actor.lm.named_modules() if hasattr(m, "lora_A")}


def test_comma_separated_target_modules_may_hold_spaces(tiny_model_path):
    actor = ActorWithValueHead.from_pretrained(tiny_model_path)
    apply_lora(actor, LoraConfig(r=2, target_modules="q_proj, v_proj"))
    assert {name.rsplit(".", 1)[-1] for name in _adapted(actor)} == {"q_proj", "v_proj"}


def test_an_adapter_adds_alpha_over_r_times_b_a_x(tiny_model_path):
    """The adapted layer computes W x + (alpha / r) B A x: alpha = 8, r = 4 scale B A x by 2."""
    actor = ActorWithValueHead.from_pretrained(tiny_model_path)
    apply_lora(actor, LoraConfig(r=4, alpha=8.0, target_modules="q_proj"))
    layer = next(iter(_adapted(actor).values()))
    A, B = layer.lora_A["default"].weight, layer.lora_B["default"].weight  # (r, in), (out, r)
    x = torch.randn(3, A.shape[1], generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        B.normal_()  # B starts at 0; any B shows the scale
        torch.testing.assert_close(layer(x), layer.base_layer(x) + 2.0 * x @ (B @ A).T)


def test_the_merged_copy_generates_as_the_policy_and_leaves_it_as_it_was(tiny_model_path):
    """``merged_copy`` (what a LoRA run evaluates): a plain LM whose logits are the policy's up to rounding, with
    no adapter left in it; the live policy keeps its adapters and its base weights bit for bit."""
    from ppo_core.run.lora import merged_copy

    actor = ActorWithValueHead.from_pretrained(tiny_model_path)
    apply_lora(actor, LoraConfig(r=4, alpha=8.0))
    with torch.no_grad():
        for layer in _adapted(actor).values():
            layer.lora_B["default"].weight.normal_(std=0.05)  # trained adapters: B A is no longer 0
    before = {k: v.clone() for k, v in actor.lm.state_dict().items()}
    merged = merged_copy(actor)
    assert not any("lora_" in name for name, _ in merged.named_parameters())
    assert actor.lm.state_dict().keys() == before.keys()
    assert all(torch.equal(v, before[k]) for k, v in actor.lm.state_dict().items())
    ids = torch.randint(3, 30, (2, 12), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        want, got = actor.lm.eval()(ids).logits, merged(ids).logits
        with actor.peft_model.disable_adapter():
            base = actor.lm(ids).logits
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    assert (want - base).abs().max() > 1e-3  # the adapters do move the logits
