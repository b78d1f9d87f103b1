"""Chapter 05 - the supervised warm start: the SFT stage of RLHF, in under a minute on a CPU.

RLHF starts PPO from a model that already writes answers in the right form (InstructGPT's SFT
model). Our offline run has no pretrained model, so we make one: a tiny character-level model
(``ppo_core.tasks.tiny``) trained by next-token cross-entropy on the synthetic task's solutions
(``ppo_core.tasks.synthetic``). Only the completion tokens are scored; the prompt tokens are masked out::

    tokens   <bos> A n n   h a s   3 ... ? \\n  3 + 4 = 7 \\n # # # #   7 <eos> <pad> ...
    labels   -100 (prompt, never scored) ......  3 + 4 = 7 \\n # # # #   7 <eos> -100 ...

The warm start is **deliberately imperfect**, and the chapter says so. In a share ``answer_noise``
of the targets the final ``#### N`` is replaced by one of the problem's operands (the working line
stays right), as if the demonstrations came from careless annotators who often copied a number
from the question instead of their result. The model learns the working well and learns to end
with an operand most of the time: its working line is right far more often than its final answer.
That gap is what the PPO stage closes with the task reward (1.0 right, 0.1 well-formed but wrong):
it teaches the policy to copy its own result after ``####``. It does not teach new arithmetic.

Training runs once per setting: ``warm_start`` saves the model, the tokenizer and
``warmstart.json`` (settings, loss curve, held-out accuracies) under ``out_dir/warmstart-<hash>``
and a second call with the same settings returns that folder at once. The default run's warm start
(seed 0) ships with the package in float16 (``tasks/warmstarts/``, about 2.4 MB): a cache miss on its
settings copies it instead of training. Every warm start rounds its weights to float16 once, at the end,
so the shipped copy and a retrained one are the same model.
"""

import hashlib
import json
import math
import random
import re
import resource
import time
from pathlib import Path

import torch
from tqdm.auto import tqdm

from ..rollout import complete
from ..utils import write_folder_atomically
from .data import build_prompt
from .rewards import ANSWER_MARKER, accuracy
from .synthetic import SYNTHETIC_ALPHABET, make_synthetic_task
from .tiny import build_char_tokenizer, build_tiny_model, count_parameters, load_tiny, model_size, save_tiny

__all__ = [
    "warm_start",
    "evaluate_accuracy",
    "generate_completions",
    "sft_batch",
    "noisy_answer",
    "settings_hash",
    "WARMSTART_VERSION",
]

WARMSTART_VERSION = 2
"""Part of the cache key: bump it when a code change makes old cached models stale."""

SHIPPED = Path(__file__).parent / "warmstarts"
"""Warm starts that ship with the package (float16 weights), by cache folder name."""

IGNORE_INDEX = -100
"""The label transformers' cross-entropy skips (prompt and padding positions)."""

ADAM_BETAS = (0.9, 0.98)
"""AdamW betas of the warm start: a shorter second-moment memory than 0.999 suits a few hundred steps."""
MAX_GRAD_NORM = 1.0
"""Global gradient-norm clip of the warm start."""
WARMUP_FRACTION = 0.1
"""Share of the warm-start steps spent ramping the learning rate up from 0 (then cosine decay to 0)."""


def noisy_answer(answer: str, rng: random.Random, answer_noise: float) -> str:
    """With probability ``answer_noise``, replace the final number by an operand of the working line.

    ``"3+4=7\\n#### 7"`` becomes ``"3+4=7\\n#### 3"`` or ``"... #### 4"``: the slip of an annotator
    who copied a number from the problem instead of the result. Operands equal to the result are
    skipped (``5-0=5`` can only become ``#### 0``); ``0+0=0`` becomes ``#### 1``.
    """
    if rng.random() >= answer_noise:
        return answer
    working, final = answer.rsplit(ANSWER_MARKER, 1)
    result = final.strip()
    operands = re.findall(r"\d+", working.split("=")[0])  # "3+4=7\n" -> ["3", "4"]
    wrong = [x for x in operands if x != result] or [str(int(result) + 1)]
    return f"{working}{ANSWER_MARKER} {rng.choice(wrong)}"


def sft_batch(tokenizer, prompts: list[str], completions: list[str]) -> dict:
    """Right-padded ``input_ids``, ``attention_mask`` and ``labels`` for supervised fine-tuning.

    Each row is ``<bos> prompt completion <eos>``; labels copy the completion and its EOS and are
    ``IGNORE_INDEX`` on the prompt and the padding. Right padding keeps positions 0, 1, 2, ... on
    the real tokens, as ``generate`` numbers them later.
    """
    prompt_ids = tokenizer(prompts)["input_ids"]  # the post-processor adds <bos>
    completion_ids = tokenizer(completions, add_special_tokens=False)["input_ids"]
    rows = [p + c + [tokenizer.eos_token_id] for p, c in zip(prompt_ids, completion_ids)]
    L = max(len(r) for r in rows)
    input_ids = torch.full((len(rows), L), tokenizer.pad_token_id)  # (B, L)
    labels = torch.full((len(rows), L), IGNORE_INDEX)  # (B, L)
    attention_mask = torch.zeros((len(rows), L), dtype=torch.long)  # (B, L)
    for i, (row, p) in enumerate(zip(rows, prompt_ids)):
        input_ids[i, : len(row)] = torch.tensor(row)
        labels[i, len(p) : len(row)] = torch.tensor(row[len(p) :])
        attention_mask[i, : len(row)] = 1
    return {"input_ids": input_ids, "attention_mask": attention_mask, "labels": labels}


