"""Tests for ppo_core.tasks.rewards (chapter 05): final-answer extraction and the GSM8K reward."""

import json
from decimal import Decimal
from pathlib import Path

import pytest

from ppo_core.tasks.rewards import extract_answer, gold_number, gsm8k_reward, is_correct, normalize_number

FIXTURE = Path(__file__).resolve().parent / "fixtures" / "gsm8k_tiny.jsonl"
GSM8K_DIR = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "gsm8k"


@pytest.mark.parametrize(
    "text, want",
    [
        ("#### 72", "72"),
        ("Natalia sold 24 clips.\n#### 72", "72"),
        ("#### 1,234", "1234"),
        ("#### 1,000,000", "1000000"),
        ("#### $1,234.50", "1234.5"),
        ("#### $ 5", "5"),
        ("#### 72.", "72"),  # a full stop, not a decimal point
        ("####    72   ", "72"),
        ("####\t72", "72"),
        ("####72", "72"),
        ("#### -3.50", "-3.5"),
        ("#### -$5", "-5"),
        ("#### $-5", "-5"),
        ("#### \u22124", "-4"),  # unicode minus sign
        ("#### +7", "7"),
        ("#### 18.0", "18"),
        ("#### 0.50", "0.5"),
        ("#### .5", "0.5"),
        ("#### 100", "100"),  # no exponent form ("1E+2")
        ("#### 0", "0"),
        ("#### -0.0", "0"),
        ("#### 72 clips", "72"),  # text after the number is ignored
        ("#### 10%", "10"),
        ("#### 72\nQuestion: a new one with #", "72"),
        ("#### 5\n#### 6", "6"),  # the last marker counts
        ("#### 5 #### 6", "6"),
        ("##### 7", "7"),
        ("#### 123456789012345678901234567890123.5", "123456789012345678901234567890123.5"),
    ],
)
def test_extract_answer(text, want):
    assert extract_answer(text) == want


@pytest.mark.parametrize(
    "text",
    [
        "",
        "The answer is 72.",  # no marker
        "####",  # marker with nothing
        "#### ",
        "####\n72",  # the number must be on the marker's line
        "#### The answer is 7",  # the number must come first
        "#### 5\n####",  # the last marker is empty: an earlier number does not rescue it
        "#### 3/4",  # fractions are rejected, not read as 3
        "#### 1,23",  # commas must group thousands
        "#### 1234,567",  # a group of three after four digits is not thousands
        "#### 12.5.3",
        "#### 5kg",
        "#### 1e5",
        "#### -",
        "#### $",
        "# 72",
    ],
)
def test_extract_answer_none(text):
    assert extract_answer(text) is None


@pytest.mark.parametrize("text, want", [("72", "72"), ("1,000", "1000"), (" 18.0 ", "18"), ("$-.5", "-0.5")])
def test_normalize_number(text, want):
    assert normalize_number(text) == want


@pytest.mark.parametrize("text", ["", "72 apples", "seventy", "1,23", "1234,567", "#### 72"])
def test_normalize_number_rejects(text):
    assert normalize_number(text) is None


@pytest.mark.parametrize(
    "gold, want",
    [("Step one.\nStep two.\n#### 72", "72"), ("#### 1,080", "1080"), ("72", "72"), ("1,000", "1000"), ("18.0", "18")],
)
def test_gold_number(gold, want):
    assert gold_number(gold) == want


@pytest.mark.parametrize("gold", ["", "no number here", "Work.\n#### ", "72 apples"])
def test_gold_number_rejects_broken_gold(gold):
    with pytest.raises(ValueError, match="gold answer"):
        gold_number(gold)


def test_broken_gold_raises_even_for_an_unformatted_completion():
    with pytest.raises(ValueError, match="gold answer"):
        gsm8k_reward("no marker here", "no number here")


@pytest.mark.parametrize(
    "completion, gold, want",
    [
        ("So 48 + 24 = 72.\n#### 72", "72", 1.0),
        ("#### 72", "Work.\n#### 72", 1.0),
        ("#### 1000", "1,000", 1.0),
        ("#### 1,000", "1000", 1.0),
        ("#### 18", "18.0", 1.0),
        ("#### 18.00", "Work.\n#### 18", 1.0),
        ("#### .5", "0.50", 1.0),
        ("#### $1,080.", "Work.\n#### 1,080", 1.0),
        ("#### 73", "72", 0.1),  # well formed, wrong
        ("#### -72", "72", 0.1),
        ("#### 72\n#### 73", "72", 0.1),  # the last marker counts
        ("The answer is 72.", "72", 0.0),  # no marker
        ("####", "72", 0.0),  # marker without number
        ("#### seventy-two", "72", 0.0),
        ("", "72", 0.0),
    ],
)
def test_gsm8k_reward_values(completion, gold, want):
    got = gsm8k_reward(completion, gold)
    assert isinstance(got, float)
    assert got == want  # exactly 1.0 / 0.1 / 0.0, no float arithmetic on the way


def test_gsm8k_reward_custom_scores():
    assert gsm8k_reward("#### 4", "4", correct=2.0, format_reward=0.0) == 2.0
    assert gsm8k_reward("#### 5", "4", correct=2.0, format_reward=-0.5) == -0.5
    assert gsm8k_reward("four", "4", correct=2.0, format_reward=-0.5) == 0.0


def test_numbers_compared_exactly_not_as_floats():
    # 2**53 + 1 and 2**53 are the same float64, but different answers
    assert float("9007199254740993") == float("9007199254740992")
    assert not is_correct("#### 9007199254740993", "9007199254740992")
    assert gsm8k_reward("#### 9007199254740993", "9007199254740992") == 0.1
    assert not is_correct("#### 0.30000000000000001", "0.3")


def test_is_correct():
    assert is_correct("#### 1,234", "1234")
    assert not is_correct("#### 1,235", "1234")
    assert not is_correct("1234", "1234")  # right number, but no marker


def _gold_solutions_score_one(path: Path) -> int:
    """Every record's answer field, as a completion, scores 1.0 against itself and its bare number."""
    n = 0
    with path.open(encoding="utf-8") as f:
        for line_no, line in enumerate(f, start=1):
            answer = json.loads(line)["answer"]
            bare = answer.rsplit("####", 1)[1].strip()  # as written, e.g. "1,080"
            assert gsm8k_reward(answer, answer) == 1.0, f"{path.name} line {line_no}"
            assert gsm8k_reward(answer, bare) == 1.0, f"{path.name} line {line_no}: {bare!r}"
            wrong = Decimal(bare.replace(",", "")) + 1
            assert gsm8k_reward(f"{answer}\n#### {wrong}", answer) == 0.1, f"{path.name} line {line_no}"
            n += 1
    return n


def test_fixture_gold_solutions_score_one():
    assert _gold_solutions_score_one(FIXTURE) == 10


@pytest.mark.parametrize("split, count", [("train", 7473), ("test", 1319)])
def test_real_gsm8k_gold_solutions_score_one(split, count):
    path = GSM8K_DIR / f"{split}.jsonl"
    if not path.is_file():
        pytest.skip(f"real GSM8K not found at {path} (only the course's build machines have ../shared/data/gsm8k)")
    assert _gold_solutions_score_one(path) == count
