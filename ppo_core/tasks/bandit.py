"""Chapter 05 - PPO on a K-armed bandit, where a policy's expected reward is exact: epochs judged by outcome.

The policy is a table of K logits per run, and many independent runs train at once, one row each. A rollout
samples ``batch_size`` arms per run; each pays 1 with its arm's probability (``arm_means``), else 0. Advantages are
the rewards whitened within the run's rollout; the update is ``epochs`` AdamW steps on the package's
``policy_loss``, against the log-probs stored at sampling time. The exact expected reward is softmax(logits) . means.
"""

import torch

from ..losses import policy_loss

__all__ = ["ppo_bandit"]


def ppo_bandit(
    arm_means,
    epochs: int,
    *,
    rollouts: int = 150,
    batch_size: int = 8,
    lr: float = 0.1,
    clip_eps: float = 0.2,
    runs: int = 400,
    seed: int = 0,
) -> dict:
    """Train ``runs`` independent uniform policies for ``rollouts`` rollouts of ``epochs`` full-batch PPO epochs.

    Returns ``expected_reward`` (rollouts + 1, runs), exact, before each rollout and at the end; ``probs`` (runs, K)
    at the end; ``clipfrac`` and ``approx_kl`` (rollouts,): the last epoch's stats of each rollout, over all runs.
    """
    means = torch.as_tensor(arm_means, dtype=torch.float32)  # (K,)
    g = torch.Generator().manual_seed(seed)
    logits = torch.zeros(runs, len(means), requires_grad=True)  # (runs, K): uniform policies
    optimizer = torch.optim.AdamW([logits], lr=lr, weight_decay=0.0)
    expected, clipfrac, approx_kl = [], [], []
    for _ in range(rollouts):
        with torch.no_grad():  # the rollout: pi_old samples, and its log-probs are stored
            probs = torch.softmax(logits, -1)  # (runs, K)
            expected.append(probs @ means)
            arms = torch.multinomial(probs, batch_size, replacement=True, generator=g)  # (runs, B)
            rewards = torch.bernoulli(means[arms], generator=g)  # (runs, B)
            advantages = (rewards - rewards.mean(1, keepdim=True)) / (rewards.std(1, keepdim=True) + 1e-8)
            old_logprobs = torch.log_softmax(logits, -1).gather(1, arms)  # (runs, B)
        mask = torch.ones_like(arms, dtype=torch.bool)
        for _ in range(epochs):  # the log-probs are recomputed with the current weights in every epoch
            logprobs = torch.log_softmax(logits, -1).gather(1, arms)  # (runs, B)
            loss, stats = policy_loss(logprobs, old_logprobs, advantages, mask, clip_eps)
            optimizer.zero_grad()
            (loss * runs).backward()  # each run's gradient is its own token mean: the rows stay independent
            optimizer.step()
        clipfrac.append(stats["clipfrac"])
        approx_kl.append(stats["approx_kl"])
    with torch.no_grad():
        probs = torch.softmax(logits, -1)
        expected.append(probs @ means)
    return {
        "expected_reward": torch.stack(expected),
        "probs": probs,
        "clipfrac": torch.tensor(clipfrac),
        "approx_kl": torch.tensor(approx_kl),
    }
