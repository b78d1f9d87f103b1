"""Chapter 05 - the PPO step as the algorithm box. ``PPOTrainer.step()`` = ``collect()`` + ``learn()``:

    collect(records) -> Rollout
    1. sample       a response for each prompt of the batch                       (rollout.sample; sampler, ch. 09)
    2. score        old logprobs and values (actor), reference logprobs, scores   (rollout.score)
    learn(rollout) -> metrics
    3. rewards      task score on the last token, -kl_coef * KL on every token    (gae.token_rewards)
    4. advantages   GAE advantages (ppo.lam), then whitening over the batch       (gae.compute_gae)
       returns      the critic's targets, GAE with their own lambda               (ppo.lam_value)
    5. update       ppo_epochs passes over shuffled minibatches                   (update.minibatch_update; correction)
    6. KL control   adapt kl_coef to the measured KL to the reference             (kl.AdaptiveKLController)

The first ``ppo.value_warmup_steps`` steps run 1-4, then fit only the critic (``update.value_update``):
no policy update and no KL controller update, logged with ``value/warmup`` = 1.

Chapter 07's switches (``algo.*``, ``rollout.group_size``) change steps 1, 3, 4 and 5 only: G samples per
prompt; the KL in the reward or in the loss; a critic-free advantage (``advantages.outcome_advantages``)
instead of GAE, with no value head at all; how the per-token policy losses are averaged.

Chapter 08's dynamic sampling (``algo.dynamic_sampling``) is part of the box: DAPO's algorithm itself samples
again until the batch holds groups that teach something. ``dapo.DynamicSampling`` decides from the data which
prompts to sample next; ``step`` calls ``collect`` on them (``refill``), so the run's guarded ``collect`` covers
every round.

The trainer holds the algorithm's state (models, optimizer, KL controller, step counter), declared in
``__init__``, and is handed its parts; nothing below it calls back into it. Its extension points are
arguments, not subclasses: ``data_parallel`` (an object that shards the step's records, gathers the rollout
and runs a minibatch update across processes; ``OneProcess`` by default, ``run.distributed.DataParallel`` under
torchrun) and the ``collect`` function ``step`` uses (``run.runner.RunTrainer`` passes its guarded one).
``ppo_core.run.runner.build_trainer(cfg)`` builds the parts and holds the trainer inside a run (logs,
checkpoints, guards).
"""

import time
from dataclasses import dataclass, field

import torch

from . import dapo
from .advantages import ADV_ESTIMATORS
from .correction import policy_inputs
from .fastpaths import PromptCache
from .gae import explained_variance, token_rewards
from .kl import kl_penalty
from .masking import masked_mean, masked_whiten
from .registry import AdvantageOptions
from .rollout import Rollout, sample, score, stop_token_ids
from .sampler import Sampler
from .update import minibatch_update, update_kwargs, value_update
from .utils import stream_seed

__all__ = ["PPOTrainer", "StepRecord", "OneProcess"]


@dataclass
class StepRecord:
    """What ``learn`` computed on its way, kept for tests and for readers (``trainer.last_step``). (B, T) each."""

    kl: torch.Tensor  # per-token KL penalty estimate (ppo.kl_estimator), log pi_old - log pi_ref for k1
    rewards: torch.Tensor  # step 3: -kl_coef * kl on every token, plus the task score on the last one
    advantages_raw: torch.Tensor  # step 4: GAE advantages before whitening (critic-free: the advantages)
    advantages: torch.Tensor  # after whitening (the same tensor if ppo.whiten_advantages is off)
    returns: torch.Tensor | None  # the critic's targets: GAE(ppo.lam_value) + old values (None without a critic)
    schedule: list  # step 5: per epoch, the minibatches' row indices (tensors) in the order they were used
    kl_coef_used: float  # the coefficient of step 3
    kl_for_controller: float  # step 6: sum over response tokens of k1, mean over sequences
    updates: int  # step 5: minibatch updates tried, the critic's extra passes (ppo.value_epochs) included
    skipped: list = field(default_factory=list)  # step 5: (where, stats) of each update skipped as non-finite


