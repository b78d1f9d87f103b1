"""Chapter 06 - the reward-model command: ``python -m ppo_core.train_rm [--config PRESET_OR_PATH] [key=value ...]``.

With no arguments it runs offline on the CPU: preference pairs labelled by the synthetic task's gold
reward (``ppo_core.preferences``), a reward model on the warm-started tiny model's trunk, the
Bradley-Terry loss, then the score normalisation on the starting policy's samples. ``data.source``
takes a ``prompt / chosen / rejected`` JSON Lines file (or a hub id) instead.

The run folder holds ``step_N/`` checkpoints and ``final/``, each a transformers
``AutoModelForSequenceClassification`` folder plus ``reward_model.json`` (the normalisation) and the
training state; ``train.resume=auto`` continues the latest one. Same conventions as
``python -m ppo_core.train``: a preset, dotted overrides, one-line errors, exit 2 on bad input
before anything is written.
"""

import argparse
import json
import os
import random
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch
from tqdm.auto import tqdm
from transformers import AutoModelForSequenceClassification

from ..fastpaths import shared_prompt_pair_loss
from ..reward_model import RewardModel, evaluate_pairs, pair_loss
from ..tasks.data import build_prompt
from ..tasks.preferences import load_pairs, make_preference_pairs
from ..tasks.synthetic import make_synthetic_task
from ..tasks.tiny import build_tiny_model, load_tiny
from ..tasks.warmstart import generate_completions, warm_start_from
from ..utils import no_transformers_bars
from .checkpoint import STATE_FILE, CheckpointWriteError, clear_run, recover_interrupted_saves, write_atomically
from .config import ConfigError, WarmStartConfig, load_config, to_dict
from .resume import resume_path

__all__ = [
    "RMConfig",
    "load_rm_config",
    "fit_reward_model",
    "gold_order_agreement",
    "train_rm",
    "warm_start_path",
    "main",
    "RM_PRESETS",
]

RM_PRESETS = ("rm_cpu",)


@dataclass
class RMModelConfig:
    init: str = "tiny"
    """'tiny': the warm-started tiny model (the SFT model) is the trunk; else a folder holding a causal LM."""
    hidden_size: int = 0
    """With init=tiny: 0 keeps the warm start's trunk; > 0 builds a fresh, smaller Llama trunk this wide."""
    num_layers: int = 1
    """Layers of that fresh trunk (only with hidden_size > 0)."""


@dataclass
class RMDataConfig:
    source: str = "synthetic"
    """'synthetic' (pairs labelled by the gold reward) or a prompt/chosen/rejected .jsonl file or hub id."""
    eval_source: str = ""
    """Held-out pairs for a real source ('' = the last eval_pairs of source)."""
    n_pairs: int = 512
    """Synthetic: training prompts (pairs whose two responses are equal are dropped); real: at most this many."""
    eval_pairs: int = 128
    """Held-out pairs for the pairwise accuracy."""
    beta: float = 5.0
    """Synthetic labeller care: P(a preferred) = sigmoid(beta * (gold_a - gold_b))."""
    length_coef: float = 0.05
    """Synthetic gold reward's charge per character beyond the reference solution."""
    perturb: float = 0.5
    """Synthetic: probability that a pair's second response is an edit of the first."""
    max_new_tokens: int = 24
    """Synthetic: response length limit when sampling the pairs."""


@dataclass
class RMTrainConfig:
    steps: int = 150
    """Optimizer steps."""
    batch_size: int = 32
    """Pairs per step (2 x batch_size sequences)."""
    lr: float = 3e-4
    """AdamW learning rate."""
    seed: int = 0
    """Seeds the pairs, the head's init and the batches."""
    output_dir: str = "outputs/rm"
    """Run folder: checkpoints, final/, metrics.jsonl."""
    save_every: int = 50
    """Checkpoint every this many steps (0 = only final/)."""
    normalize_samples: int = 256
    """Policy samples the final normalisation is measured on (real data: its chosen and rejected texts)."""
    resume: str = ""
    """'auto': continue the latest checkpoint in output_dir; a step_N folder; '' = a fresh run."""
    overwrite: bool = False
    """A fresh run into an output_dir that holds a run deletes that run (else it is refused)."""
    num_threads: int = 0
    """torch CPU threads (0 = torch's default)."""
    fast_paths: bool = True
    """Run each pair's prompt once (``fastpaths.shared_prompt_pair_loss``): the same numbers up to float rounding,
    about half the time on chapter 06's pairs. false: ``reward_model.pair_loss``, the prompt in both rows."""
    progress: bool = True
    """Show a tqdm progress bar."""


