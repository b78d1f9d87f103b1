"""Memory of one PPO step for Qwen2.5-0.5B- and 1.5B-shaped models, per component, measured next to the formula.

    .venv/bin/python benchmarks/memory.py [--batch 2] [--prompt 64] [--response 32]
    .venv/bin/python benchmarks/memory.py --logprobs [--batch 16] [--response 256]

The shapes are Qwen2.5's public config.json numbers (random init, nothing downloaded):

    0.5B: hidden 896,  24 layers, 14 heads, 2 KV heads, intermediate 4864, vocab 151936, tied embeddings
    1.5B: hidden 1536, 28 layers, 12 heads, 2 KV heads, intermediate 8960, vocab 151936, tied embeddings

A whole 1.5B model with float32 weights, gradients and AdamW state needs ~25 GB, more than this
machine's share, so every component is measured on the **full width and vocabulary at 1 and 2
layers** and extrapolated linearly to the full depth (each component is a per-model part plus a
per-layer part: exact for weights, gradients, optimizer state and the KV cache; for activations it
is what a layer saves for backward, which does not depend on depth). How each is measured:

* policy weights (float32 master copy), reference (bf16), gradients: bytes of the tensors;
* optimizer state: bytes of the tensors in ``optimizer.state`` after one real ``step()``, for torch
  AdamW and for bitsandbytes AdamW8bit (on the CPU);
* activations: bytes of the distinct tensors autograd saves for backward during one PPO training
  forward (``torch.autograd.graph.saved_tensors_hooks``), under bf16 autocast, eager attention;
  the bf16 copies of the weight matrices that autocast makes (and keeps for backward) are counted
  apart from the activations proper: they do not grow with the batch;
* KV cache: bytes of the cache ``generate`` returns for the rollout batch (bf16 policy, T new tokens).

It also runs one real PPO step (``rollout.sample`` -> ``rollout.score`` -> ``update.minibatch_update``)
of the 2-layer model and prints the process's peak RSS. The analytic column is the formula in
``analytic()``: exact counts for weights, optimizer state and KV cache; for activations, a formula
written from the list of tensors a small Qwen2 layer saves under bf16 autocast with eager attention,
so its agreement at full width checks the extrapolation, not an independent derivation. Flash or SDPA
attention on a GPU does not keep the S x S scores, so there activations are lower. A GPU adds the CUDA
context (~0.3-0.5 GB) and the allocator's fragmentation, which a CPU run cannot see.
"""

import argparse
import gc
import resource
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from results_meta import save_result  # noqa: E402  (benchmarks/ is on sys.path: this script's folder)

from tools.memory_peaks import row_wise_peaks  # noqa: E402  (the repository root is on sys.path, above)

SHAPES = {
    "Qwen2.5-0.5B": dict(hidden_size=896, num_hidden_layers=24, num_attention_heads=14, num_key_value_heads=2,
                         intermediate_size=4864, vocab_size=151936, tie_word_embeddings=True),
    "Qwen2.5-1.5B": dict(hidden_size=1536, num_hidden_layers=28, num_attention_heads=12, num_key_value_heads=2,
                         intermediate_size=8960, vocab_size=151936, tie_word_embeddings=True),
}  # fmt: skip
"""From the models' config.json on the hub (checked against published copies of both files)."""

GB = 1024**3


def _config(shape: dict, layers: int):
    from transformers import Qwen2Config

    return Qwen2Config(**{**shape, "num_hidden_layers": layers}, max_position_embeddings=32768,
                       attn_implementation="eager", rope_theta=1e6, rms_norm_eps=1e-6)  # fmt: skip


def n_params(shape: dict) -> int:
    """Exact parameter count of the full-depth model (built on the meta device: no memory)."""
    from transformers import AutoModelForCausalLM

    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(_config(shape, shape["num_hidden_layers"]))
    return sum(p.numel() for p in model.parameters())


def analytic(shape: dict, N: int, B: int, P: int, T: int) -> dict:
    """The planning formulas, in bytes (N parameters; B sequences of P prompt + T response tokens)."""
    h, L, V, i = shape["hidden_size"], shape["num_hidden_layers"], shape["vocab_size"], shape["intermediate_size"]
    kv = shape["num_key_value_heads"] * h // shape["num_attention_heads"]  # K (or V) width per token
    heads, S = shape["num_attention_heads"], P + T
    # per token and layer, what one layer saves for backward under bf16 autocast (listed from the saved tensors of a
    # small Qwen2): bf16 inputs of the 7 matmuls and the MLP's products (4 i + 9 h values), four float32 copies of
    # the hidden state around the RMSNorms and residuals (16 h bytes); eager attention keeps its B x heads x S x S
    # scores in float32 and probabilities in bf16 (6 bytes each)
    per_layer = B * S * (2 * (4 * i + 9 * h) + 16 * h) + B * heads * S * S * 6
    logits = B * T * V * 4  # the float32 log-softmax of the T response positions' logits
    return {
        "policy weights (fp32)": 4 * N,
        "gradients (fp32)": 4 * N,
        "reference (bf16)": 2 * N,
        "AdamW state (fp32 m, v)": 8 * N,
        "AdamW8bit state": 2 * N + 2 * 4 * N / 256,  # two uint8 moments + a float32 absmax per 256-block each
        "autocast bf16 weight copies": 2 * N,  # every matrix (the tied LM head too) cast once, kept for backward
        "activations (one minibatch)": L * per_layer + B * S * h * 8 + logits,
        "KV cache (bf16, rollout)": 2 * L * B * S * kv * 2,
    }


