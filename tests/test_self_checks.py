"""Every chapter ends its page with a self-check: a "## Check your understanding"
section of 6-10 questions, each followed by its answer in a collapsed block that the book renders
closed and Jupyter shows closed too.

Accepted collapsed blocks: ``<details><summary>...</summary> ... </details>`` (without ``open``), and
MyST dropdowns (``:::{dropdown}`` or a backtick fence, without ``:open:``). The section runs from its
heading to the next heading of level 1 or 2, over the heading's markdown cell and the markdown cells
right after it.
"""

import re
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parent.parent
CHAPTERS = sorted((ROOT / "chapters").glob("*.ipynb"))
HEADING = "## Check your understanding"
MIN_QUESTIONS, MAX_QUESTIONS = 6, 10

_BLOCK = re.compile(
    r"<details(?P<attrs>[^>]*)>(?P<details>.*?)</details>"
    r"|^(?P<fence>:{3,}|`{3,})\{dropdown\}[^\n]*\n(?P<dropdown>.*?)^(?P=fence)[ \t]*$",
    re.DOTALL | re.MULTILINE,
)
_SUMMARY = re.compile(r"<summary>.*?</summary>", re.DOTALL)


def section_text(cells: list[dict]) -> str | None:
    """The markdown of the "Check your understanding" section, or None if there is none."""
    for i, cell in enumerate(cells):
        if cell["cell_type"] != "markdown":
            continue
        lines = cell["source"].splitlines()
        if HEADING not in (line.strip() for line in lines):
            continue
        start = [line.strip() for line in lines].index(HEADING)
        body = ["\n".join(lines[start + 1 :])]
        for nxt in cells[i + 1 :]:
            if nxt["cell_type"] != "markdown":
                break
            body.append(nxt["source"])
        text = "\n\n".join(body)
        end = re.search(r"^#{1,2} ", text, re.MULTILINE)  # the next heading of level 1 or 2 ends the section
        return text[: end.start()] if end else text
    return None


def questions_and_answers(section: str) -> list[tuple[str, str]]:
    """(question, answer) pairs: each collapsed block is an answer, the text before it its question.

    Raises ValueError naming the problem: an answer block rendered open, an empty answer, an answer
    with no question before it, or text after the last answer.
    """
    pairs, pos = [], 0
    for m in _BLOCK.finditer(section):
        question = section[pos : m.start()].strip()
        if m.group("details") is not None:
            if re.search(r"\bopen\b", m.group("attrs")):
                raise ValueError(f"the answer to {question[:60]!r} is rendered open (<details open>)")
            answer = _SUMMARY.sub("", m.group("details")).strip()
        else:
            if re.search(r"^:open:", m.group("dropdown"), re.MULTILINE):
                raise ValueError(f"the answer to {question[:60]!r} is rendered open (:open:)")
            answer = m.group("dropdown").strip()
        if not re.search(r"\w", question):
            raise ValueError(f"answer {len(pairs) + 1} has no question before it")
        if not re.search(r"\w", answer):
            raise ValueError(f"the answer to {question[:60]!r} is empty")
        pairs.append((question, answer))
        pos = m.end()
    if pairs and re.search(r"\w", section[pos:]):
        raise ValueError(f"text after the last answer has no collapsed answer: {section[pos:].strip()[:60]!r}")
    return pairs


def test_every_chapter_is_checked():
    assert len(CHAPTERS) >= 5, f"expected the chapter notebooks in {ROOT / 'chapters'}"


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.stem)
def test_chapter_has_self_check(path):
    nb = nbformat.read(path, as_version=4)
    section = section_text(nb.cells)
    assert section is not None, f"{path.name}: no markdown cell with the heading {HEADING!r}"
    try:
        pairs = questions_and_answers(section)
    except ValueError as e:
        pytest.fail(f"{path.name}, {HEADING!r}: {e}")
    assert MIN_QUESTIONS <= len(pairs) <= MAX_QUESTIONS, (
        f"{path.name}: {len(pairs)} questions with a collapsed answer under {HEADING!r}, "
        f"expected {MIN_QUESTIONS}-{MAX_QUESTIONS}"
    )


def _cells(*sources):
    return [nbformat.v4.new_markdown_cell(s) for s in sources]


def test_parser_accepts_both_collapsed_forms():
    details = "**1. Why?**\n\n<details><summary>Answer</summary>\n\nBecause.\n\n</details>\n"
    dropdown = "**2. And?**\n\n:::{dropdown} Answer\nSo.\n:::\n"
    fenced = "**3. Then?**\n\n```{dropdown} Answer\nThus.\n```\n"
    section = section_text(_cells("# Title", f"{HEADING}\n\nIntro.", details + dropdown + fenced, "## Next\n\nx"))
    pairs = questions_and_answers(section)
    assert [a for _, a in pairs] == ["Because.", "So.", "Thus."]
    assert "Intro." in pairs[0][0] and pairs[2][0] == "**3. Then?**"


@pytest.mark.parametrize(
    ("section", "message"),
    [
        ("Q?\n\n<details open><summary>Answer</summary>\n\nA.\n</details>", "rendered open"),
        ("Q?\n\n:::{dropdown} Answer\n:open:\nA.\n:::", "rendered open"),
        ("Q?\n\n<details><summary>Answer</summary>\n\n</details>", "is empty"),
        ("<details><summary>Answer</summary>\n\nA.\n</details>", "no question"),
        ("Q?\n\n<details><summary>Answer</summary>\n\nA.\n</details>\n\nQ2 without an answer?", "after the last"),
    ],
)
def test_parser_rejects(section, message):
    with pytest.raises(ValueError, match=message):
        questions_and_answers(section)


def test_parser_counts_and_stops_at_the_next_heading():
    qa = "".join(f"**{i}. Q?**\n\n<details><summary>Answer</summary>\n\nA.\n\n</details>\n\n" for i in range(5))
    cells = _cells(f"{HEADING}\n\n{qa}## Summary\n\n{qa}")
    assert len(questions_and_answers(section_text(cells))) == 5  # the 5 after "## Summary" do not count
    assert section_text(_cells("## Check your understanding, maybe")) is None
