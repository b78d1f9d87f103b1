"""The product speaks to its readers, not about how it was made: no words of the project's own bookkeeping.

"The issue's target", "this turn's machine" or "a second machine" mean something only to the people who
wrote the course. A reader meets the code, the docs, the notebooks and the configs; this test scans them.
"""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

PROCESS_WORDS = [
    r"\b(this|that|the|previous|next|last|earlier|later) turn\b",
    r"\bturn's\b",
    r"\bissues? #?\d+",
    r"\bissue's\b",
    r"\bsecond machine\b",
    r"\bthis machine\b",
    r"\b(between|across|several|other|earlier|later|previous) sessions\b",  # work sessions, not Python's or pytest's
    r"\bsession's machine\b",
    r"/work/bin/",  # a wrapper that exists only on the authors' machine
    r"\bworktree\b",
]
PATTERN = re.compile("|".join(f"(?:{p})" for p in PROCESS_WORDS), re.I)

PRODUCT = [
    "README.md", "CONTRIBUTING.md", "_config.yml", "_toc.yml", "pyproject.toml", "requirements.txt", ".ci/run",
    "book/**/*.md", "chapters/*.ipynb", "exercises/*.ipynb", "ppo_core/**/*.py", "ppo_core/**/*.yaml",
    "benchmarks/*.py", "benchmarks/*.md", "benchmarks/*.txt", "tools/**/*.py", "tools/**/*.sh", "tests/**/*.py",
    "tests/quality/*", "conftest.py",
]  # fmt: skip
SELF = Path(__file__).resolve()  # this file names the words it looks for

PENDING: set[str] = set()  # files another change is rewriting now; each leaves this list when its rewrite lands


def product_files() -> list[Path]:
    files = {p for pattern in PRODUCT for p in ROOT.glob(pattern) if p.is_file()}
    return sorted(p for p in files if "_vendor" not in p.parts and "__pycache__" not in p.parts and p != SELF)


def hits(text: str) -> list[str]:
    """Each line of ``text`` holding a process word, trimmed to the word and its surroundings."""
    out = []
    for line in text.splitlines():
        for m in PATTERN.finditer(line):
            out.append(line[max(0, m.start() - 40) : m.end() + 40].strip())
    return out


@pytest.mark.parametrize(
    "text",
    [
        "On this turn's machine the default command printed",
        "the run before this turn",
        "That meets the issue's target on seeds 0-2",
        "(issue 19) mutation testing",
        "On a second machine, where the same seeds",
        "only the CPU can be checked on this machine",
        "wall times varied between sessions",
        "Run it through /work/bin/heavy",
    ],
)
def test_the_scan_finds_process_words(text):
    assert hits(text)


@pytest.mark.parametrize(
    "text",
    [
        "the return's variance",  # "turn's" inside a word
        "return before the update",
        "each trainer runs one update in turn",
        "results of this Python session are kept",
        "a notebook executed in an earlier session",  # a pytest session
        "tensorboard --logdir outputs starts a TensorBoard session",
        "machine: AMD EPYC, torch 2.13",
    ],
)
def test_the_scan_leaves_ordinary_words(text):
    assert not hits(text)


def test_the_scan_covers_the_product():
    names = {p.relative_to(ROOT).as_posix() for p in product_files()}
    for must in ("README.md", "CONTRIBUTING.md", "book/training.md", "ppo_core/trainer.py", "tools/report.py",
                 "tests/test_realmodel.py", "tests/quality/planted_bugs.py", "conftest.py"):  # fmt: skip
        assert must in names
    assert "tests/test_process_words.py" not in names  # the one file that must name the words
    assert any(n.startswith("chapters/") for n in names) and any(n.startswith("book/measurements/") for n in names)


def test_no_process_words_in_the_product():
    found = {}
    for path in product_files():
        rel = path.relative_to(ROOT).as_posix()
        if rel not in PENDING and (lines := hits(path.read_text(errors="replace"))):
            found[rel] = lines
    assert not found, "process words in the product (say what the reader needs instead):\n" + "\n".join(
        f"  {rel}: {line!r}" for rel, lines in found.items() for line in lines
    )


def test_pending_files_exist():
    """A pending entry for a file that is gone or renamed would silently exempt nothing: drop it."""
    missing = [rel for rel in PENDING if not (ROOT / rel).is_file()]
    assert not missing, f"PENDING names files that do not exist: {missing}"