def _nbytes(tensors) -> int:
    seen, total = set(), 0
    for t in tensors:
        if torch.is_tensor(t) and t.untyped_storage().data_ptr() not in seen:
            seen.add(t.untyped_storage().data_ptr())
            total += t.untyped_storage().nbytes()
    return total


def _optimizer_bytes(model, kind: str) -> int:
    params = [p for p in model.parameters() if p.requires_grad]
    for p in params:
        p.grad = torch.full_like(p, 1e-3)
    if kind == "adamw":
        opt = torch.optim.AdamW(params, lr=1e-6)
    else:
        import bitsandbytes as bnb

        opt = bnb.optim.AdamW8bit(params, lr=1e-6)
    opt.step()
    out = _nbytes(t for state in opt.state.values() for t in state.values())
    for p in params:
        p.grad = None
    del opt
    gc.collect()
    return out


def measure(shape: dict, layers: int, B: int, P: int, T: int) -> dict:
    """Every component's bytes for the model cut to ``layers`` layers (full width and vocabulary)."""
    from transformers import AutoModelForCausalLM

    from ppo_core.model import ActorWithValueHead

    torch.manual_seed(0)
    lm = AutoModelForCausalLM.from_config(_config(shape, layers)).eval()  # float32 master weights
    N = sum(p.numel() for p in lm.parameters())
    out = {"policy weights (fp32)": _nbytes(lm.parameters()), "reference (bf16)": 2 * N, "gradients (fp32)": 4 * N}
    out["AdamW state (fp32 m, v)"] = _optimizer_bytes(lm, "adamw")
    out["AdamW8bit state"] = _optimizer_bytes(lm, "adamw8bit")
    # activations: one training forward of the PPO loss's logprobs, bf16 autocast
    actor = ActorWithValueHead(lm).train()
    ids = torch.randint(10, shape["vocab_size"], (B, P + T))
    attn = torch.ones_like(ids)
    saved = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(t) or t, lambda t: t):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            logits, values = actor(ids, attn, keep=slice(P - 1, P + T - 1))
            logprobs = torch.log_softmax(logits.float(), -1).gather(-1, ids[:, P:].unsqueeze(-1)).squeeze(-1)
    weight_shapes = {s for p in lm.parameters() if p.ndim == 2 for s in (tuple(p.shape), tuple(p.shape)[::-1])}
    copies = [t for t in saved if t.ndim == 2 and t.dtype == torch.bfloat16 and tuple(t.shape) in weight_shapes]
    out["autocast bf16 weight copies"] = _nbytes(copies)
    out["activations (one minibatch)"] = _nbytes(saved) - out["autocast bf16 weight copies"]
    (logprobs.sum() + values.sum()).backward()
    saved.clear()
    del logits, values, logprobs
    actor.zero_grad(set_to_none=True)
    # KV cache of the rollout: generate T tokens for B prompts with the bf16 policy
    lm_bf16 = lm.to(torch.bfloat16).eval()
    prompts = torch.randint(10, shape["vocab_size"], (B, P))
    gen = lm_bf16.generate(input_ids=prompts, do_sample=True, top_k=0, max_new_tokens=T, min_new_tokens=T,
                           eos_token_id=None, return_dict_in_generate=True)  # fmt: skip
    cache = gen.past_key_values
    out["KV cache (bf16, rollout)"] = _nbytes(
        t for layer in cache.layers for t in (layer.keys, layer.values)
    )  # generate's cache holds P + T - 1 positions: the last token is sampled, never fed back
    del lm, lm_bf16, actor, gen, cache
    gc.collect()
    return out


def ppo_step_peak_rss(shape: dict, B: int, P: int, T: int) -> float:
    """Run one real PPO step of the 2-layer model (sample, score, one minibatch update); peak RSS in GiB."""
    from transformers import AutoModelForCausalLM

    from ppo_core.model import ActorWithValueHead, make_reference
    from ppo_core.rollout import Rollout, score
    from ppo_core.update import minibatch_update

    torch.manual_seed(0)
    actor = ActorWithValueHead(AutoModelForCausalLM.from_config(_config(shape, 2)))
    ref = make_reference(actor).to(torch.bfloat16)
    ids = torch.randint(10, shape["vocab_size"], (B, P + T))
    ro = Rollout(input_ids=ids, attention_mask=torch.ones_like(ids), prompt_len=P, response_ids=ids[:, P:],
                 mask=torch.ones(B, T, dtype=torch.bool))  # fmt: skip
    with torch.autocast("cpu", dtype=torch.bfloat16):
        score(actor.eval(), ref, ro, 1.0, B)
    mb = dict(input_ids=ids, attention_mask=ro.attention_mask, response_ids=ro.response_ids, mask=ro.mask,
              old_logprobs=ro.logprobs, old_values=ro.values, advantages=torch.randn(B, T),
              returns=torch.randn(B, T), keep=ro.keep)  # fmt: skip
    opt = torch.optim.AdamW([p for p in actor.parameters() if p.requires_grad], lr=1e-6)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        minibatch_update(actor.train(), opt, mb, grad_accum_steps=1)
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024**2