class OneProcess:
    """The default ``data_parallel`` of ``PPOTrainer``: one process holds the whole batch and the whole update.

    The three methods a data-parallel object provides (``run.distributed.DataParallel`` shares them over ranks).
    """

    def shard(self, records: list, step: int) -> list:
        """This process's share of step ``step``'s records: all of them."""
        return records

    def gather(self, ro: Rollout, pad_id: int) -> Rollout:
        """The whole step's rollout from this process's share: the share itself."""
        return ro

    def update(self, minibatch_update, actor, optimizer, mb: dict, **kwargs) -> dict:
        """One minibatch update (``update.minibatch_update`` or a swapped-in one) on the whole minibatch."""
        return minibatch_update(actor, optimizer, mb, **kwargs)


class PPOTrainer:
    """PPO for a causal LM with a value head, against a frozen reference, on prompts drawn from ``records``.

    ``prompt_fn(records)`` renders the prompts, ``score_fn(records, completions)`` returns one score per
    response, (B,). ``step()`` runs one PPO iteration on the next batch of prompts and returns its metrics.
    ``data_parallel``: how a step is shared by processes (``OneProcess`` when None; see the module doc).
    """

    def __init__(self, cfg, actor, ref, tokenizer, optimizer, kl_ctl, records, prompt_fn, score_fn, sampler=None,
                 data_parallel=None):  # fmt: skip
        self.cfg, self.actor, self.ref, self.tokenizer = cfg, actor, ref, tokenizer
        self.optimizer, self.kl_ctl, self.sampler = optimizer, kl_ctl, sampler or Sampler(actor.lm)  # chapter 09
        self.train_records, self.prompt_fn, self.score_fn = records, prompt_fn, score_fn
        self.critic = actor.value_head is not None  # False for GRPO, RLOO, REINFORCE++ (chapter 07)
        self.shuffle_gen = torch.Generator().manual_seed(cfg.train.seed)  # minibatch order; saved in checkpoints
        self.minibatch_update = minibatch_update  # chapter 05 swaps in the learner's own version
        self.data_parallel = data_parallel or OneProcess()  # shard / gather / update (run.distributed: N ranks)
        self.hparams = update_kwargs(cfg)  # clip_eps, vf_coef, ... of minibatch_update
        p = cfg.ppo  # step 4's estimator reads these (registry.ADV_ESTIMATORS)
        self.adv_options = AdvantageOptions(p.gamma, p.lam, p.lam_value, cfg.rollout.group_size,
                                            cfg.algo.norm_adv_by_std_in_grpo)  # fmt: skip
        self.step_count, self.last_step, self.times = 0, None, {}
        self.last_batch = None  # the (records, rollout) the last step trained on: dynamic sampling's kept groups

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
            gen = torch.Generator().manual_seed(stream_seed(self.cfg.train.seed, "prompts", index=epoch))
            perm = torch.randperm(n, generator=gen)
            out += [self.train_records[int(perm[j])]] * G
        return out

    def prompts(self, records: list[dict]) -> list[str]:
        return self.prompt_fn(records)

    def step(self, collect=None) -> dict:
        """One PPO iteration: ``collect`` (1 sample, 2 score), ``learn`` (3 rewards .. 6 KL control); its metrics.

        ``collect(records) -> Rollout``: how the step gathers a batch, ``self.collect`` unless given (the run
        passes its guarded one)."""
        collect = collect or self.collect
        records = self.prompt_batch(self.step_count + 1)
        ro, extra = collect(records), {}
        if self.cfg.algo.dynamic_sampling:  # chapter 08 (DAPO): drop groups whose scores agree, sample more
            records, ro, extra = self.refill(records, ro, collect)
        metrics = {**self.learn(ro), **extra}
        self.step_count, self.last_batch = self.step_count + 1, (records, ro)
        lengths = ro.mask.sum(1).float()
        return {"rollout/reward_mean": ro.scores.mean().item(), "rollout/response_length": lengths.mean().item(),
                **metrics, **self.times}  # fmt: skip

    def refill(self, records: list[dict], ro: Rollout, collect) -> tuple[list, Rollout, dict]:
        """Chapter 08's dynamic sampling: ``dapo.DynamicSampling`` keeps the groups whose scores disagree and
        returns the prompts it needs next; ``collect`` samples them, until it needs none. The kept (records,
        rollout) and the metrics. Times add up."""
        cfg = self.cfg
        kept = dapo.DynamicSampling(cfg.rollout.group_size, cfg.rollout.batch_size, cfg.algo.max_sampling_rounds,
                                    self.train_records, cfg.train.seed, self.step_count + 1)  # fmt: skip
        times = dict(self.times)
        while (records := kept.add(records, ro)) is not None:  # the prompts to sample next
            ro = collect(records)
            times = {k: times.get(k, 0.0) + v for k, v in self.times.items()}
        self.times = times
        return kept.batch(self.tokenizer.pad_token_id)

    def collect(self, records: list[dict]) -> Rollout:
        """Steps 1-2: sample a response per record, score it (old logprobs, values, reference logprobs, task score)."""
        cfg, t0 = self.cfg, time.perf_counter()
        records = self.data_parallel.shard(records, self.step_count + 1)  # N ranks: this rank's share
        self.actor.eval()
        cache = PromptCache() if cfg.train.fast_paths and not self.sampler.own else None  # beside the rollout
        ro = sample(self.sampler.lm, self.tokenizer, self.prompts(records), cfg.rollout.max_new_tokens,  # 1. sample
                    cfg.rollout.temperature, cfg.data.max_prompt_len, cfg.rollout.generation_batch_size,
                    prompt_cache=cache, **self.sampler.options(self.actor.compute_dtype, cfg.correction))  # fmt: skip
        t1 = time.perf_counter()
        score(self.actor, self.ref, ro, cfg.rollout.temperature, cfg.ppo.minibatch_size, cache)  # 2. score
        ro.scores = self.score_fn(records, ro.completions)
        dapo.shape_rollout(ro, cfg, stop_token_ids(self.actor.lm, self.tokenizer))  # chapter 08's switches, if on
        self.times = {"time/rollout": t1 - t0, "time/score": time.perf_counter() - t1}
        return self.data_parallel.gather(ro, self.tokenizer.pad_token_id)  # N ranks: every rank holds the whole batch

    def learn(self, ro: Rollout) -> dict:
        """Steps 3-6 on a scored rollout; returns the update's and the KL's metrics, keeps ``last_step``."""
        p, a, t0 = self.cfg.ppo, self.cfg.algo, time.perf_counter()
        kl_coef = self.kl_ctl.value if a.use_kl_in_reward else 0.0  # GRPO puts the KL in the loss instead
        # 3. rewards: the task score on the last token, a KL penalty against the reference on every token
        kl = kl_penalty(ro.logprobs, ro.ref_logprobs, p.kl_estimator)  # (B, T)
        rewards = token_rewards(ro.scores, kl, ro.mask, kl_coef)
        # 4. advantages: GAE with the critic (and the critic's targets, the returns), then whitening over the whole
        #    batch; or a critic-free baseline, GRPO / RLOO (groups of rollout.group_size) or REINFORCE++ (chapter 07)
        advantages_raw, returns = ADV_ESTIMATORS.get(a.adv_estimator)(rewards, ro.values, ro.mask, self.adv_options)
        whiten = self.critic and p.whiten_advantages
        advantages = masked_whiten(advantages_raw, ro.mask) if whiten else advantages_raw
        # 5. update: ppo_epochs passes over shuffled minibatches (a value warm-up step: the critic alone)
        warmup = self.critic and self.step_count < p.value_warmup_steps  # this is step step_count + 1
        data, correction_stats = self.minibatch_data(ro, advantages, returns)
        self.actor.train()
        skipped = []
        stats, schedule = self.update(data, p.ppo_epochs, self.value_step if warmup else self.policy_step, skipped)
        updates = sum(map(len, schedule))
        if self.critic and not warmup and p.value_epochs > p.ppo_epochs:  # ppo.value_epochs: the critic's extra passes
            extra, extra_schedule = self.update(data, p.value_epochs - p.ppo_epochs, self.value_step, skipped)
            updates += sum(map(len, extra_schedule))
            stats["value/extra_loss"] = extra["value/loss"]
            stats["train/skipped"] += extra["train/skipped"]
        # 6. KL control: the sequence-level KL to the reference (k1, summed over tokens, mean over sequences)
        k1 = kl_penalty(ro.logprobs, ro.ref_logprobs, "k1")
        kl_to_ref = masked_mean(k1, ro.mask, dim=1).mul(ro.mask.sum(1)).mean().item()
        if not warmup:  # the policy did not move: nothing for the controller to react to
            self.kl_ctl.update(kl_to_ref, ro.input_ids.shape[0])
            self.sampler.sync(self.actor.lm)  # the new weights (chapter 09: or those of k updates ago)
        self.last_step = StepRecord(
            kl=kl,
            rewards=rewards,
            advantages_raw=advantages_raw,
            advantages=advantages,
            returns=returns,
            schedule=schedule,
            kl_coef_used=kl_coef,
            kl_for_controller=kl_to_ref,
            updates=updates,
            skipped=skipped,
        )
        self.times["time/update"] = time.perf_counter() - t0
        # learn also runs on a rollout that collect did not time (tests, a rollout built by hand)
        self.times["time/step"] = sum(self.times.get(k, 0.0) for k in ("time/rollout", "time/score", "time/update"))
        return {
            "kl/to_ref": kl_to_ref,
            "kl/coef": kl_coef,
            **({"value/explained_variance": explained_variance(ro.values, returns, ro.mask)} if self.critic else {}),
            **({"value/warmup": 1.0} if warmup else {}),
            **(stats | correction_stats),  # chapter 09's mismatch/ and correction/ metrics
        }

    def minibatch_data(self, ro: Rollout, advantages, returns) -> tuple[dict, dict]:
        """The (B, ...) tensors that step 5 cuts into minibatches (what ``minibatch_update`` reads), and ``keep``;
        with them chapter 09's mismatch/ and correction/ metrics of the rollout (empty without a correction)."""
        policy, correction_stats = policy_inputs(ro.logprobs, ro.behaviour_logprobs, ro.mask, self.cfg.correction)
        data = {
            "input_ids": ro.input_ids,
            "attention_mask": ro.attention_mask,
            "response_ids": ro.response_ids,
            "mask": ro.mask,
            **policy,  # old_logprobs (pi_old; mu in bypass mode), chapter 09's is_weights and policy_mask
            "old_values": ro.values,
            "advantages": advantages,
            "returns": returns,
            "ref_logprobs": ro.ref_logprobs if self.cfg.algo.use_kl_loss else None,
            "keep": ro.keep,  # the slice [P-1 : P+T-1] of the positions that score the response
            "sampling_mask": ro.sampling_mask,  # chapter 09: the sampler's top-k/top-p support, if kept
        }
        data = {key: v for key, v in data.items() if v is not None}  # no critic: no values, no returns
        return data, correction_stats

    def policy_step(self, mb: dict, first: bool) -> dict:
        """One PPO minibatch update; the first of a step checks that the ratio is 1 (``train.check_ratio``)."""
        check = self.cfg.train.check_ratio and first and self.sampler.starts_at_ratio_one(self.cfg.correction)
        ratio_tol = self.cfg.train.ratio_tol if check else None
        return self.data_parallel.update(self.minibatch_update, self.actor, self.optimizer, mb, **self.hparams,
                                         ratio_tol=ratio_tol)  # fmt: skip

    def value_step(self, mb: dict, first: bool) -> dict:
        """One critic-only update (value warm-up, ``ppo.value_epochs``): the policy cannot move."""
        p = self.cfg.ppo
        return value_update(self.actor, self.optimizer, mb, vf_clip_eps=p.vf_clip_eps, max_grad_norm=p.max_grad_norm)

    def update(self, data: dict, epochs: int, update_fn, skipped: list) -> tuple[dict, list]:
        """Step 5: ``epochs`` passes over ``data`` in shuffled minibatches of ``ppo.minibatch_size``, calling
        ``update_fn(minibatch, first)`` on each; returns (stats, schedule).

        Stats are averaged over the updates that were applied; ``train/skipped`` counts those skipped for a
        non-finite loss or gradient, each appended to ``skipped`` as (where, stats).
        """
        B = data["input_ids"].shape[0]
        schedule, applied, skipped_here = [], [], []
        for epoch in range(epochs):
            order = torch.randperm(B, generator=self.shuffle_gen).split(self.cfg.ppo.minibatch_size)
            schedule.append(list(order))  # a fresh permutation each epoch
            for k, idx in enumerate(order):
                mb = {key: v[idx.to(v.device)] if torch.is_tensor(v) else v for key, v in data.items()}
                stats = update_fn(mb, epoch == 0 and k == 0)
                (skipped_here if stats.get("train/skipped") else applied).append(stats)
                if stats.get("train/skipped"):
                    skipped.append((f"step {self.step_count + 1}, epoch {epoch + 1}, minibatch {k + 1}", stats))
        used = applied or skipped_here  # if every update was skipped, log their (non-finite) stats as they are
        out = {key: sum(s[key] for s in used) / len(used) for key in used[0]}
        out["train/skipped"] = float(len(skipped_here))  # a count, not a mean
        return out, schedule
