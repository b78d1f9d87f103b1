"""The exercises of every chapter, and the learner copies made from the chapters.

The chapter notebooks in ``chapters/`` are the one source of truth: each exercise is a code cell
tagged ``exercise`` whose body holds the working solution between the marker lines
``# SOLUTION START`` and ``# SOLUTION END``, followed (a few cells later at most) by the cell that
calls its checker, ``checks.check_xxx(fn)``. The learner copies in ``exercises/`` are generated from
them: the same notebook with every solution region replaced by a stub that raises
``NotImplementedError``, a short header, a cell that installs the package when the notebook runs in
Colab, and a last cell showing ``checks.progress()``.

    python -m tools.exercises build   # (re)write exercises/NN_slug.ipynb from chapters/NN_slug.ipynb
    python -m tools.exercises check   # exit 1, naming them, if some learner copy is out of date

The generator reads and writes the notebooks as plain JSON (no torch, no nbformat import), in the
same layout as ``nbformat.write``, so that a build is byte-for-byte reproducible.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import re
import sys
from pathlib import Path


def _load_catalog():
    """``ppo_core/checks/catalog.py``, the exercise table, imported on its own.

    Importing it as ``ppo_core.checks.catalog`` would run ``ppo_core.checks``, which imports torch;
    the generator needs only the table. The module is registered under its own name, so a later
    ``import ppo_core.checks`` in the same process shares it (one ``Exercise`` class, one table).
    """
    name = "ppo_core.checks.catalog"
    if name not in sys.modules:
        path = Path(__file__).resolve().parents[1] / "ppo_core" / "checks" / "catalog.py"
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


_catalog = _load_catalog()
CHAPTER_TITLES, EXERCISES, START, END = _catalog.CHAPTER_TITLES, _catalog.EXERCISES, _catalog.START, _catalog.END
Exercise, exercise_by_id, exercise_for_checker = (
    _catalog.Exercise,
    _catalog.exercise_by_id,
    _catalog.exercise_for_checker,
)

__all__ = [
    "REPO_URL",
    "EXERCISES",
    "CHAPTER_TITLES",
    "Exercise",
    "ExerciseError",
    "exercise_for_checker",
    "colab_url",
    "find_exercises",
    "stub_source",
    "replace_solution",
    "learner_copy",
    "render",
    "build",
    "stale",
    "main",
]

REPO_URL = "https://github.com/ppo-for-llms/ppo-for-llms"
"""The course repository: the Colab links and the Colab install cell both use it (placeholder until published)."""

BRANCH = "main"
CHAPTERS_DIR, EXERCISES_DIR = "chapters", "exercises"
EXERCISE_TAG = "exercise"
LINKS_CELL_ID = "exercise-links"
"""The id of the markdown cell near the top of each chapter that links to its learner copy."""


def colab_url(chapter: str) -> str:
    """The "Open in Colab" address of a chapter's learner copy (``chapter`` is the file stem)."""
    path = REPO_URL.removeprefix("https://github.com/")
    return f"https://colab.research.google.com/github/{path}/blob/{BRANCH}/{EXERCISES_DIR}/{chapter}.ipynb"


# ----------------------------------------------------------------------------------------------
# notebook JSON helpers (the layout nbformat writes: sources as lists of lines, sorted keys, indent 1)
# ----------------------------------------------------------------------------------------------


def _source(cell: dict) -> str:
    src = cell.get("source", "")
    return "".join(src) if isinstance(src, list) else src


def _lines(text: str) -> list[str]:
    return text.splitlines(keepends=True)


def _tags(cell: dict) -> list[str]:
    return list(cell.get("metadata", {}).get("tags", []))


def _markdown(cell_id: str, text: str) -> dict:
    return {"cell_type": "markdown", "id": cell_id, "metadata": {}, "source": _lines(text)}


def _code(cell_id: str, text: str) -> dict:
    return {
        "cell_type": "code",
        "execution_count": None,
        "id": cell_id,
        "metadata": {},
        "outputs": [],
        "source": _lines(text),
    }


