"""Held-out accuracy: of a live model (``accuracy``, used by the trainer) or of a saved checkpoint
(``evaluate_checkpoint``, the ``python -m ppo_core.evaluate`` command in ``run/cli.py``).

Greedy and sampled accuracy on the held-out split of the run's task (the run's config says which).
"""

from pathlib import Path

from transformers import AutoModelForCausalLM, AutoTokenizer

from ..precision import DTYPES
from ..rollout import complete
from ..tasks import rewards
from ..tasks.data import build_prompt
from ..tasks.rewards import is_correct
from .config import ConfigError, load_config
from .lora import is_lora_checkpoint, load_merged
from .manifest import damage
from .setup import fit_prompt_len, load_task, resolve_device

__all__ = ["accuracy", "accuracies", "evaluate_checkpoint"]


def accuracy(lm, tokenizer, records: list[dict], cfg, greedy: bool = False, correct_fn=is_correct) -> float:
    """Share of ``records`` answered correctly: greedy, or sampled at ``cfg.rollout.temperature``.

    Seeded from ``cfg.train.seed`` inside a forked RNG, so evaluating never shifts a run's randomness:
    the fork saves and restores the CPU generator and, for a model on a GPU, that GPU's generator, and
    only those two are seeded (``torch.manual_seed`` would reseed every GPU, which the fork would not
    restore). Runs in the compute dtype ``cfg.model.dtype`` (autocast).
    """
    texts = _complete(lm, tokenizer, records, cfg, None if greedy else cfg.rollout.temperature)
    return rewards.accuracy(texts, records, correct_fn or is_correct)


def accuracies(lm, tokenizer, records: list[dict], cfg, correct_fn=is_correct) -> tuple[float, float]:
    """(sampled, greedy) accuracy, as two calls of ``accuracy`` give them, in one pass over the prompts: each batch's
    greedy draw reuses its sampled draw's prompt keys and values (``rollout.complete``), so the prompts run once.
    The sampled texts are those of ``accuracy``; the greedy ones the same up to float rounding (float32 compute)."""
    texts, greedy = _complete(lm, tokenizer, records, cfg, cfg.rollout.temperature, also_greedy=True)
    score = correct_fn or is_correct
    return rewards.accuracy(texts, records, score), rewards.accuracy(greedy, records, score)


def _complete(lm, tokenizer, records, cfg, temperature, also_greedy: bool = False):
    prompts = [build_prompt(r["question"], tokenizer, cfg.data.prompt_style) for r in records]
    return complete(
        lm,
        tokenizer,
        prompts,
        cfg.rollout.max_new_tokens,
        temperature,
        cfg.data.max_prompt_len,
        cfg.rollout.generation_batch_size or cfg.rollout.batch_size,
        seed=cfg.train.seed + 12345,
        dtype=DTYPES[cfg.model.dtype],
        also_greedy=also_greedy,
    )


def evaluate_checkpoint(checkpoint: str, preset: str = "auto", overrides=()) -> dict:
    """Load a step_N/final folder and return its held-out sampled and greedy accuracy."""
    ckpt = Path(checkpoint)
    if not (ckpt / "config.json").is_file() and not is_lora_checkpoint(ckpt):
        raise FileNotFoundError(f"{ckpt} is not a checkpoint folder (no config.json); pass a step_N or final folder")
    why = damage(ckpt)  # its manifest, or for a folder without one a full read (run/manifest.py)
    if why is not None:
        raise ConfigError(f"{ckpt} is damaged: {why}; evaluate another checkpoint of the run")
    run_cfg = ckpt.parent / "effective_config.yaml"
    if preset == "auto":
        preset = str(run_cfg) if run_cfg.is_file() else "cpu"
    cfg = load_config(preset, list(overrides))
    _, test, _, correct_fn = load_task(cfg)
    test = test[: cfg.train.eval_samples]
    device, dtype = resolve_device(cfg.model.device), DTYPES[cfg.model.dtype]  # the run's own
    if is_lora_checkpoint(ckpt):  # a LoRA checkpoint: its base with the adapters merged in (run/lora.py)
        lm = load_merged(ckpt, dtype=dtype).to(device)
    else:
        lm = AutoModelForCausalLM.from_pretrained(ckpt, dtype=dtype).to(device)
    tokenizer = AutoTokenizer.from_pretrained(ckpt)
    cfg = fit_prompt_len(cfg, lm)
    sampled, greedy = accuracies(lm, tokenizer, test, cfg, correct_fn=correct_fn)  # as the run's own evaluation
    return {"sampled_accuracy": sampled, "greedy_accuracy": greedy, "n": len(test)}
