"""The long-answer variant of the synthetic task: ~100-token solutions whose first token decides the answer.

Each problem is a chain of three single-digit steps; the solution writes the working out line by line
before the ``####`` line, as GSM8K solutions do::

    question: "Ann has 3 apples. Ann gets 4 then loses 2 then gets 1. How many now?"
    answer:   "3 apples at the start.\\nThen Ann gets 4 so 3+4=7.\\nThen Ann loses 2 so 7-2=5.\\n"
              "Then Ann gets 1 so 5+1=6.\\n#### 6"

Every running total stays in 0..9 (the task's alphabet has no comma), so the arithmetic is the
default task's single-digit facts and the solutions are about 100-110 characters, i.e. tokens
with the character-level tokenizer.

Why it exists: with a zero-initialised critic and GAE lambda = 0.95, the advantage of the first of T
response tokens carries lambda^(T-1) of the final score (0.95^99 = 0.006 at T = 100). Here the
**first token is the decisive one**: the warm start's demonstrations (``demonstration``) start from a
wrong number - another number of the question - in a share ``answer_noise`` of the cases and then work
the chain out correctly from there, so the warm-started policy often starts wrong and everything after
follows. Fixing that needs credit at token 0, a hundred tokens before the reward.
``benchmarks/critic.py --long`` measures how much of the score reaches it under each setting.

The warm start reuses ``ppo_core.warmstart``'s supervised loop and is cached the same way
(``warm_start_long``).
"""

import random
import resource
import time
from pathlib import Path

import torch

from .rewards import is_correct
from .synthetic import SYNTHETIC_ALPHABET, TEST_NAMES, TEST_OBJECTS, TRAIN_NAMES, TRAIN_OBJECTS
from .tiny import count_parameters, model_size
from .warmstart import _save_atomically, _task_digest, _train, generate_completions, settings_hash

__all__ = ["make_long_task", "long_answer", "demonstration", "warm_start_long", "LONG_MAX_NEW_TOKENS"]

LONG_MAX_NEW_TOKENS = 128
"""A response limit that fits every solution and its EOS."""

_VERBS = {"+": ("gets", "loses"), "-": ("loses", "gets")}


def _steps(rng: random.Random, start: int) -> list[tuple[str, int]]:
    """Three (op, operand) steps whose running totals stay in 0..9 from ``start``."""
    steps, x = [], start
    for _ in range(3):
        op = rng.choice("+-")
        if op == "+" and x == 9:
            op = "-"
        if op == "-" and x == 0:
            op = "+"
        b = rng.randint(1, 9 - x) if op == "+" else rng.randint(1, x)
        x = x + b if op == "+" else x - b
        steps.append((op, b))
    return steps


def _chain(start: int, steps: list[tuple[str, int]]) -> list[int] | None:
    """Running totals after each step from ``start``, or None if one leaves 0..9."""
    totals, x = [], start
    for op, b in steps:
        x = x + b if op == "+" else x - b
        if not 0 <= x <= 9:
            return None
        totals.append(x)
    return totals


def long_answer(start: int, steps: list[tuple[str, int]], obj: str, name: str) -> str:
    """The worked solution from ``start``: a start line, one line per step, then ``#### result``."""
    lines = [f"{start} {obj[:-1] if start == 1 else obj} at the start."]
    x = start
    for (op, b), y in zip(steps, _chain(start, steps)):
        lines.append(f"Then {name} {'gets' if op == '+' else 'loses'} {b} so {x}{op}{b}={y}.")
        x = y
    return "\n".join(lines) + f"\n#### {x}"


def demonstration(record: dict, rng: random.Random, answer_noise: float) -> str:
    """The warm start's target for ``record``: its answer, or (with probability ``answer_noise``) the solution
    worked out correctly from a wrong start, another number of the question whose chain stays in 0..9."""
    if rng.random() >= answer_noise:
        return record["answer"]
    start, steps = record["start"], record["steps"]
    wrong = [b for _, b in steps if b != start and _chain(b, steps) is not None]
    wrong = wrong or [s for s in range(10) if s != start and _chain(s, steps) is not None]
    return long_answer(rng.choice(wrong), steps, record["object"], record["name"]) if wrong else record["answer"]


