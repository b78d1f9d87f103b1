import re

import pytest

from ppo_core.tasks.rewards import extract_answer
from ppo_core.tasks.synthetic import (
    SYNTHETIC_ALPHABET,
    TEST_NAMES,
    TEST_OBJECTS,
    TRAIN_NAMES,
    TRAIN_OBJECTS,
    make_synthetic_task,
)

_QUESTION = re.compile(r"(\w+) ha[sd] (\d) (\w+) and (gets|found|gives away|lost) (\d)")


def _facts(question: str) -> tuple[str, int, str, int, str]:
    """(name, a, object, b, op) read back from a question."""
    name, a, obj, verb, b = _QUESTION.match(question).groups()
    return name, int(a), obj, int(b), "+" if verb in ("gets", "found") else "-"


def test_deterministic_in_the_seed():
    assert make_synthetic_task(3, 50, 20) == make_synthetic_task(3, 50, 20)
    assert make_synthetic_task(3, 50, 20) != make_synthetic_task(4, 50, 20)


def test_sizes_and_distinct_questions():
    train, test = make_synthetic_task(0, 300, 100)
    assert len(train) == 300 and len(test) == 100
    assert len({r["question"] for r in train}) == 300 and len({r["question"] for r in test}) == 100


def test_held_out_split_never_seen_in_training():
    train, test = make_synthetic_task(0)
    assert not {r["question"] for r in train} & {r["question"] for r in test}
    assert not set(TRAIN_NAMES) & set(TEST_NAMES) and not set(TRAIN_OBJECTS) & set(TEST_OBJECTS)
    for records, names, objects in ((train, TRAIN_NAMES, TRAIN_OBJECTS), (test, TEST_NAMES, TEST_OBJECTS)):
        for r in records:
            name, a, obj, _, _ = _facts(r["question"])
            assert name in names and (obj + "s" if a == 1 else obj) in objects  # "1 apple", "2 apples"


def test_held_out_facts_are_practised_in_training():
    """The split holds out names and objects, not arithmetic facts (see the module docstring)."""
    train, test = make_synthetic_task(0)
    train_facts = {r["answer"] for r in train}
    assert {r["answer"] for r in test} <= train_facts
    assert len(train_facts) == 155  # 100 additions + 55 subtractions with a >= b


def test_answer_is_gsm8k_format_and_right():
    train, test = make_synthetic_task(1, 500, 200)
    for r in train + test:
        _, a, _, b, op = _facts(r["question"])
        result = a + b if op == "+" else a - b
        assert result >= 0
        assert r["answer"] == f"{a}{op}{b}={result}\n#### {result}"
        assert extract_answer(r["answer"]) == str(result)


def test_every_character_is_in_the_alphabet():
    train, test = make_synthetic_task(2)
    used = set("".join(r["question"] + r["answer"] for r in train + test))
    assert used <= set(SYNTHETIC_ALPHABET)
    assert len(SYNTHETIC_ALPHABET) == len(set(SYNTHETIC_ALPHABET))


def test_asking_for_more_problems_than_exist_fails_loudly():
    with pytest.raises(ValueError, match="distinct"):
        make_synthetic_task(0, n_train=10, n_test=20_000)


def test_additions_and_subtractions_are_drawn_half_and_half():
    train, test = make_synthetic_task(0)
    for records in (train, test):
        additions = sum("+" in r["answer"] for r in records) / len(records)
        assert abs(additions - 0.5) < 0.05
