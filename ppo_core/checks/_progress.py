"""Which exercises pass: every checker records its last result, ``progress()`` lists them by chapter.

The learner's functions live in their notebooks, so the checkers themselves keep the score: each
call of a checker writes its outcome (passed / failed / not implemented) to a small JSON file shared
by all notebooks, and ``ppo_core.checks.progress()`` reads it back.

Where the file is:

- ``$PPO_CORE_PROGRESS`` if set (``off`` or an empty value: record nothing);
- otherwise ``$XDG_CACHE_HOME/ppo_core/progress.json``, by default ``~/.cache/ppo_core/progress.json``;
- under pytest (``PYTEST_CURRENT_TEST`` set) without ``PPO_CORE_PROGRESS``, nothing is written: the
  test suite never touches a learner's progress.

What counts: a checker run on the exercise's own function (the name the exercise cell defines, e.g.
``my_compute_gae``). The chapters' worked solutions (their source still holds the ``# SOLUTION START``
marker) and the chapters' demonstrations of wrong versions (other names) are not recorded, so reading
or building the chapters never changes a learner's progress. Results of this Python session are kept
in memory as well, so ``progress()`` works even where the file cannot be written.
"""

from __future__ import annotations

import inspect
import json
import os
import time
from collections.abc import Mapping
from pathlib import Path

from .catalog import CHAPTER_TITLES, EXERCISES, START, exercise_for_checker

__all__ = ["progress", "reset_progress", "progress_path", "record", "counts"]

STATUSES = ("passed", "failed", "not implemented", "not tried")
_MARKS = {
    "passed": "\N{WHITE HEAVY CHECK MARK}",
    "failed": "\N{CROSS MARK}",
    "not implemented": "\N{HOURGLASS}",
    "not tried": "\N{MIDDLE DOT} ",
}
_SESSION: dict[str, dict] = {}
"""checker name -> its last record in this Python session."""


def progress_path() -> Path | None:
    """The progress file, or None when recording is off (see the module docstring)."""
    env = os.environ.get("PPO_CORE_PROGRESS")
    if env is not None:
        return None if env.strip().lower() in ("", "0", "off", "false", "none") else Path(env).expanduser()
    if "PYTEST_CURRENT_TEST" in os.environ:
        return None
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache) / "ppo_core" / "progress.json"


def _read(path: Path | None) -> dict[str, dict]:
    if path is None or not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        return {k: v for k, v in data.get("checks", {}).items() if isinstance(v, dict)}
    except (OSError, ValueError, AttributeError):
        return {}  # a damaged file is not worth an error in the learner's notebook


def counts(checker: str, fn) -> bool:
    """Does a run of ``checker`` on ``fn`` count towards the progress? (see the module docstring)"""
    ex = exercise_for_checker(checker)
    if ex is None or getattr(fn, "__name__", None) != ex.function:
        return False
    try:
        return START not in inspect.getsource(fn)
    except (OSError, TypeError):  # no source to look at: a learner's function all the same
        return True


def record(checker: str, status: str, detail: str = "") -> None:
    """Remember ``checker``'s latest outcome, in this session and in the progress file (if any)."""
    entry = {"status": status, "detail": detail[:200], "time": time.strftime("%Y-%m-%d %H:%M:%S")}
    _SESSION[checker] = entry
    path = progress_path()
    if path is None:
        return
    try:
        data = _read(path)
        data[checker] = entry
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps({"version": 1, "checks": data}, indent=1, sort_keys=True), encoding="utf-8")
        os.replace(tmp, path)  # atomic: two kernels writing at once never leave half a file
    except OSError:
        pass  # a read-only home must not break a checker


def reset_progress() -> None:
    """Forget every recorded result (this session's and the file's)."""
    _SESSION.clear()
    path = progress_path()
    if path is not None:
        try:
            path.unlink()
        except FileNotFoundError:
            pass


class Progress(Mapping):
    """Exercise id ("3.1") -> "passed" | "failed" | "not implemented" | "not tried"; shows as a table."""

    def __init__(self, entries: dict[str, dict], path: Path | None):
        self._entries, self.path = entries, path
        self._status = {ex.id: entries.get(ex.checker, {}).get("status", "not tried") for ex in EXERCISES}

    def __getitem__(self, exercise_id: str) -> str:
        return self._status[exercise_id]

    def __iter__(self):
        return iter(self._status)

    def __len__(self) -> int:
        return len(self._status)

    @property
    def passed(self) -> list[str]:
        return [k for k, v in self._status.items() if v == "passed"]

    def table(self) -> str:
        width = max(len(ex.plain_title) for ex in EXERCISES)
        lines = [f"Exercises passed: {len(self.passed)} of {len(self)}"]
        chapter = None
        for ex in EXERCISES:
            if ex.chapter != chapter:
                chapter = ex.chapter
                lines.append(f"{chapter[:2]} {CHAPTER_TITLES.get(chapter, chapter)}  ({chapter}.ipynb)")
            entry, status = self._entries.get(ex.checker, {}), self[ex.id]
            text = {"not implemented": "not implemented yet", "not tried": "not tried yet"}.get(status, status)
            if status == "failed" and entry.get("detail"):
                first = entry["detail"].splitlines()[0]
                text += f": {first if len(first) <= 100 else first[:99] + '…'}"
            lines.append(f"  {_MARKS[status]} {ex.id}  {ex.plain_title:<{width}}  {text}")
        where = f"saved in {self.path}" if self.path else "this session only: no progress file"
        lines.append(f"(the last result of each exercise's checker; {where})")
        return "\n".join(lines)

    def __repr__(self) -> str:
        return self.table()

    __str__ = __repr__

    def _repr_pretty_(self, printer, cycle):  # IPython: show the table, not a dict
        printer.text(self.table())


def progress() -> Progress:
    """Which exercises pass, chapter by chapter: ``checks.progress()`` in a notebook shows the table.

    The result maps each exercise id to ``"passed"``, ``"failed"``, ``"not implemented"`` or
    ``"not tried"`` (the last result of its checker, from any notebook), e.g. ``progress()["3.1"]``.
    """
    path = progress_path()
    entries = _read(path)
    for checker, entry in _SESSION.items():  # the newer of this session's result and the file's
        if entry["time"] >= entries.get(checker, {}).get("time", ""):
            entries[checker] = entry
    return Progress(entries, path)


def exercise_label(checker: str) -> str:
    """ "Exercise 3.1 (compute_gae)" for a checker name, or "" if it grades no listed exercise."""
    ex = exercise_for_checker(checker)
    return f"Exercise {ex.id} ({ex.plain_title})" if ex else ""