def render(nb: dict) -> str:
    """The notebook as text, exactly as ``nbformat.write`` lays it out (so a rebuild is a no-op)."""
    return json.dumps(nb, sort_keys=True, indent=1, ensure_ascii=False, separators=(",", ": ")) + "\n"


# ----------------------------------------------------------------------------------------------
# finding the exercises of a chapter
# ----------------------------------------------------------------------------------------------

_HEADING = re.compile(r"^### Exercise (\d+\.\d+) — (.+?)\s*$", re.M)
_DEF = re.compile(r"^def (\w+)\(", re.M)


class ExerciseError(ValueError):
    """A chapter's exercise cells do not follow the conventions the generator relies on."""


def _solution_span(lines: list[str], where: str) -> tuple[int, int, str]:
    """(index of START, index of END, their indentation) in an exercise cell's lines."""
    starts = [i for i, line in enumerate(lines) if line.strip() == START]
    ends = [i for i, line in enumerate(lines) if line.strip() == END]
    if len(starts) != 1 or len(ends) != 1 or ends[0] < starts[0]:
        raise ExerciseError(f"{where}: needs exactly one `{START}` line followed by one `{END}` line")
    indent = lines[starts[0]][: len(lines[starts[0]]) - len(lines[starts[0]].lstrip())]
    if not indent or not lines[ends[0]].startswith(indent):
        raise ExerciseError(f"{where}: the solution markers must be indented to the function body")
    return starts[0], ends[0], indent


def find_exercises(nb: dict, chapter: str) -> list[dict]:
    """The exercises of a chapter notebook: for each, its registry entry and the indices of its cells.

    Returns dicts ``{"exercise": Exercise, "heading": i, "cell": i, "checker_cell": i, "cell_id": ...,
    "checker_cell_id": ...}`` in order (indices into ``nb["cells"]``, and the cells' ids).
    Raises ExerciseError when an exercise cell lacks a heading, markers, a registry entry or a checker cell.
    """
    cells, found = nb["cells"], []
    for i, cell in enumerate(cells):
        if cell["cell_type"] != "code" or EXERCISE_TAG not in _tags(cell):
            continue
        where = f"{chapter}.ipynb, cell {i} (id {cell.get('id')})"
        heading = next(
            (
                j
                for j in range(i - 1, -1, -1)
                if cells[j]["cell_type"] == "markdown" and _HEADING.search(_source(cells[j]))
            ),
            None,
        )
        if heading is None:
            raise ExerciseError(f"{where}: no `### Exercise N.M — title` markdown heading above the exercise cell")
        ex_id = _HEADING.findall(_source(cells[heading]))[-1][0]
        ex = exercise_by_id(ex_id)
        if ex is None or ex.chapter != chapter:
            raise ExerciseError(
                f"{where}: exercise {ex_id} is not in ppo_core.checks.catalog.EXERCISES for chapter {chapter}"
            )
        names = _DEF.findall(_source(cell))
        if ex.function not in names:
            raise ExerciseError(f"{where}: exercise {ex_id} should define `{ex.function}` (EXERCISES), found {names}")
        _solution_span(_lines(_source(cell)), where)
        call = re.compile(rf"^checks\.{ex.checker}\({ex.function}\)\s*;?\s*$")
        checker_cell = next(
            (
                j
                for j in range(i + 1, len(cells))
                if cells[j]["cell_type"] == "code" and call.match(_source(cells[j]).strip())
            ),
            None,
        )
        if checker_cell is None:
            raise ExerciseError(f"{where}: no cell `checks.{ex.checker}({ex.function})` after exercise {ex_id}")
        found.append(
            {
                "exercise": ex,
                "heading": heading,
                "cell": i,
                "checker_cell": checker_cell,
                "cell_id": cell.get("id"),
                "checker_cell_id": cells[checker_cell].get("id"),
            }
        )
    return found


# ----------------------------------------------------------------------------------------------
# the learner copy
# ----------------------------------------------------------------------------------------------


