"""tools/flops.py: the analytic FLOP count of an update agrees with torch's own count of a real forward and
backward (``torch.utils.flop_counter``), for the course's tiny Llama and a grouped-query shape."""

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode
from transformers import AutoModelForCausalLM, LlamaConfig

from ppo_core.model import ActorWithValueHead, lm_logits
from tools import flops

TINY = dict(hidden_size=192, num_hidden_layers=2, num_attention_heads=6, intermediate_size=768)  # tasks/tiny.py
# grouped-query attention with its own head_dim: q is 64 wide, k and v 32, neither is hidden_size
GQA = dict(
    hidden_size=48, num_hidden_layers=3, intermediate_size=80, num_attention_heads=4, num_key_value_heads=2, head_dim=16
)


def _lm(shape: dict):
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=74, max_position_embeddings=64, **shape)
    return AutoModelForCausalLM.from_config(cfg, attn_implementation="eager").float(), cfg


def _counted(fn) -> float:
    with FlopCounterMode(display=False) as mode:
        fn()
    return mode.get_total_flops()


def _other_half(cfg, B, L):
    """Eager attention computes the whole L x L square; forward_flops counts the causal half, this is the other."""
    _, q, _, layers = flops._dims(cfg)
    return 2 * layers * B * L * L * q


@pytest.mark.parametrize("shape", [TINY, GQA], ids=["tiny", "gqa"])
def test_forward_flops_match_torchs_count(shape):
    lm, cfg = _lm(shape)
    B, P, T = 3, 20, 12
    ids, mask = torch.randint(4, 74, (B, P + T)), torch.ones(B, P + T, dtype=torch.long)
    with torch.no_grad():
        counted = _counted(lambda: lm_logits(lm, ids, mask, keep=slice(P - 1, P + T - 1)))
    want = flops.forward_flops(cfg, B, P + T, T) + _other_half(cfg, B, P + T)
    assert counted == pytest.approx(want, rel=1e-3)  # rel: the rotary embedding's small matmul


def test_update_flops_match_torchs_count_of_actor_and_separate_critic():
    """Forward and backward of the actor with a separate critic, the LM head on the T response positions."""
    lm, cfg = _lm(TINY)
    actor = ActorWithValueHead(lm, separate_critic=True)
    B, P, T = 2, 9, 6
    ids, mask = torch.randint(4, 74, (B, P + T)), torch.ones(B, P + T, dtype=torch.long)

    def step():
        logits, values = actor(ids, mask, keep=slice(P - 1, P + T - 1))
        (logits.sum() + values.sum()).backward()

    counted = _counted(step)
    want = flops.update_flops(cfg, B, P, T, epochs=1, critic_trunk=True, head_positions=T)
    assert counted == pytest.approx(want + 3 * 2 * _other_half(cfg, B, P + T), rel=1e-3)
    one_trunk = flops.update_flops(cfg, B, P, T, epochs=1, critic_trunk=False, head_positions=T)
    assert counted != pytest.approx(one_trunk + 3 * _other_half(cfg, B, P + T), rel=0.1)  # misses the critic's
