"""A tiny actor, a minibatch and a gradient-recording optimizer for the split-invariance tests of chapter 08
(tests/test_split_invariance.py, and tests/objectives_dp_worker.py under torchrun). Deterministic."""

import functools

import torch

from ppo_core.checks.ch05_loop import _minibatch, _perturbed, _tiny_actor
from ppo_core.update import LossSwitches, ppo_loss

SETTINGS = {  # name -> (algo.policy_loss, its switches)
    "vanilla": ("vanilla", {}),
    "clip-higher+dual-clip": ("vanilla", {"clip_eps_high": 0.28, "dual_clip_c": 1.5}),
    "gspo": ("gspo", {"clip_eps_low": 0.003, "clip_eps_high": 0.004}),
    "cispo": ("cispo", {"clip_eps_high": 0.28}),
    "sapo": ("sapo", {}),
}
MODES = ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum-norm")
T = 5
KW = dict(clip_eps=0.2, vf_clip_eps=0.2, vf_coef=0.5, ent_coef=0.05, temperature=1.3, max_grad_norm=0.0)


class Recorder:
    """Stands in for the optimizer: ``step`` records the gradient it would apply; no weight moves."""

    def __init__(self, actor):
        self.params = [p for p in actor.parameters() if p.requires_grad]
        self.grad = None

    def zero_grad(self, set_to_none=True):
        for p in self.params:
            p.grad = None

    def step(self):
        self.grad = torch.cat([(p.grad if p.grad is not None else torch.zeros_like(p)).flatten() for p in self.params])


def build_case():
    """(actor, minibatch of 8 rows with 5, 1, 3, 5, 2, 4, 1, 3 response tokens; old policy = actor + noise)."""
    actor, tok = _tiny_actor("llama", seed=3)
    g = torch.Generator().manual_seed(0)
    old = _perturbed(actor, 0.08, g)
    lens = (5, 1, 3, 5, 2, 4, 1, 3)
    mb = _minibatch(actor, old, tok, g, prompt_lens=(4, 2, 3, 5, 2, 3, 4, 2), resp_lens=lens, T=T, temperature=1.3)
    mb["ref_logprobs"] = mb["old_logprobs"] + 0.2 * torch.randn(mb["old_logprobs"].shape, generator=g)
    return actor.train(), mb


def loss_fn(setting: str, mode: str):
    """``ppo_loss`` with one objective, one aggregation, and every term on (value, entropy, KL in the loss)."""
    name, switches = SETTINGS[setting]
    s = LossSwitches(mode, T + 2, kl_loss_coef=0.1, kl_loss_type="k3", policy_loss=name, **switches)
    return functools.partial(ppo_loss, switches=s)
