"""On a CUDA GPU (``pytest -m cuda``; skipped without one): the cuda preset's path on the device itself.

``tests/test_cuda_preset.py`` runs the preset end to end on the CPU; these run what only a GPU can show: the
rollout's logprobs on the device agree with the CPU's, 8-bit AdamW's CUDA kernels step like torch's AdamW, the
chunked log-softmax keeps its memory bound on the device, and the preset trains, passes its ratio check under
bf16 autocast and resumes on the GPU. ``benchmarks/cuda_report.py`` runs them and measures the rest.
"""

import json

import pytest
import torch
from ppo_test_support import gsm8k_folder

pytestmark = pytest.mark.cuda


def _tiny_llama():
    from ppo_core.model import ActorWithValueHead, make_reference
    from ppo_core.tasks.synthetic import SYNTHETIC_ALPHABET
    from ppo_core.tasks.tiny import build_char_tokenizer, build_tiny_model

    torch.manual_seed(0)
    tok = build_char_tokenizer(SYNTHETIC_ALPHABET)
    lm = build_tiny_model(
        tok, "llama", hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4
    )
    actor = ActorWithValueHead(lm.eval(), value_head_init_std=0.5)
    return actor, make_reference(actor), tok


def test_rollout_logprobs_on_the_gpu_match_the_cpu():
    """Sample on the GPU, score there and on the CPU: float32 logprobs, values and reference logprobs agree."""
    from ppo_core.rollout import sample, score
    from ppo_core.tasks.synthetic import make_synthetic_task

    actor, ref, tok = _tiny_llama()
    prompts = [r["question"] + "\n" for r in make_synthetic_task(0, n_train=8, n_test=1)[0]]
    actor.cuda(), ref.cuda()
    torch.manual_seed(1)
    ro = sample(actor.lm, tok, prompts, 12, 1.0)
    assert ro.input_ids.is_cuda
    score(actor, ref, ro, 1.0, 4)
    gpu = [t.detach().cpu() for t in (ro.logprobs, ro.values, ro.ref_logprobs)]
    actor.cpu(), ref.cpu()
    for name in ("input_ids", "attention_mask", "response_ids", "mask"):
        setattr(ro, name, getattr(ro, name).cpu())
    score(actor, ref, ro, 1.0, 4)
    for a, b in zip(gpu, (ro.logprobs, ro.values, ro.ref_logprobs)):
        torch.testing.assert_close(a * ro.mask, b * ro.mask, atol=1e-4, rtol=1e-4)


def test_adamw8bit_on_the_gpu_steps_like_adamw():
    """bitsandbytes' CUDA kernels: 20 steps of AdamW8bit move the weights as torch's AdamW does, up to the
    moments' 8-bit rounding (measured on an H200: 3e-3 at worst per element, on moves of about 2e-2)."""
    bnb = pytest.importorskip("bitsandbytes")
    torch.manual_seed(0)
    w0 = torch.randn(4096, 64, device="cuda")  # >= 4096 elements: bitsandbytes keeps smaller tensors in 32 bits
    target = torch.randn(4096, 64, device="cuda")
    moved, losses = {}, {}
    for name, cls in (("torch", torch.optim.AdamW), ("bnb", bnb.optim.AdamW8bit)):
        w = torch.nn.Parameter(w0.clone())
        opt = cls([w], lr=1e-3, weight_decay=0.0)
        for _ in range(20):
            opt.zero_grad()
            loss = ((w - target) ** 2).mean()
            loss.backward()
            opt.step()
        moved[name], losses[name] = (w.detach() - w0), ((w.detach() - target) ** 2).mean().item()
        if name == "bnb":
            assert opt.state[w]["state1"].dtype == torch.uint8  # really 8-bit
    assert moved["torch"].abs().max() > 1e-2  # it moved
    rel = (moved["bnb"] - moved["torch"]).norm() / moved["torch"].norm()
    assert rel < 0.05, f"8-bit AdamW's move differs from AdamW's by {rel:.1%}"
    assert abs(losses["bnb"] - losses["torch"]) < 1e-3 * losses["torch"]


def test_chunked_logprobs_keep_their_memory_bound_on_the_gpu():
    """On a real vocabulary the chunked log-softmax's extra peak stays a fraction of the logits' float32 size."""
    from ppo_core.logprobs import logprobs_from_logits

    logits = torch.randn(8, 256, 151936, device="cuda", dtype=torch.bfloat16)
    tokens = torch.randint(0, 151936, (8, 256), device="cuda")
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    with torch.no_grad():
        out = logprobs_from_logits(logits, tokens)
    extra = torch.cuda.max_memory_allocated() - base
    full = logits.numel() * 4
    assert out.shape == (8, 256) and torch.isfinite(out).all()
    assert extra < 0.35 * full, f"extra peak {extra / 2**30:.2f} GiB against {full / 2**30:.2f} GiB of float32 logits"


def test_cuda_preset_on_the_gpu_checks_the_ratio_and_resumes(tmp_path):
    """The cuda preset as shipped (bf16 autocast, 8-bit AdamW, accumulation, checkpointing, its ratio check) on
    the hub-shaped model: two steps, then one more after ``train.resume=auto``."""
    from ppo_core.run.config import load_config
    from ppo_core.tasks.hub_model import build_hub_model
    from ppo_core.train import main

    data = gsm8k_folder(tmp_path)
    hub = build_hub_model(tmp_path / "cache")
    out = tmp_path / "run"
    argv = ["--config", "cuda", f"model.name_or_path={hub}", f"data.source={data}", f"train.output_dir={out}",
            "rollout.batch_size=8", "rollout.generation_batch_size=8", "rollout.max_new_tokens=16",
            "ppo.minibatch_size=4", "ppo.grad_accum_steps=2", "data.n_test=3", "train.eval_samples=3",
            "train.save_every=1", "train.progress=false", "train.tensorboard=false"]  # fmt: skip
    cfg = load_config("cuda", argv[2:])
    assert cfg.model.device == "cuda" and cfg.train.check_ratio  # the preset's own ratio check, at its tolerance
    assert main([*argv, "train.steps=2"]) == 0
    assert main([*argv, "train.steps=3", "train.resume=auto"]) == 0
    steps = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    updates = [s for s in steps if "loss/total" in s]
    assert [s["step"] for s in updates] == [1, 2, 3]
    assert all(s["train/skipped"] == 0 for s in updates)
    assert all(s["policy/max_abs_log_ratio"] < 10 for s in updates)  # finite, and no runaway
