"""A second, differently written correct solution of every exercise, one module per chapter, and the run of
every learner copy with them filled in.

Each ``chNN_slug.py`` defines the exercise functions of chapter ``NN_slug`` under the names the exercise cells
use. They are written apart from the chapters' worked solutions (another order of operations, a loop, float64
intermediates, ``torch.prod`` instead of a sum of logs, ``exp(a) / exp(b)`` instead of ``exp(a - b)``), as a
learner might write them, so that a checker or a notebook cell that accepts only the chapter's exact arithmetic
fails a test (tests/test_learner_solutions.py, and the second-solution run of every learner copy,
exercises/conftest.py). A function's body, from the line after its signature, is what fills the exercise's stub:
it may use the names the chapter has imported by then (``torch``, ``F``, ``RatioCheckError``).
"""

import ast
import importlib
import inspect
import json
import os
import re
import textwrap
from pathlib import Path

from tools.exercises import EXERCISES, find_exercises, replace_solution, stub_source

__all__ = ["solution", "solution_body", "filled_copy", "run_filled_copy", "KNOWN_BREAKS", "KnownBreak", "SMOKE"]

ROOT = Path(__file__).resolve().parents[2]

KNOWN_BREAKS = {}
"""Chapter -> (cell id, why): learner copies that stop at a cell after their exercises although every checker passed.
Each is a known defect of the chapter, expected to fail there (xfail, strict): once the chapter is fixed the run
passes, the strict xfail fails, and the entry goes."""


SMOKE = "PPO_NOTEBOOK_SMOKE"
"""Set to 1 in the kernel of a filled learner copy: the chapters whose experiments train for minutes (05, 06) train
for a few steps there and do not check what the trainings learn. The run checks that every cell runs with the second
solutions and that every checker passes; the chapter's own nbval run checks the claims at full length."""


class KnownBreak(AssertionError):
    """The learner copy stopped at the cell ``KNOWN_BREAKS`` names for it."""


def _module(chapter: str):
    return importlib.import_module(f"{__name__}.ch{chapter}")


def solution(ex_id: str):
    """The second solution of exercise ``ex_id`` ("3.1"): a function named like the exercise's."""
    ex = next(e for e in EXERCISES if e.id == ex_id)
    return getattr(_module(ex.chapter), ex.function)


def solution_body(ex_id: str) -> str:
    """The body of the second solution of ``ex_id``: the lines after its signature, dedented."""
    fn = solution(ex_id)
    source = textwrap.dedent(inspect.getsource(fn))
    node = ast.parse(source).body[0]
    lines = source.splitlines(keepends=True)
    first = node.body[0].lineno - 1  # the first statement; comments between it and the signature come along
    while first > 0 and lines[first - 1].strip().startswith("#"):
        first -= 1
    return textwrap.dedent("".join(lines[first : node.end_lineno]))


def _source(cell) -> str:
    src = cell.get("source", "")
    return "".join(src) if isinstance(src, list) else src


def filled_copy(chapter: str, root: Path = ROOT) -> dict:
    """The learner copy ``exercises/<chapter>.ipynb`` (JSON) with every stub replaced by the second solution.

    The stub must be the one ``tools.exercises`` makes from the chapter (else the copy is stale: rebuild it).
    """
    chapter_nb = json.loads((root / "chapters" / f"{chapter}.ipynb").read_text(encoding="utf-8"))
    learner_nb = json.loads((root / "exercises" / f"{chapter}.ipynb").read_text(encoding="utf-8"))
    cells = {cell.get("id"): cell for cell in learner_nb["cells"]}
    for found in find_exercises(chapter_nb, chapter):
        ex, source = found["exercise"], _source(chapter_nb["cells"][found["cell"]])
        cell = cells[found["cell_id"]]
        if _source(cell) != stub_source(source, ex):
            raise AssertionError(f"exercises/{chapter}.ipynb is stale: run `python -m tools.exercises build`")
        filled = replace_solution(source, solution_body(ex.id), f"exercise {ex.id}")
        cell["source"] = filled.splitlines(keepends=True)
    return learner_nb


def _current_env_kernel():
    """A kernel manager for this process's Python (as nbval's --nbval-current-env): the checkout's package and
    environment variables (PYTHONPATH, PPO_NOTEBOOK_QUICK, ...) reach the kernel."""
    import ipykernel.kernelspec
    from jupyter_client.kernelspec import KernelSpec, KernelSpecManager
    from jupyter_client.manager import KernelManager

    class CurrentEnv(KernelSpecManager):
        def get_kernel_spec(self, kernel_name):
            return KernelSpec(resource_dir=ipykernel.kernelspec.RESOURCES, **ipykernel.kernelspec.get_kernel_dict())

    return KernelManager(kernel_name="python3", kernel_spec_manager=CurrentEnv())


def run_filled_copy(chapter: str, root: Path = ROOT, timeout: int = 900):
    """Run the filled learner copy top to bottom (cwd: exercises/); return the executed notebook.

    Raises KnownBreak if it stops at the cell ``KNOWN_BREAKS`` names, AssertionError if it stops anywhere else,
    if a checker cell does not print that it passed, or if the last cell's progress does not list the chapter's
    exercises as passed.
    """
    import nbformat
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError

    nb = nbformat.reads(json.dumps(filled_copy(chapter, root)), as_version=4)
    client = NotebookClient(
        nb,
        km=_current_env_kernel(),
        timeout=timeout,
        record_timing=False,
        resources={"metadata": {"path": str(root / "exercises")}},
    )
    try:
        client.execute(env={**os.environ, SMOKE: "1"})
    except CellExecutionError as err:
        index, cell = next(
            (i, c)
            for i, c in enumerate(nb.cells)
            if any(out.get("output_type") == "error" for out in c.get("outputs", []))
        )
        error = next(out for out in cell.outputs if out.get("output_type") == "error")
        message = (
            f"exercises/{chapter}.ipynb with the second solutions stopped at cell {index} (id {cell.get('id')}): "
            f"{error.get('ename')}: {error.get('evalue')}\n\n{err}"
        )
        if KNOWN_BREAKS.get(chapter, (None,))[0] == cell.get("id"):
            raise KnownBreak(message) from None
        raise AssertionError(message) from None
    cells = {cell.get("id"): cell for cell in nb.cells}
    entries = nb.metadata["ppo_core"]["exercises"]
    for entry in entries:
        printed = "".join(out.get("text", "") for out in cells[entry["checker_cell"]].outputs)
        assert f"{entry['checker']} passed (exercise {entry['id']})" in printed, (entry, printed)
    last = nb.cells[-1]
    progress = "".join(
        out.get("data", {}).get("text/plain", "") for out in last.outputs if out.get("output_type") == "execute_result"
    )
    for entry in entries:
        assert re.search(rf"^\W*{re.escape(entry['id'])}\s.*\spassed\s*$", progress, re.M), (entry["id"], progress)
    return nb
