"""Chapter 05 - the PPO step as the algorithm box. ``PPOTrainer.step()`` = ``collect()`` + ``learn()``:

    collect(records) -> Rollout
    1. sample       a response for each prompt of the batch                       (rollout.sample)
    2. score        old logprobs and values (actor), reference logprobs, scores   (rollout.score)
    learn(rollout) -> metrics
    3. rewards      task score on the last token, -kl_coef * KL on every token    (gae.token_rewards)
    4. advantages   GAE advantages (ppo.lam), then whitening over the batch       (gae.compute_gae)
       returns      the critic's targets, GAE with their own lambda               (ppo.lam_value)
    5. update       ppo_epochs passes over shuffled minibatches                   (update.minibatch_update)
    6. KL control   adapt kl_coef to the measured KL to the reference             (kl.AdaptiveKLController)

The first ``ppo.value_warmup_steps`` steps run 1-4, then fit only the value head (``update.value_update``):
no policy update and no KL controller update, logged with ``value/warmup`` = 1.

Chapter 07's switches (``algo.*``, ``rollout.group_size``) change steps 1, 3, 4 and 5 only: G samples per
prompt; the KL in the reward or in the loss; a critic-free advantage (``advantages.outcome_advantages``)
instead of GAE, with no value head at all; how the per-token policy losses are averaged.

The trainer is the only stateful piece: model, reference, optimizer, KL controller, step counter.
What a real run needs around the step lives in ``ppo_core.run``: building the pieces (``setup``),
checkpoints and resume (``resume``), NaN guards (``guards``), the run loop with its signal handling
(``loop``), metrics (``metrics``).
"""

import time
from dataclasses import dataclass
from pathlib import Path

import torch

from . import dapo
from .advantages import outcome_advantages
from .gae import adaptive_lam, compute_gae, token_rewards
from .kl import kl_penalty
from .masking import masked_mean, masked_whiten
from .rollout import Rollout, sample, score, stop_token_ids
from .run import fastpaths, guards, loop, resume
from .run.checkpoint import recover_interrupted_saves
from .run.config import Config
from .run.evaluation import accuracy
from .run.metrics import explained_variance
from .run.setup import (
    build_kl_controller,
    build_optimizer,
    fit_prompt_len,
    load_models,
    load_reward_model,
    load_task,
    resolve_device,
    seed_everything,
    update_hparams,
    uses_critic,
)
from .tasks.data import build_prompt
from .tasks.preferences import gold_reward
from .update import minibatch_update, value_update

__all__ = ["PPOTrainer", "StepRecord"]


@dataclass
class StepRecord:
    """What ``learn`` computed on its way, kept for tests and for readers (``trainer.last_step``). (B, T) each."""

    kl: torch.Tensor  # per-token KL penalty estimate (ppo.kl_estimator), log pi_old - log pi_ref for k1
    rewards: torch.Tensor  # step 3: -kl_coef * kl on every token, plus the task score on the last one
    advantages_raw: torch.Tensor  # step 4: GAE advantages before whitening (critic-free: the advantages)
    advantages: torch.Tensor  # after whitening (the same tensor if ppo.whiten_advantages is off)
    returns: torch.Tensor | None  # the value head's targets: GAE(ppo.lam_value) + old values (None without a critic)
    schedule: list  # step 5: per epoch, the minibatches' row indices (tensors) in the order they were used
    kl_coef_used: float  # the coefficient of step 3
    kl_for_controller: float  # step 6: sum over response tokens of k1, mean over sequences
    updates: int  # step 5: minibatch updates tried, the critic's extra passes (ppo.value_epochs) included


