"""Chapter 05 - score a policy: ``python -m ppo_core.evaluate CHECKPOINT [--config ...] [key=value ...]``.

Greedy and sampled accuracy on the held-out split of the run's task (the run's config says which).
"""

import argparse
import sys
from pathlib import Path

import torch

from .config import ConfigError, load_config

__all__ = ["accuracy", "evaluate_checkpoint", "main"]


def accuracy(lm, tokenizer, records: list[dict], cfg, greedy: bool = False, correct_fn=None) -> float:
    """Share of ``records`` answered correctly: greedy, or sampled at ``cfg.rollout.temperature``.

    Seeded from ``cfg.train.seed`` inside a forked RNG, so evaluating never shifts a run's randomness.
    """
    from .data import build_prompt
    from .rewards import is_correct
    from .rollout import sample

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


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m ppo_core.evaluate", description=__doc__.splitlines()[0])
    ap.add_argument("checkpoint", help="a step_N or final folder written by ppo_core.train")
    ap.add_argument(
        "--config", default="auto", help="'auto' (the run's effective_config.yaml), a preset or a YAML file"
    )
    ap.add_argument("overrides", nargs="*", help="dotted key=value overrides, e.g. train.eval_samples=200")
    args = ap.parse_args(argv)
    try:
        res = evaluate_checkpoint(args.checkpoint, args.config, args.overrides)
    except (ConfigError, FileNotFoundError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(
        f"held-out ({res['n']} problems): sampled accuracy {res['sampled_accuracy']:.3f}, greedy accuracy {res['greedy_accuracy']:.3f}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
