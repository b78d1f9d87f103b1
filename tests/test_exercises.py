"""The learner copies: generated from the chapters, up to date, without solutions, with the
conventions every exercise follows; the progress summary; the rejection tests of every checker.

The learner copies themselves run in the slow tier (``pytest exercises``, ``exercises/conftest.py``): each must stop
at its first exercise's checker, then run to its end with the second solutions.
"""

import ast
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
import torch

from ppo_core import checks
from ppo_core.checks import _progress
from tools import exercises as ex_mod
from tools.exercises import END, EXERCISES, REPO_URL, START, ExerciseError, colab_url, find_exercises

ROOT = Path(__file__).resolve().parent.parent
CHAPTERS = sorted({ex.chapter for ex in EXERCISES})


def _nb(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))


def _src(cell: dict) -> str:
    return "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]


def _by_id(nb: dict) -> dict:
    return {c.get("id"): c for c in nb["cells"]}


# ---------------------------------------------------------------- generated, deterministic, up to date


def test_learner_copies_are_up_to_date(tmp_path):
    """Regenerating into a temporary folder gives exactly the committed files (run `build` if not)."""
    written = ex_mod.build(ROOT, out=tmp_path)
    assert sorted(p.name for p in written) == sorted(f"{c}.ipynb" for c in CHAPTERS)
    committed = sorted(p.name for p in (ROOT / "exercises").glob("*.ipynb"))
    assert committed == sorted(p.name for p in tmp_path.glob("*.ipynb")), "run: python -m tools.exercises build"
    for name in committed:
        assert (tmp_path / name).read_bytes() == (ROOT / "exercises" / name).read_bytes(), (
            f"exercises/{name} is out of date with chapters/{name}: run `python -m tools.exercises build`"
        )
    assert ex_mod.build(ROOT, out=tmp_path) == []  # a second build changes nothing


def test_learner_copies_are_valid_notebooks_in_nbformat_layout():
    for chapter in CHAPTERS:
        text = (ROOT / "exercises" / f"{chapter}.ipynb").read_text(encoding="utf-8")
        nb = nbformat.reads(text, as_version=4)
        nbformat.validate(nb)
        assert nbformat.writes(nb) + "\n" == text  # the layout Jupyter itself writes: no diff noise on save
        for cell in nb.cells:
            if cell.cell_type == "code":
                assert cell.execution_count is None and cell.outputs == []