@torch.no_grad()
def generate_completions(
    model,
    tokenizer,
    records: list[dict],
    temperature: float = 1.0,
    greedy: bool = False,
    max_new_tokens: int = 24,
    batch_size: int = 256,
    seed: int | None = None,
) -> list[str]:
    """The decoded completion of each record's prompt ``question + "\\n"`` (left-padded, stops at EOS).

    Samples from softmax(logits / temperature) with no top-k / top-p (PPO's sampling distribution,
    ``rollout.sample``), or decodes greedily with ``greedy=True``. ``seed`` makes sampling
    reproducible without touching the global RNG.
    """
    prompts = [build_prompt(r["question"]) for r in records]
    temperature = None if greedy else temperature
    return complete(model, tokenizer, prompts, max_new_tokens, temperature, 10**9, batch_size, seed)


def evaluate_accuracy(
    model,
    tokenizer,
    records: list[dict],
    temperature: float = 1.0,
    greedy: bool = False,
    max_new_tokens: int = 24,
    batch_size: int = 256,
    seed: int | None = None,
) -> float:
    """Share of ``records`` whose generated final answer (the number after the last ``####``) is right."""
    texts = generate_completions(model, tokenizer, records, temperature, greedy, max_new_tokens, batch_size, seed)
    return accuracy(texts, records)


def _scores(texts: list[str], records: list[dict]) -> dict:
    """Final-answer accuracy and working-line accuracy (first line equal to the gold working line)."""
    n = max(len(records), 1)
    pairs = list(zip(texts, [r["answer"] for r in records]))
    return {
        "accuracy": accuracy(texts, records),
        "working_line_accuracy": sum(text.split("\n")[0] == gold.split("\n")[0] for text, gold in pairs) / n,
    }


def settings_hash(settings: dict) -> str:
    """A short stable hash of the settings (and ``WARMSTART_VERSION``): the cache folder's key."""
    blob = json.dumps({**settings, "version": WARMSTART_VERSION}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:12]


def _task_digest(records: list[dict]) -> str:
    """A hash of the task's records: editing the synthetic task's templates invalidates the cache."""
    return hashlib.sha256(json.dumps(records, sort_keys=True).encode()).hexdigest()[:12]


def cosine_schedule_with_warmup(optimizer, warmup_steps: int, total_steps: int):
    """Linear warm-up to the base lr over ``warmup_steps``, then a half cosine down to 0 at ``total_steps``.

    The formula of transformers' ``get_cosine_schedule_with_warmup`` (tests/test_warmstart.py checks they
    agree), written here because importing that one loads transformers' trainer utilities, which import
    peft and bitsandbytes and print a kernel warning on CPU machines.
    """

    def factor(step: int) -> float:
        if step < warmup_steps:
            return step / max(1, warmup_steps)
        progress = (step - warmup_steps) / max(1, total_steps - warmup_steps)
        return max(0.0, 0.5 * (1.0 + math.cos(math.pi * progress)))

    return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)


def _train(settings: dict, train: list[dict], progress: bool) -> tuple:
    """Build the tokenizer and model; run the supervised steps. Returns (model, tokenizer, losses)."""
    s = settings
    torch.manual_seed(s["seed"])
    rng = random.Random(s["seed"])
    tokenizer = build_char_tokenizer(SYNTHETIC_ALPHABET)
    model = build_tiny_model(tokenizer, s["arch"], **s["size"]).train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=s["lr"], weight_decay=0.0, betas=ADAM_BETAS)
    scheduler = cosine_schedule_with_warmup(optimizer, max(1, int(WARMUP_FRACTION * s["steps"])), s["steps"])
    losses = []
    steps = range(s["steps"])
    if progress:
        steps = tqdm(steps, desc="warm start", leave=False)
    for _ in steps:
        records = rng.sample(train, s["batch_size"])
        completions = [noisy_answer(r["answer"], rng, s["answer_noise"]) for r in records]
        batch = sft_batch(tokenizer, [build_prompt(r["question"]) for r in records], completions)
        loss = model(**batch).loss  # mean cross-entropy over the completion tokens
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), MAX_GRAD_NORM)
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad(set_to_none=True)
        losses.append(round(loss.item(), 4))
    return model.eval(), tokenizer, losses


