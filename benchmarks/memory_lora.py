"""Peak CPU memory of one PPO update step, full fine-tuning vs LoRA, on Qwen2.5-0.5B and -1.5B shapes.

    .venv/bin/python benchmarks/memory_lora.py [--cap-gib 6] [--sizes 0.5B,1.5B] [--dtype bfloat16]

The models are built from the public config numbers (random init, no download; see SHAPES) the way
the trainer builds them (``run.setup.load_models``, ``precision``), with ``--dtype`` as
``model.dtype``, the compute dtype:

* full fine-tuning: float32 policy weights (master copy), gradients and AdamW state, forwards under
  autocast at ``--dtype``; a frozen reference copy stored in ``--dtype``;
* LoRA (r = 16, every linear layer): the frozen base stored in ``--dtype``, float32 adapters, their
  gradients and AdamW state; the reference is the base with the adapters off (no copy).

One "step" is what the trainer does after sampling: score (actor forward + reference forward, no
grad), then one minibatch update (forward, backward, AdamW step). Sampling is left out (its memory is
the forward's plus the KV cache). Each configuration runs in its own child process and reports its
peak resident memory (``ru_maxrss``) after building the model ("built") and after the step ("peak"),
so the numbers include the Python/torch baseline, which the script measures too.

A configuration whose estimated peak exceeds ``--cap-gib`` is not run: its line says "estimated"
and gives the estimate (weights, reference copy, gradients and AdamW's two moments, from the
parameter counts; activations not included). ``benchmarks/memory.py`` breaks full fine-tuning down
per component.
"""

import argparse
import json
import resource
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # ppo_core from this checkout

# Qwen2.5 config.json numbers (hidden_size, intermediate_size, num_hidden_layers, num_attention_heads,
# num_key_value_heads; vocab 151936, tied embeddings, QKV bias): checked against published copies of
# Qwen/Qwen2.5-0.5B's config.json and the Qwen2.5(-Coder)-1.5B model card (28 layers, 12 Q / 2 KV heads).
SHAPES = {
    "0.5B": dict(hidden_size=896, intermediate_size=4864, num_hidden_layers=24, num_attention_heads=14),
    "1.5B": dict(hidden_size=1536, intermediate_size=8960, num_hidden_layers=28, num_attention_heads=12),
}
COMMON = dict(num_key_value_heads=2, vocab_size=151936, tie_word_embeddings=True, max_position_embeddings=32768)
B, P, T = 2, 64, 64  # sequences, prompt tokens, response tokens of the measured minibatch
LORA_R = 16