@dataclass
class RMConfig:
    model: RMModelConfig = field(default_factory=RMModelConfig)
    warmstart: WarmStartConfig = field(default_factory=WarmStartConfig)
    data: RMDataConfig = field(default_factory=RMDataConfig)
    train: RMTrainConfig = field(default_factory=RMTrainConfig)


def load_rm_config(preset: str = "rm_cpu", overrides=()) -> RMConfig:
    """Preset (name or YAML path) + dotted ``key=value`` overrides -> a validated ``RMConfig`` (``load_config``)."""
    return load_config(preset, overrides, schema=RMConfig, presets=RM_PRESETS, check=validate_rm)


def validate_rm(c: RMConfig) -> None:
    """Ranges that types alone cannot express."""
    t, d = c.train, c.data
    for ok, msg in [
        (t.steps >= 1, f"train.steps must be >= 1, got {t.steps}"),
        (t.batch_size >= 1, f"train.batch_size must be >= 1, got {t.batch_size}"),
        (t.lr > 0, f"train.lr must be > 0, got {t.lr}"),
        (d.beta > 0, f"data.beta must be > 0, got {d.beta}"),
        (d.n_pairs >= 1 and d.eval_pairs >= 1, "data.n_pairs and data.eval_pairs must be >= 1"),
        (0 <= d.perturb <= 1, f"data.perturb must be in [0, 1], got {d.perturb}"),
        (t.save_every >= 0 and t.normalize_samples >= 2, "train.save_every >= 0, train.normalize_samples >= 2"),
    ]:
        if not ok:
            raise ConfigError(msg)


def fit_reward_model(
    rm,
    pairs: list[dict],
    steps: int,
    batch_size: int = 32,
    lr: float = 3e-4,
    seed: int = 0,
    optimizer=None,
    start_step: int = 0,
    on_step=None,
    progress: bool = False,
    fast_paths: bool = False,
) -> list[dict]:
    """Bradley-Terry training: ``steps`` AdamW steps on random batches of ``pairs``. Returns each step's stats.

    The batches of step ``n`` depend only on ``seed`` and ``n``, so a resumed run sees the same data.
    ``on_step(n, stats)`` runs after each step (checkpoints, logs). ``fast_paths``: each prompt through the
    trunk once (``fastpaths.shared_prompt_pair_loss``), else ``pair_loss``.
    """
    loss_fn = shared_prompt_pair_loss if fast_paths else pair_loss

    optimizer = optimizer or torch.optim.AdamW(rm.parameters(), lr=lr)
    rm.train()
    history, steps_iter = [], range(start_step + 1, steps + 1)
    if progress:
        steps_iter = tqdm(steps_iter, desc="reward model", leave=False)
    for n in steps_iter:
        batch = random.Random(seed * 100_003 + n).sample(pairs, min(batch_size, len(pairs)))
        loss, stats = loss_fn(rm, batch)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        history.append({"step": n, **stats})
        if on_step is not None:
            on_step(n, stats)
    return history


# ---- the command line ------------------------------------------------------------------------------