def _problem(rng: random.Random, names: tuple, objects: tuple) -> dict:
    start = rng.randrange(10)
    steps = _steps(rng, start)
    name, obj = rng.choice(names), rng.choice(objects)
    verbs = [("gets " if op == "+" else "loses ") + str(b) for op, b in steps]
    question = (f"{name} has {start} {obj[:-1] if start == 1 else obj}. "
                f"{name} {verbs[0]} then {verbs[1]} then {verbs[2]}. How many now?")  # fmt: skip
    return {"question": question, "answer": long_answer(start, steps, obj, name), "start": start,
            "steps": steps, "object": obj, "name": name}  # fmt: skip


def make_long_task(seed: int = 0, n_train: int = 4000, n_test: int = 500) -> tuple[list[dict], list[dict]]:
    """Train and held-out splits of ``{"question", "answer", ...}`` records, deterministic in ``seed``.

    As in ``make_synthetic_task``, held-out problems use names and objects never seen in training, and
    no question repeats. Records also keep ``start``, ``steps``, ``object`` and ``name`` (for ``demonstration``).
    """
    rng = random.Random(seed + 7_919)  # not the default task's stream
    out = []
    for names, objects, n in ((TRAIN_NAMES, TRAIN_OBJECTS, n_train), (TEST_NAMES, TEST_OBJECTS, n_test)):
        seen, records = set(), []
        while len(records) < n:
            r = _problem(rng, names, objects)
            if r["question"] not in seen:
                seen.add(r["question"])
                records.append(r)
        out.append(records)
    assert all(set(r["question"] + r["answer"]) <= set(SYNTHETIC_ALPHABET) for r in out[0][:50])
    return out[0], out[1]


def warm_start_long(out_dir: str | Path, seed: int = 0, steps: int = 300, batch_size: int = 16, lr: float = 2e-3,
                    answer_noise: float = 0.75, n_train: int = 4000, n_test: int = 500, eval_samples: int = 128,
                    force: bool = False, progress: bool = True) -> Path:  # fmt: skip
    """Train (or reuse) the tiny model warm-started on the long task; returns ``out_dir/warmstart-long-<hash>``.

    The supervised loop of ``ppo_core.warmstart`` on ``demonstration`` targets, drawn once per record
    (a fixed demonstration set, as a real SFT set is). Arguments as in ``warm_start``.
    """
    train, test = make_long_task(seed, n_train, n_test)
    rng = random.Random(seed)
    demos = [{"question": r["question"], "answer": demonstration(r, rng, answer_noise)} for r in train]
    settings = dict(task_name="long", seed=seed, steps=steps, batch_size=batch_size, lr=lr, answer_noise=answer_noise,
                    arch="llama", n_train=n_train, n_test=n_test, size=dict(sorted(model_size("llama").items())),
                    task=_task_digest(demos + [{"q": r["question"], "a": r["answer"]} for r in test]))  # fmt: skip
    final = Path(out_dir).expanduser() / f"warmstart-long-{settings_hash(settings)}"
    if (final / "warmstart.json").is_file() and not force:
        return final
    start, start_cpu = time.perf_counter(), time.process_time()
    with torch.random.fork_rng(devices=[]):
        model, tokenizer, losses = _train({**settings, "answer_noise": 0.0}, demos, progress)
        train_s = time.perf_counter() - start
        scores = _evaluate_long(model, tokenizer, test[:eval_samples], seed)
    report = dict(settings=settings, losses=losses, train_seconds=round(train_s, 2),
                  total_seconds=round(time.perf_counter() - start, 2),
                  cpu_seconds=round(time.process_time() - start_cpu, 2), n_parameters=count_parameters(model),
                  peak_rss_mb=round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
                  torch_threads=torch.get_num_threads(), **scores)  # fmt: skip
    _save_atomically(model, tokenizer, report, final, replace=force)
    return final


def _evaluate_long(model, tokenizer, records: list[dict], seed: int) -> dict:
    """Held-out sampled/greedy accuracy and the share of sampled solutions that start from the right number."""
    sampled = generate_completions(model, tokenizer, records, seed=seed, max_new_tokens=LONG_MAX_NEW_TOKENS)
    greedy = generate_completions(model, tokenizer, records, greedy=True, max_new_tokens=LONG_MAX_NEW_TOKENS)
    n = max(len(records), 1)
    return {
        "heldout_sampled_accuracy": sum(is_correct(t, r["answer"]) for t, r in zip(sampled, records)) / n,
        "heldout_greedy_accuracy": sum(is_correct(t, r["answer"]) for t, r in zip(greedy, records)) / n,
        "heldout_sampled_right_start": sum(t.split(" ")[0] == str(r["start"]) for t, r in zip(sampled, records)) / n,
        "mean_sampled_length": sum(len(t) for t in sampled) / n,
        "eval_samples": len(records),
    }
