"""Test-suite plumbing for the learner copies. Learners: you can ignore this file.

The notebooks in this folder are generated from ``chapters/`` by ``python -m tools.exercises
build``, with every exercise replaced by a stub. A learner copy is *expected* to stop, exactly as "Run All" does
in Jupyter: the checker cell of its first exercise raises the friendly ``NotImplementedYet`` ("... is not
implemented yet ...").

The suite runs each copy as one test, ``exercises/NN_slug.ipynb::run_all``, in one fresh kernel
(``tests/learner_solutions.run_learner_copy``):

1. the copy as it is, top to bottom: every cell before the checker of its first exercise must run, and that
   checker must raise ``NotImplementedYet`` with the "not implemented yet" message. A copy that fails before it,
   whose checker passes on the stub, or that runs to its end fails the test;
2. then, in the same kernel, from the first exercise on, the copy with every stub filled with a second,
   differently written correct solution (``tests/learner_solutions/``): every checker must pass and the notebook
   must reach its end. Copies known to stop after correct answers are expected to fail at the named cell
   (``learner_solutions.KNOWN_BREAKS``: xfail, strict).

The kernel has ``PPO_NOTEBOOK_SMOKE=1``: chapters 05 and 06 train for a few steps there (see
``learner_solutions.SMOKE``). nbval, which runs the chapters cell by cell, does not collect these copies: the test
above runs them whole, and one kernel serves both runs.
"""

import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent


def _learner_solutions():
    """tests/learner_solutions, importable as when pytest collects tests/ (its folder on sys.path)."""
    tests = str(HERE.parent / "tests")
    if tests not in sys.path:
        sys.path.insert(0, tests)
    import learner_solutions

    return learner_solutions


class RunAll(pytest.Item):
    """Run All on the learner copy (it stops at its first checker), then the copy with its second solutions."""

    def runtest(self):
        _learner_solutions().run_learner_copy(self.path.stem)

    def reportinfo(self):
        return self.path, None, f"{self.path.name}: Run All stops at the first checker; the second solutions run on"


class LearnerCopy(pytest.File):
    """A learner copy's file: it holds the one ``run_all`` test."""

    def collect(self):
        lib = _learner_solutions()
        item = RunAll.from_parent(self, name="run_all")
        known = lib.KNOWN_BREAKS.get(self.path.stem)
        if known is not None:
            item.add_marker(pytest.mark.xfail(strict=True, raises=lib.KnownBreak, reason=known[1]))
        yield item


def _is_learner_copy(file_path: Path) -> bool:
    """A notebook of this folder, in a repository that has tests/learner_solutions beside it."""
    return (
        file_path.suffix == ".ipynb"
        and file_path.parent == HERE
        and (HERE.parent / "tests" / "learner_solutions").is_dir()
    )


@pytest.hookimpl(wrapper=True)
def pytest_collect_file(file_path, parent):
    """A learner copy is collected as one ``run_all`` test, not cell by cell by nbval."""
    collectors = yield
    if not _is_learner_copy(file_path):
        return collectors
    return [c for c in collectors if c is not None and not type(c).__module__.startswith("nbval")] + [
        LearnerCopy.from_parent(parent, path=file_path)
    ]
