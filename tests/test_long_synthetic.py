"""The long-answer synthetic task: ~100-token worked solutions whose first token decides the answer."""

import random
import re

import pytest

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


def test_warm_start_long_trains_on_the_demonstrations_unchanged(tmp_path, monkeypatch):
    """The long warm start's targets are the demonstrations: correct working from the (wrong) start, no second noise."""
    from ppo_core.tasks import warmstart
    from ppo_core.tasks.long_synthetic import warm_start_long

    class Stop(Exception):
        pass

    targets = []

    def spy_batch(tokenizer, prompts, completions):
        targets.extend(completions)
        raise Stop  # the first batch is enough

    monkeypatch.setattr(warmstart, "sft_batch", spy_batch)
    with pytest.raises(Stop):
        warm_start_long(tmp_path, steps=1, batch_size=16, answer_noise=1.0, n_train=40, n_test=2, progress=False)
    assert len(targets) == 16 and all(_chain_ok(t) for t in targets)


def test_every_step_changes_the_total_by_one_to_nine():
    train, test = make_long_task(0, n_train=500, n_test=100)
    for r in train + test:
        assert len(r["steps"]) == 3 and all(op in "+-" and 1 <= b <= 9 for op, b in r["steps"])
        assert "gets 0" not in r["question"] and "loses 0" not in r["question"]