def _evaluate(model, tokenizer, records: list[dict], seed: int) -> dict:
    """Held-out scores of the warm-started model, sampled at temperature 1 and greedy."""
    sampled = _scores(generate_completions(model, tokenizer, records, seed=seed), records)
    greedy = _scores(generate_completions(model, tokenizer, records, greedy=True), records)
    return {
        "heldout_sampled_accuracy": sampled["accuracy"],
        "heldout_greedy_accuracy": greedy["accuracy"],
        "heldout_sampled_working_line_accuracy": sampled["working_line_accuracy"],
        "heldout_greedy_working_line_accuracy": greedy["working_line_accuracy"],
        "eval_samples": len(records),
    }


def _save_atomically(model, tokenizer, report: dict, final: Path, replace: bool) -> None:
    """Write into a temporary sibling folder, then rename it to ``final`` in one step."""

    def write(tmp: Path) -> None:
        save_tiny(model, tokenizer, tmp)
        (tmp / "warmstart.json").write_text(json.dumps(report, indent=2) + "\n")

    write_folder_atomically(final, write, replace=replace)


@torch.no_grad()
def round_to_float16_(model: torch.nn.Module) -> torch.nn.Module:
    """Round every float32 weight to the nearest float16 value, in place (the weights stay float32)."""
    for p in model.parameters():
        p.copy_(p.half().float())
    return model


def warm_start_from(w, *, seed: int, progress: bool, fn=None, **data) -> Path:
    """``warm_start`` (or ``fn``, e.g. the long task's) with the settings of a config's ``warmstart`` section."""
    return (fn or warm_start)(Path(w.cache_dir).expanduser(), seed=seed, steps=w.steps, batch_size=w.batch_size,
                              lr=w.lr, answer_noise=w.answer_noise, progress=progress, **data)  # fmt: skip


def warm_start(
    out_dir: str | Path,
    seed: int = 0,
    steps: int = 450,
    batch_size: int = 16,
    lr: float = 2e-3,
    answer_noise: float = 0.75,
    arch: str = "llama",
    n_train: int = 4000,
    n_test: int = 500,
    size: dict | None = None,
    eval_samples: int = 256,
    force: bool = False,
    progress: bool = True,
) -> Path:
    """Train (or reuse) the warm-started tiny model; returns its folder ``out_dir/warmstart-<hash>``.

    Args:
        out_dir: the cache folder; each setting gets its own ``warmstart-<hash>`` inside it.
        seed: seeds the synthetic task (the same split the PPO run uses), the init and the batches.
        steps, batch_size, lr: supervised steps, sequences per step, peak AdamW learning rate
            (linear warm-up over the first 10 % of steps, cosine decay to 0).
        answer_noise: share of targets whose final number is replaced by an operand (``noisy_answer``).
        arch, size: the model (``ppo_core.tasks.tiny.build_tiny_model``); ``size`` overrides the default size.
        n_train, n_test: sizes of the synthetic splits (``make_synthetic_task``).
        eval_samples: held-out problems scored after training (recorded, not part of the cache key).
        force: retrain even if the cache holds this setting.

    The folder loads with ``AutoModelForCausalLM.from_pretrained`` / ``AutoTokenizer.from_pretrained``
    (or ``ppo_core.tasks.tiny.load_tiny``) and holds ``warmstart.json``: the settings, the loss curve,
    times, parameter count, peak RSS, and held-out accuracies sampled at temperature 1 and greedy,
    of the final answer and of the working line. Training runs with the global torch RNG saved and
    restored, so a cache miss does not change the caller's random stream.
    """
    train, test = make_synthetic_task(seed, n_train=n_train, n_test=n_test)
    settings = dict(
        seed=seed,
        steps=steps,
        batch_size=batch_size,
        lr=lr,
        answer_noise=answer_noise,
        arch=arch,
        n_train=n_train,
        n_test=n_test,
        size=dict(sorted(model_size(arch, size).items())),
        task=_task_digest(train + test),
    )
    final = Path(out_dir).expanduser() / f"warmstart-{settings_hash(settings)}"
    if (final / "warmstart.json").is_file() and not force:
        return final
    if (SHIPPED / final.name / "warmstart.json").is_file() and not force:  # the default run's: copy, in float32
        model, tokenizer = load_tiny(SHIPPED / final.name, dtype=torch.float32)
        report = json.loads((SHIPPED / final.name / "warmstart.json").read_text())
        _save_atomically(model, tokenizer, report, final, replace=False)
        return final
    start, start_cpu = time.perf_counter(), time.process_time()
    with torch.random.fork_rng(devices=[]):
        model, tokenizer, losses = _train(settings, train, progress)
        round_to_float16_(model)  # the shipped copy's precision, for every warm start
        train_s = time.perf_counter() - start
        scores = _evaluate(model, tokenizer, test[:eval_samples], seed)
    report = dict(
        settings=settings,
        losses=losses,
        train_seconds=round(train_s, 2),
        total_seconds=round(time.perf_counter() - start, 2),
        cpu_seconds=round(time.process_time() - start_cpu, 2),
        n_parameters=count_parameters(model),
        peak_rss_mb=round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        torch_threads=torch.get_num_threads(),
        **scores,
    )
    _save_atomically(model, tokenizer, report, final, replace=force)
    return final
