"""The arithmetic of a PPO update, counted from the model's shape, and what a float32 matmul reaches here.

``benchmarks/vs_trl.py`` divides ``update_flops`` by an update's seconds (the GFLOP/s an update reaches) and
saves it beside ``matmul_rate``, the GFLOP/s of one large matrix product on the same threads (a reference
peak). tests/test_flops.py checks the count against ``torch.utils.flop_counter`` on a real forward.
"""

import time

import torch


def _dims(cfg) -> tuple[int, int, int, int]:
    """(H, width of q and of the attention output, width of k and of v, layers) of a Llama/Qwen2-style config."""
    c = cfg.get_text_config()
    heads = c.num_attention_heads
    head_dim = getattr(c, "head_dim", None) or c.hidden_size // heads
    kv_heads = getattr(c, "num_key_value_heads", None) or heads
    return c.hidden_size, heads * head_dim, kv_heads * head_dim, c.num_hidden_layers


def linear_weights(cfg) -> int:
    """N: the trunk's matmul weights, q, k, v, o and the gated MLP's three, over all layers (Llama, Qwen2)."""
    H, q, kv, layers = _dims(cfg)
    return layers * (2 * H * q + 2 * H * kv + 3 * H * cfg.get_text_config().intermediate_size)


def forward_flops(cfg, B: int, L: int, head_positions: int) -> float:
    """FLOPs of one forward of the trunk over B rows of L tokens, the LM head on ``head_positions`` per row:

        2 N B L  +  2 layers B L^2 q  +  2 H V B head_positions

    2 per multiply-add; the middle term is attention's QK^T and AV (2 L^2 q each, q = heads x head_dim), half
    of it kept by the causal mask.
    """
    H, q, _, layers = _dims(cfg)
    attention = 2 * layers * B * L * L * q
    return 2 * linear_weights(cfg) * B * L + attention + 2 * H * cfg.get_text_config().vocab_size * B * head_positions


def update_flops(cfg, B: int, P: int, T: int, epochs: int, critic_trunk: bool, head_positions: int) -> float:
    """FLOPs of the PPO epochs of one update over B rows of P + T tokens: forward + backward = 3 forwards, of the
    actor (LM head on ``head_positions`` per row) and, with ``critic_trunk``, of the value model's trunk."""
    actor = forward_flops(cfg, B, P + T, head_positions)
    critic = forward_flops(cfg, B, P + T, 0) if critic_trunk else 0.0
    return epochs * 3 * (actor + critic)


def matmul_rate(device: str = "cpu", n: int | None = None, repeats: int = 5) -> float:
    """FLOP/s of an n x n float32 matrix product (best of ``repeats``) on the current torch threads."""
    n = n or (2048 if device == "cpu" else 8192)
    a, b = torch.randn(n, n, device=device), torch.randn(n, n, device=device)
    a @ b  # warm-up
    best = float("inf")
    for _ in range(repeats):
        if device == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        a @ b
        if device == "cuda":
            torch.cuda.synchronize()
        best = min(best, time.perf_counter() - t0)
    return 2 * n**3 / best
