"""Chapter 06 - preference pairs: synthetic ones with a known truth, and a loader for real ones.

Real RLHF data are pairs ``(prompt, chosen, rejected)`` labelled by people, whose "true" quality no
one can compute. Ours come from a **gold reward** we choose and can always evaluate, so every later
plot can show the truth next to the reward model's proxy (Gao et al. 2022 use a large RM as gold;
we use a formula). The gold reward of a response to a synthetic problem is::

    g(y) = task(y) - length_coef * max(0, len(y) - len(reference))

    task(y) = 1.0 right final answer, 0.1 well-formed ``#### N`` but wrong, 0.0 otherwise
              (chapter 05's ``gsm8k_reward``)

The length term charges every character beyond the reference solution (``"3+4=7\\n#### 7"``): a
concise right answer beats a rambling one. Labels follow the Bradley-Terry model with noise: a
labeller prefers ``a`` over ``b`` with probability ``sigma(beta * (g_a - g_b))``, so a larger ``beta``
is a more careful labeller and equal gold scores are coin flips.

Responses come from the warm-started policy (two samples per prompt) and, with probability
``perturb``, the second response is an edit of the first (its final number set to the working
line's result, or to another number), so the pairs also hold near-twins that differ only in the
part that matters.

``load_pairs`` reads real data in the common ``prompt / chosen / rejected`` JSON Lines layout (one
object per line, three strings), or a hub id through ``datasets.load_dataset``. A bad line is one
error that names the line and the fix.
"""

import json
import math
import random
import re
from pathlib import Path

from .data import build_prompt
from .rewards import ANSWER_MARKER, gsm8k_reward
from .warmstart import generate_completions

__all__ = ["gold_reward", "label_pair", "perturb_response", "make_preference_pairs", "load_pairs", "save_pairs",
           "PAIR_KEYS"]  # fmt: skip

PAIR_KEYS = ("prompt", "chosen", "rejected")


def gold_reward(response: str, answer: str, length_coef: float = 0.05) -> float:
    """The known truth: ``task(y) - length_coef * max(0, len(y) - len(answer))`` (see the module docstring)."""
    return gsm8k_reward(response, answer) - length_coef * max(0, len(response) - len(answer))


def label_pair(gold_a: float, gold_b: float, beta: float, rng: random.Random) -> bool:
    """True when the noisy labeller prefers ``a``: a draw with P(a > b) = sigma(beta * (g_a - g_b))."""
    return rng.random() < 0.5 * (1.0 + math.tanh(0.5 * beta * (gold_a - gold_b)))  # sigma(x), no overflow


def perturb_response(response: str, rng: random.Random) -> str:
    """An edit of ``response``: its final number set to the working line's result or to another digit.

    ``"3+4=7\\n#### 3"`` -> ``"3+4=7\\n#### 7"`` (the fix) or ``"3+4=7\\n#### 5"``. A response without
    a marker gets one appended with a random digit.
    """
    if ANSWER_MARKER not in response:
        return f"{response}\n{ANSWER_MARKER} {rng.randrange(10)}"
    working, _ = response.rsplit(ANSWER_MARKER, 1)
    result = re.search(r"=\s*(-?\d+)", working)
    number = result.group(1) if result and rng.random() < 0.5 else str(rng.randrange(19))
    return f"{working}{ANSWER_MARKER} {number}"


