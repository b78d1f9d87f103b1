"""ppo_core.tasks.bandit: PPO on a bandit with an exact expected reward (chapter 05's epochs experiment)."""

import torch

from ppo_core import losses
from ppo_core.tasks import bandit
from ppo_core.tasks.bandit import ppo_bandit

ARMS = [0.6, 0.5, 0.5, 0.5]


def test_expected_reward_is_exact():
    out = ppo_bandit(ARMS, epochs=2, rollouts=3, runs=5)
    assert out["expected_reward"].shape == (4, 5) and out["probs"].shape == (5, 4)
    torch.testing.assert_close(out["expected_reward"][0], torch.full((5,), 0.525))  # uniform start: mean of the arms
    torch.testing.assert_close(out["expected_reward"][-1], out["probs"] @ torch.tensor(ARMS))


def test_one_epoch_is_on_policy():
    """One full-batch epoch runs at ratio exactly 1: the stored log-probs are the sampling policy's."""
    out = ppo_bandit(ARMS, epochs=1, rollouts=20, runs=50)
    assert (out["clipfrac"] == 0).all() and out["approx_kl"].abs().max() < 1e-6


def _epochs_leave_the_rollout(out) -> bool:
    """Later epochs move the policy off the rollout that sampled the data: clipping engages, approx-KL grows."""
    return bool(out["clipfrac"][0] > 0.3 and out["approx_kl"][0] > 1e-3)


def test_epochs_take_the_policy_off_the_rollout():
    assert _epochs_leave_the_rollout(ppo_bandit(ARMS, epochs=16, rollouts=1, runs=50))


def test_a_ratio_stuck_at_one_is_caught(monkeypatch):
    """The property above rejects a loop whose ratio never leaves 1 (log-probs computed once, before the epochs,
    or old log-probs refreshed in every epoch): it would have no trust region and would log none."""
    stuck = lambda logprobs, old, *args: losses.policy_loss(logprobs, logprobs.detach(), *args)
    monkeypatch.setattr(bandit, "policy_loss", stuck)
    assert not _epochs_leave_the_rollout(ppo_bandit(ARMS, epochs=16, rollouts=1, runs=50))


def test_more_epochs_learn_faster_then_end_worse():
    """Same rollouts, batch and learning rate: 16 epochs lead after 10 rollouts and trail after 150, by > 3 SE."""
    diff = ppo_bandit(ARMS, epochs=16)["expected_reward"] - ppo_bandit(ARMS, epochs=2)["expected_reward"]
    mean, se = diff.mean(-1), diff.std(-1) / diff.shape[-1] ** 0.5  # (rollouts + 1,) over 400 runs
    assert mean[10] > 3 * se[10]
    assert mean[-1] < -3 * se[-1]
