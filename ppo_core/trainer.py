"""Chapter 05 - the PPO loop. ``PPOTrainer.step`` reads like the algorithm box:

    1. rollout      sample a response for each prompt of the batch            (rollout.sample)
    2. score        old logprobs + values (actor), reference logprobs          (rollout.score)
    3. reward       task score on the last token, -kl_coef * KL on every token (gae.token_rewards)
    4. advantages   GAE, then whiten over the whole batch                      (gae.compute_gae)
    5. update       ppo_epochs passes over shuffled minibatches                (update.minibatch_update)

The trainer is the only stateful piece: model, reference, optimizer, KL controller, step counter.
"""

import json
import os
import random
import shutil
import time
from dataclasses import asdict
from pathlib import Path

import numpy as np
import torch
from omegaconf import OmegaConf

from .config import Config
from .gae import compute_gae, token_rewards
from .kl import AdaptiveKLController, FixedKLController, kl_penalty
from .masking import masked_mean, masked_var, masked_whiten
from .metrics import MetricsLogger, plot_dashboard, read_metrics
from .model import ActorWithValueHead
from .rollout import sample, score
from .setup import build_optimizer, load_models, load_task, resolve_device
from .update import minibatch_update

__all__ = ["PPOTrainer", "latest_checkpoint"]

STATE_FILE = "trainer_state.pt"


def latest_checkpoint(output_dir) -> Path | None:
    """The step_N folder with the largest N in ``output_dir`` (complete ones only), or None."""
    steps = [p for p in Path(output_dir).glob("step_*") if (p / STATE_FILE).is_file() and p.name[5:].isdigit()]
    return max(steps, key=lambda p: int(p.name[5:]), default=None)


