"""tests/quality/planted_bugs.py's catalogs stay plantable: a bug whose text no longer occurs in the package, or whose
test was renamed, would make the benchmark stop (or test nothing) instead of reporting it."""

import importlib.util
import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
QUALITY = ROOT / "tests" / "quality"
WIDE = json.loads((QUALITY / "planted_bugs_wide.json").read_text())


def _script():
    spec = importlib.util.spec_from_file_location("planted_bugs", QUALITY / "planted_bugs.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("bug", WIDE, ids=[b["bug"] for b in WIDE])
def test_each_wide_bug_plants_once_and_names_tests_that_exist(bug):
    assert set(bug) == {"bug", "file", "edits", "tests"}
    text = (ROOT / bug["file"]).read_text()
    assert any(text.count(old) == 1 and new != old for old, new in bug["edits"]), "no edit's text occurs exactly once"
    assert bug["tests"]
    for node in bug["tests"]:
        file, _, name = node.partition("::")
        assert (ROOT / file).is_file(), node
        if name:  # a test function (parametrised or not) defined in that file
            assert re.search(rf"^def {re.escape(name.split('[')[0])}\(", (ROOT / file).read_text(), re.M), node


def test_wide_labels_are_unique_and_the_step_bugs_still_plant():
    assert len({b["bug"] for b in WIDE}) == len(WIDE)
    for label, file, edits in _script().BUGS:
        text = (ROOT / file).read_text()
        assert any(text.count(old) == 1 for old, _ in edits), label


def test_only_that_matches_nothing_is_an_error(capsys):
    with pytest.raises(SystemExit) as exit_info:
        _script().main(["--wide", "--only", "no such bug"])
    assert exit_info.value.code == 2 and "no bug's label contains 'no such bug'" in capsys.readouterr().err


def test_the_saved_wide_run_caught_every_bug_of_the_catalog():
    """The saved run of ``--wide`` caught every bug of the current catalog: a bug added since needs a new run."""
    saved = (QUALITY / "planted_bugs_wide_run.txt").read_text().splitlines()
    caught = {line.removeprefix("caught").rsplit(": ", 1)[0].strip() for line in saved if line.startswith("caught ")}
    assert caught == {b["bug"] for b in WIDE}
    assert f"{len(WIDE)} of {len(WIDE)} caught" in saved
