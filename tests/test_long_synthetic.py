"""The long-answer synthetic task: ~100-token worked solutions whose first token decides the answer."""

import random
import re

from ppo_core.tasks.long_synthetic import demonstration, long_answer, make_long_task
from ppo_core.tasks.rewards import gold_number, is_correct
from ppo_core.tasks.synthetic import SYNTHETIC_ALPHABET, TEST_NAMES, TRAIN_NAMES

LINE = re.compile(r"Then \w+ (gets|loses) (\d) so (\d)([+-])(\d)=(\d)\.")


def _chain_ok(answer: str) -> bool:
    """Every working line is right arithmetic continuing the previous total, and #### repeats the last total."""
    lines = answer.split("\n")
    x = int(lines[0].split(" ")[0])
    for line in lines[1:-1]:
        m = LINE.fullmatch(line)
        verb, b, a, op, b2, y = m.groups()
        assert int(a) == x and b == b2 and (op == "+") == (verb == "gets")
        x = int(a) + int(b) if op == "+" else int(a) - int(b)
        assert x == int(y) and 0 <= x <= 9
    return lines[-1] == f"#### {x}"


def test_records_are_long_well_formed_and_the_first_token_is_the_start():
    train, test = make_long_task(0, n_train=500, n_test=100)
    assert len({r["question"] for r in train}) == 500 and not {r["question"] for r in train} & {
        r["question"] for r in test
    }
    assert all(r["name"] in TRAIN_NAMES for r in train) and all(r["name"] in TEST_NAMES for r in test)
    for r in train + test:
        assert set(r["question"] + r["answer"]) <= set(SYNTHETIC_ALPHABET)
        assert 100 <= len(r["answer"]) <= 115  # tokens, with the character-level tokenizer
        assert r["answer"][0] == str(r["start"]) and _chain_ok(r["answer"])
        assert is_correct(r["answer"], r["answer"])
    assert make_long_task(0, 50, 10) == make_long_task(0, 50, 10)


def test_demonstrations_start_wrong_and_then_work_correctly():
    train, _ = make_long_task(1, n_train=300, n_test=10)
    rng = random.Random(0)
    demos = [demonstration(r, rng, answer_noise=0.75) for r in train]
    wrong = [(d, r) for d, r in zip(demos, train) if d != r["answer"]]
    assert 0.6 < len(wrong) / len(train) <= 0.75
    for d, r in wrong:
        assert d[0] != str(r["start"]) and _chain_ok(d)  # a wrong first number, correct working from it
        assert gold_number(d) != gold_number(r["answer"]) or d.split("\n")[0] != r["answer"].split("\n")[0]
    assert all(demonstration(r, rng, 0.0) == r["answer"] for r in train)
    assert long_answer(3, [("+", 4), ("-", 2), ("+", 1)], "apples", "Ann").endswith("#### 6")