class PPOTrainer:
    def __init__(self, cfg: Config):
        self.cfg = cfg
        if cfg.train.num_threads > 0:
            torch.set_num_threads(cfg.train.num_threads)
        _seed_everything(cfg.train.seed)
        self.device = resolve_device(cfg.model.device)
        self.train_records, self.test_records, self.reward_fn, self.correct_fn = load_task(cfg)
        self.actor, self.ref, self.tokenizer, self.init_path = load_models(cfg, self.device)
        self.optimizer = build_optimizer(self.actor, cfg.ppo)
        p = cfg.ppo
        self.kl_ctl = AdaptiveKLController(p.kl_coef, p.kl_target, p.kl_horizon) if p.adaptive_kl else FixedKLController(p.kl_coef)
        self.shuffle_gen = torch.Generator().manual_seed(cfg.train.seed)
        self.minibatch_update = minibatch_update  # chapter 05 swaps in the learner's own version
        self.step_count = 0
        self.out = Path(cfg.train.output_dir)
        self.out.mkdir(parents=True, exist_ok=True)
        resume = latest_checkpoint(self.out) if cfg.train.resume == "auto" else (Path(cfg.train.resume) if cfg.train.resume else None)
        if resume is not None:
            self.load_checkpoint(resume)
        OmegaConf.save(OmegaConf.structured(cfg), self.out / "effective_config.yaml")
        wandb_cfg = {"project": cfg.train.wandb_project, "config": asdict(cfg)} if cfg.train.wandb else None
        self.logger = MetricsLogger(self.out, cfg.train.tensorboard, wandb_cfg)
        if resume is not None:
            self.logger.truncate_after(self.step_count)

    # ---- data -------------------------------------------------------------------------------
    def prompt_batch(self, step: int) -> list[dict]:
        """The records of PPO step ``step`` (1-based): a fresh seeded permutation each pass over the data."""
        n, b = len(self.train_records), self.cfg.rollout.batch_size
        out = []
        for i in range((step - 1) * b, step * b):
            epoch, j = divmod(i, n)
            perm = torch.randperm(n, generator=torch.Generator().manual_seed(self.cfg.train.seed * 100_003 + epoch))
            out.append(self.train_records[int(perm[j])])
        return out

    def prompts(self, records: list[dict]) -> list[str]:
        from .data import build_prompt

        return [build_prompt(r["question"], self.tokenizer, self.cfg.data.prompt_style) for r in records]

    # ---- one PPO step -----------------------------------------------------------------------
    def step(self) -> dict:
        cfg, p = self.cfg, self.cfg.ppo
        records = self.prompt_batch(self.step_count + 1)
        t0 = time.perf_counter()
        # 1. rollout
        self.actor.eval()
        ro = sample(self.actor.lm, self.tokenizer, self.prompts(records), cfg.rollout.max_new_tokens,
                    cfg.rollout.temperature, cfg.data.max_prompt_len, cfg.rollout.generation_batch_size)
        t1 = time.perf_counter()
        # 2. score
        score(self.actor, self.ref, ro, cfg.rollout.temperature, p.minibatch_size)
        scores = torch.tensor([self.reward_fn(c, r["answer"]) for c, r in zip(ro.completions, records)], device=self.device)
        t2 = time.perf_counter()
        # 3. reward: task score + per-token KL penalty against the frozen reference
        kl = kl_penalty(ro.logprobs, ro.ref_logprobs, p.kl_estimator)  # (B, T)
        rewards = token_rewards(scores, kl, ro.mask, self.kl_ctl.value)
        # 4. advantages (raw), returns, then whitening over the whole batch
        advantages, returns = compute_gae(rewards, ro.values, ro.mask, p.gamma, p.lam)
        if p.whiten_advantages:
            advantages = masked_whiten(advantages, ro.mask)
        # 5. update
        self.actor.train()
        upd = self.update(ro, advantages, returns)
        t3 = time.perf_counter()
        self.step_count += 1
        kl_to_ref = masked_mean(kl_penalty(ro.logprobs, ro.ref_logprobs, "k1"), ro.mask, dim=1).mul(ro.mask.sum(1)).mean().item()
        kl_coef = self.kl_ctl.value
        self.kl_ctl.update(kl_to_ref, len(records))
        eos = ((ro.response_ids == self.tokenizer.eos_token_id) & ro.mask).any(1)
        metrics = {
            "rollout/reward_mean": scores.mean().item(),
            "rollout/correct_rate": float(np.mean([self.correct_fn(c, r["answer"]) for c, r in zip(ro.completions, records)])),
            "rollout/response_length": ro.mask.sum(1).float().mean().item(),
            "rollout/eos_rate": eos.float().mean().item(),
            "params/kl_to_ref": kl_to_ref,
            "params/kl_coef": kl_coef,
            "params/explained_variance": explained_variance(ro.values, returns, ro.mask),
            **upd,
            "time/rollout": t1 - t0, "time/score": t2 - t1, "time/update": t3 - t2, "time/step": t3 - t0,
        }
        if cfg.train.log_every and self.step_count % cfg.train.log_every == 0:
            self.logger.log_samples(self.step_count, [r["question"] for r in records], ro.completions, scores.tolist())
        self.logger.log(self.step_count, metrics)
        return metrics

    def update(self, ro, advantages, returns) -> dict:
        """``ppo_epochs`` passes over the rollout in shuffled minibatches; stats averaged over minibatches."""
        cfg, p = self.cfg, self.cfg.ppo
        B = ro.input_ids.shape[0]
        data = {
            "input_ids": ro.input_ids, "attention_mask": ro.attention_mask, "response_ids": ro.response_ids,
            "mask": ro.mask, "old_logprobs": ro.logprobs, "old_values": ro.values,
            "advantages": advantages, "returns": returns,
        }
        totals, n = {}, 0
        for epoch in range(p.ppo_epochs):
            perm = torch.randperm(B, generator=self.shuffle_gen)  # a fresh permutation each epoch
            for k, idx in enumerate(perm.split(p.minibatch_size)):
                mb = {key: v[idx.to(v.device)] for key, v in data.items()}
                mb["keep"] = ro.keep
                stats = self.minibatch_update(
                    self.actor, self.optimizer, mb, clip_eps=p.clip_eps, vf_clip_eps=p.vf_clip_eps,
                    vf_coef=p.vf_coef, ent_coef=p.ent_coef, temperature=cfg.rollout.temperature,
                    grad_accum_steps=p.grad_accum_steps, max_grad_norm=p.max_grad_norm,
                    ratio_tol=cfg.train.ratio_tol if (cfg.train.check_ratio and epoch == 0 and k == 0) else None,
                )
                for key, v in stats.items():
                    totals[key] = totals.get(key, 0.0) + v
                n += 1
        out = {k: v / n for k, v in totals.items()}
        out["params/skipped"] = totals.get("params/skipped", 0.0)  # a count, not a mean
        return out

    # ---- evaluation -------------------------------------------------------------------------
    def evaluate(self, greedy: bool = False, n: int | None = None) -> float:
        """Accuracy on the held-out split (sampled at the rollout temperature, or greedy)."""
        from .evaluate import accuracy

        records = self.test_records[: n or self.cfg.train.eval_samples]
        return accuracy(self.actor.lm, self.tokenizer, records, self.cfg, greedy, self.correct_fn)

    # ---- checkpoints ------------------------------------------------------------------------
    def save_checkpoint(self, name: str) -> Path:
        """Write ``output_dir/name`` atomically: into a temporary folder, then one rename."""
        final = self.out / name
        tmp = self.out / f".tmp-{name}-{os.getpid()}"
        shutil.rmtree(tmp, ignore_errors=True)
        self.actor.save_pretrained(tmp)
        self.tokenizer.save_pretrained(tmp)
        torch.save(self.optimizer.state_dict(), tmp / "optimizer.pt")
        state = {
            "step": self.step_count, "kl_coef": self.kl_ctl.value, "init_path": str(self.init_path),
            "torch_rng": torch.get_rng_state(), "shuffle_rng": self.shuffle_gen.get_state(),
            "numpy_rng": np.random.get_state(), "python_rng": random.getstate(),
            "cuda_rng": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None,
        }
        torch.save(state, tmp / STATE_FILE)  # written last: its presence marks a complete checkpoint
        (tmp / "trainer_state.json").write_text(json.dumps({"step": self.step_count, "kl_coef": self.kl_ctl.value}, indent=1))
        if final.exists():
            old = self.out / f".old-{name}-{os.getpid()}"
            os.replace(final, old)
            os.replace(tmp, final)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, final)
        self._prune()
        return final

    def _prune(self) -> None:
        steps = sorted((p for p in self.out.glob("step_*") if p.name[5:].isdigit()), key=lambda p: int(p.name[5:]))
        for old in steps[: -self.cfg.train.keep_last]:
            shutil.rmtree(old, ignore_errors=True)

    def load_checkpoint(self, path) -> None:
        path = Path(path)
        if not (path / STATE_FILE).is_file():
            raise FileNotFoundError(f"{path} is not a complete checkpoint (no {STATE_FILE}); pass a step_N folder or train.resume=auto")
        loaded = ActorWithValueHead.from_pretrained(str(path))
        self.actor.load_state_dict(loaded.state_dict())
        self.optimizer.load_state_dict(torch.load(path / "optimizer.pt", map_location=self.device, weights_only=False))
        state = torch.load(path / STATE_FILE, weights_only=False)
        self.step_count, self.kl_ctl.value = state["step"], state["kl_coef"]
        torch.set_rng_state(state["torch_rng"])
        self.shuffle_gen.set_state(state["shuffle_rng"])
        np.random.set_state(state["numpy_rng"])
        random.setstate(state["python_rng"])
        if state.get("cuda_rng") is not None and torch.cuda.is_available():
            torch.cuda.set_rng_state_all(state["cuda_rng"])

    # ---- the whole run ----------------------------------------------------------------------
    def train(self) -> dict:
        """Evaluate, run ``train.steps`` PPO steps (checkpointing), save final/, evaluate again."""
        from tqdm.auto import tqdm

        cfg = self.cfg.train
        summary = {}
        if self.step_count == 0:
            summary["before/sampled_accuracy"] = self.evaluate()
            summary["before/greedy_accuracy"] = self.evaluate(greedy=True)
            self.logger.log(0, {"eval/sampled_accuracy": summary["before/sampled_accuracy"], "eval/greedy_accuracy": summary["before/greedy_accuracy"]})
        bar = tqdm(total=cfg.steps, initial=self.step_count, disable=not cfg.progress, desc="PPO")
        try:
            while self.step_count < cfg.steps:
                m = self.step()
                bar.update(1)
                bar.set_postfix(reward=f"{m['rollout/reward_mean']:.3f}", correct=f"{m['rollout/correct_rate']:.2f}", kl=f"{m['params/kl_to_ref']:.2f}")
                if cfg.eval_every and self.step_count % cfg.eval_every == 0 and self.step_count < cfg.steps:
                    self.logger.log(self.step_count, {"eval/sampled_accuracy": self.evaluate()})
                if cfg.save_every and self.step_count % cfg.save_every == 0:
                    self.save_checkpoint(f"step_{self.step_count}")
        finally:
            bar.close()
        self.save_checkpoint("final")
        summary["after/sampled_accuracy"] = self.evaluate()
        summary["after/greedy_accuracy"] = self.evaluate(greedy=True)
        self.logger.log(self.step_count, {"eval/sampled_accuracy": summary["after/sampled_accuracy"], "eval/greedy_accuracy": summary["after/greedy_accuracy"]})
        import matplotlib.pyplot as plt

        plt.close(plot_dashboard(read_metrics(self.out), self.out / "dashboard.png"))
        self.logger.close()
        (self.out / "summary.json").write_text(json.dumps(summary, indent=1))
        return summary


def explained_variance(values, returns, mask) -> float:
    """1 - Var[R - V] / Var[R] over response tokens: 1 = perfect critic, 0 = no better than a constant."""
    var_r = masked_var(returns, mask).item()
    return float("nan") if var_r == 0 else 1.0 - masked_var(returns - values, mask).item() / var_r


def _seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
