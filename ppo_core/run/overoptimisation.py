"""Chapter 06 - reward over-optimisation, measured: PPO against a learned reward, the gold reward beside it.

``ppo_against_reward_model`` runs the course's PPO trainer with ``reward.type=model`` and records,
after every step, the three numbers of Gao et al. (2022)'s plots: the distance from the reference,
``sqrt(KL(pi || pi_ref))`` (the k1 estimate per response, summed over its tokens, averaged over the
batch), the **proxy** reward (the reward model's normalised score, what PPO maximises) and the **gold**
reward (``ppo_core.tasks.preferences.gold_reward``, the truth the reward model was trained to stand
for). The chapter and ``benchmarks/overoptimisation.py`` both call it.
"""

import math

from ..tasks.preferences import gold_reward
from ..tasks.warmstart import generate_completions
from .config import load_config
from .runner import build_trainer

__all__ = ["ppo_against_reward_model", "CURVE_KEYS"]

CURVE_KEYS = ("step", "sqrt_kl", "proxy", "gold", "rule", "length")


def ppo_against_reward_model(rm_path: str, kl_coef: float, steps: int, output_dir: str, overrides=(),
                             n_samples: int = 6) -> dict:  # fmt: skip
    """Run ``steps`` PPO steps against the reward model at ``rm_path``.

    Returns ``{"curve": [one dict of CURVE_KEYS per step], "samples": [...]}``, the samples being the final
    policy's answers to ``n_samples`` held-out problems with their proxy and gold rewards.

    Args:
        rm_path: a reward-model folder (``python -m ppo_core.train_rm``'s ``final/``).
        kl_coef: the KL penalty's weight (fixed, not adaptive).
        steps: PPO steps.
        output_dir: the run folder (overwritten).
        overrides: more dotted ``key=value`` settings for the ``cpu`` preset (batch size, lr, ...).
    """
    cfg = load_config("cpu", ["reward.type=model", f"reward.path={rm_path}", f"ppo.kl_coef={kl_coef}",
                              f"train.steps={steps}", f"train.output_dir={output_dir}", "train.overwrite=true",
                              "train.save_every=0", "train.log_every=0", "train.tensorboard=false",
                              "train.progress=false", *overrides])  # fmt: skip
    trainer = build_trainer(cfg)
    curve = []
    for _ in range(steps):
        m = trainer.step()
        kl = m["kl/to_ref"]
        curve.append(dict(step=trainer.step_count, sqrt_kl=math.sqrt(max(kl, 0.0)),
                          proxy=m["rollout/reward_mean"], gold=m["rollout/gold_reward"], rule=m["rollout/rule_reward"],
                          length=m["rollout/response_length"]))  # fmt: skip
    trainer.logger.close()
    return {"curve": curve, "samples": _samples(trainer, n_samples)}


def _samples(trainer, n: int) -> list[dict]:
    """The trained policy's answers to ``n`` held-out problems, with the proxy and gold rewards of each."""
    records = trainer.test_records[:n]
    texts = generate_completions(trainer.actor.lm, trainer.tokenizer, records, seed=trainer.cfg.train.seed,
                                 max_new_tokens=trainer.cfg.rollout.max_new_tokens)  # fmt: skip
    proxy = trainer.sequence_scores(records, texts).tolist()
    coef = trainer.cfg.reward.gold_length_coef
    return [dict(question=r["question"], completion=t, proxy=p, gold=gold_reward(t, r["answer"], coef))
            for r, t, p in zip(records, texts, proxy)]  # fmt: skip
