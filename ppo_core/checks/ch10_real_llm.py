"""Checker for chapter 10 (a real model): ``check_reference_logprobs``.

The learner writes the reference's log-probs of a LoRA run: the policy's own weights with the adapters
switched off. The checker runs it on a tiny Llama with random adapters and a left-padded batch, compares
with the package (``run.lora.AdapterOffReference`` under ``model.lm_logits``) and names the typical mistake.
"""

import torch

from ..logprobs import logprobs_from_logits
from ..model import lm_logits, position_ids_from_mask
from ..utils import no_peft_deprecation, quiet_peft
from ._common import CheckFailure, call, checker, expect_close

__all__ = ["check_reference_logprobs", "reference_logprobs_case"]


def reference_logprobs_case(seed: int = 0):
    """(peft model with non-zero adapters, input_ids, attention_mask, response_ids, keep): a left-padded batch."""
    from ..tasks.synthetic import SYNTHETIC_ALPHABET
    from ..tasks.tiny import build_char_tokenizer, build_tiny_model

    peft = quiet_peft()
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        tok = build_char_tokenizer(SYNTHETIC_ALPHABET)
        lm = build_tiny_model(tok, "llama", hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                              num_attention_heads=2)  # fmt: skip
        config = peft.LoraConfig(r=4, lora_alpha=8, target_modules="all-linear", init_lora_weights=False)
        with no_peft_deprecation():
            model = peft.get_peft_model(lm, config)  # random A and B: the adapters change the model's outputs
        model.eval()
        P, T = 6, 5
        ids = torch.randint(5, len(tok), (3, P + T))
        attn = torch.ones(3, P + T, dtype=torch.long)
        attn[1, :2] = 0  # left padding: two pad positions before the shorter prompt
        attn[2, :4] = 0
        ids = ids.masked_fill(attn == 0, tok.pad_token_id)
    return model, ids, attn, ids[:, P:], slice(P - 1, P + T - 1)


def _package(model, ids, attn, response, keep, temperature, *, adapters=False):
    """The reference log-probs, or the policy's (adapters on)."""
    import contextlib

    base = model.get_base_model()
    with torch.no_grad(), contextlib.nullcontext() if adapters else model.disable_adapter():
        logits, _ = lm_logits(base, ids, attn, position_ids_from_mask(attn), keep=keep)
    return logprobs_from_logits(logits, response, temperature)


@checker
def check_reference_logprobs(fn):
    """Check ``fn(peft_model, input_ids, attention_mask, response_ids, keep, temperature)`` -> (B, T) log-probs
    of the response tokens under the base model with the adapters off, at ``temperature``, without gradients."""
    model, ids, attn, response, keep = reference_logprobs_case()
    temperature = 0.7
    case = "a tiny Llama with random LoRA adapters, 3 rows (two left-padded), 6 prompt and 5 response tokens, T = 0.7"
    got = call(fn, model, ids, attn, response, keep, temperature)
    if not isinstance(got, torch.Tensor):
        raise CheckFailure(f"expected a (3, 5) tensor of log-probs, got {type(got).__name__}")
    if got.requires_grad:
        raise CheckFailure(
            "the result carries a gradient graph: the reference is frozen, so compute it under torch.no_grad() "
            "(a graph over every layer costs the memory of a training forward)"
        )
    want = _package(model, ids, attn, response, keep, temperature)
    late = slice(keep.start + 1, keep.stop + 1)
    mistakes = {
        "left the adapters on: that is the policy, not the reference. Run the forward inside "
        "`with peft_model.disable_adapter():`": _package(model, ids, attn, response, keep, temperature, adapters=True),
        "forgot the temperature: the log-probs must be those of softmax(logits / temperature), the distribution "
        "that sampled": _package(model, ids, attn, response, keep, 1.0),
        "took the logits one position late: the logits at position t predict token t + 1, so the response's "
        "log-probs come from positions P - 1 .. P + T - 2 (keep)": _package(model, ids, attn, response, late,
                                                                            temperature),
    }  # fmt: skip
    expect_close(got, want, what="reference log-probs", mistakes=mistakes, case=case, atol=1e-5, rtol=1e-4)
    on = _package(model, ids, attn, response, keep, temperature, adapters=True)
    if torch.allclose(on, want):
        raise CheckFailure("after your function the adapters are off for good: use disable_adapter() as a context")
