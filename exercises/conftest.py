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
"""

import pytest

try:  # nbval is what runs notebooks in this suite; without it there is nothing to adapt
    from nbval.plugin import IPyNbCell, NbCellError
except ImportError:  # pragma: no cover
    IPyNbCell = NbCellError = None

EXPECTED_ERROR = "NotImplementedYet"
EXPECTED_TEXT = "not implemented yet"

_stopped: dict[str, str] = {}
"""notebook node id -> why its remaining cells are skipped."""


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
