"""The value warm-up's update (``update.value_update``) on a left-padded minibatch: it must see the values the
full actor computes (attention mask and position ids), and ``max_grad_norm <= 0`` means no clipping."""

import pytest
import torch
from test_algorithm_box import BASE, P, T, fixed_rollout, make_trainer  # noqa: F401

from ppo_core.losses import value_loss
from ppo_core.update import value_update


def minibatch(fixed: dict) -> dict:
    keys = ["input_ids", "attention_mask", "mask"]
    mb = {k: fixed[k].clone() for k in keys}
    mb["old_values"] = fixed["values"].clone()
    mb["returns"] = fixed["values"] + torch.linspace(-1, 1, fixed["values"].numel()).reshape(fixed["values"].shape)
    mb["keep"] = slice(P - 1, P + T - 1)
    return mb


def test_value_update_sees_the_actors_values_on_left_padded_rows(tiny_model_path, tmp_path, fixed_rollout):  # noqa: F811
    tr = make_trainer(tiny_model_path, tmp_path / "run", BASE)
    with torch.no_grad():  # a zero-initialised head gives V = 0 whatever the trunk computes: make V read it
        tr.actor.value_head.weight.normal_(std=0.5, generator=torch.Generator().manual_seed(0))
    mb = minibatch(fixed_rollout)
    assert (mb["attention_mask"][:, 0] == 0).any()  # some rows are left-padded
    with torch.no_grad():
        pos = (mb["attention_mask"].cumsum(-1) - 1).clamp(min=0)
        _, values = tr.actor(mb["input_ids"], mb["attention_mask"], pos, keep=mb["keep"])
        want, _ = value_loss(
            values.float(), mb["old_values"], mb["returns"], mb["mask"], 1e3
        )  # no clip: reads every value
    stats = value_update(tr.actor, tr.optimizer, mb, vf_clip_eps=1e3, max_grad_norm=1.0)
    assert stats["value/loss"] == pytest.approx(want.item(), rel=1e-5)


def test_value_update_without_clipping_when_max_grad_norm_is_zero(tiny_model_path, tmp_path, fixed_rollout):  # noqa: F811
    tr = make_trainer(tiny_model_path, tmp_path / "run", BASE)
    head = tr.actor.value_head
    before = [p.detach().clone() for p in head.parameters()]
    stats = value_update(tr.actor, tr.optimizer, minibatch(fixed_rollout), vf_clip_eps=0.2, max_grad_norm=0.0)
    assert stats["train/grad_norm"] > 0 and stats["train/skipped"] == 0.0
    moved = sum(float((p.detach() - b).abs().max()) for p, b in zip(head.parameters(), before))
    assert moved > 0.5 * BASE["lr"]  # an unclipped AdamW step moves each weight by about lr