def make_preference_pairs(model, tokenizer, records: list[dict], beta: float = 5.0, length_coef: float = 0.05,
                          perturb: float = 0.5, seed: int = 0, max_new_tokens: int = 24) -> list[dict]:  # fmt: skip
    """One labelled pair per record whose two responses differ: ``prompt, chosen, rejected`` + their gold scores.

    Args:
        model, tokenizer: the policy that writes the responses (the warm-started tiny model).
        records: synthetic ``{"question", "answer"}`` records (``ppo_core.synthetic``).
        beta: labeller care in ``sigma(beta * (g_a - g_b))``; ``beta -> inf`` always picks the better one.
        length_coef: the gold reward's charge per character beyond the reference (``gold_reward``).
        perturb: probability that the second response is an edit of the first instead of a new sample.
        seed: seeds sampling, perturbations and labels.
    """
    rng = random.Random(seed)
    first = generate_completions(model, tokenizer, records, max_new_tokens=max_new_tokens, seed=seed)
    second = generate_completions(model, tokenizer, records, max_new_tokens=max_new_tokens, seed=seed + 1)
    pairs = []
    for record, a, b in zip(records, first, second):
        if rng.random() < perturb:
            b = perturb_response(a, rng)
        if a == b:
            continue
        g_a, g_b = (gold_reward(y, record["answer"], length_coef) for y in (a, b))
        if not label_pair(g_a, g_b, beta, rng):
            a, b, g_a, g_b = b, a, g_b, g_a
        pairs.append(dict(prompt=build_prompt(record["question"]), chosen=a, rejected=b, gold_chosen=g_a,
                          gold_rejected=g_b, answer=record["answer"]))  # fmt: skip
    return pairs


def _check_pair(row: object, where: str) -> dict:
    """The three strings of one pair, or a ValueError that says which field is wrong and how to fix it."""
    if not isinstance(row, dict):
        raise ValueError(f"{where}: expected a JSON object with string fields prompt, chosen, rejected")
    missing = [k for k in PAIR_KEYS if k not in row]
    if missing:
        raise ValueError(f"{where}: missing {', '.join(missing)} (has {', '.join(map(str, row)) or 'no keys'}); "
                         "each pair needs string fields prompt, chosen, rejected")  # fmt: skip
    bad = [k for k in PAIR_KEYS if not isinstance(row[k], str)]
    if bad:
        raise ValueError(f"{where}: {', '.join(bad)} must be a string (chat-message lists: apply the chat "
                         "template first)")  # fmt: skip
    if row["chosen"] == row["rejected"]:
        raise ValueError(f"{where}: chosen and rejected are the same text; a pair must differ")
    return {k: row[k] for k in PAIR_KEYS}


def load_pairs(source: str | Path, split: str = "train", limit: int | None = None) -> list[dict]:
    """``[{"prompt", "chosen", "rejected"}]`` from a ``.jsonl`` file or a hub id (``datasets.load_dataset``).

    Raises FileNotFoundError for a missing file, ValueError naming the line for a row that is not JSON
    or lacks a field, ConnectionError for a hub id that cannot be reached.
    """
    path = Path(source).expanduser()
    if path.suffix in (".jsonl", ".json") or path.exists() or str(source).startswith((".", "/", "~")):
        if not path.is_file():
            raise FileNotFoundError(f"preference file not found: {path}; pass a .jsonl file with one "
                                    '{"prompt": ..., "chosen": ..., "rejected": ...} object per line')  # fmt: skip
        pairs = []
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as err:
                raise ValueError(f"{path}, line {number}: not valid JSON ({err.msg}); one object per line") from None
            pairs.append(_check_pair(row, f"{path}, line {number}"))
        if not pairs:
            raise ValueError(f"{path} holds no pairs")
        return pairs[:limit]
    try:
        from datasets import load_dataset

        rows = load_dataset(str(source), split=split)
    except Exception as err:  # offline, unknown id, no such split
        raise ConnectionError(f"cannot load hub data set {source!r} (split {split!r}): {str(err).splitlines()[0]}; "
                              "pass a local .jsonl file instead") from None  # fmt: skip
    return [_check_pair(row, f"{source}[{i}]") for i, row in enumerate(rows)][:limit]


def save_pairs(pairs: list[dict], path: str | Path) -> Path:
    """Write pairs as JSON Lines (every field kept: the gold scores too), one object per line."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(p) + "\n" for p in pairs), encoding="utf-8")
    return path
