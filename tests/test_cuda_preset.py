"""The ``cuda`` preset end to end on the CPU, against the hub-shaped model.

What a reader with a GPU runs first: ``--config cuda`` (a Qwen2-architecture chat checkpoint, GSM8K
from a local folder, chat-template prompts, bf16 compute, bitsandbytes 8-bit AdamW, gradient
accumulation, activation checkpointing, adaptive KL), with only the device, the model folder, the
data folder and the sizes overridden so that it runs in seconds on a CPU. The GSM8K records are
the committed fixture, split into a train and a test file.
"""

import json
import warnings

import pytest
import torch
from ppo_test_support import gsm8k_folder


@pytest.mark.slow
@pytest.mark.parametrize("separate", [False, True], ids=["shared-head", "separate-critic"])
def test_cuda_preset_runs_on_the_cpu_against_a_hub_shaped_model(tmp_path, separate):
    from ppo_core.run.config import load_config
    from ppo_core.tasks.hub_model import build_hub_model
    from ppo_core.train import main

    data = gsm8k_folder(tmp_path)
    hub = build_hub_model(tmp_path / "cache")
    out = tmp_path / "run"
    argv = ["--config", "cuda", "model.device=cpu", f"model.name_or_path={hub}", f"data.source={data}",
            f"train.output_dir={out}", "train.steps=2", "rollout.batch_size=8", "rollout.generation_batch_size=4",
            "rollout.max_new_tokens=12", "ppo.minibatch_size=4", "ppo.grad_accum_steps=2", "data.n_test=3",
            "train.eval_samples=3", "train.save_every=1", "train.eval_every=1", "train.progress=false",
            "train.tensorboard=false", "train.check_ratio=true",
            f"ppo.separate_critic={str(separate).lower()}"]  # fmt: skip
    cfg = load_config("cuda", argv[2:])
    assert (cfg.model.dtype, cfg.ppo.optimizer, cfg.data.prompt_style) == ("bfloat16", "adamw8bit", "chat")
    assert cfg.model.gradient_checkpointing and cfg.ppo.grad_accum_steps == 2
    assert (cfg.ppo.lam, cfg.ppo.lam_value, cfg.ppo.value_lr) == (1.0, 1.0, 1e-5)  # the preset's critic
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert main(argv) == 0
    fallback = [str(w.message) for w in caught if "falling back" in str(w.message)]
    assert not fallback, fallback  # 8-bit AdamW really ran
    steps = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    updates = [s for s in steps if "loss/total" in s]
    assert len(updates) == 2 and all(s["train/skipped"] == 0 for s in updates)
    state = torch.load(out / "final" / "optimizer.pt", weights_only=False)
    assert [g["lr"] for g in state["param_groups"]] == [1e-6, 1e-5]  # the value head in its own 8-bit AdamW group
    quant = [s.get("__bnb_optimizer_quant_state__", s) for s in state["state"].values()]
    assert any(q.get("state1") is not None and q["state1"].dtype == torch.uint8 for q in quant), "no 8-bit state"
    from safetensors.torch import load_file

    weights = load_file(out / "final" / "model.safetensors")
    assert all(w.dtype == torch.float32 for w in weights.values()), "the checkpoint must keep float32 weights"
    critic_dir = out / "final" / "critic"
    assert critic_dir.is_dir() == separate
    if separate:  # a GPU user's choice: the critic's trunk trains in the value head's 8-bit group, saved in float32
        critic = load_file(critic_dir / "model.safetensors")
        assert critic and all(w.dtype == torch.float32 for w in critic.values())
        value_group = state["param_groups"][1]["params"]  # the critic's trunk and the value head (weight, bias)
        assert len(value_group) == len(critic) + 2 and all(i in state["state"] for i in value_group)
    summary = json.loads((out / "summary.json").read_text())
    assert {"before/sampled_accuracy", "after/greedy_accuracy", "last10/value/explained_variance"} <= set(summary)