class PPOTrainer:
    """PPO for a causal LM with a value head, against a frozen reference, on the task of ``cfg``.

    ``step()`` runs one PPO iteration on the next batch of prompts and returns its metrics;
    ``train()`` runs the whole configured run (``run.loop.train``). Building it resumes from a
    checkpoint when ``train.resume`` says so.
    """

    def __init__(self, cfg: Config):
        self.cfg = cfg
        if cfg.train.num_threads > 0:
            torch.set_num_threads(cfg.train.num_threads)
        seed_everything(cfg.train.seed)
        self.device = resolve_device(cfg.model.device)
        self.out = Path(cfg.train.output_dir)
        recover_interrupted_saves(self.out)
        self.resumed_from = resume.resume_path(cfg)  # every check that can refuse the run comes first
        self.train_records, self.test_records, self.reward_fn, self.correct_fn = load_task(cfg)
        self.reward_model = load_reward_model(cfg, self.device)  # reward.type=model (chapter 06); None: the rule
        self.critic = uses_critic(cfg)  # False for GRPO, RLOO, REINFORCE++ (chapter 07): no value head is built
        self.actor, self.ref, self.tokenizer, self.init_path = load_models(cfg, self.device)
        fit_prompt_len(cfg, self.actor.lm)
        if cfg.train.fast_paths:  # same numbers up to float rounding, less work (run/fastpaths.py)
            fastpaths.enable(self.actor)
        self.optimizer = build_optimizer(self.actor, cfg.ppo)
        self.kl_ctl = build_kl_controller(cfg.ppo)
        self.shuffle_gen = torch.Generator().manual_seed(cfg.train.seed)  # minibatch order; saved in checkpoints
        self.minibatch_update = minibatch_update  # chapter 05 swaps in the learner's own version
        self.hparams = update_hparams(cfg)
        self.skips = guards.SkippedUpdates(cfg.train.max_skipped_steps)
        self.step_count, self.last_step, self.times = 0, None, {}
        self.logger = resume.open_run(self, self.resumed_from)

    def prompt_batch(self, step: int) -> list[dict]:
        """The records of PPO step ``step`` (1-based): a fresh seeded permutation each pass over the data.

        A pure function of the step, so restoring the step count restores the data position. With
        ``rollout.group_size`` G > 1 the step takes batch_size / G prompts and repeats each G times in a
        row (rows [kG, kG + G) share prompt k), so every step still samples batch_size episodes.
        """
        G = self.cfg.rollout.group_size
        n, b = len(self.train_records), self.cfg.rollout.batch_size // G
        out = []
        for i in range((step - 1) * b, step * b):
            epoch, j = divmod(i, n)
            perm = torch.randperm(n, generator=torch.Generator().manual_seed(self.cfg.train.seed * 100_003 + epoch))
            out += [self.train_records[int(perm[j])]] * G
        return out

    def prompts(self, records: list[dict]) -> list[str]:
        return [build_prompt(r["question"], self.tokenizer, self.cfg.data.prompt_style) for r in records]

    def step(self) -> dict:
        """One PPO iteration: ``collect`` (1 sample, 2 score), ``learn`` (3 rewards .. 6 KL control).

        Returns the step's metrics, logged at once (``run.loop.record_step``); raises ``NonFiniteError``
        on a NaN rollout or parameter, or after ``train.max_skipped_steps`` all-skipped steps.
        """
        records = self.prompt_batch(self.step_count + 1)
        ro, extra = self.collect(records), {}
        if self.cfg.algo.dynamic_sampling:  # chapter 08 (DAPO): drop groups whose scores agree, sample more
            records, ro, extra = dapo.dynamic_sampling(self, records, ro)
        metrics = {**self.learn(ro), **extra}
        self.step_count += 1
        return loop.record_step(self, records, ro, metrics)

    def collect(self, records: list[dict]) -> Rollout:
        """Steps 1-2: sample a response per record, score it (old logprobs, values, reference logprobs, task score)."""
        cfg, n, t0 = self.cfg, self.step_count + 1, time.perf_counter()
        self.actor.eval()
        cache = fastpaths.PromptCache() if cfg.train.fast_paths else None  # travels beside the rollout
        try:  # 1. sample
            ro = sample(
                self.actor.lm,
                self.tokenizer,
                self.prompts(records),
                cfg.rollout.max_new_tokens,
                cfg.rollout.temperature,
                cfg.data.max_prompt_len,
                cfg.rollout.generation_batch_size,
                prompt_cache=cache,
                dtype=self.actor.compute_dtype,
            )
        except RuntimeError as err:  # torch.multinomial on NaN/inf probabilities
            diagnosis = guards.sampling_failed(err, n, self.out)
            if diagnosis is None:
                raise
            raise diagnosis from None
        t1 = time.perf_counter()
        score(self.actor, self.ref, ro, cfg.rollout.temperature, cfg.ppo.minibatch_size, cache)  # 2. score
        ro.scores = self.sequence_scores(records, ro.completions)
        self.shape_scores(ro)  # chapter 08's overlong and missing-EOS switches (off by default)
        guards.check_rollout(ro, n, self.out)
        self.times = {"time/rollout": t1 - t0, "time/score": time.perf_counter() - t1}
        return ro

    def sequence_scores(self, records: list[dict], completions: list[str]) -> torch.Tensor:
        """The score of each response, (B,): the task's rule, or the frozen reward model on prompt + response.

        The reward model (``reward.type=model``, chapter 06) reads the decoded ``prompt + completion`` once
        per rollout, in eval mode with no gradient, and returns scores normalised on the starting policy's
        samples.
        """
        if self.reward_model is None:
            scores = [self.reward_fn(c, r["answer"]) for c, r in zip(completions, records)]
            return torch.tensor(scores, device=self.device)
        texts = [prompt + c for prompt, c in zip(self.prompts(records), completions)]
        return self.reward_model.score_texts(texts).to(self.device)

    def shape_scores(self, ro: Rollout) -> None:
        """DAPO's soft overlong penalty and a missing-EOS penalty on ``ro.scores``; with ``rollout.overlong_filter``
        the truncated responses leave the loss (``dapo``, chapter 08). In place; nothing when all are off."""
        rw, r = self.cfg.reward, self.cfg.rollout
        if not (rw.overlong_buffer_len or rw.missing_eos_penalty or r.overlong_filter):
            return
        ended = dapo.ended_with_eos(ro.response_ids, ro.mask, stop_token_ids(self.actor.lm, self.tokenizer))
        lengths = ro.mask.sum(1)  # (B,)
        L, buffer = r.max_new_tokens, rw.overlong_buffer_len
        ro.scores = dapo.shape_scores(ro.scores, lengths, ended, L, buffer, rw.overlong_penalty, rw.missing_eos_penalty)
        if r.overlong_filter:
            ro.mask = ro.mask & ended[:, None]  # (B, T)

    def reward_model_metrics(self, records: list[dict], completions: list[str]) -> dict:
        """With a learned reward: the rule's score and (synthetic task) the gold reward of the same responses."""
        if self.reward_model is None:
            return {}
        rule = [self.reward_fn(c, r["answer"]) for c, r in zip(completions, records)]
        out = {"rollout/rule_reward": sum(rule) / max(len(rule), 1)}
        if self.cfg.data.task == "synthetic":
            coef = self.cfg.reward.gold_length_coef
            gold = [gold_reward(c, r["answer"], coef) for c, r in zip(completions, records)]
            out["rollout/gold_reward"] = sum(gold) / max(len(gold), 1)
        return out

    def learn(self, ro: Rollout) -> dict:
        """Steps 3-6 on a scored rollout; returns the update's and the KL's metrics, keeps ``last_step``."""
        p, a, t0 = self.cfg.ppo, self.cfg.algo, time.perf_counter()
        kl_coef = self.kl_ctl.value if a.use_kl_in_reward else 0.0  # GRPO puts the KL in the loss instead
        # 3. rewards: the task score on the last token, a KL penalty against the reference on every token
        kl = kl_penalty(ro.logprobs, ro.ref_logprobs, p.kl_estimator)  # (B, T)
        rewards = token_rewards(ro.scores, kl, ro.mask, kl_coef)
        # 4. advantages: GAE with the critic, then whitening over the whole batch; or a critic-free baseline
        lam_policy = None
        if self.critic:
            # the policy's lambda (one, or VAPO's per-sequence length-adaptive one) and the critic's targets' lambda
            lam_policy = adaptive_lam(ro.mask, p.lam_policy_alpha) if p.lam_policy_alpha > 0 else p.lam
            lam_value = p.lam if p.lam_value is None else p.lam_value
            advantages_raw, returns = compute_gae(rewards, ro.values, ro.mask, p.gamma, lam_policy)
            if torch.is_tensor(lam_policy) or lam_value != lam_policy:  # the targets need their own GAE pass
                _, returns = compute_gae(rewards, ro.values, ro.mask, p.gamma, lam_value)
            advantages = masked_whiten(advantages_raw, ro.mask) if p.whiten_advantages else advantages_raw
        else:  # GRPO / RLOO (groups of rollout.group_size) or REINFORCE++ (the batch), chapter 07
            G, norm = self.cfg.rollout.group_size, a.norm_adv_by_std_in_grpo
            advantages_raw = advantages = outcome_advantages(a.adv_estimator, rewards, ro.mask, G, p.gamma, norm)
            returns = None
        # 5. update: ppo_epochs passes over shuffled minibatches (a value warm-up step: the value head alone)
        warmup = self.critic and self.step_count < p.value_warmup_steps  # this is step step_count + 1
        self.actor.train()
        stats, schedule = self.value_warmup(ro, returns) if warmup else self.update(ro, advantages, returns)
        updates = sum(map(len, schedule))
        extra = (p.value_epochs or p.ppo_epochs) - p.ppo_epochs if self.critic and not warmup else 0
        if extra > 0:  # ppo.value_epochs: more passes for the critic alone, after the policy's
            value_stats, value_schedule = self.value_warmup(ro, returns, extra)
            updates += sum(map(len, value_schedule))
            stats["value/extra_loss"] = value_stats["value/loss"]
            stats["train/skipped"] += value_stats["train/skipped"]
        # 6. KL control: the sequence-level KL to the reference (k1, summed over tokens, mean over sequences)
        k1 = kl_penalty(ro.logprobs, ro.ref_logprobs, "k1")
        kl_to_ref = masked_mean(k1, ro.mask, dim=1).mul(ro.mask.sum(1)).mean().item()
        if not warmup:  # the policy did not move: nothing for the controller to react to
            self.kl_ctl.update(kl_to_ref, ro.input_ids.shape[0])
        self.last_step = StepRecord(
            kl, rewards, advantages_raw, advantages, returns, schedule, kl_coef, kl_to_ref, updates
        )
        self.times["time/update"] = time.perf_counter() - t0
        # learn also runs on a rollout that collect did not time (tests, a rollout built by hand)
        self.times["time/step"] = sum(self.times.get(k, 0.0) for k in ("time/rollout", "time/score", "time/update"))
        return {
            "kl/to_ref": kl_to_ref,
            "kl/coef": kl_coef,
            **({"value/explained_variance": explained_variance(ro.values, returns, ro.mask)} if self.critic else {}),
            **({"value/warmup": 1.0} if warmup else {}),
            **({"rollout/lam_policy": lam_policy.mean().item()} if torch.is_tensor(lam_policy) else {}),
            **stats,
        }

    def update(self, ro: Rollout, advantages, returns) -> tuple[dict, list]:
        """Step 5: ``ppo_epochs`` passes over the rollout in shuffled minibatches; returns (stats, schedule).

        Stats are averaged over the minibatch updates that were applied; ``train/skipped`` counts the
        ones skipped for a non-finite loss or gradient (each one also warns, naming the culprit).
        """
        cfg, p = self.cfg, self.cfg.ppo  # self.hparams: clip_eps, vf_coef, ... (run.setup.update_hparams)
        data = {
            "input_ids": ro.input_ids,
            "attention_mask": ro.attention_mask,
            "response_ids": ro.response_ids,
            "mask": ro.mask,
            "old_logprobs": ro.logprobs,
            "old_values": ro.values,
            "advantages": advantages,
            "returns": returns,
            "ref_logprobs": ro.ref_logprobs if self.cfg.algo.use_kl_loss else None,
            "policy_features": ro.policy_features,  # (B, T, 6) for a critic that reads the policy, else None
        }
        data = {key: v for key, v in data.items() if v is not None}  # no critic: no values, no returns
        schedule, applied, skipped = [], [], []
        for epoch in range(p.ppo_epochs):
            order = torch.randperm(ro.input_ids.shape[0], generator=self.shuffle_gen).split(p.minibatch_size)
            schedule.append(list(order))  # a fresh permutation each epoch
            for k, idx in enumerate(order):
                mb = {key: v[idx.to(v.device)] for key, v in data.items()}
                mb["keep"] = ro.keep
                check = cfg.train.check_ratio and epoch == 0 and k == 0  # the policy has not moved yet: ratio 1
                ratio_tol = cfg.train.ratio_tol if check else None
                stats = self.minibatch_update(self.actor, self.optimizer, mb, **self.hparams, ratio_tol=ratio_tol)
                (skipped if stats.get("train/skipped") else applied).append(stats)
                if stats.get("train/skipped"):
                    where = f"step {self.step_count + 1}, epoch {epoch + 1}, minibatch {k + 1}"
                    self.skips.skipped(stats, where)
        used = applied or skipped  # if every update was skipped, log their (non-finite) stats as they are
        out = {key: sum(s[key] for s in used) / len(used) for key in used[0]}
        out["train/skipped"] = float(len(skipped))  # a count, not a mean
        return out, schedule

    def value_warmup(self, ro: Rollout, returns, epochs: int | None = None) -> tuple[dict, list]:
        """Step 5 of a value warm-up step: ``epochs`` (default ``ppo_epochs``) passes of critic-only updates
        (``update.value_update``) over shuffled minibatches; returns (stats, schedule) as ``update`` does.
        Also the critic's extra passes of ``ppo.value_epochs`` after a PPO update."""
        p = self.cfg.ppo
        data = {
            "input_ids": ro.input_ids,
            "attention_mask": ro.attention_mask,
            "mask": ro.mask,
            "old_values": ro.values,
            "returns": returns,
            "policy_features": ro.policy_features,
        }
        data = {key: v for key, v in data.items() if v is not None}
        schedule, applied, skipped = [], [], []
        for epoch in range(p.ppo_epochs if epochs is None else epochs):
            order = torch.randperm(ro.input_ids.shape[0], generator=self.shuffle_gen).split(p.minibatch_size)
            schedule.append(list(order))
            for k, idx in enumerate(order):
                mb = {key: v[idx.to(v.device)] for key, v in data.items()}
                mb["keep"] = ro.keep
                stats = value_update(
                    self.actor, self.optimizer, mb, vf_clip_eps=p.vf_clip_eps, max_grad_norm=p.max_grad_norm
                )
                (skipped if stats["train/skipped"] else applied).append(stats)
                if stats["train/skipped"]:
                    self.skips.skipped(
                        stats, f"step {self.step_count + 1} (value warm-up), epoch {epoch + 1}, minibatch {k + 1}"
                    )
        used = applied or skipped
        out = {key: sum(s[key] for s in used) / len(used) for key in used[0]}
        out["train/skipped"] = float(len(skipped))
        return out, schedule

    def evaluate(self, greedy: bool = False, n: int | None = None) -> float:
        """Accuracy on the held-out split (sampled at the rollout temperature, or greedy)."""
        records = self.test_records[: n or self.cfg.train.eval_samples]
        return accuracy(self.actor.lm, self.tokenizer, records, self.cfg, greedy, self.correct_fn)

    def train(self) -> dict:
        """The whole run (``run.loop.train``): evaluate, ``train.steps`` steps with checkpoints, evaluate."""
        return loop.train(self)

    def save_checkpoint(self, name: str):
        """Save ``output_dir/name`` atomically (``run.resume.save_checkpoint``)."""
        return resume.save_checkpoint(self, name)
