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

__all__ = [
    "solution",
    "solution_body",
    "filled_copy",
    "run_learner_copy",
    "run_all_stops_at_the_first_checker",
    "KNOWN_BREAKS",
    "KnownBreak",
    "SMOKE",
]

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


EXPECTED_ERROR = "NotImplementedYet"
EXPECTED_TEXT = "not implemented yet"


class _Kernel:
    """One kernel (this process's Python, cwd ``path``): ``run(nb, index)`` executes cell ``index`` of ``nb`` and
    returns None, or the cell's error output if it raised. Notebooks may take turns in it. Shut down on leaving the
    ``with``."""

    def __init__(self, nb, path: Path, timeout: int, env: dict | None = None):
        from nbclient import NotebookClient

        self.client = NotebookClient(
            nb, km=_current_env_kernel(), timeout=timeout, record_timing=False,
            resources={"metadata": {"path": str(path)}},
        )  # fmt: skip
        self.env = env

    def __enter__(self):
        self._setup = self.client.setup_kernel(env={**os.environ, **(self.env or {})})
        self._setup.__enter__()
        return self

    def __exit__(self, *exc):
        try:
            self._setup.__exit__(*exc)
        finally:  # a kernel manager handed in is not shut down by nbclient: the kernel would outlive the test
            if self.client.kc is not None:
                self.client.kc.stop_channels()
            self.client.km.shutdown_kernel(now=True)

    def run(self, nb, index: int) -> dict | None:
        from nbclient.exceptions import CellExecutionError

        self.client.nb = nb  # nbclient writes the executed cell back into its notebook
        cell = nb.cells[index]
        try:
            self.client.execute_cell(cell, index)
        except CellExecutionError:
            return next(out for out in cell.outputs if out.get("output_type") == "error")
        return None


def run_all_stops_at_the_first_checker(kernel: _Kernel, nb, where: str) -> int:
    """Run All on a learner copy as it is: every cell runs until the checker cell of its first exercise, which must
    raise ``NotImplementedYet`` ("... is not implemented yet"), as Run All in Jupyter stops there. Returns that
    cell's index; AssertionError, naming the cell, if a cell fails before it, if it passes, or if the copy ends."""
    first = nb.metadata["ppo_core"]["exercises"][0]
    for index, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        error = kernel.run(nb, index)
        is_checker = cell.get("id") == first["checker_cell"]
        if error is not None:
            ename, evalue = error.get("ename", "?"), error.get("evalue", "")
            if is_checker and ename == EXPECTED_ERROR and EXPECTED_TEXT in evalue:
                return index
            what = f"the checker of exercise {first['id']}" if is_checker else f"cell {index} (id {cell.get('id')})"
            raise AssertionError(
                f"{where}: {what} raised {ename}: {evalue}\n"
                f"expected Run All to stop at the checker of exercise {first['id']} with {EXPECTED_ERROR} "
                f"('{EXPECTED_TEXT}') on the untouched stub"
            )
        if is_checker:
            raise AssertionError(
                f"{where}: the checker of exercise {first['id']} passed on the stub; it should raise "
                f"{EXPECTED_ERROR} (is the solution region really replaced?)"
            )
    raise AssertionError(f"{where} ran to its end: it should stop at the checker of exercise {first['id']}")


def run_learner_copy(chapter: str, root: Path = ROOT, timeout: int = 900):
    """Run a learner copy twice over in one kernel (cwd: exercises/, ``PPO_NOTEBOOK_SMOKE=1``); return the filled
    notebook, executed from its first exercise on.

    1. The copy as it is, Run All: it must stop at the checker of its first exercise
       (``run_all_stops_at_the_first_checker``).
    2. Every stub filled with its second solution (``filled_copy``): from the first exercise's cell on, every cell
       runs to the end, every checker prints that it passed, and the last cell's progress lists every exercise as
       passed. The cells before the first exercise are those of step 1, already run in this kernel.

    Raises KnownBreak if step 2 stops at the cell ``KNOWN_BREAKS`` names, AssertionError anywhere else.
    """
    import nbformat

    learner = nbformat.reads((root / "exercises" / f"{chapter}.ipynb").read_text(encoding="utf-8"), as_version=4)
    nb = nbformat.reads(json.dumps(filled_copy(chapter, root)), as_version=4)
    entries = nb.metadata["ppo_core"]["exercises"]
    start = next(i for i, cell in enumerate(nb.cells) if cell.get("id") == entries[0]["cell"])
    with _Kernel(learner, root / "exercises", timeout, {SMOKE: "1"}) as kernel:
        run_all_stops_at_the_first_checker(kernel, learner, f"exercises/{chapter}.ipynb")
        for index in range(start, len(nb.cells)):
            cell = nb.cells[index]
            if cell.cell_type != "code":
                continue
            error = kernel.run(nb, index)
            if error is None:
                continue
            message = (
                f"exercises/{chapter}.ipynb with the second solutions stopped at cell {index} (id {cell.get('id')}): "
                f"{error.get('ename')}: {error.get('evalue')}\n\n" + "\n".join(error.get("traceback", []))
            )
            if KNOWN_BREAKS.get(chapter, (None,))[0] == cell.get("id"):
                raise KnownBreak(message)
            raise AssertionError(message)
    cells = {cell.get("id"): cell for cell in nb.cells}
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