def replace_solution(source: str, body: str, where: str = "exercise cell") -> str:
    """The exercise cell's source with its solution region, marker lines included, replaced by ``body``
    (unindented code), indented to the markers. The learner copy's stub is one such body; the tests put
    other solutions in the same place (tests/learner_solutions/)."""
    lines = _lines(source)
    start, end, indent = _solution_span(lines, where)
    new = [indent + line if line.strip() else line for line in _lines(body.rstrip("\n") + "\n")]
    out = "".join(lines[:start] + new + lines[end + 1 :])
    return out if source.endswith("\n") else out.rstrip("\n")


def stub_source(source: str, ex: Exercise, where: str = "") -> str:
    """The exercise cell's source with its solution region replaced by a NotImplementedError stub."""
    stub = (
        "# Your code here: replace the `raise` below, run this cell, then run the checker cell.\n"
        f"# Hint: {ex.hint}.\n"
        f'raise NotImplementedError("Exercise {ex.id} is yours to write (the hints are in the cell above)")\n'
    )
    return replace_solution(source, stub, where or f"exercise {ex.id}")


def _header(chapter: str, exercises: list[dict]) -> str:
    listing = ", ".join(f"{e['exercise'].id} {e['exercise'].title}" for e in exercises)
    return (
        f"**This is the learner copy of the chapter.** Its exercises ({listing}) are stubs for you to fill in; "
        "everything else is the chapter as it is.\n"
        "\n"
        "1. Run the notebook from the top. A run stops at the first exercise you have not done yet, with a "
        '"not implemented yet" message from its checker: that is expected.\n'
        "2. Write the function in the exercise cell (the hints above it unfold one at a time), run the cell, "
        "then run the checker cell below it. A wrong answer is diagnosed: the message names the likely "
        "mistake and shows the expected and actual values on a tiny case.\n"
        "3. Carry on from there. `checks.progress()` lists which exercises pass, in every chapter.\n"
        "\n"
        f"The solutions are in the chapter itself, [`chapters/{chapter}.ipynb`](../chapters/{chapter}.ipynb) "
        f"(in Colab: [open this copy]({colab_url(chapter)})).\n"
        "\n"
        f"*Generated from `chapters/{chapter}.ipynb` by `python -m tools.exercises build`: edit the chapter, "
        "not this file.*\n"
    )


_SETUP = (
    "# In Google Colab, install the course's package first (about a minute); elsewhere this cell does nothing.\n"
    "import subprocess\n"
    "import sys\n"
    "\n"
    'if "google.colab" in sys.modules:\n'
    '    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "ppo_core @ git+{url}"], check=True)'
)

_PROGRESS_MD = "## Your progress\n\nEvery checker you ran, in every chapter (the last result of each):"
_PROGRESS_CODE = "from ppo_core import checks\n\nchecks.progress()"


def learner_copy(nb: dict, chapter: str) -> dict:
    """The learner copy of a chapter notebook (a new dict; ``nb`` is not modified).

    Every solution region becomes a stub, the links cell becomes the learner header, a Colab setup
    cell follows it, a progress cell ends the notebook, and the notebook's metadata records where
    each exercise and its checker cell are (``exercises/conftest.py`` reads it).
    """
    nb = json.loads(json.dumps(nb))  # deep copy
    found = find_exercises(nb, chapter)
    if not found:
        raise ExerciseError(f"{chapter}.ipynb has no exercise cells")
    cells = nb["cells"]
    for f in found:
        cell, ex = cells[f["cell"]], f["exercise"]
        cell["source"] = _lines(stub_source(_source(cell), ex, f"{chapter}.ipynb, cell {f['cell']}"))
        tags = [t for t in _tags(cell) if t != "hide-input"]  # the stub is the learner's to see
        cell["metadata"]["tags"] = tags
    for cell in cells:
        if cell["cell_type"] == "code":
            cell["execution_count"], cell["outputs"] = None, []
    links = next((i for i, c in enumerate(cells) if c.get("id") == LINKS_CELL_ID), None)
    header = [_markdown("learner-copy", _header(chapter, found)), _code("learner-setup", _SETUP.format(url=REPO_URL))]
    if links is None:
        cells[1:1] = header
    else:
        cells[links : links + 1] = header
    cells += [_markdown("learner-progress", _PROGRESS_MD), _code("learner-progress-check", _PROGRESS_CODE)]
    nb["metadata"]["ppo_core"] = {
        "learner_copy_of": f"{CHAPTERS_DIR}/{chapter}.ipynb",
        "exercises": [
            {
                "id": f["exercise"].id,
                "checker": f["exercise"].checker,
                "cell": f["cell_id"],
                "checker_cell": f["checker_cell_id"],
            }
            for f in found
        ],
    }
    return nb


