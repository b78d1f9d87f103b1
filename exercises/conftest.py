"""Test-suite plumbing for the learner copies. Learners: you can ignore this file.

The notebooks in this folder are generated from ``chapters/`` by ``python -m tools.exercises
build``, with every exercise replaced by a stub. ``pytest`` runs them with nbval like the chapters,
but a learner copy is *expected* to stop, exactly as "Run All" does in Jupyter: the checker cell of
its first exercise raises the friendly ``NotImplementedYet`` ("... is not implemented yet ...").

For every notebook under ``exercises/`` this file turns that into the test:

- the first cell that raises must be the checker cell of the notebook's first exercise (the notebook's
  metadata, written by the generator, says which cell that is), and its error must be
  ``NotImplementedYet`` with the "not implemented yet" message: that cell then passes;
- every later cell is skipped, with the reason, as "Run All stops at the first error";
- any other error, a checker cell that does not raise, or a notebook that runs to its end fails.

It also adds one test per learner copy, ``exercises/NN_slug.ipynb::second_solutions``: the copy with every stub
filled with a second, differently written correct solution (``tests/learner_solutions/``), run top to bottom in
a fresh kernel; every checker must pass and the notebook must reach its end. It sits in the notebook's file, so
pytest-xdist (``--dist loadfile``) gives it the worker that runs the notebook's cells, and the copies spread over
the workers. Copies known to stop after correct answers are expected to fail at the named cell
(``learner_solutions.KNOWN_BREAKS``: xfail, strict).
"""

import sys
from pathlib import Path

import pytest

try:  # nbval is what runs notebooks in this suite; without it there is nothing to adapt
    from nbval.plugin import IPyNbCell, NbCellError
except ImportError:  # pragma: no cover
    IPyNbCell = NbCellError = None

EXPECTED_ERROR = "NotImplementedYet"
EXPECTED_TEXT = "not implemented yet"

_stopped: dict[str, str] = {}
"""notebook node id -> why its remaining cells are skipped."""

HERE = Path(__file__).resolve().parent


def _learner_solutions():
    """tests/learner_solutions, importable as when pytest collects tests/ (its folder on sys.path)."""
    tests = str(HERE.parent / "tests")
    if tests not in sys.path:
        sys.path.insert(0, tests)
    import learner_solutions

    return learner_solutions


class SecondSolutions(pytest.Item):
    """The learner copy with every exercise filled with its second solution, run top to bottom."""

    def runtest(self):
        _learner_solutions().run_filled_copy(self.path.stem)

    def reportinfo(self):
        return self.path, None, f"{self.path.name} with the second solutions, top to bottom"


class LearnerCopyRun(pytest.File):
    """The learner copy's file, as a second collector beside nbval's: it holds the one ``second_solutions`` test."""

    def collect(self):
        lib = _learner_solutions()
        item = SecondSolutions.from_parent(self, name="second_solutions")
        known = lib.KNOWN_BREAKS.get(self.path.stem)
        if known is not None:
            item.add_marker(pytest.mark.xfail(strict=True, raises=lib.KnownBreak, reason=known[1]))
        yield item


def pytest_collect_file(file_path, parent):
    """A learner copy of this repository (its tests/learner_solutions beside it) gets its second-solution run."""
    if (
        file_path.suffix == ".ipynb"
        and file_path.parent == HERE
        and (HERE.parent / "tests" / "learner_solutions").is_dir()
    ):
        return LearnerCopyRun.from_parent(parent, path=file_path)


def _learner_cell(item):
    """(notebook metadata for learner copies, the first exercise's entry) if ``item`` is a learner-copy cell."""
    if IPyNbCell is None or not isinstance(item, IPyNbCell):
        return None
    meta = item.parent.nb.metadata.get("ppo_core", {})
    if not meta.get("exercises"):
        return None
    return meta, meta["exercises"][0]


def _is_last_code_cell(item) -> bool:
    n_code = sum(1 for cell in item.parent.nb.cells if cell.cell_type == "code")
    return item.cell_num == n_code - 1


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    if _learner_cell(item) is not None and item.parent.nodeid in _stopped:
        pytest.skip(_stopped[item.parent.nodeid])


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    found = _learner_cell(item)
    if found is None:
        return (yield)
    meta, first = found
    is_checker = item.cell.get("id") == first["checker_cell"]
    where = f"{meta.get('learner_copy_of', 'the chapter')}'s learner copy"
    try:
        result = yield
    except NbCellError:
        error = next((o for o in item.test_outputs or [] if o.get("output_type") == "error"), {})
        ename, evalue = error.get("ename", "?"), error.get("evalue", "")
        if is_checker and ename == EXPECTED_ERROR and EXPECTED_TEXT in evalue:
            _stopped[item.parent.nodeid] = (
                f"not run: the notebook stopped at the checker of exercise {first['id']} "
                f"({EXPECTED_ERROR}), as Run All stops at the first error"
            )
            return None
        if is_checker:
            _stopped[item.parent.nodeid] = f"not run: the checker of exercise {first['id']} failed"
            item.raise_cell_error(
                f"{where}: the checker of exercise {first['id']} raised {ename}: {evalue}\n"
                f"expected {EXPECTED_ERROR} with '{EXPECTED_TEXT}' on the untouched stub"
            )
        _stopped[item.parent.nodeid] = f"not run: cell {item.cell_num} failed before the first exercise's checker"
        raise  # an error before the first exercise's checker: the chapter's cells fail as they are
    if is_checker:
        _stopped[item.parent.nodeid] = f"not run: the checker of exercise {first['id']} did not stop the notebook"
        item.raise_cell_error(
            f"{where}: the checker of exercise {first['id']} passed on the stub; "
            f"it should raise {EXPECTED_ERROR} (is the solution region really replaced?)"
        )
    if _is_last_code_cell(item):
        item.raise_cell_error(f"{where} ran to its end: it should stop at the checker of exercise {first['id']}")
    return result
