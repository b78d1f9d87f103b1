"""The trainer of a real run: ``PPOTrainer`` built from a config, held inside a run folder.

``build_trainer(cfg)`` builds the parts (``setup``: task, models, optimizer, KL controller, score function)
and hands them to ``ppo_core.trainer.PPOTrainer``. The ``RunTrainer`` it returns holds that algorithm box as
``run.ppo`` (it does not subclass it) and adds what a run needs around it: resume (``resume``), NaN guards
(``guards``, on every ``collect`` the step makes), logs (``metrics``), held-out evaluation (``evaluation``) and
the whole run with its checkpoints and signals (``loop.train``). Under torchrun the same ``RunTrainer`` is
built with a ``distributed.DataParallel`` that the box calls (``distributed.join``): no subclass either.

What callers read most is forwarded, read-only: ``actor``, ``ref``, ``tokenizer``, ``optimizer``, ``kl_ctl``,
``step_count``, ``last_step``, ``prompt_batch``, ``prompts``, ``learn``; the rest, and every assignment
(``run.ppo.minibatch_update = ...``), goes through ``run.ppo``: setting on the run a name the box owns raises.
"""

from pathlib import Path

import torch

from .. import fastpaths
from ..rollout import stop_token_ids
from ..sampler import Sampler
from ..tasks.data import build_prompt
from ..tasks.preferences import gold_reward
from ..trainer import PPOTrainer
from . import distributed, guards, loop, resume
from .checkpoint import recover_interrupted_saves
from .config import Config
from .evaluation import accuracies, accuracy
from .lora import is_lora, merged_copy
from .setup import (
    build_kl_controller,
    build_optimizer,
    fit_prompt_len,
    load_models,
    load_reward_model,
    load_task,
    resolve_device,
    seed_everything,
)

__all__ = ["RunTrainer", "build_trainer"]


def _from_ppo(name: str) -> property:
    """A read-only view of the algorithm box's attribute ``name`` (the box owns it; assign through ``run.ppo``)."""
    return property(lambda self: getattr(self.ppo, name), doc=f"``self.ppo.{name}`` (read-only)")


