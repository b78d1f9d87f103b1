"""Held-out accuracy: of a live model (``accuracy``, used by the trainer) or of a saved checkpoint
(``evaluate_checkpoint``, the ``python -m ppo_core.evaluate`` command in ``run/cli.py``).

Greedy and sampled accuracy on the held-out split of the run's task (the run's config says which).
"""

from pathlib import Path

import torch

from .config import load_config

__all__ = ["accuracy", "evaluate_checkpoint"]


def accuracy(lm, tokenizer, records: list[dict], cfg, greedy: bool = False, correct_fn=None) -> float:
    """Share of ``records`` answered correctly: greedy, or sampled at ``cfg.rollout.temperature``.

    Seeded from ``cfg.train.seed`` inside a forked RNG, so evaluating never shifts a run's randomness.
    """
    from ..rollout import sample
    from ..tasks.data import build_prompt
    from ..tasks.rewards import is_correct

    correct_fn = correct_fn or is_correct
    was_training = lm.training
    lm.eval()
    bs = cfg.rollout.generation_batch_size or cfg.rollout.batch_size
    hits = []
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(cfg.train.seed + 12345)
        for i in range(0, len(records), bs):
            chunk = records[i : i + bs]
            prompts = [build_prompt(r["question"], tokenizer, cfg.data.prompt_style) for r in chunk]
            ro = sample(
                lm,
                tokenizer,
                prompts,
                cfg.rollout.max_new_tokens,
                None if greedy else cfg.rollout.temperature,
                cfg.data.max_prompt_len,
            )
            hits += [correct_fn(c, r["answer"]) for c, r in zip(ro.completions, chunk)]
    lm.train(was_training)
    return sum(hits) / len(hits) if hits else 0.0


def evaluate_checkpoint(checkpoint: str, preset: str = "auto", overrides=()) -> dict:
    """Load a step_N/final folder and return its held-out sampled and greedy accuracy."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from .setup import fit_prompt_len, load_task

    ckpt = Path(checkpoint)
    if not (ckpt / "config.json").is_file():
        raise FileNotFoundError(f"{ckpt} is not a checkpoint folder (no config.json); pass a step_N or final folder")
    run_cfg = ckpt.parent / "effective_config.yaml"
    if preset == "auto":
        preset = str(run_cfg) if run_cfg.is_file() else "cpu"
    cfg = load_config(preset, list(overrides))
    _, test, _, correct_fn = load_task(cfg)
    test = test[: cfg.train.eval_samples]
    lm = AutoModelForCausalLM.from_pretrained(ckpt)
    tokenizer = AutoTokenizer.from_pretrained(ckpt)
    fit_prompt_len(cfg, lm)
    return {
        "sampled_accuracy": accuracy(lm, tokenizer, test, cfg, greedy=False, correct_fn=correct_fn),
        "greedy_accuracy": accuracy(lm, tokenizer, test, cfg, greedy=True, correct_fn=correct_fn),
        "n": len(test),
    }
