"""Chapter 07's switches end to end: each preset through the training command, no critic where there is
none, the groups of rollout.group_size, resume without a value head, and the config's one-line errors."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from ppo_core.advantages import group_relative_advantages
from ppo_core.run.config import ConfigError, load_config
from ppo_core.run.metrics import read_metrics
from ppo_core.run.runner import RunTrainer
from ppo_core.train import main

ROOT = Path(__file__).resolve().parents[1]
CRITIC_FREE = {"cpu-grpo": True, "cpu-drgrpo": True, "cpu-rloo": True, "cpu-reinforcepp": False}  # -> groups?


def _overrides(preset, tiny_overrides, model, out, steps=2, *extra):
    groups = ["rollout.group_size=4"] if CRITIC_FREE.get(preset) else []  # 2 prompts x 4 samples per step
    return ["--config", preset, *tiny_overrides(model, out, steps, *groups, *extra)]


@pytest.mark.slow
@pytest.mark.parametrize("preset", list(CRITIC_FREE))
def test_each_method_runs_through_the_training_command(preset, tiny_model_path, tiny_overrides, tmp_path, one_thread):
    out = tmp_path / "run"
    assert main(_overrides(preset, tiny_overrides, tiny_model_path, out)) == 0
    cfg = load_config(str(out / "effective_config.yaml"))
    steps = [r for r in read_metrics(out) if "rollout/reward_mean" in r]
    assert [r["step"] for r in steps] == [1, 2]
    for r in steps:  # no critic: no value loss, no value metrics
        assert not any(k.startswith("value/") for k in r), r
        assert ("kl/loss" in r) == cfg.algo.use_kl_loss
        assert r["kl/coef"] == (cfg.ppo.kl_coef if cfg.algo.use_kl_in_reward else 0.0)
    assert (out / "summary.json").is_file() and (out / "final" / "model.safetensors").is_file()
    assert not (out / "final" / "value_head.pt").exists()


@pytest.mark.slow
def test_ppo_still_trains_its_critic(tiny_model_path, tiny_overrides, tmp_path, one_thread):
    out = tmp_path / "run"
    assert main(["--config", "cpu", *tiny_overrides(tiny_model_path, out, 1)]) == 0
    (step,) = [r for r in read_metrics(out) if "rollout/reward_mean" in r]
    assert "value/loss" in step and "value/explained_variance" in step and "kl/loss" not in step
    assert (out / "final" / "value_head.pt").is_file()


@pytest.mark.slow
def test_grpo_command_in_a_subprocess(tiny_model_path, tiny_overrides, tmp_path):
    """What a user types: python -m ppo_core.train --config cpu-grpo ..."""
    out = tmp_path / "run"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    args = _overrides("cpu-grpo", tiny_overrides, tiny_model_path, out, 1)
    proc = subprocess.run([sys.executable, "-m", "ppo_core.train", *args], capture_output=True, text=True, env=env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "held-out sampled accuracy" in proc.stdout
    assert json.loads((out / "summary.json").read_text())["after/sampled_accuracy"] >= 0


@pytest.mark.slow
def test_no_value_head_is_built_or_optimised_and_the_groups_are_contiguous(tiny_model_path, tiny_overrides, tmp_path):
    cfg = load_config("cpu-grpo", tiny_overrides(tiny_model_path, tmp_path / "run", 1, "rollout.group_size=4"))
    trainer = RunTrainer(cfg)
    assert trainer.actor.value_head is None
    optimised = {id(p) for group in trainer.optimizer.param_groups for p in group["params"]}
    assert optimised == {id(p) for p in trainer.actor.lm.parameters() if p.requires_grad}
    records = trainer.prompt_batch(1)
    assert len(records) == cfg.rollout.batch_size == 8
    assert records[0] == records[3] and records[4] == records[7] and records[0] != records[4]  # rows [kG, kG+G)
    trainer.step()
    rec = trainer.last_step
    assert rec.returns is None
    want = group_relative_advantages(rec.rewards.sum(1), 4)  # (B,) from each response's return R_i
    for i in range(8):  # one advantage per response, on every one of its tokens
        values = rec.advantages[i][rec.advantages[i] != 0].unique()
        assert len(values) <= 1 and (len(values) == 0 or torch.isclose(values[0], want[i])), (i, values, want[i])
    assert torch.allclose(want.view(2, 4).sum(1), torch.zeros(2), atol=1e-5)  # each group's sum to 0


@pytest.mark.slow
def test_critic_free_run_resumes_from_a_checkpoint(tiny_model_path, tiny_overrides, tmp_path, one_thread):
    out = tmp_path / "run"
    assert main(_overrides("cpu-rloo", tiny_overrides, tiny_model_path, out, 1, "train.save_every=1")) == 0
    assert main(_overrides("cpu-rloo", tiny_overrides, tiny_model_path, out, 2, "train.resume=auto")) == 0
    steps = [r["step"] for r in read_metrics(out) if "rollout/reward_mean" in r]
    assert steps == [1, 2]


@pytest.mark.parametrize(
    "preset, overrides, message",
    [
        ("cpu-grpo", ["rollout.group_size=1"], "set rollout.group_size >= 2"),
        ("cpu-rloo", ["rollout.group_size=3"], "multiple of rollout.group_size"),
        ("cpu", ["algo.adv_estimator=ppo"], "gae, grpo, rloo, reinforce_plus_plus"),
        ("cpu", ["algo.loss_agg_mode=seq-mean"], "seq-mean-token-sum-norm"),
        ("cpu", ["algo.kl_loss_type=low_var_kl"], "k1, k2, k3"),
    ],
)
def test_bad_switches_name_the_fix(preset, overrides, message):
    with pytest.raises(ConfigError, match=message):
        load_config(preset, overrides)
