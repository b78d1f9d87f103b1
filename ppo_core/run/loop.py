"""The run around the PPO step: evaluate, ``total_steps`` steps with checkpoints, final/, evaluate again.

``total_steps`` = ``ppo.value_warmup_steps`` value-head-only steps + ``train.steps`` PPO steps; the summary
keeps the critic's health in one number, the mean explained variance of the last 10 PPO steps.

SIGINT (Ctrl-C) and SIGTERM finish the step in flight, save ``step_N`` and return; a second one
stops at once (``checkpoint.StopOnSignal``). ``RunTrainer.train()`` calls ``train(trainer)``.
"""

import json
import signal
from dataclasses import dataclass
from pathlib import Path

import matplotlib.pyplot as plt
from tqdm.auto import tqdm

from ..tasks.rewards import accuracy
from . import guards
from .checkpoint import StopOnSignal, checkpoint_step
from .metrics import last_mean, plot_dashboard, read_metrics
from .resume import save_checkpoint

__all__ = ["train", "record_step", "step_metrics", "RunSide", "total_steps"]


def total_steps(cfg) -> int:
    """Steps of the whole run: ``ppo.value_warmup_steps`` value warm-up steps, then ``train.steps`` PPO steps."""
    return cfg.ppo.value_warmup_steps + cfg.train.steps


def train(trainer) -> dict:
    """Run ``trainer`` to ``total_steps`` steps and return the summary: held-out accuracy before and after, and
    (with a critic) ``last10/value/explained_variance``, the mean over the last 10 PPO steps.

    On SIGINT/SIGTERM: save ``step_N`` after the step in flight and return ``{"interrupted": ...}``.
    """
    out = trainer.out
    done = out / "summary.json"
    if trainer.resumed_from is not None and trainer.step_count >= total_steps(trainer.cfg) and done.is_file():
        trainer.logger.close()
        return json.loads(done.read_text())  # resumed a finished run: nothing left to do
    summary = {}
    with StopOnSignal() as stop:
        try:
            if trainer.step_count == 0:
                summary.update(_evaluate(trainer, "before"))
            _steps(trainer, stop)
            if stop.signum is not None:
                return _interrupted(trainer, stop.signum)
            save_checkpoint(trainer, "final")
        except BaseException:
            trainer.logger.close()
            raise
    summary.update(_evaluate(trainer, "after"))
    records = read_metrics(out)
    if trainer.ppo.critic:
        summary["last10/value/explained_variance"] = last_mean(records, "value/explained_variance")
    plt.close(plot_dashboard(records, out / "dashboard.png"))
    trainer.logger.close()
    done.write_text(json.dumps(summary, indent=1))
    return summary


def _evaluate(trainer, when: str) -> dict:
    """Held-out sampled and greedy accuracy, logged at the current step; keys ``{when}/...``."""
    sampled, greedy = trainer.evaluate_both()
    trainer.logger.log(trainer.step_count, {"eval/sampled_accuracy": sampled, "eval/greedy_accuracy": greedy})
    return {f"{when}/sampled_accuracy": sampled, f"{when}/greedy_accuracy": greedy}


def _steps(trainer, stop) -> None:
    cfg, total = trainer.cfg.train, total_steps(trainer.cfg)
    bar = tqdm(total=total, initial=trainer.step_count, disable=not cfg.progress, desc="PPO")
    try:
        while trainer.step_count < total and stop.signum is None:
            m = trainer.step()
            bar.update(1)
            bar.set_postfix(
                reward=f"{m['rollout/reward_mean']:.3f}",
                correct=f"{m['rollout/correct_rate']:.2f}",
                kl=f"{m['kl/to_ref']:.2f}",
            )
            n = trainer.step_count
            if cfg.eval_every and n % cfg.eval_every == 0 and n < total:
                trainer.logger.log(n, {"eval/sampled_accuracy": trainer.evaluate()})
            if cfg.save_every and n % cfg.save_every == 0:
                save_checkpoint(trainer, f"step_{n}")
    finally:
        bar.close()


def _interrupted(trainer, signum: int) -> dict:
    """Save the steps done since the last checkpoint; the run continues with train.resume=auto."""
    path = None
    if trainer.step_count > 0:
        path = trainer.out / f"step_{trainer.step_count}"
        if checkpoint_step(path) != trainer.step_count:  # not saved by save_every already
            save_checkpoint(trainer, path.name)
    trainer.logger.close()
    return {
        "interrupted": signal.Signals(signum).name,
        "step": trainer.step_count,
        "checkpoint": str(path) if path else None,
    }


def step_metrics(metrics: dict, records: list, ro, correct_fn, stop_ids, reward_metrics: dict) -> dict:
    """A finished step's metrics with the rollout's: the correct rate (``correct_fn``), the EOS rate (``stop_ids``)
    and, with a learned reward, ``reward_metrics``, in the order the logs show them."""
    return {
        "rollout/reward_mean": metrics.pop("rollout/reward_mean"),
        "rollout/correct_rate": accuracy(ro.completions, records, correct_fn),
        **reward_metrics,  # learned reward: rule and gold beside it
        "rollout/response_length": metrics.pop("rollout/response_length"),
        "rollout/eos_rate": ro.ended_with_eos(stop_ids).float().mean().item(),  # ended on any of the model's EOS ids
        **metrics,
    }


def record_step(n: int, metrics: dict, records: list, ro, last_step, run) -> dict:
    """The run's side of finished step ``n``: the logs and the guards. ``records``, ``ro``: the step's batch;
    ``last_step``: its ``StepRecord``; ``run``: the ``RunSide`` it writes to. Returns ``metrics``.

    The metrics line is flushed at once (a crash loses at most the next step), and logged before the
    guards run, so a step that stops the run is still on disk for diagnosis.
    """
    for where, stats in last_step.skipped:  # each skipped update warns, naming the culprit
        run.skips.skipped(stats, where)
    if run.log_every and n % run.log_every == 0:
        questions = [r["question"] for r in records]
        run.logger.log_samples(n, questions, ro.completions, ro.scores.tolist())
    run.logger.log(n, metrics)
    guards.check_parameters(run.actor, n, run.out)
    all_skipped = metrics["train/skipped"] == last_step.updates  # the critic's extra passes too
    run.skips.end_step(all_skipped, n, run.out)
    return metrics


@dataclass(frozen=True)
class RunSide:
    """Where a run's steps are recorded: its logger, its skipped-update guard, the weights the parameter guard
    reads, its folder and ``train.log_every``."""

    logger: object
    skips: object
    actor: object
    out: Path
    log_every: int
