"""CONTRIBUTING.md against the code: its layout names every module of the package, its map of run/'s tests names
every run/ module once and test files that exist and cover it, and its xdist mode is pyproject.toml's."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "ppo_core"


def contributing() -> str:
    return (ROOT / "CONTRIBUTING.md").read_text()


def layout(text: str) -> str:
    """The ```text block of the Layout section."""
    return text.split("## Layout", 1)[1].split("```text", 1)[1].split("```", 1)[0]


def run_map(text: str) -> dict[str, list[str]]:
    """run/ module file name -> the test files of its row."""
    out = {}
    for line in text.split("**Where run/'s tests are.**", 1)[1].splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 2 and cells[0].endswith(".py"):
            for module in (m.strip() for m in cells[0].split(",")):
                assert module not in out, f"{module} is in two rows"
                out[module] = [t.strip() for t in cells[1].split(",")]
    return out


def missing_from_layout(text: str) -> list[str]:
    block = layout(text)
    names = [p.name for p in PACKAGE.glob("*.py") if p.name != "__init__.py"]
    names += [p.name + "/" for p in PACKAGE.iterdir() if (p / "__init__.py").is_file()]
    return sorted(n for n in names if not re.search(rf"(?<![\w/]){re.escape(n)}", block))


def map_problems(text: str) -> list[str]:
    mapped, problems = run_map(text), []
    modules = sorted(p.name for p in (PACKAGE / "run").glob("*.py") if p.name != "__init__.py")
    problems += [f"{m}: no row" for m in modules if m not in mapped]
    problems += [f"{m}: not a run/ module" for m in mapped if m not in modules]
    for module, tests in mapped.items():
        for test in tests:
            path = ROOT / test
            stem = module.removesuffix(".py")
            if not path.is_file():
                problems.append(f"{module}: {test} does not exist")
            elif not re.search(rf"run[./]{stem}\b|run import [\w, ]*\b{stem}\b", path.read_text()):
                problems.append(f"{module}: {test} never names run/{module}")
    return problems


def test_the_layout_names_every_module_of_the_package():
    assert missing_from_layout(contributing()) == []


def test_every_run_module_has_a_test_file_in_the_map():
    assert map_problems(contributing()) == []


def test_the_checks_reject_a_missing_module_and_a_wrong_map():
    text = contributing()
    assert missing_from_layout(text.replace("registry.py ", "")) == ["registry.py"]
    assert "guards.py: no row" in map_problems(
        text.replace("evaluation.py, guards.py, setup.py", "evaluation.py, setup.py")
    )
    wrong = text.replace("| rm.py | tests/test_train_rm.py |", "| rm.py | tests/test_gae.py |")
    assert map_problems(wrong) == ["rm.py: tests/test_gae.py never names run/rm.py"]


def test_the_xdist_mode_is_the_one_pyproject_sets():
    mode = re.search(r"--dist (\w+)", (ROOT / "pyproject.toml").read_text()).group(1)
    assert f"--dist {mode}`" in contributing() and mode == "loadfile"
