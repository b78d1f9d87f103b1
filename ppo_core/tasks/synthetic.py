"""Chapter 05 - a synthetic GSM8K-shaped task that trains on two CPU cores in minutes.

Each record is a one-step arithmetic word problem in GSM8K's answer format::

    question: "Ann has 3 apples and gets 4 more. How many now?"
    answer:   "3+4=7\\n#### 7"

The *facts* are every single-digit addition ``a+b`` (100 facts) and every single-digit subtraction
``a-b`` with ``a >= b`` (55 facts); each problem picks the operation with probability 1/2, then its
operands, a template, a name and an object.

The held-out split uses the **same facts** but **names and objects never seen in training**: a test
question is new text (a new name, a new object, a new question string) over arithmetic the model has
practised. We chose this split on purpose. A 1-10 M parameter model memorises facts rather than
learning to add, so holding out whole facts caps what any training can reach (a prototype measured
greedy accuracy stuck at 50-60 %); with the fact set shared, the held-out score measures whether the
policy reads the numbers out of an unseen question and writes a well-formed, correct answer - which
is exactly what the RL stage of this course is meant to change.

Every character the task can produce is in ``SYNTHETIC_ALPHABET`` (a small fixed set), so a
character-level tokenizer built from it never meets an unknown character.
"""

import random
import string

__all__ = ["SYNTHETIC_ALPHABET", "TRAIN_NAMES", "TEST_NAMES", "TRAIN_OBJECTS", "TEST_OBJECTS", "make_synthetic_task"]

SYNTHETIC_ALPHABET = " \n#+-=.?" + string.digits + string.ascii_lowercase + string.ascii_uppercase
"""All characters a question or answer can contain: space, newline, ``#+-=.?``, digits, letters."""

TRAIN_NAMES = (
    "Ann",
    "Bob",
    "Cat",
    "Dan",
    "Eve",
    "Fay",
    "Gus",
    "Hal",
    "Ivy",
    "Jon",
    "Kim",
    "Lee",
    "Max",
    "Ned",
    "Pam",
    "Ray",
    "Sam",
    "Tom",
    "Uma",
    "Val",
)
TEST_NAMES = ("Wes", "Xia", "Yul", "Zoe", "Ada", "Ben", "Cy", "Di")
TRAIN_OBJECTS = (
    "apples",
    "books",
    "cards",
    "coins",
    "cups",
    "eggs",
    "hats",
    "keys",
    "pens",
    "rocks",
    "shells",
    "stamps",
)
TEST_OBJECTS = ("beads", "bells", "dolls", "kites", "marbles", "plums")

# {n} name, {a} {b} operands, {o} object (plural; every object name drops a final "s" for one).
# Two phrasings per operation, kept short: prompt tokens are most of the compute in every forward pass.
_ADD_TEMPLATES = (
    "{n} has {a} {o} and gets {b} more. How many now?",
    "{n} had {a} {o} and found {b} more. How many now?",
)
_SUB_TEMPLATES = (
    "{n} has {a} {o} and gives away {b}. How many now?",
    "{n} had {a} {o} and lost {b}. How many are left?",
)


def _problem(rng: random.Random, names: tuple, objects: tuple) -> dict:
    """One record: pick an operation, its operands, a template, a name and an object."""
    if rng.random() < 0.5:
        a, b = rng.randrange(10), rng.randrange(10)
        op, result, template = "+", a + b, rng.choice(_ADD_TEMPLATES)
    else:
        a = rng.randrange(10)
        b = rng.randrange(a + 1)
        op, result, template = "-", a - b, rng.choice(_SUB_TEMPLATES)
    obj = rng.choice(objects)
    question = template.format(n=rng.choice(names), a=a, b=b, o=obj[:-1] if a == 1 else obj)
    return {"question": question, "answer": f"{a}{op}{b}={result}\n#### {result}"}


def _unique_problems(rng: random.Random, n: int, names: tuple, objects: tuple) -> list[dict]:
    """``n`` records with distinct questions (a repeat is drawn again)."""
    per_fact = len(names) * len(objects)
    distinct = per_fact * (len(_ADD_TEMPLATES) * 100 + len(_SUB_TEMPLATES) * 55)
    if n > distinct // 2:  # beyond half, redrawing repeats gets slow
        raise ValueError(f"asked for {n} distinct problems; at most {distinct // 2} of the {distinct} possible")
    seen, records = set(), []
    while len(records) < n:
        record = _problem(rng, names, objects)
        if record["question"] not in seen:
            seen.add(record["question"])
            records.append(record)
    return records


def make_synthetic_task(seed: int = 0, n_train: int = 4000, n_test: int = 500) -> tuple[list[dict], list[dict]]:
    """Train and held-out splits of ``{"question": str, "answer": str}`` records, deterministic in ``seed``.

    The answer is the working line and a final ``#### <result>`` line, as in GSM8K. Held-out records
    use only ``TEST_NAMES`` and ``TEST_OBJECTS``, so no held-out question can occur in training.
    """
    rng = random.Random(seed)
    train = _unique_problems(rng, n_train, TRAIN_NAMES, TRAIN_OBJECTS)
    test = _unique_problems(rng, n_test, TEST_NAMES, TEST_OBJECTS)
    return train, test