def logprobs_report(B: int, T: int, V: int = 151936) -> str:
    """The token logprobs (scoring, and the training forward before autograd keeps its copy) and the logged entropy
    (``update`` with ``ppo.ent_coef`` 0), all rows at once against the package's chunks."""
    from ppo_core.logprobs import CHUNK_BYTES, _rows_per_chunk

    rows = _rows_per_chunk(torch.empty(B, T, V, device="meta"))
    lines = [f"on bf16 logits of {B} x {T} x {V} ({B * T * V * 2 / GB:.2f} GiB), extra peak RSS, all rows at once "
             f"(float32 (B, T, V) copies) -> the package's chunks of <= {CHUNK_BYTES / 2**20:.0f} MiB of float32 "
             f"logits ({rows} sequence{'s' if rows > 1 else ''} here):"]  # fmt: skip
    for what, name in (("logprobs", "logprobs_from_logits"), ("entropy", "entropy_from_logits")):
        peaks = row_wise_peaks(what, B, T, V)
        lines.append(f"  {name + ':':22s} {peaks[True] / GB:5.2f} GiB -> {peaks[False] / GB:5.2f} GiB")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, help="sequences per minibatch (and per rollout here); default 2 (16 "
                    "with --logprobs, the cuda preset's scoring chunk)")  # fmt: skip
    ap.add_argument("--prompt", type=int, default=64, help="prompt tokens P")
    ap.add_argument("--response", type=int, help="response tokens T; default 32 (256 with "
                    "--logprobs, the cuda preset's max_new_tokens)")  # fmt: skip
    ap.add_argument("--shapes", nargs="+", default=list(SHAPES))
    ap.add_argument("--logprobs", action="store_true", help="instead: the extra peak memory of the token "
                    "logprobs and the logged entropy on Qwen2.5's vocabulary, all rows at once and in the package's "
                    "chunks")  # fmt: skip
    ap.add_argument("--json", default="benchmarks/results/memory/logprobs.json", help="where --logprobs saves")
    args = ap.parse_args()
    if args.logprobs:
        printed = logprobs_report(args.batch or 16, args.response or 256)
        print(printed)
        command = " ".join(["python benchmarks/memory.py", *sys.argv[1:]])
        return print(save_result(args.json, {"printed": printed.splitlines()}, command=command))
    torch.set_num_threads(2)
    B, P, T = args.batch or 2, args.prompt, args.response or 32
    print(f"batch B={B}, prompt P={P}, response T={T}; torch {torch.__version__}, CPU; GiB = 2^30 bytes\n")
    for name in args.shapes:
        shape, t0 = SHAPES[name], time.perf_counter()
        L, N = shape["num_hidden_layers"], n_params(shape)
        one, two = measure(shape, 1, B, P, T), measure(shape, 2, B, P, T)
        est = analytic(shape, N, B, P, T)
        print(f"{name}: {N / 1e9:.3f} B parameters, {L} layers (measured at 1 and 2 layers, extrapolated)")
        print(f"  {'component':30s} {'measured GiB':>13s} {'formula GiB':>12s}")
        total_adamw = total_8bit = 0.0
        for key in one:
            full = one[key] + (L - 1) * (two[key] - one[key])  # per-model part + L x per-layer part
            print(f"  {key:30s} {full / GB:13.3f} {est[key] / GB:12.3f}")
            if key != "AdamW8bit state":
                total_adamw += full
            if key != "AdamW state (fp32 m, v)":
                total_8bit += full
        full = {key: one[key] + (L - 1) * (two[key] - one[key]) for key in one}
        act, kv = (
            full[k] / (B * (P + T)) / 1024**2 for k in ("activations (one minibatch)", "KV cache (bf16, rollout)")
        )
        print(f"  per token (scale by B x (P+T) to plan): activations {act:.3f} MiB, KV cache {kv:.4f} MiB")
        print(f"  {'total with torch AdamW':30s} {total_adamw / GB:13.3f}")
        print(f"  {'total with AdamW8bit':30s} {total_8bit / GB:13.3f}")
        peak = ppo_step_peak_rss(shape, B, P, T)
        print(f"  one real PPO step of the 2-layer cut: peak RSS of this process so far {peak:.2f} GiB "
              f"({time.perf_counter() - t0:.0f} s)\n")  # fmt: skip


if __name__ == "__main__":
    main()