def _pairs(cfg: RMConfig, warm_path):
    """(train pairs, held-out pairs, normalisation texts); every data error is a ConfigError."""
    d = cfg.data
    if d.source != "synthetic":
        try:
            pairs = load_pairs(d.source, limit=None)
            held = load_pairs(d.eval_source) if d.eval_source else None
        except (OSError, ValueError) as err:
            raise ConfigError(f"data.source: {str(err).splitlines()[0]}") from None
        if held is None:
            if len(pairs) < 2:
                raise ConfigError(
                    f"data.source={d.source} holds {len(pairs)} pair; need 2 or more (or data.eval_source)"
                )
            k = min(d.eval_pairs, len(pairs) // 2)
            pairs, held = pairs[:-k], pairs[-k:]
        texts = [p["prompt"] + p[s] for p in pairs for s in ("chosen", "rejected")][: cfg.train.normalize_samples]
        return pairs[: d.n_pairs], held[: d.eval_pairs], texts
    policy, tokenizer = load_tiny(warm_path)
    train, test = make_synthetic_task(cfg.train.seed, n_train=max(d.n_pairs, 1000))
    kw = dict(beta=d.beta, length_coef=d.length_coef, perturb=d.perturb, max_new_tokens=d.max_new_tokens)
    pairs = make_preference_pairs(policy, tokenizer, train[: d.n_pairs], seed=cfg.train.seed, **kw)
    held = make_preference_pairs(policy, tokenizer, test[: d.eval_pairs], seed=cfg.train.seed + 7, **kw)
    records = train[-cfg.train.normalize_samples :]
    samples = generate_completions(
        policy, tokenizer, records, max_new_tokens=d.max_new_tokens, seed=cfg.train.seed + 13
    )
    return pairs, held, [build_prompt(r["question"]) + y for r, y in zip(records, samples)]


def warm_start_path(cfg: RMConfig) -> Path:
    """The warm-started tiny policy (cached; the same settings as the PPO CLI's default run share one folder)."""
    return warm_start_from(cfg.warmstart, seed=cfg.train.seed, progress=cfg.train.progress)


def _build_rm(cfg: RMConfig, warm_path, init_state=None):

    if init_state is not None:
        return RewardModel.from_pretrained(init_state)
    torch.manual_seed(cfg.train.seed)
    if cfg.model.init != "tiny":
        if not (Path(cfg.model.init).expanduser() / "config.json").is_file():
            raise ConfigError(
                f"model.init={cfg.model.init}: no such model folder (config.json); use tiny or a folder "
                "holding a causal LM saved with save_pretrained"
            )
        return RewardModel.from_lm(Path(cfg.model.init).expanduser())
    if cfg.model.hidden_size <= 0:
        return RewardModel.from_lm(warm_path)

    _, tokenizer = load_tiny(warm_path)
    heads = max(1, cfg.model.hidden_size // 32)
    lm = build_tiny_model(
        tokenizer,
        "llama",
        hidden_size=cfg.model.hidden_size,
        num_hidden_layers=cfg.model.num_layers,
        num_attention_heads=heads,
        intermediate_size=4 * cfg.model.hidden_size,
    )
    config = lm.config
    config.num_labels = 1
    return RewardModel(AutoModelForSequenceClassification.from_config(config), tokenizer)


def _resume_path(cfg: RMConfig) -> Path | None:
    """The checkpoint to resume from, or None; the PPO CLI's rules (``run.resume.resume_path``)."""
    return resume_path(cfg)


def _save(out: Path, name: str, rm, optimizer, step: int, cfg: RMConfig, extra: dict | None = None) -> Path:

    def write(tmp: Path) -> None:
        with no_transformers_bars():  # they would break the run's own bar at every checkpoint
            rm.save_pretrained(tmp)
        (tmp / "trainer_state.json").write_text(
            json.dumps({"step": step, "config": to_dict(cfg), **(extra or {})}) + "\n"
        )
        torch.save({"optimizer": optimizer.state_dict(), "step": step}, tmp / STATE_FILE)

    return write_atomically(out, name, write)


def gold_order_agreement(rm, pairs: list[dict]) -> dict:
    """How often ``rm`` ranks a pair as its gold reward does, over the pairs whose two gold rewards differ.

    The pairwise accuracy is measured against the labeller's choices, which are coin flips on gold ties and
    sometimes wrong otherwise, so its ceiling is well under 1. The gold order is what the RM stands for. Pairs
    without gold scores (real data) give ``{"agreement": None, "pairs": 0}``.
    """
    differ = [p for p in pairs if "gold_chosen" in p and p["gold_chosen"] != p["gold_rejected"]]
    if not differ:
        return {"agreement": None, "pairs": 0}
    chosen = rm.raw_scores([p["prompt"] + p["chosen"] for p in differ])
    rejected = rm.raw_scores([p["prompt"] + p["rejected"] for p in differ])
    gold = [p["gold_chosen"] > p["gold_rejected"] for p in differ]
    right = sum(bool(c > r) == g for c, r, g in zip(chosen.tolist(), rejected.tolist(), gold, strict=True))
    return {"agreement": right / len(differ), "pairs": len(differ)}


def train_rm(cfg: RMConfig) -> dict:
    """Run the whole CLI job; returns the summary written to ``output_dir/summary.json``."""

    if cfg.train.num_threads:
        torch.set_num_threads(cfg.train.num_threads)
    out = Path(cfg.train.output_dir)
    recover_interrupted_saves(out)
    resume = _resume_path(cfg)  # every refusal comes before anything is written
    if cfg.data.source != "synthetic":
        _pairs(cfg, None)  # a bad data file fails here, before the warm start and before anything is written
    warm = warm_start_path(cfg) if (cfg.data.source == "synthetic" or cfg.model.init == "tiny") else None
    pairs, held, norm_texts = _pairs(cfg, warm)
    rm = _build_rm(cfg, warm, resume)
    optimizer = torch.optim.AdamW(rm.parameters(), lr=cfg.train.lr)
    start = 0
    if resume is not None:
        state = torch.load(resume / "trainer_state.pt", weights_only=False)
        optimizer.load_state_dict(state["optimizer"])
        start = state["step"]
    else:
        clear_run(out)
    out.mkdir(parents=True, exist_ok=True)
    metrics = out / "metrics.jsonl"
    if metrics.is_file():  # lines logged after the checkpoint we resume from are redone
        kept = [line for line in metrics.read_text().splitlines() if json.loads(line)["step"] <= start]
        metrics.write_text("".join(line + "\n" for line in kept))
    log = metrics.open("a")

    def on_step(n, stats):
        log.write(json.dumps({"step": n, **{f"rm/{k}": v for k, v in stats.items()}}) + "\n")
        log.flush()
        if cfg.train.save_every and n % cfg.train.save_every == 0 and n < cfg.train.steps:
            _save(out, f"step_{n}", rm, optimizer, n, cfg)

    t0 = time.perf_counter()
    before = evaluate_pairs(rm, held)
    fit_reward_model(
        rm,
        pairs,
        cfg.train.steps,
        cfg.train.batch_size,
        seed=cfg.train.seed,
        optimizer=optimizer,
        start_step=start,
        on_step=on_step,
        progress=cfg.train.progress,
        fast_paths=cfg.train.fast_paths,
    )
    log.close()
    rm.eval()
    norm = rm.normalize_on(norm_texts, source=cfg.data.source)
    after = evaluate_pairs(rm, held)
    gold = gold_order_agreement(rm, held)
    summary = {
        "train_pairs": len(pairs),
        "heldout_pairs": len(held),
        "heldout_accuracy_before": before["accuracy"],
        "heldout_accuracy": after["accuracy"],
        "heldout_loss": after["loss"],
        "heldout_gold_agreement": gold["agreement"],
        "heldout_gold_pairs": gold["pairs"],
        "norm_mean": norm["mean"],
        "norm_std": norm["std"],
        "seconds": round(time.perf_counter() - t0, 1),
        "resumed_from": str(resume or ""),
    }
    _save(out, "final", rm, optimizer, cfg.train.steps, cfg, {"summary": summary})
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    return summary


def main(argv=None) -> int:
    """Exit 0 done, 2 bad input (config, data file, model path, a damaged checkpoint to resume): one line on stderr,
    nothing written; 3 a checkpoint the disk refused (full): one line, earlier checkpoints intact."""
    ap = argparse.ArgumentParser(prog="python -m ppo_core.train_rm", description=__doc__.splitlines()[0])
    ap.add_argument("--config", default="rm_cpu", help="a preset (rm_cpu) or a YAML file (default: rm_cpu)")
    ap.add_argument("overrides", nargs="*", help="dotted key=value overrides, e.g. train.steps=50 data.source=x.jsonl")
    args = ap.parse_args(argv)
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # before torch loads (see run.cli)
    try:
        cfg = load_rm_config(args.config, args.overrides)
        if not cfg.train.progress:
            from transformers.utils.logging import disable_progress_bar

            disable_progress_bar()
        summary = train_rm(cfg)
    except ConfigError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except Exception as err:
        if not isinstance(err, CheckpointWriteError):
            raise  # a bug: keep the traceback
        print(f"error: {err}", file=sys.stderr)  # the disk refused a checkpoint; earlier ones are intact
        return 3
    print(
        f"reward model: {cfg.train.output_dir}/final  held-out pairwise accuracy "
        f"{summary['heldout_accuracy_before']:.3f} -> {summary['heldout_accuracy']:.3f} "
        f"on {summary['heldout_pairs']} pairs"
        + (
            f" (agrees with the gold order on {summary['heldout_gold_agreement']:.3f} of the "
            f"{summary['heldout_gold_pairs']} whose gold differs)"
            if summary["heldout_gold_pairs"]
            else ""
        )
        + "; scores normalised "
        f"(mean {summary['norm_mean']:.3f}, std {summary['norm_std']:.3f})"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
