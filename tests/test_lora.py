"""LoRA through peft (run/lora.py): the reference is the base with adapters off, only adapters and the
value head train, checkpoints hold the adapters and resume repeats the run, evaluate merges them."""

import json

import pytest
import torch

pytest.importorskip("peft")

from ppo_core.model import lm_logits  # noqa: E402
from ppo_core.rollout import score  # noqa: E402
from ppo_core.run.config import ConfigError, load_config  # noqa: E402
from ppo_core.run.evaluation import evaluate_checkpoint  # noqa: E402
from ppo_core.run.lora import load_merged  # noqa: E402
from ppo_core.run.metrics import read_metrics  # noqa: E402
from ppo_core.run.resume import save_checkpoint  # noqa: E402
from ppo_core.train import main  # noqa: E402
from ppo_core.trainer import PPOTrainer  # noqa: E402

LORA = ("model.lora.r=4", "model.lora.alpha=8", "ppo.lr=1e-2")


def _trainer(tiny_model_path, tiny_overrides, out, steps=2, *extra):
    return PPOTrainer(load_config("cpu", tiny_overrides(tiny_model_path, out, steps, *LORA, *extra)))


def test_reference_is_the_base_with_adapters_off_and_stays_frozen(
    tiny_model_path, tiny_overrides, tmp_path, one_thread
):
    tr = _trainer(tiny_model_path, tiny_overrides, tmp_path / "run")
    names = {n for n, p in tr.actor.named_parameters() if p.requires_grad}
    assert names and all("lora_" in n or n.startswith("value_head.") for n in names)
    assert any(n.startswith("value_head.") for n in names)  # the value head trains in full
    in_opt = {id(p) for g in tr.optimizer.param_groups for p in g["params"]}
    assert in_opt == {id(p) for n, p in tr.actor.named_parameters() if n in names}
    # one copy of the base weights: the reference's parameters are the actor's own tensors
    actor_ids = {id(p) for p in tr.actor.lm.parameters()}
    assert all(id(p) in actor_ids for p in tr.ref.parameters())
    base_before = [p.detach().clone() for p in tr.ref.parameters()]

    ro = tr.collect(tr.prompt_batch(1))  # step 0: B = 0, so the policy is the reference
    torch.testing.assert_close(ro.ref_logprobs, ro.logprobs, rtol=0, atol=1e-6)
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


def test_resume_repeats_the_run_and_evaluate_merges(tiny_model_path, tiny_overrides, tmp_path, one_thread, capsys):
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
    got = evaluate_checkpoint(str(final))  # base + adapters merged: the run's own final accuracy
    assert (got["sampled_accuracy"], got["greedy_accuracy"]) == (
        summary["after/sampled_accuracy"],
        summary["after/greedy_accuracy"],
    )
    with pytest.warns(UserWarning, match="settings that differ"):  # adapters into a full fine-tuning run: refused
        assert main(tiny_overrides(tiny_model_path, whole, 5, "train.resume=auto")) != 0
    assert "holds LoRA adapters; resume it with the run's model.lora.r" in capsys.readouterr().err


def test_bad_lora_settings_are_refused_with_the_fix():
    with pytest.raises(ConfigError, match="model.lora.dropout"):
        load_config("cpu", ["model.lora.r=4", "model.lora.dropout=1.5"])
    with pytest.raises(ConfigError, match="model.lora.r must be >= 0"):
        load_config("cpu", ["model.lora.r=-1"])
