"""Chapter 05 - the PPO loop. ``PPOTrainer.step`` reads like the algorithm box:

    1. rollout      sample a response for each prompt of the batch            (rollout.sample)
    2. score        old logprobs + values (actor), reference logprobs          (rollout.score)
    3. reward       task score on the last token, -kl_coef * KL on every token (gae.token_rewards)
    4. advantages   GAE, then whiten over the whole batch                      (gae.compute_gae)
    5. update       ppo_epochs passes over shuffled minibatches                (update.minibatch_update)

Chapter 07's switches (``algo.*``, ``rollout.group_size``) change steps 1, 3, 4 and 5 only: G samples per
prompt; the KL in the reward or in the loss; a critic-free advantage (``advantages.outcome_advantages``)
instead of GAE, with no value head at all; how the per-token policy losses are averaged.

The trainer is the only stateful piece: model, reference, optimizer, KL controller, step counter.
It also keeps a run safe to stop at any moment:

* a minibatch update with a non-finite loss or gradient is skipped and counted (``params/skipped``);
  a non-finite rollout or parameter, or ``train.max_skipped_steps`` all-skipped steps in a row, stops
  the run with ``NonFiniteError`` (which tensor, which step) before anything broken is saved;
* SIGINT (Ctrl-C) and SIGTERM finish the step in flight, save ``step_N`` and return; a second one
  stops at once;
* checkpoints are written into a temporary folder and published by one rename, so a kill -9 during
  a save leaves the previous checkpoint as the latest complete one;
* ``train.resume`` restores model, value head, optimizer, KL controller, every RNG and the step
  count (which fixes the data position), so a resumed CPU run repeats an uninterrupted one exactly.
"""

import json
import os
import random
import shutil
import signal
import time
import warnings
from dataclasses import asdict
from pathlib import Path

import numpy as np
import torch
from omegaconf import OmegaConf

from .advantages import outcome_advantages
from .gae import compute_gae, token_rewards
from .kl import AdaptiveKLController, FixedKLController, kl_penalty
from .masking import masked_mean, masked_var, masked_whiten
from .model import ActorWithValueHead
from .rollout import sample, score
from .run.checkpoint import (
    STATE_FILE,
    StopOnSignal,
    checkpoint_step,
    clear_run,
    config_changes,
    later_checkpoints,
    latest_checkpoint,
    prune,
    recover_interrupted_saves,
    write_atomically,
)
from .run.config import Config, ConfigError
from .run.guards import DIVERGED_HINT, NonFiniteError, nonfinite_parameters, skip_reason
from .run.metrics import MetricsLogger, last_logged_step, plot_dashboard, read_metrics
from .run.setup import build_optimizer, fit_prompt_len, load_models, load_task, resolve_device, uses_critic
from .update import minibatch_update

__all__ = ["PPOTrainer"]


