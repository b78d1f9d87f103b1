"""tools.book.merge_streams: what a printed output looks like after \\r, \\x08 and chunked writes.

Every printed output of the book once came out blank: a word-boundary regex (``r"\\b"``) stood where a
backspace was meant, and it ate the text. These cases pin the behaviour on real control characters.
"""

import pytest

from tools.book import merge_streams


def stream(text, name="stdout"):
    return {"output_type": "stream", "name": name, "text": text}


@pytest.mark.parametrize(
    "text",
    [
        "rewards: [0.0, 0.0, 1.0]\n",
        "step 10 | reward 0.81 | kl 1.9e-02\nstep 20 | reward 0.93\n",
        "word boundaries: a-b c_d e.f (g) 'h' \"i\" 1/2 x=3\n",
        "  indented\ttabs\n\ntrailing spaces   \n",
        "ünïcödé → λ γ ε π_θ\n",
    ],
)
def test_plain_text_is_unchanged(text):
    assert merge_streams([stream(text)]) == [stream(text)]


def test_consecutive_chunks_of_one_stream_merge():
    out = merge_streams([stream("rew"), stream("ards: 1\n"), stream("warn\n", "stderr"), stream("next\n")])
    assert out == [stream("rewards: 1\n"), stream("warn\n", "stderr"), stream("next\n")]


def test_other_outputs_are_kept_in_place():
    image = {"output_type": "display_data", "data": {"image/png": "..."}, "metadata": {}}
    out = merge_streams([stream("a\n"), image, stream("b\n")])
    assert out == [stream("a\n"), image, stream("b\n")]


@pytest.mark.parametrize(
    "raw, shown",
    [
        ("10%\r50%\r100%\n", "100%\n"),  # a progress line redrawn in place
        ("  0%|          | 0/3\r100%|##########| 3/3\ndone\n", "100%|##########| 3/3\ndone\n"),
        ("line one\r\nline two\n", "line one\r\nline two\n"),  # \r\n is a line end, not a redraw
        ("abc\x08\x08d\n", "ad\n"),  # each backspace erases one character
        ("\x08start\n", "start\n"),  # nothing to erase: the backspace is dropped
        ("ab\n\x08c\n", "ab\nc\n"),  # a backspace never erases a line break
        ("spin |\x08/\x08-\x08\\\x08done\n", "spin done\n"),
    ],
)
def test_control_characters_are_applied(raw, shown):
    assert merge_streams([stream(raw)]) == [stream(shown)]


def test_control_characters_across_chunks():
    assert merge_streams([stream("50%"), stream("\r100%\n")]) == [stream("100%\n")]
    assert merge_streams([stream("ab"), stream("\x08c\n")]) == [stream("ac\n")]
