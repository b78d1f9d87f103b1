"""Every checker accepts a second, differently written correct solution (tests/learner_solutions/).

A checker that compares with the package's exact arithmetic, or that names a mistake that is not one, fails here
without running a notebook. The learner copies run top to bottom with the same solutions in the slow tier
(exercises/conftest.py).
"""

import json
import re
from pathlib import Path

import pytest
from learner_solutions import filled_copy, solution, solution_body

from ppo_core import checks
from tools.exercises import END, EXERCISES, START, find_exercises

ROOT = Path(__file__).resolve().parents[1]


def _code_lines(text: str) -> set[str]:
    """The statements of a body, comments and blank lines dropped, whitespace squeezed."""
    lines = (re.sub(r"\s+", " ", line.split("#", 1)[0]).strip() for line in text.splitlines())
    return {line for line in lines if line}


def _chapter_solution(ex) -> str:
    nb = json.loads((ROOT / "chapters" / f"{ex.chapter}.ipynb").read_text(encoding="utf-8"))
    found = next(f for f in find_exercises(nb, ex.chapter) if f["exercise"] is ex)
    source = "".join(nb["cells"][found["cell"]]["source"])
    return source[source.index(START) + len(START) : source.index(END)]


def _computes(line: str) -> bool:
    """A statement that computes (a call or an assignment), not a bare ``if``/``else``/``return name``."""
    return "(" in line or re.search(r"[^=!<>]=[^=]", line) is not None


@pytest.mark.parametrize("ex", EXERCISES, ids=lambda ex: ex.id)
def test_second_solution_is_written_apart_from_the_chapter(ex):
    """A second solution exists for every exercise, and at most a fifth of its computing statements (calls,
    assignments) appear in the chapter's worked solution: it is not a copy of it."""
    assert solution(ex.id).__name__ == ex.function
    ours = {line for line in _code_lines(solution_body(ex.id)) if _computes(line)}
    shared = ours & _code_lines(_chapter_solution(ex))
    assert len(shared) <= len(ours) / 5, f"exercise {ex.id}: the second solution repeats the chapter's {sorted(shared)}"


@pytest.mark.parametrize("ex", EXERCISES, ids=lambda ex: ex.id)
def test_checker_accepts_the_second_solution(ex, monkeypatch, capsys):
    monkeypatch.setenv("PPO_CORE_PROGRESS", "off")
    assert getattr(checks, ex.checker)(solution(ex.id)) is True
    assert f"{ex.checker} passed (exercise {ex.id})" in capsys.readouterr().out


@pytest.mark.parametrize("chapter", sorted({ex.chapter for ex in EXERCISES}))
def test_filled_copy_holds_the_second_solutions_in_place_of_the_stubs(chapter):
    """What the slow tier runs: the learner copy, each stub replaced by the second solution's body, indented to
    the function, nothing else changed."""
    learner = json.loads((ROOT / "exercises" / f"{chapter}.ipynb").read_text(encoding="utf-8"))
    filled = filled_copy(chapter)
    entries = {e["cell"]: e["id"] for e in filled["metadata"]["ppo_core"]["exercises"]}
    assert len(filled["cells"]) == len(learner["cells"]) and entries
    for before, after in zip(learner["cells"], filled["cells"]):
        source = "".join(after["source"])
        if before.get("id") not in entries:
            assert after == before
            continue
        ex_id = entries[before["id"]]
        assert "NotImplementedError" not in source and f"Exercise {ex_id} is yours" not in source
        compile(source, f"exercise {ex_id}", "exec")  # the body sits inside the function
        body = [line.strip() for line in solution_body(ex_id).splitlines() if line.strip()]
        assert [line.strip() for line in source.splitlines() if line.strip()][-len(body) :] == body