class PPOTrainer:
    def __init__(self, cfg: Config):
        self.cfg = cfg
        if cfg.train.num_threads > 0:
            torch.set_num_threads(cfg.train.num_threads)
        _seed_everything(cfg.train.seed)
        self.device = resolve_device(cfg.model.device)
        self.out = Path(cfg.train.output_dir)
        recover_interrupted_saves(self.out)
        resume = self._resume_path()  # every check that can refuse the run comes before anything is written
        self.train_records, self.test_records, self.reward_fn, self.correct_fn = load_task(cfg)
        self.critic = uses_critic(cfg)  # False for GRPO, RLOO, REINFORCE++: no value head is built
        self.actor, self.ref, self.tokenizer, self.init_path = load_models(cfg, self.device)
        fit_prompt_len(cfg, self.actor.lm)
        self.optimizer = build_optimizer(self.actor, cfg.ppo)
        p = cfg.ppo
        self.kl_ctl = (
            AdaptiveKLController(p.kl_coef, p.kl_target, p.kl_horizon)
            if p.adaptive_kl
            else FixedKLController(p.kl_coef)
        )
        self.shuffle_gen = torch.Generator().manual_seed(cfg.train.seed)
        self.minibatch_update = minibatch_update  # chapter 05 swaps in the learner's own version
        self.step_count = 0
        self.skipped_streak, self.skip_reasons, self.all_updates_skipped = 0, set(), False
        self.resumed_from = resume
        if resume is None:
            clear_run(self.out)  # a previous run here was allowed (overwrite, or auto with nothing saved)
        self.out.mkdir(parents=True, exist_ok=True)
        if resume is not None:
            self.load_checkpoint(resume)
            self._drop_checkpoints_after(self.step_count)
        OmegaConf.save(OmegaConf.structured(cfg), self.out / "effective_config.yaml")
        wandb_cfg = {"project": cfg.train.wandb_project, "config": asdict(cfg)} if cfg.train.wandb else None
        self.logger = MetricsLogger(self.out, cfg.train.tensorboard, wandb_cfg)
        if resume is not None:
            self.logger.truncate_after(self.step_count)  # lines logged after the checkpoint are redone

    def _resume_path(self) -> Path | None:
        """The checkpoint to resume from, or None for a fresh run; refuses to mix a fresh run into an old one."""
        t = self.cfg.train
        if t.resume == "auto":
            return latest_checkpoint(self.out)  # None: nothing saved yet, so start afresh
        if t.resume:
            path = Path(t.resume).expanduser()
            if checkpoint_step(path) is None:
                raise ConfigError(
                    f"train.resume={t.resume} is not a complete checkpoint (no {STATE_FILE}); "
                    "pass a step_N or final folder, or train.resume=auto"
                )
            return path
        previous = sorted(
            p.name for p in self.out.glob("*") if p.name in ("final", "metrics.jsonl") or p.name.startswith("step_")
        )
        if previous and not t.overwrite:
            raise ConfigError(
                f"train.output_dir={self.out} already holds a run ({', '.join(previous)}); continue it with "
                "train.resume=auto, start over with train.overwrite=true, or choose another train.output_dir"
            )
        return None

    # ---- data -------------------------------------------------------------------------------
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
        from .tasks.data import build_prompt

        return [build_prompt(r["question"], self.tokenizer, self.cfg.data.prompt_style) for r in records]

    # ---- one PPO step -----------------------------------------------------------------------
    def step(self) -> dict:
        cfg, p = self.cfg, self.cfg.ppo
        n = self.step_count + 1
        records = self.prompt_batch(n)
        t0 = time.perf_counter()
        # 1. rollout
        self.actor.eval()
        ro = self._sample(records, n)
        t1 = time.perf_counter()
        # 2. score
        score(self.actor, self.ref, ro, cfg.rollout.temperature, p.minibatch_size)
        scores = torch.tensor(
            [self.reward_fn(c, r["answer"]) for c, r in zip(ro.completions, records)], device=self.device
        )
        self._check_rollout(ro, scores, n)
        t2 = time.perf_counter()
        # 3. reward: task score + per-token KL penalty against the frozen reference (unless the KL is in the loss)
        a = cfg.algo
        kl = kl_penalty(ro.logprobs, ro.ref_logprobs, p.kl_estimator)  # (B, T)
        kl_coef = self.kl_ctl.value if a.use_kl_in_reward else 0.0
        rewards = token_rewards(scores, kl, ro.mask, kl_coef)
        # 4. advantages: GAE with the critic, then whitening over the whole batch; or a critic-free baseline
        if self.critic:
            advantages, returns = compute_gae(rewards, ro.values, ro.mask, p.gamma, p.lam)
            if p.whiten_advantages:
                advantages = masked_whiten(advantages, ro.mask)
        else:
            G, norm = cfg.rollout.group_size, a.norm_adv_by_std_in_grpo
            advantages, returns = outcome_advantages(a.adv_estimator, rewards, ro.mask, G, p.gamma, norm), None
        # 5. update
        self.actor.train()
        upd = self.update(ro, advantages, returns)
        t3 = time.perf_counter()
        self.step_count = n
        kl_to_ref = (
            masked_mean(kl_penalty(ro.logprobs, ro.ref_logprobs, "k1"), ro.mask, dim=1)
            .mul(ro.mask.sum(1))
            .mean()
            .item()
        )
        self.kl_ctl.update(kl_to_ref, len(records))
        eos = ((ro.response_ids == self.tokenizer.eos_token_id) & ro.mask).any(1)
        metrics = {
            "rollout/reward_mean": scores.mean().item(),
            "rollout/correct_rate": float(
                np.mean([self.correct_fn(c, r["answer"]) for c, r in zip(ro.completions, records)])
            ),
            "rollout/response_length": ro.mask.sum(1).float().mean().item(),
            "rollout/eos_rate": eos.float().mean().item(),
            "params/kl_to_ref": kl_to_ref,
            "params/kl_coef": kl_coef,
            **({"params/explained_variance": explained_variance(ro.values, returns, ro.mask)} if self.critic else {}),
            **upd,
            "time/rollout": t1 - t0,
            "time/score": t2 - t1,
            "time/update": t3 - t2,
            "time/step": t3 - t0,
        }
        if cfg.train.log_every and self.step_count % cfg.train.log_every == 0:
            self.logger.log_samples(self.step_count, [r["question"] for r in records], ro.completions, scores.tolist())
        self.logger.log(self.step_count, metrics)  # flushed now: a crash loses at most the next step
        self._check_after_update()
        return metrics

    def update(self, ro, advantages, returns) -> dict:
        """``ppo_epochs`` passes over the rollout in shuffled minibatches.

        Stats are averaged over the minibatch updates that were applied; ``params/skipped`` counts the
        ones skipped for a non-finite loss or gradient (each one also warns, naming the culprit).
        """
        cfg, p = self.cfg, self.cfg.ppo
        B = ro.input_ids.shape[0]
        data = {
            "input_ids": ro.input_ids,
            "attention_mask": ro.attention_mask,
            "response_ids": ro.response_ids,
            "mask": ro.mask,
            "old_logprobs": ro.logprobs,
            "old_values": ro.values,
            "advantages": advantages,
            "returns": returns,
            "ref_logprobs": ro.ref_logprobs if cfg.algo.use_kl_loss else None,
        }
        data = {key: v for key, v in data.items() if v is not None}  # no critic: no values, no returns
        applied, skipped = [], []
        for epoch in range(p.ppo_epochs):
            perm = torch.randperm(B, generator=self.shuffle_gen)  # a fresh permutation each epoch
            for k, idx in enumerate(perm.split(p.minibatch_size)):
                mb = {key: v[idx.to(v.device)] for key, v in data.items()}
                mb["keep"] = ro.keep
                stats = self.minibatch_update(
                    self.actor,
                    self.optimizer,
                    mb,
                    clip_eps=p.clip_eps,
                    vf_clip_eps=p.vf_clip_eps,
                    vf_coef=p.vf_coef,
                    ent_coef=p.ent_coef,
                    temperature=cfg.rollout.temperature,
                    grad_accum_steps=p.grad_accum_steps,
                    max_grad_norm=p.max_grad_norm,
                    ratio_tol=cfg.train.ratio_tol if (cfg.train.check_ratio and epoch == 0 and k == 0) else None,
                    loss_agg_mode=cfg.algo.loss_agg_mode,
                    kl_loss_coef=cfg.algo.kl_loss_coef if cfg.algo.use_kl_loss else 0.0,
                    kl_loss_type=cfg.algo.kl_loss_type,
                    loss_norm_len=cfg.rollout.max_new_tokens,
                )
                (skipped if stats.get("params/skipped") else applied).append(stats)
                if stats.get("params/skipped"):
                    self.skip_reasons.add(skip_reason(stats))
                    warnings.warn(
                        f"step {self.step_count + 1}, epoch {epoch + 1}, minibatch {k + 1}: update skipped "
                        f"(non-finite {skip_reason(stats)}); the parameters were not changed"
                    )
        used = applied or skipped  # if every update was skipped, log their (non-finite) stats as they are
        out = {key: sum(s[key] for s in used) / len(used) for key in used[0]}
        out["params/skipped"] = float(len(skipped))  # a count, not a mean
        self.all_updates_skipped = not applied
        return out

    def _sample(self, records, n: int):
        cfg = self.cfg
        try:
            return sample(
                self.actor.lm,
                self.tokenizer,
                self.prompts(records),
                cfg.rollout.max_new_tokens,
                cfg.rollout.temperature,
                cfg.data.max_prompt_len,
                cfg.rollout.generation_batch_size,
                keep_cache=True,
            )
        except RuntimeError as err:  # torch.multinomial on NaN/inf probabilities
            if "probability tensor contains" not in str(err):
                raise
            raise NonFiniteError(
                f"step {n}: sampling failed, the policy's next-token probabilities hold NaN/inf "
                f"({self._last_good()}); {DIVERGED_HINT}"
            ) from None

    def _check_rollout(self, ro, scores, n: int) -> None:
        """Stop before an update built from NaN: name the rollout tensor that holds it."""
        tensors = {
            "old logprobs": ro.logprobs[ro.mask],
            "values": ro.values[ro.mask] if ro.values is not None else ro.logprobs[:0],
            "reference logprobs": ro.ref_logprobs[ro.mask],
            "scores": scores,
        }
        finite = torch.stack([torch.isfinite(x).all() for x in tensors.values()]).tolist()
        bad = [name for name, ok in zip(tensors, finite) if not ok]
        if bad:
            raise NonFiniteError(
                f"step {n}: the rollout's {', '.join(bad)} hold NaN/inf before the update "
                f"({self._last_good()}); {DIVERGED_HINT}"
            )

    def _check_after_update(self) -> None:
        """After the step's metrics are logged: stop on a broken model or on too many all-skipped steps."""
        bad = nonfinite_parameters(self.actor)
        if bad:
            raise NonFiniteError(
                f"step {self.step_count}: parameter(s) {', '.join(bad[:3])}{' ...' if len(bad) > 3 else ''} "
                f"hold NaN/inf after the update; not saved ({self._last_good()}); {DIVERGED_HINT}"
            )
        all_skipped = self.all_updates_skipped
        self.skipped_streak = self.skipped_streak + 1 if all_skipped else 0
        if not all_skipped:
            self.skip_reasons = set()
        limit = self.cfg.train.max_skipped_steps
        if limit and self.skipped_streak >= limit:
            first = self.step_count - self.skipped_streak + 1
            raise NonFiniteError(
                f"steps {first}-{self.step_count}: every update was skipped (non-finite "
                f"{', '.join(sorted(self.skip_reasons))}); stopping ({self._last_good()}); {DIVERGED_HINT}"
            )

    def _last_good(self) -> str:
        ckpt = latest_checkpoint(self.out)
        return f"last good checkpoint: {ckpt}" if ckpt else "no checkpoint saved yet"

    # ---- evaluation -------------------------------------------------------------------------
    def evaluate(self, greedy: bool = False, n: int | None = None) -> float:
        """Accuracy on the held-out split (sampled at the rollout temperature, or greedy)."""
        from .run.evaluation import accuracy

        records = self.test_records[: n or self.cfg.train.eval_samples]
        return accuracy(self.actor.lm, self.tokenizer, records, self.cfg, greedy, self.correct_fn)

    # ---- checkpoints ------------------------------------------------------------------------
    def save_checkpoint(self, name: str) -> Path:
        """Write ``output_dir/name`` atomically: into a temporary folder, flushed to disk, then one rename.

        Refuses (``NonFiniteError``) to save parameters that hold NaN/inf.
        """
        bad = nonfinite_parameters(self.actor)
        if bad:
            raise NonFiniteError(
                f"refusing to save {name} at step {self.step_count}: {', '.join(bad[:3])} hold NaN/inf"
            )
        state = {
            "step": self.step_count,
            "kl_coef": self.kl_ctl.value,
            "init_path": str(self.init_path),
            "torch_rng": torch.get_rng_state(),
            "shuffle_rng": self.shuffle_gen.get_state(),
            "numpy_rng": np.random.get_state(),
            "python_rng": random.getstate(),
            "cuda_rng": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None,
            "config": asdict(self.cfg),
        }

        def write(tmp: Path) -> None:
            self.actor.save_pretrained(tmp)
            self.tokenizer.save_pretrained(tmp)
            torch.save(self.optimizer.state_dict(), tmp / "optimizer.pt")
            (tmp / "trainer_state.json").write_text(json.dumps({"step": self.step_count, "kl_coef": self.kl_ctl.value}))
            torch.save(state, tmp / STATE_FILE)  # written last: its presence marks a complete checkpoint

        path = write_atomically(self.out, name, write)
        prune(self.out, self.cfg.train.keep_last)
        return path

    def _drop_checkpoints_after(self, step: int) -> None:
        """Resuming from step N abandons what a previous attempt saved after N (it belongs to another
        trajectory). Nothing is deleted: the later checkpoints, the summary and a copy of the full logs
        move to ``abandoned/after_step_N-<time>/``, out of the way of ``resume=auto`` and ``keep_last``."""
        later = later_checkpoints(self.out, step)
        logs = [self.out / name for name in ("metrics.jsonl", "samples.jsonl")]
        logged_after = any((last_logged_step(path) or 0) > step for path in logs if path.exists())
        if not later and not logged_after:
            return
        aside = self.out / "abandoned" / f"after_step_{step}-{time.strftime('%Y%m%d-%H%M%S')}"
        aside.mkdir(parents=True, exist_ok=True)
        for path in logs:
            if path.exists():
                shutil.copy2(path, aside / path.name)  # the full logs; the run's own copies are cut back below
        for path in [*later, self.out / "summary.json"]:
            if path.exists():
                os.replace(path, aside / path.name)
        if later:
            warnings.warn(
                f"resuming from step {step}: moved later checkpoints {', '.join(sorted(p.name for p in later))} "
                f"to {aside.relative_to(self.out)}"
            )

    def load_checkpoint(self, path) -> None:
        """Restore model, value head, optimizer, KL controller, RNG states and step count from a checkpoint."""
        path = Path(path)
        if checkpoint_step(path) is None:
            raise ConfigError(
                f"{path} is not a complete checkpoint (no {STATE_FILE}); pass a step_N folder or train.resume=auto"
            )
        state = torch.load(path / STATE_FILE, weights_only=False)
        changed = config_changes(state.get("config"), asdict(self.cfg))
        if changed:
            warnings.warn(
                f"resuming {path} with settings that differ from its run ({'; '.join(changed)}): "
                "the continuation will not match an uninterrupted run"
            )
        loaded = ActorWithValueHead.from_pretrained(str(path), with_value_head=self.critic)
        self.actor.load_state_dict(loaded.state_dict())
        self.optimizer.load_state_dict(torch.load(path / "optimizer.pt", map_location=self.device, weights_only=False))
        self.step_count, self.kl_ctl.value = state["step"], state["kl_coef"]
        torch.set_rng_state(state["torch_rng"])
        self.shuffle_gen.set_state(state["shuffle_rng"])
        np.random.set_state(state["numpy_rng"])
        random.setstate(state["python_rng"])
        if state.get("cuda_rng") is not None and torch.cuda.is_available():
            torch.cuda.set_rng_state_all(state["cuda_rng"])

    # ---- the whole run ----------------------------------------------------------------------
    def train(self) -> dict:
        """Evaluate, run ``train.steps`` PPO steps (checkpointing), save final/, evaluate again.

        On SIGINT/SIGTERM: save ``step_N`` after the step in flight and return ``{"interrupted": ...}``.
        """
        from tqdm.auto import tqdm

        cfg = self.cfg.train
        done = self.out / "summary.json"
        if self.resumed_from is not None and self.step_count >= cfg.steps and done.is_file():
            self.logger.close()
            return json.loads(done.read_text())  # resumed a finished run: nothing left to do
        summary = {}
        with StopOnSignal() as stop:
            try:
                if self.step_count == 0:
                    summary["before/sampled_accuracy"] = self.evaluate()
                    summary["before/greedy_accuracy"] = self.evaluate(greedy=True)
                    self.logger.log(
                        0,
                        {
                            "eval/sampled_accuracy": summary["before/sampled_accuracy"],
                            "eval/greedy_accuracy": summary["before/greedy_accuracy"],
                        },
                    )
                self._loop(tqdm, stop)
                if stop.signum is not None:
                    return self._interrupted(stop.signum)
                self.save_checkpoint("final")
            except BaseException:
                self.logger.close()
                raise
        summary["after/sampled_accuracy"] = self.evaluate()
        summary["after/greedy_accuracy"] = self.evaluate(greedy=True)
        self.logger.log(
            self.step_count,
            {
                "eval/sampled_accuracy": summary["after/sampled_accuracy"],
                "eval/greedy_accuracy": summary["after/greedy_accuracy"],
            },
        )
        import matplotlib.pyplot as plt

        plt.close(plot_dashboard(read_metrics(self.out), self.out / "dashboard.png"))
        self.logger.close()
        done.write_text(json.dumps(summary, indent=1))
        return summary

    def _loop(self, tqdm, stop) -> None:
        cfg = self.cfg.train
        bar = tqdm(total=cfg.steps, initial=self.step_count, disable=not cfg.progress, desc="PPO")
        try:
            while self.step_count < cfg.steps and stop.signum is None:
                m = self.step()
                bar.update(1)
                bar.set_postfix(
                    reward=f"{m['rollout/reward_mean']:.3f}",
                    correct=f"{m['rollout/correct_rate']:.2f}",
                    kl=f"{m['params/kl_to_ref']:.2f}",
                )
                if cfg.eval_every and self.step_count % cfg.eval_every == 0 and self.step_count < cfg.steps:
                    self.logger.log(self.step_count, {"eval/sampled_accuracy": self.evaluate()})
                if cfg.save_every and self.step_count % cfg.save_every == 0:
                    self.save_checkpoint(f"step_{self.step_count}")
        finally:
            bar.close()

    def _interrupted(self, signum: int) -> dict:
        """Save the steps done since the last checkpoint; the run continues with train.resume=auto."""
        path = None
        if self.step_count > 0:
            path = self.out / f"step_{self.step_count}"
            if checkpoint_step(path) != self.step_count:  # not saved by save_every already
                self.save_checkpoint(path.name)
        self.logger.close()
        return {
            "interrupted": signal.Signals(signum).name,
            "step": self.step_count,
            "checkpoint": str(path) if path else None,
        }


def explained_variance(values, returns, mask) -> float:
    """1 - Var[R - V] / Var[R] over response tokens: 1 = perfect critic, 0 = no better than a constant."""
    var_r = masked_var(returns, mask).item()
    return float("nan") if var_r == 0 else 1.0 - masked_var(returns - values, mask).item() / var_r


def _seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
