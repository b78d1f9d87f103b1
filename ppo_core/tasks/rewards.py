"""Chapter 05 - the task reward of the full loop: is the final answer of a GSM8K completion right?

GSM8K solutions end with a line ``#### <number>``; the number after the *last* ``####`` marker is
the final answer. The reward is the sequence score that ``ppo_core.gae.token_rewards`` puts on
the last response token:

    1.0  the final answer equals the gold answer          (``correct``)
    0.1  a well-formed final answer, but the wrong number  (``format_reward``)
    0.0  no ``####`` marker followed by a number

What ``extract_answer`` accepts after the last marker (same line, spaces and tabs allowed):

    #### 72            -> "72"        #### $1,234.50   -> "1234.5"     #### -3.50  -> "-3.5"
    #### 72.           -> "72"        #### -$5 / $-5   -> "-5"         #### −4     -> "-4"  (U+2212)
    #### 72 clips      -> "72"        #### 10%         -> "10"         #### .5     -> "0.5"
    #### 5 #### 6      -> "6"         ####             -> None         #### 3/4    -> None
    #### The answer 7  -> None        #### 1,23        -> None         #### 5kg    -> None

The number must come first; text after it (a unit word, a full stop, the next line) is ignored.
Commas must group thousands (``1,234``); a number glued to letters, digits after a second comma
or point, and fractions ``a/b`` are rejected rather than half-read. Only the last marker counts,
even when it is empty and an earlier one was not: the completion's final statement is malformed.

Numbers are compared exactly, as ``decimal.Decimal`` values, never as floats: ``18.0 == 18``,
``1,000 == 1000``, ``0.50 == .5``.
"""

import re
from decimal import Context, Decimal

__all__ = [
    "ANSWER_MARKER",
    "extract_answer",
    "normalize_number",
    "gold_number",
    "is_correct",
    "accuracy",
    "gsm8k_reward",
]

ANSWER_MARKER = "####"

_NUMBER = re.compile(
    r"""
    [ \t]*
    (?: (?P<sign_a>[-+\u2212]) [ \t]* \$         # -$5
      | \$? [ \t]* (?P<sign_b>[-+\u2212])? )     # $-5, $5, -5, 5
    [ \t]*
    (?P<digits> [0-9]{1,3}(?:,[0-9]{3})+(?:\.[0-9]+)?   # 1,234 or 1,234.5
              | [0-9]+(?:\.[0-9]+)?                     # 1234 or 1234.5
              | \.[0-9]+ )                              # .5
    (?! [\w/] | [.,][0-9] )                      # not 5kg, 3/4, 1,23, 1.2.3
    """,
    re.VERBOSE,
)


def _canonical(value: Decimal) -> str:
    """The one string for a number: no exponent, no trailing zeros, no ``-0``."""
    if value == 0:
        return "0"
    context = Context(prec=max(28, len(value.as_tuple().digits)))
    return format(value.normalize(context), "f")


def _match_number(text: str) -> tuple[str, int] | None:
    """Parse a number at the start of ``text``: (canonical string, end index), or None."""
    match = _NUMBER.match(text)
    if match is None:
        return None
    value = Decimal(match["digits"].replace(",", ""))
    if (match["sign_a"] or match["sign_b"]) in ("-", "\u2212"):
        value = -value
    return _canonical(value), match.end()


def normalize_number(text: str) -> str | None:
    """A bare number (``"1,000"``, ``" $18.0 "``, ``"-.5"``) -> its canonical string, or None."""
    parsed = _match_number(text)
    if parsed is None or text[parsed[1] :].strip():
        return None
    return parsed[0]


def extract_answer(text: str) -> str | None:
    """The final answer of a completion: the number right after the last ``####``, normalised.

    Returns e.g. ``"1234"`` for ``"... #### 1,234."`` and ``"-3.5"`` for ``"#### -3.50"``; None
    when there is no marker or the last marker is not followed by a number on its line.
    """
    start = text.rfind(ANSWER_MARKER)
    if start < 0:
        return None
    parsed = _match_number(text[start + len(ANSWER_MARKER) :])
    return None if parsed is None else parsed[0]


def gold_number(gold_answer: str) -> str:
    """The gold final answer, normalised: from GSM8K's whole ``answer`` field or a bare number.

    ``"...\\n#### 72"`` -> ``"72"``; ``"1,000"`` -> ``"1000"``; ``"18.0"`` -> ``"18"``.
    Raises ValueError when neither form parses (a broken data set, not a wrong completion).
    """
    if ANSWER_MARKER in gold_answer:
        number = extract_answer(gold_answer)
    else:
        number = normalize_number(gold_answer)
    if number is None:
        shown = gold_answer if len(gold_answer) <= 60 else "..." + gold_answer[-57:]
        raise ValueError(f"gold answer {shown!r} has no final '#### <number>' and is not a bare number")
    return number


def is_correct(completion: str, gold_answer: str) -> bool:
    """True when the completion's final answer equals the gold answer as a number (accuracy metric)."""
    gold = gold_number(gold_answer)  # parsed first, so a broken gold answer always raises
    predicted = extract_answer(completion)
    return predicted is not None and Decimal(predicted) == Decimal(gold)


def accuracy(completions: list[str], records: list[dict], correct_fn=is_correct) -> float:
    """Share of ``completions`` whose final answer is right for the matching record (0.0 for none)."""
    hits = [correct_fn(c, r["answer"]) for c, r in zip(completions, records)]
    return sum(hits) / len(hits) if hits else 0.0


def gsm8k_reward(completion: str, gold_answer: str, correct: float = 1.0, format_reward: float = 0.1) -> float:
    """The sequence score of one completion: ``correct``, ``format_reward`` or 0.0.

    Args:
        completion: the generated response text (the prompt not included).
        gold_answer: GSM8K's whole ``answer`` field (ending in ``#### N``) or the bare number.
        correct: the score for a right final answer.
        format_reward: the score for a ``#### <number>`` final answer with the wrong number;
            a small bonus that teaches the format before the model gets answers right.
    """
    if is_correct(completion, gold_answer):
        return float(correct)
    return 0.0 if extract_answer(completion) is None else float(format_reward)