def test_generator_does_not_import_torch():
    code = "import sys, tools.exercises; assert 'torch' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_check_command_on_the_repository():
    out = subprocess.run([sys.executable, "-m", "tools.exercises", "check"], cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert "up to date" in out.stdout


def test_check_names_stale_missing_and_extra_copies(tmp_path, capsys):
    shutil.copytree(ROOT / "chapters", tmp_path / "chapters")
    ex_mod.build(tmp_path)
    assert ex_mod.main(["check", "--root", str(tmp_path)]) == 0

    chapter = tmp_path / "chapters" / "03_gae.ipynb"  # edit a solution line in the chapter
    chapter.write_text(
        chapter.read_text(encoding="utf-8").replace("gamma * lam * next_advantage", "lam * gamma * next_advantage"),
        encoding="utf-8",
    )
    (tmp_path / "exercises" / "02_masking.ipynb").unlink()
    (tmp_path / "exercises" / "99_gone.ipynb").write_text("{}", encoding="utf-8")
    capsys.readouterr()
    assert ex_mod.main(["check", "--root", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert "exercises/03_gae.ipynb (out of date" in err
    assert "exercises/02_masking.ipynb (missing)" in err
    assert "exercises/99_gone.ipynb (no such chapter)" in err
    assert "01_logprobs" not in err

    assert ex_mod.main(["build", "--root", str(tmp_path)]) == 0
    assert ex_mod.stale(tmp_path) == []
    assert not (tmp_path / "exercises" / "99_gone.ipynb").exists()


def test_generator_rejects_a_broken_exercise(tmp_path):
    nb = _nb(ROOT / "chapters" / "03_gae.ipynb")
    cell = next(c for c in nb["cells"] if "exercise" in c["metadata"].get("tags", []))
    cell["source"] = [line for line in cell["source"] if END not in line]
    with pytest.raises(ExerciseError, match="SOLUTION END"):
        ex_mod.learner_copy(nb, "03_gae")
    with pytest.raises(ExerciseError, match="not in ppo_core.checks.catalog.EXERCISES"):
        ex_mod.learner_copy(_nb(ROOT / "chapters" / "03_gae.ipynb"), "04_losses")


# ---------------------------------------------------------------- the chapters: conventions of every exercise


def test_registry_matches_the_chapters():
    """Every exercise cell is in EXERCISES (same id, function, checker, title), in order, and vice versa."""
    seen = []
    for chapter in CHAPTERS:
        nb = _nb(ROOT / "chapters" / f"{chapter}.ipynb")
        found = find_exercises(nb, chapter)
        tagged = [
            i
            for i, c in enumerate(nb["cells"])
            if c["cell_type"] == "code" and "exercise" in c["metadata"].get("tags", [])
        ]
        assert [f["cell"] for f in found] == tagged
        for f in found:
            ex = f["exercise"]
            heading = re.search(r"^### Exercise (\d+\.\d+) — (.+)$", _src(nb["cells"][f["heading"]]), re.M)
            assert heading.groups() == (ex.id, ex.title)
            assert hasattr(checks, ex.checker)
            seen.append(ex.id)
    assert seen == [ex.id for ex in EXERCISES]
    assert {"4.1", "4.2", "4.3", "3.1", "5.1", "1.1", "1.2", "2.1", "2.2"} <= set(seen)  # the seeds' five + ch01/02


@pytest.mark.parametrize("ex", EXERCISES, ids=lambda ex: ex.id)
def test_exercise_has_label_goal_hints_and_markers(ex):
    nb = _nb(ROOT / "chapters" / f"{ex.chapter}.ipynb")
    f = next(f for f in find_exercises(nb, ex.chapter) if f["exercise"] is ex)
    md = _src(nb["cells"][f["heading"]])
    md = md[md.index(f"### Exercise {ex.id} — ") :]  # the exercise's part of the cell
    assert re.search(r"^Difficulty: [🔴⚪]{5} · Importance: [🔵⚪]{5} · ~\d+ min$", md, re.M), "label line"
    assert re.search(r"^\*\*Goal:\*\* \S", md, re.M), "a **Goal:** line"
    hints = re.findall(r"<details><summary>Hint (\d+)</summary>", md)
    assert len(hints) >= 2 and hints == [str(k) for k in range(1, len(hints) + 1)], "hints numbered 1, 2, ..."
    assert md.count("</details>") == len(hints), "every hint folds (one <details> block each)"
    cell = nb["cells"][f["cell"]]
    assert {"exercise", "hide-input"} <= set(cell["metadata"]["tags"])  # the solution sits behind a toggle in the book
    code = _src(cell)
    assert code.count(START) == 1 and code.count(END) == 1
    assert code.index(f"def {ex.function}(") < code.index('"""') < code.index(START)  # signature, docstring, solution


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_chapter_links_to_its_learner_copy(chapter):
    nb = _nb(ROOT / "chapters" / f"{chapter}.ipynb")
    links = nb["cells"][1]
    assert links.get("id") == ex_mod.LINKS_CELL_ID and links["cell_type"] == "markdown"
    text = _src(links)
    assert f"{{download}}`download the learner copy <../exercises/{chapter}.ipynb>`" in text
    assert f"({colab_url(chapter)})" in text
    assert (
        colab_url(chapter) == f"https://colab.research.google.com/github/{REPO_URL[len('https://github.com/') :]}"
        f"/blob/main/exercises/{chapter}.ipynb"
    )
    assert (ROOT / "exercises" / f"{chapter}.ipynb").is_file()


# ---------------------------------------------------------------- the learner copies: stubs, no solutions


@pytest.mark.parametrize("ex", EXERCISES, ids=lambda ex: ex.id)
def test_learner_copy_has_a_stub_and_no_solution(ex):
    chapter_nb = _nb(ROOT / "chapters" / f"{ex.chapter}.ipynb")
    learner_nb = _nb(ROOT / "exercises" / f"{ex.chapter}.ipynb")
    f = next(f for f in find_exercises(chapter_nb, ex.chapter) if f["exercise"] is ex)
    solution = _src(chapter_nb["cells"][f["cell"]])
    body = solution[solution.index(START) + len(START) : solution.index(END)]
    solution_lines = {line.strip() for line in body.splitlines() if line.strip()}

    stub = _src(_by_id(learner_nb)[f["cell_id"]])
    assert START not in stub and END not in stub
    assert f'raise NotImplementedError("Exercise {ex.id}' in stub and ex.hint in stub
    assert solution[: solution.index(START)].rstrip() in stub  # signature and docstring kept
    assert not solution_lines & {line.strip() for line in stub.splitlines()}, "a solution line survived"
    assert "hide-input" not in _by_id(learner_nb)[f["cell_id"]]["metadata"]["tags"]
    assert not any(START in _src(c) or END in _src(c) for c in learner_nb["cells"])

    entry = next(e for e in learner_nb["metadata"]["ppo_core"]["exercises"] if e["id"] == ex.id)
    assert entry == {"id": ex.id, "checker": ex.checker, "cell": f["cell_id"], "checker_cell": f["checker_cell_id"]}
    assert _src(_by_id(learner_nb)[entry["checker_cell"]]).startswith(f"checks.{ex.checker}({ex.function})")


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_learner_copy_header_setup_and_progress_cells(chapter):
    nb = _nb(ROOT / "exercises" / f"{chapter}.ipynb")
    cells = nb["cells"]
    assert [c.get("id") for c in cells[1:3]] == ["learner-copy", "learner-setup"]
    assert f"](../chapters/{chapter}.ipynb)" in _src(cells[1]) and colab_url(chapter) in _src(cells[1])
    setup = _src(cells[2])
    assert 'if "google.colab" in sys.modules:' in setup and f"git+{REPO_URL}" in setup
    exec(compile(setup, "setup", "exec"), {})  # outside Colab: does nothing, installs nothing
    assert _src(cells[-1]).endswith("checks.progress()")
    assert all(c.get("id") != ex_mod.LINKS_CELL_ID for c in cells)
    assert nb["metadata"]["ppo_core"]["learner_copy_of"] == f"chapters/{chapter}.ipynb"


def _namespace():
    """What the exercise cells' signatures may refer to."""
    from ppo_core.masking import masked_mean, masked_var  # noqa: F401

    return {"torch": torch, "masked_mean": masked_mean, "masked_var": masked_var}


@pytest.mark.parametrize("ex", [e for e in EXERCISES if e.id != "5.1"], ids=lambda ex: ex.id)
def test_stub_gives_the_friendly_not_implemented_yet(ex, monkeypatch):
    """The untouched stub, run through its checker: one friendly line naming the exercise, no traceback.
    (5.1's stub is covered by tests/test_checks_ch05.py and by the run of exercises/05_full_loop.ipynb.)"""
    monkeypatch.setenv("PPO_CORE_PROGRESS", "off")
    learner_nb = _nb(ROOT / "exercises" / f"{ex.chapter}.ipynb")
    entry = next(e for e in learner_nb["metadata"]["ppo_core"]["exercises"] if e["id"] == ex.id)
    ns = _namespace()
    exec(compile(_src(_by_id(learner_nb)[entry["cell"]]), f"exercise {ex.id}", "exec"), ns)
    with pytest.raises(checks.NotImplementedYet) as info:
        getattr(checks, ex.checker)(ns[ex.function])
    message = str(info.value)
    assert message.startswith(f"Exercise {ex.id} ({ex.plain_title}): {ex.function} is not implemented yet")
    assert info.value._render_traceback_() == [f"\N{HOURGLASS} {message}"]  # what Jupyter shows instead of a traceback


# ---------------------------------------------------------------- progress()


@pytest.fixture
def progress_file(tmp_path, monkeypatch):
    path = tmp_path / "progress.json"
    monkeypatch.setenv("PPO_CORE_PROGRESS", str(path))
    monkeypatch.setattr(_progress, "_SESSION", {})
    return path


def _learner_fn(name, body):
    """A function named like the exercise's (the name progress() counts), behaving like ``body``."""

    def fn(*args, **kwargs):
        return body(*args, **kwargs)

    fn.__name__ = name
    return fn


def test_progress_reports_passed_failed_not_implemented_and_not_tried(progress_file):
    from ppo_core.gae import compute_gae
    from ppo_core.losses import policy_loss

    def stub(*args, **kwargs):
        raise NotImplementedError

    def flipped(*args, **kwargs):
        loss, stats = policy_loss(*args, **kwargs)
        return -loss, stats

    checks.check_compute_gae(_learner_fn("my_compute_gae", compute_gae), verbose=False)
    with pytest.raises(checks.NotImplementedYet):
        checks.check_token_rewards(_learner_fn("my_token_rewards", stub))
    with pytest.raises(checks.CheckFailure):
        checks.check_policy_loss(_learner_fn("policy_loss", flipped))

    p = checks.progress()
    assert p["3.1"] == "passed" and p["3.2"] == "not implemented" and p["4.1"] == "failed"
    assert all(p[k] == "not tried" for k in p if k not in ("3.1", "3.2", "4.1"))
    assert p.passed == ["3.1"] and len(p) == len(EXERCISES)
    table = repr(p)
    assert table.startswith(f"Exercises passed: 1 of {len(EXERCISES)}")
    assert "03 Rewards, KL and GAE" in table and "05 The full loop" in table
    assert re.search(r"3\.1 +compute_gae +passed", table)
    assert re.search(r"4\.1 +the clipped policy loss +failed: .*flipped the sign", table)
    assert re.search(r"2\.2 +response_mask +not tried yet", table)
    assert str(progress_file) in table

    saved = json.loads(progress_file.read_text())["checks"]  # another notebook (a new session) sees the same
    assert saved["check_compute_gae"]["status"] == "passed"
    _progress._SESSION.clear()
    assert dict(checks.progress()) == dict(p)

    checks.reset_progress()
    assert not progress_file.exists() and set(checks.progress().values()) == {"not tried"}


def test_progress_ignores_solutions_and_demos(progress_file):
    """The chapters' own solutions (marker in the source) and wrong-version demos (other names) do not count."""
    from ppo_core.losses import policy_loss

    assert _progress.counts("check_policy_loss", _learner_fn("policy_loss", policy_loss))
    assert not _progress.counts("check_policy_loss", _learner_fn("optimistic_policy_loss", policy_loss))  # a demo
    assert not _progress.counts("check_not_an_exercise", _learner_fn("policy_loss", policy_loss))

    src = progress_file.parent / "solution.py"  # a function whose source holds the solution marker
    src.write_text(f"def policy_loss(*args, **kwargs):\n    {START}\n    return real(*args, **kwargs)\n    {END}\n")
    ns = {"real": policy_loss}
    exec(compile(src.read_text(), str(src), "exec"), ns)
    assert not _progress.counts("check_policy_loss", ns["policy_loss"])
    checks.check_policy_loss(ns["policy_loss"], verbose=False)
    assert checks.RESULTS["check_policy_loss"] == "passed"  # the session knows (chapter 05 relies on it) ...
    assert checks.progress()["4.1"] == "not tried" and not progress_file.exists()  # ... the progress does not


def test_progress_is_not_written_under_pytest_by_default(tmp_path, monkeypatch):
    from ppo_core.masking import response_mask

    monkeypatch.delenv("PPO_CORE_PROGRESS", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setattr(_progress, "_SESSION", {})
    assert checks.progress_path() is None
    checks.check_response_mask(_learner_fn("response_mask", response_mask), verbose=False)
    assert not any(tmp_path.iterdir())
    assert checks.progress()["2.2"] == "passed"  # this session still knows
    monkeypatch.delenv("PYTEST_CURRENT_TEST")
    assert checks.progress_path() == tmp_path / "ppo_core" / "progress.json"  # a learner's default


def test_progress_survives_a_damaged_or_unwritable_file(tmp_path, monkeypatch):
    from ppo_core.masking import response_mask

    monkeypatch.setattr(_progress, "_SESSION", {})
    bad = tmp_path / "progress.json"
    bad.write_text("{not json")
    monkeypatch.setenv("PPO_CORE_PROGRESS", str(bad))
    assert set(checks.progress().values()) == {"not tried"}
    monkeypatch.setenv("PPO_CORE_PROGRESS", str(tmp_path / "a_file" / "x.json"))
    (tmp_path / "a_file").write_text("")  # the parent is a file: writing fails quietly
    checks.check_response_mask(_learner_fn("response_mask", response_mask), verbose=False)
    assert checks.progress()["2.2"] == "passed"


# ---------------------------------------------------------------- every checker rejects >= 3 named mistakes


def _mistake_tests():
    """{checker name: [(test, number of wrong variants)]} from the parametrized "names the mistake" tests
    in tests/test_checks_ch*.py, each of which asserts the mistake's description in the message."""
    found: dict[str, list] = {}
    for path in sorted(ROOT.glob("tests/test_checks_ch*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if not (isinstance(node, ast.FunctionDef) and "names_the_mistake" in node.name):
                continue
            body = ast.unparse(node)
            assert re.search(r"pytest\.raises\(CheckFailure, match=\w+\)", body), (
                f"{path.name}::{node.name} must match the mistake's name"
            )
            rows = [
                d.args[1]
                for d in node.decorator_list
                if isinstance(d, ast.Call) and ast.unparse(d.func) == "pytest.mark.parametrize"
            ]
            called = set(re.findall(r"checks\.(check_\w+)\(", body))
            assert len(rows) == 1 and len(called) == 1, f"{path.name}::{node.name}"
            variants = rows[0].elts
            assert all(
                isinstance(v, ast.Tuple) and isinstance(v.elts[-1], ast.Constant) and len(v.elts[-1].value) >= 5
                for v in variants
            )
            found.setdefault(called.pop(), []).append((f"{path.name}::{node.name}", len(variants)))
    return found


def test_every_checker_has_at_least_three_named_wrong_variants_tested():
    found = _mistake_tests()
    counts = {ex.checker: sum(n for _, n in found.get(ex.checker, [])) for ex in EXERCISES}
    assert all(n >= 3 for n in counts.values()), counts


def _no_temperature(logits, response_ids, prompt_len, temperature=1.0):
    from ppo_core.logprobs import logprobs_from_logits, response_logits

    return logprobs_from_logits(response_logits(logits, prompt_len, response_ids.shape[1]), response_ids, 1.0)


def _whiten_no_mask(x, mask, shift_mean=True, eps=1e-8):
    out = (x - x.mean()) / torch.sqrt(x.var() + eps)
    return torch.where(mask, out if shift_mean else out + x.mean(), 0.0)


def _policy_loss_flipped(*args, **kwargs):
    from ppo_core.losses import policy_loss

    loss, stats = policy_loss(*args, **kwargs)
    return -loss, stats


@pytest.mark.parametrize(
    "check, wrong, named",
    [
        ("check_gather_response_logprobs", _no_temperature, "forgot the temperature"),
        ("check_masked_whiten", _whiten_no_mask, "forgot the mask"),
        ("check_policy_loss", _policy_loss_flipped, "flipped the sign"),
    ],
)
def test_value_mistakes_print_the_case_expected_and_got(check, wrong, named):
    with pytest.raises(checks.CheckFailure) as info:
        getattr(checks, check)(wrong, verbose=False)
    message = str(info.value)
    assert named in message
    assert re.search(r"\n +case: +\S.*\n +expected: +\S.*\n +got: +\S", message), message


def test_failure_messages_show_expected_and_got_on_a_tiny_case():
    """Value mistakes print the case, the expected and the actual values (a tiny case: short lists)."""
    from ppo_core.gae import compute_gae

    def forwards_gae(rewards, values, mask, gamma=1.0, lam=0.95):
        adv = torch.zeros_like(rewards)
        carry = torch.zeros(rewards.shape[0])
        for t in range(rewards.shape[1]):  # the recursion run forwards
            nv = values[:, t + 1] * mask[:, t + 1] if t + 1 < rewards.shape[1] else torch.zeros(rewards.shape[0])
            carry = (rewards[:, t] + gamma * nv - values[:, t] + gamma * lam * carry) * mask[:, t]
            adv[:, t] = carry
        return adv, (adv + values) * mask

    with pytest.raises(checks.CheckFailure) as info:
        checks.check_compute_gae(forwards_gae, verbose=False)
    message = str(info.value)
    assert "recursion forwards" in message
    assert re.search(r"case: +rewards \[\[0, 0, 1\]\]", message)
    assert re.search(r"expected: \[\[[-\d., ]+\]\]\n +got: +\[\[[-\d., ]+\]\]", message)
    assert compute_gae  # the package answer is what "expected" shows


# ---------------------------------------------------------------- the learner copies' run: where Run All stops


def _toy_notebook(checker_source: str, first_source: str = "x = 1", checker_id: str = "chk"):
    """A learner copy in miniature: a cell, the exercise stub, its checker cell, one more cell."""
    nb = nbformat.v4.new_notebook()
    nb.metadata["ppo_core"] = {
        "learner_copy_of": "chapters/toy.ipynb",
        "exercises": [{"id": "9.1", "checker": "check_f", "cell": "ex", "checker_cell": checker_id}],
    }
    sources = [
        ("first", first_source),
        ("ex", "def f():\n    raise NotImplementedError"),
        ("chk", checker_source),
        ("after", "y = 2"),
    ]
    for cell_id, source in sources:
        cell = nbformat.v4.new_code_cell(source)
        cell.id = cell_id
        nb.cells.append(cell)
    return nb


def test_run_all_must_stop_at_the_first_checker(tmp_path):
    """Stops at the first checker with NotImplementedYet: passes, and says where. A copy whose checker passes on the
    stub, that fails before it, whose checker raises another error, or that runs to its end: fails, saying which."""
    from learner_solutions import _Kernel, run_all_stops_at_the_first_checker

    raise_nyi = (
        "class NotImplementedYet(Exception):\n    pass\n\n"
        "raise NotImplementedYet('Exercise 9.1 (f): f is not implemented yet')"
    )
    stops = _toy_notebook(raise_nyi)
    wrong = {
        "passed on the stub": _toy_notebook("z = 3"),
        "cell 0 .*ZeroDivisionError": _toy_notebook(raise_nyi, first_source="1 / 0"),
        "the checker of exercise 9.1 raised ValueError": _toy_notebook("raise ValueError('not implemented yet')"),
        "ran to its end": _toy_notebook("z = 3", checker_id="elsewhere"),
    }
    with _Kernel(stops, tmp_path, timeout=60) as kernel:
        assert run_all_stops_at_the_first_checker(kernel, stops, "toy") == 2
        assert "after" not in [c.id for c in stops.cells if c.get("outputs") or c.get("execution_count")]
        for message, nb in wrong.items():
            with pytest.raises(AssertionError, match=message):
                run_all_stops_at_the_first_checker(kernel, nb, "toy")


@pytest.mark.parametrize("folder", ["chapters", "exercises"])
def test_notebooks_are_stored_without_outputs(folder):
    """The book shows the outputs of the suite's own execution and a reader's Jupyter makes its own: outputs kept
    in git only go stale (a stored one-step run once printed timings of code long since changed)."""
    kept = [
        f"{path.name} cell {cell.get('id', i)}"
        for path in sorted((ROOT / folder).glob("*.ipynb"))
        for i, cell in enumerate(_nb(path)["cells"])
        if cell["cell_type"] == "code" and (cell.get("outputs") or cell.get("execution_count") is not None)
    ]
    assert not kept, f"stored with outputs (jupyter nbconvert --clear-output --inplace): {kept[:6]}"