def child(size: str, lora: bool, dtype_name: str) -> dict:
    """Build the shape, run one scoring pass + one update; return the peak RSS in GiB."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from ppo_core.model import ActorWithValueHead, lm_logits, make_reference
    from ppo_core.run.config import LoraConfig
    from ppo_core.update import minibatch_update

    torch.manual_seed(0)
    torch.set_num_threads(2)
    dtype = getattr(torch, dtype_name)
    cfg = Qwen2Config(**SHAPES[size], **COMMON)
    # as run.setup.load_models: full fine-tuning loads the policy in float32 (master weights); LoRA loads the
    # frozen base in model.dtype directly (no float32 copy on the way)
    torch.set_default_dtype(dtype if lora else torch.float32)
    lm = Qwen2ForCausalLM(cfg)
    torch.set_default_dtype(torch.float32)
    actor = ActorWithValueHead(lm, compute_dtype=dtype)  # the value head is float32
    if lora:
        from ppo_core.run.lora import apply_lora

        actor, ref = apply_lora(actor, LoraConfig(r=LORA_R, alpha=2 * LORA_R), base_dtype=dtype)
    else:
        ref = make_reference(actor).to(dtype)
    built = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    params = [p for p in actor.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=1e-6)
    ids = torch.randint(0, cfg.vocab_size, (B, P + T))
    attn = torch.ones_like(ids)
    keep = slice(P - 1, P + T - 1)
    with torch.no_grad():  # scoring: old logprobs and values (actor), reference logprobs
        actor(ids, attn, keep=keep)
        lm_logits(ref, ids, attn, keep=keep)
    mask = torch.ones(B, T, dtype=torch.bool)
    mb = {
        "input_ids": ids,
        "attention_mask": attn,
        "response_ids": ids[:, P:],
        "mask": mask,
        "old_logprobs": torch.full((B, T), -12.0),
        "old_values": torch.zeros(B, T),
        "advantages": torch.randn(B, T),
        "returns": torch.zeros(B, T),
        "keep": keep,
    }
    minibatch_update(actor, opt, mb)
    n_all = sum(p.numel() for p in actor.parameters())
    n_train = sum(p.numel() for p in params)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # KiB -> GiB
    return {"peak_gib": peak, "built_gib": built, "params": n_all, "trainable": n_train}


def estimate_gib(size: str, lora: bool, bytes_per: int) -> float:
    """Weights, gradients and AdamW's two moments of the trained params (float32), plus the frozen weights
    in the compute dtype: the reference copy (full fine-tuning) or the base (LoRA)."""
    s = {**SHAPES[size], **COMMON}
    h, i, n, v = s["hidden_size"], s["intermediate_size"], s["num_hidden_layers"], s["vocab_size"]
    kv = h // s["num_attention_heads"] * s["num_key_value_heads"]
    per_layer = h * h * 2 + h * kv * 2 + h + 2 * kv + 3 * h * i + 2 * h  # q,o; k,v; biases; mlp; norms
    total = v * h + n * per_layer + h
    if lora:
        adapters = n * LORA_R * ((h + h) * 2 + (h + kv) * 2 + (h + i) * 3)
        return (total * bytes_per + adapters * 16) / 2**30
    return (total * 16 + total * bytes_per) / 2**30  # float32 weights, gradients, two moments; the reference


def baseline() -> float:
    import torch  # noqa: F401
    import transformers  # noqa: F401

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cap-gib", type=float, default=6.0)
    ap.add_argument("--sizes", default="0.5B,1.5B")
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    ap.add_argument("--baseline", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.baseline:
        print(json.dumps({"peak_gib": baseline()}))
        return
    if a.child:
        print(json.dumps(child(a.child[0], a.child[1] == "lora", a.dtype)))
        return
    bytes_per = 2 if a.dtype in ("bfloat16", "float16") else 4
    base = json.loads(subprocess.run([sys.executable, __file__, "--baseline"], capture_output=True, text=True).stdout)
    print(f"one PPO update step (score + 1 minibatch of {B}x({P}+{T}) tokens), compute {a.dtype}, CPU, peak RSS")
    print(f"baseline (python + torch + transformers imported): {base['peak_gib']:.2f} GiB")
    print(f"{'shape':6} {'mode':16} {'params':>8} {'trained':>10} {'built GiB':>10} {'peak GiB':>10}")
    for size in a.sizes.split(","):
        for lora in (False, True):
            mode = f"LoRA r={LORA_R}" if lora else "full fine-tune"
            est = estimate_gib(size, lora, bytes_per)
            if est > a.cap_gib:
                print(
                    f"{size:6} {mode:16} {'':>8} {'':>10} {'':>10} {est:>10.2f}  "
                    f"estimated (over --cap-gib {a.cap_gib:g})"
                )
                continue
            cmd = [sys.executable, __file__, "--child", size, "lora" if lora else "full", "--dtype", a.dtype]
            proc = subprocess.run(cmd, capture_output=True, text=True)
            if proc.returncode != 0:
                print(f"{size:6} {mode:16} failed: {proc.stderr.strip().splitlines()[-1]}")
                continue
            r = json.loads(proc.stdout.strip().splitlines()[-1])
            print(
                f"{size:6} {mode:16} {r['params'] / 1e9:>7.2f}B {r['trainable'] / 1e6:>9.2f}M "
                f"{r['built_gib']:>10.2f} {r['peak_gib']:>10.2f}  measured (estimate without activations: {est:.2f})"
            )


if __name__ == "__main__":
    main()