class RunTrainer:
    """A run of ``PPOTrainer`` (``self.ppo``) on the task of ``cfg``, writing to ``train.output_dir``. Building it
    resumes from a checkpoint when ``train.resume`` says so; ``train()`` runs the whole configured run
    (``loop.train``). ``data_parallel``: a ``distributed.DataParallel`` under torchrun (``build_trainer``)."""

    actor, ref, tokenizer = _from_ppo("actor"), _from_ppo("ref"), _from_ppo("tokenizer")
    optimizer, kl_ctl = _from_ppo("optimizer"), _from_ppo("kl_ctl")
    step_count, last_step = _from_ppo("step_count"), _from_ppo("last_step")
    prompt_batch, prompts, learn = _from_ppo("prompt_batch"), _from_ppo("prompts"), _from_ppo("learn")

    def __init__(self, cfg: Config, data_parallel=None):
        if cfg.train.num_threads > 0:
            torch.set_num_threads(cfg.train.num_threads)
        seed_everything(cfg.train.seed)
        self.device = resolve_device(cfg.model.device)
        self.out = Path(cfg.train.output_dir)
        recover_interrupted_saves(self.out)
        self.resumed_from = resume.resume_path(cfg)  # every check that can refuse the run comes first
        self.train_records, self.test_records, self.reward_fn, self.correct_fn = load_task(cfg)
        self.reward_model = load_reward_model(cfg, self.device)  # reward.type=model (chapter 06); None: the rule
        actor, ref, tokenizer, self.init_path = load_models(cfg, self.device)
        self.cfg = cfg = fit_prompt_len(cfg, actor.lm)  # a new config if the prompt limit had to be lowered
        if cfg.train.fast_paths:  # same numbers up to float rounding, less work (fastpaths.py)
            fastpaths.enable(actor)
        optimizer, kl_ctl = build_optimizer(actor, cfg.ppo), build_kl_controller(cfg.ppo)
        s = cfg.sampler  # the weights that sample (chapter 09): the actor itself unless a mismatch is configured
        sampler = Sampler(actor.lm, s.dtype, s.stale_steps, s.top_k, s.top_p, s.weight_noise, s.keep_sampling_mask)
        self.data_parallel = data_parallel  # None: one process
        self.ppo = PPOTrainer(cfg, actor, ref, tokenizer, optimizer, kl_ctl, self.train_records, self.render,
                              self.sequence_scores, sampler, data_parallel)  # fmt: skip
        self.skips = guards.SkippedUpdates(cfg.train.max_skipped_steps)
        self.logger = resume.open_run(self, self.resumed_from)
        if data_parallel is not None:  # rank 0's (resumed) weights everywhere, gradients averaged over ranks
            data_parallel.attach(self.actor)

    def __setattr__(self, name: str, value) -> None:
        """Refuse to set what the algorithm box owns (it would never read the run's copy): one line naming ``ppo``.
        The run's own methods (``collect``, ``step``, ...) stay replaceable."""
        if "ppo" in self.__dict__ and hasattr(self.ppo, name) and not hasattr(type(self), name):
            raise AttributeError(f"{name} belongs to the algorithm box: set run.ppo.{name} instead")
        super().__setattr__(name, value)

    def render(self, records: list[dict]) -> list[str]:
        """The prompt of each record, in the run's ``data.prompt_style``."""
        return [build_prompt(r["question"], self.tokenizer, self.cfg.data.prompt_style) for r in records]

    def sequence_scores(self, records: list[dict], completions: list[str]) -> torch.Tensor:
        """The score of each response, (B,): the task's rule, or the frozen reward model on prompt + response.

        The reward model (``reward.type=model``, chapter 06) reads the decoded ``prompt + completion`` once
        per rollout, in eval mode with no gradient, and returns scores normalised on the starting policy's
        samples.
        """
        if self.reward_model is None:
            scores = [self.reward_fn(c, r["answer"]) for c, r in zip(completions, records)]
            return torch.tensor(scores, device=self.device)
        texts = [prompt + c for prompt, c in zip(self.render(records), completions)]
        return self.reward_model.score_texts(texts).to(self.device)

    def collect(self, records: list[dict]):
        """Steps 1-2 (``PPOTrainer.collect``), guarded: a NaN in sampling or in the scored rollout stops the run
        (``guards``). The step calls it for its batch and for each round of dynamic sampling."""
        n = self.step_count + 1
        try:
            ro = self.ppo.collect(records)
        except RuntimeError as err:  # torch.multinomial on NaN/inf probabilities
            diagnosis = guards.sampling_failed(err, n, self.out)
            if diagnosis is None:
                raise
            raise diagnosis from None
        guards.check_rollout(ro, n, self.out)
        return ro

    def step(self) -> dict:
        """One PPO iteration, then the run's side of it (``loop.record_step``): more metrics, the logs, the guards.

        Raises ``NonFiniteError`` on a NaN rollout or parameter, or after ``train.max_skipped_steps``
        all-skipped steps.
        """
        metrics = self.ppo.step(self.collect)
        records, ro = self.ppo.last_batch  # with dynamic sampling the kept groups, not the last round's
        stop_ids = stop_token_ids(self.actor.lm, self.tokenizer)
        reward_metrics = self.reward_model_metrics(records, ro.completions)
        metrics = loop.step_metrics(metrics, records, ro, self.correct_fn, stop_ids, reward_metrics)
        side = loop.RunSide(self.logger, self.skips, self.actor, self.out, self.cfg.train.log_every)
        return loop.record_step(self.step_count, metrics, records, ro, self.last_step, side)

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

    def evaluate(self, greedy: bool = False, n: int | None = None) -> float:
        """Accuracy on the held-out split (sampled at the rollout temperature, or greedy)."""
        return accuracy(self._eval_lm(), self.tokenizer, self._held_out(n), self.cfg, greedy, self.correct_fn)

    def evaluate_both(self, n: int | None = None) -> tuple[float, float]:
        """(sampled, greedy) accuracy on the held-out split, the prompts run once (``evaluation.accuracies``)."""
        return accuracies(self._eval_lm(), self.tokenizer, self._held_out(n), self.cfg, self.correct_fn)

    def _held_out(self, n: int | None) -> list[dict]:
        """The first ``n`` held-out records (``train.eval_samples`` by default)."""
        return self.test_records[: n or self.cfg.train.eval_samples]

    def _eval_lm(self):
        """The policy's LM; with LoRA a copy with the adapters merged in, which generates faster (``merged_copy``)."""
        return merged_copy(self.actor) if is_lora(self.actor) else self.actor.lm

    def train(self) -> dict:
        """The whole run (``loop.train``): evaluate, ``train.steps`` steps with checkpoints, evaluate. Under
        torchrun, then a check that every rank ends with bit-identical weights (``ranks.json``)."""
        summary = loop.train(self)
        if self.data_parallel is not None:
            self.data_parallel.check_weights(self.actor, self.out)
        return summary

    def save_checkpoint(self, name: str):
        """Save ``output_dir/name`` atomically (``resume.save_checkpoint``)."""
        return resume.save_checkpoint(self, name)


def build_trainer(cfg: Config) -> RunTrainer:
    """The trainer of the run ``cfg`` describes, built and (with ``train.resume``) resumed; launched by torchrun,
    this rank's share of a data-parallel run (``distributed.join``)."""
    if distributed.launched_by_torchrun():
        cfg, data_parallel = distributed.join(cfg)
        return RunTrainer(cfg, data_parallel)
    return RunTrainer(cfg)