# ----------------------------------------------------------------------------------------------
# build and check
# ----------------------------------------------------------------------------------------------


def default_root() -> Path:
    """The repository: the folder above the package if it holds ``chapters/``, else the current folder."""
    here = Path(__file__).resolve().parent.parent
    return here if (here / CHAPTERS_DIR).is_dir() else Path.cwd()


def expected_copies(root: Path) -> dict[str, str]:
    """{file name: text} of every learner copy the chapters in ``root/chapters`` produce."""
    out = {}
    for path in sorted((root / CHAPTERS_DIR).glob("*.ipynb")):
        nb = json.loads(path.read_text(encoding="utf-8"))
        if any(c["cell_type"] == "code" and EXERCISE_TAG in _tags(c) for c in nb["cells"]):
            out[path.name] = render(learner_copy(nb, path.stem))
    return out


def build(root: Path | None = None, out: Path | None = None) -> list[Path]:
    """Write every learner copy into ``out`` (default ``root/exercises``); remove copies of chapters
    that no longer exist. Returns the paths written or removed."""
    root = Path(root) if root else default_root()
    out = Path(out) if out else root / EXERCISES_DIR
    out.mkdir(parents=True, exist_ok=True)
    want, changed = expected_copies(root), []
    for name, text in want.items():
        path = out / name
        if not path.exists() or path.read_text(encoding="utf-8") != text:
            path.write_text(text, encoding="utf-8")
            changed.append(path)
    for path in sorted(out.glob("*.ipynb")):
        if path.name not in want:
            path.unlink()
            changed.append(path)
    return changed


def stale(root: Path | None = None, out: Path | None = None) -> list[str]:
    """Names of the learner copies that are missing, out of date, or left over from a removed chapter."""
    root = Path(root) if root else default_root()
    out = Path(out) if out else root / EXERCISES_DIR
    want = expected_copies(root)
    problems = []
    for name, text in want.items():
        path = out / name
        if not path.exists():
            problems.append(f"{EXERCISES_DIR}/{name} (missing)")
        elif path.read_text(encoding="utf-8") != text:
            problems.append(f"{EXERCISES_DIR}/{name} (out of date with {CHAPTERS_DIR}/{name})")
    problems += [
        f"{EXERCISES_DIR}/{p.name} (no such chapter)" for p in sorted(out.glob("*.ipynb")) if p.name not in want
    ]
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.exercises", description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "command", choices=["build", "check"], help="build: write the learner copies; check: exit 1 if one is stale"
    )
    parser.add_argument("--root", type=Path, default=None, help="the repository (default: the one holding the package)")
    args = parser.parse_args(argv)
    root = args.root or default_root()
    try:
        if args.command == "build":
            changed = build(root)
            print(
                f"{len(changed)} learner cop{'y' if len(changed) == 1 else 'ies'} written or removed in "
                f"{root / EXERCISES_DIR}" + "".join(f"\n  {p.relative_to(root)}" for p in changed)
            )
            return 0
        problems = stale(root)
    except ExerciseError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    if problems:
        print(
            "stale learner copies (run `python -m tools.exercises build`):\n  " + "\n  ".join(problems),
            file=sys.stderr,
        )
        return 1
    print(f"learner copies up to date in {root / EXERCISES_DIR}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
