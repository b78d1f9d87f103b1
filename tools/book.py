"""Build the book from the notebooks the test suite executed: one execution serves both.

`pytest` runs every chapter notebook with nbval. ``NotebookRecorder`` (registered by the root
conftest.py) watches those runs: it records every kernel message of every cell and, once all cells
of a ``chapters/*.ipynb`` notebook passed, writes the executed notebook (sources, outputs, execution
counts, widget state, as nbclient would have written it) to ``_build/executed/chapters/``, with a
stamp naming the pytest session and a digest of the notebook it ran.

``stage_book()`` then assembles ``_build/book_src/``: ``_config.yml`` (with ``execute_notebooks:
"off"``), ``_toc.yml``, ``book/``, ``exercises/`` and the chapters, each one the notebook executed in
*this* pytest session from the current file. A chapter that this session did not run (for example
``pytest tests/test_book.py`` alone, or a notebook edited since nbval ran it) is executed here with
nbclient; a chapter whose nbval run failed stops the build (the book never shows outputs the test
suite did not produce from the current code). ``build_book()`` runs
``jupyter-book build _build/book_src --all -W --keep-going``.

Run ``.venv/bin/python -m tools.book`` to do the same by hand (every chapter executed with nbclient,
since there is no pytest session); ``jupyter-book build . --all`` still builds the book directly.
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
import uuid
from collections import defaultdict
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CHAPTERS = ROOT / "chapters"
EXECUTED = ROOT / "_build" / "executed"
STAGE = ROOT / "_build" / "book_src"
HTML = STAGE / "_build" / "html"
SESSION_ENV = "PPO_BOOK_SESSION"
"""Environment variable naming the current pytest session (set by the root conftest, inherited by
pytest-xdist workers), so that a notebook executed in an earlier session is never mistaken for this one's."""

_RGX_CARRIAGERETURN = re.compile(r".*\r(?=[^\n])")
"""A line's text up to a carriage return that is not the end of the line: overwritten, as a terminal shows it."""
_RGX_BACKSPACE = re.compile("[^\n\x08]\x08")
"""A character followed by the backspace character (\\x08) that erases it. Not ``r"[^\\n]\\b"``: in a regular
expression ``\\b`` is a word boundary, and removing "a character before a word boundary" until nothing changes
erased every printed output of the book."""


class BookError(RuntimeError):
    """The book cannot be staged or built; the message says why."""


# --------------------------------------------------------------------------------------------------
# Executed notebooks: digests, stamps, post-processing


def new_session() -> str:
    """Start a session: a fresh id in the environment (kernels and xdist workers inherit it)."""
    os.environ[SESSION_ENV] = uuid.uuid4().hex
    return os.environ[SESSION_ENV]


def notebook_digest(nb) -> str:
    """A digest of what determines a notebook's execution and rendering: cells and metadata, no outputs.

    (Not ``nbformat.writes``: it invents random ids for cells stored without one.)
    """
    content = {
        "metadata": nb.get("metadata", {}),
        "cells": [
            [cell.get("cell_type"), cell.get("source"), cell.get("metadata", {}), cell.get("attachments")]
            for cell in nb.cells
        ],
    }
    return hashlib.sha256(json.dumps(content, sort_keys=True, default=str).encode()).hexdigest()


def _stamp_path(name: str) -> Path:
    return EXECUTED / "chapters" / f"{name}.stamp.json"


def _write_stamp(name: str, status: str, digest: str, detail: str = "") -> None:
    path = _stamp_path(name)
    path.parent.mkdir(parents=True, exist_ok=True)
    stamp = {"session": os.environ.get(SESSION_ENV, ""), "status": status, "digest": digest, "detail": detail}
    path.write_text(json.dumps(stamp, indent=1))


def read_stamp(name: str) -> dict | None:
    try:
        return json.loads(_stamp_path(name).read_text())
    except (OSError, ValueError):
        return None


def merge_streams(outputs: list) -> list:
    """Merge consecutive stream outputs of the same name and apply \\r and \\x08, as Jupyter shows them.

    nbconvert's ``CoalesceStreamsPreprocessor`` merges and applies ``\\r`` but leaves backspaces, so this is
    written out here. A backspace erases the character before it on the same line (one with nothing left to
    erase is dropped); ``\\r`` not followed by ``\\n`` discards the line's text before it.
    """
    merged = []
    for out in outputs:
        if (
            out.get("output_type") == "stream"
            and merged
            and merged[-1].get("output_type") == "stream"
            and merged[-1]["name"] == out["name"]
        ):
            merged[-1]["text"] += out["text"]
        else:
            merged.append(out)
    for out in merged:
        if out.get("output_type") == "stream":
            text = out["text"]
            old = None
            while old != text:
                old, text = text, _RGX_BACKSPACE.sub("", text)
            out["text"] = _RGX_CARRIAGERETURN.sub("", text.replace("\x08", ""))
    return merged


def _language_info() -> dict:
    from ipykernel.ipkernel import IPythonKernel

    return dict(IPythonKernel.language_info)


def _finish(nb) -> None:
    """Number the executed code cells 1, 2, ... (outputs too) and merge streams: a normal executed notebook."""
    count = 0
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        cell.outputs = merge_streams(cell.outputs)
        if cell.execution_count is None:  # not executed (nbval-skip)
            continue
        count += 1
        cell.execution_count = count
        for out in cell.outputs:
            if out.get("output_type") == "execute_result":
                out["execution_count"] = count
    nb.metadata["language_info"] = _language_info()


def _output_widget_class():
    from nbclient.output_widget import OutputWidget

    class QuietOutputWidget(OutputWidget):
        """nbclient's front-end mimic of the Output widget, minus syncing back to the kernel (nbval's)."""

        def send(self, data=None, metadata=None, buffers=None):
            pass

    return QuietOutputWidget


def assemble_notebook(nb, runs: dict[int, tuple[str, list]]):
    """The executed notebook, from the kernel messages that nbval's cells received.

    Args:
        nb: the notebook as nbval read it (not modified).
        runs: {code cell number: (execute request msg_id, the iopub messages read during the cell)};
            a code cell that did not run (nbval-skip) is absent.
    Returns:
        A copy of ``nb`` whose code cells hold the outputs nbclient would have recorded from the
        same messages (clear_output, Output widgets and display updates included), widget state in
        the metadata, execution counts 1, 2, ... and merged streams.
    """
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionComplete

    nb = copy.deepcopy(nb)
    client = NotebookClient(nb, record_timing=False, store_widget_state=True)
    client.widget_registry = {"@jupyter-widgets/output": {"OutputModel": _output_widget_class()}}
    client.reset_execution_trackers()
    code_num = -1
    for index, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        code_num += 1
        cell.outputs = []
        cell.execution_count = None
        client.clear_before_next_output = False  # per-cell state nbclient sets in execute_cell
        if code_num not in runs:
            continue
        msg_id, messages = runs[code_num]
        for msg in messages:
            if msg.get("parent_header", {}).get("msg_id") != msg_id:
                continue
            try:
                client.process_message(msg, cell, index)
            except CellExecutionComplete:
                break
        cell.execution_count = code_num + 1  # any number: _finish renumbers
    client.set_widgets_metadata()
    _finish(nb)
    return nb


def execute_notebook(path: Path, timeout: int = 600):
    """Execute a notebook with nbclient (cwd: its folder), as the book's own executor would."""
    import nbformat
    from nbclient import NotebookClient

    nb = nbformat.read(path, as_version=4)
    client = NotebookClient(
        nb,
        timeout=timeout,
        kernel_name="python3",
        record_timing=False,
        resources={"metadata": {"path": str(path.parent)}},
    )
    client.execute()
    _finish(nb)
    return nb


# --------------------------------------------------------------------------------------------------
# The pytest plugin: record what nbval executes


class NotebookRecorder:
    """A pytest plugin: writes each chapter notebook that nbval ran completely and successfully.

    Only notebooks directly in ``chapters/`` are recorded, and only when every one of their code cells
    was collected (no ``-k`` subset) and none failed. A failed one gets a stamp saying so.
    """

    def __init__(self, chapters: Path = CHAPTERS):
        self.chapters = chapters.resolve()
        self.expected: dict[Path, int] = {}  # notebook -> number of code cells, when all were collected
        self.notebook_of: dict[str, Path] = {}  # nodeid -> notebook
        self.nb: dict[Path, object] = {}  # notebook -> the NotebookNode nbval read
        self.runs: dict[Path, dict[int, tuple[str, list]]] = defaultdict(dict)
        self.failed: dict[Path, str] = {}
        self.finished: dict[Path, int] = defaultdict(int)

    def _is_chapter_cell(self, item) -> bool:
        try:
            from nbval.plugin import IPyNbCell
        except ImportError:
            return False
        return isinstance(item, IPyNbCell) and Path(item.path).resolve().parent == self.chapters

    def pytest_collection_finish(self, session):
        per_nb = defaultdict(list)
        for item in session.items:
            if self._is_chapter_cell(item):
                per_nb[Path(item.path).resolve()].append(item)
        for path, items in per_nb.items():
            nb = items[0].parent.nb
            n_code = sum(cell.cell_type == "code" for cell in nb.cells)
            if len(items) == n_code:
                self.expected[path] = n_code
                self.nb[path] = nb
                for item in items:
                    self.notebook_of[item.nodeid] = path

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_call(self, item):
        """Record a chapter cell's kernel messages around nbval's ``runtest``."""
        path = self.notebook_of.get(item.nodeid)
        if path is None or getattr(item.parent, "kernel", None) is None:
            return (yield)
        nbfile, kernel, messages, ids = self._record(item)
        try:
            return (yield)
        finally:
            del nbfile.get_kernel_message  # back to the class's methods
            del kernel.execute_cell_input
            if ids:
                self.runs[path][item.cell_num] = (ids[-1], messages)

    def _record(self, item):
        """Wrap the cell's kernel calls on the instances: every iopub message and the request's id."""
        nbfile, kernel = item.parent, item.parent.kernel
        messages, ids = [], []
        get_message, execute = nbfile.get_kernel_message, kernel.execute_cell_input

        def recording_get_message(*args, **kwargs):
            msg = get_message(*args, **kwargs)
            messages.append(msg)
            return msg

        def recording_execute(*args, **kwargs):
            msg_id = execute(*args, **kwargs)
            ids.append(msg_id)
            return msg_id

        nbfile.get_kernel_message = recording_get_message
        kernel.execute_cell_input = recording_execute
        return nbfile, kernel, messages, ids

    def pytest_runtest_logreport(self, report):
        path = self.notebook_of.get(report.nodeid)
        if path is None:
            return
        if report.failed:
            self.failed.setdefault(path, f"{report.nodeid} failed ({report.when})")
        if report.when == "teardown":
            self.finished[path] += 1
            if self.finished[path] == self.expected[path]:
                self._write(path)

    def _write(self, path: Path) -> None:
        import nbformat

        nb = self.nb[path]
        digest = notebook_digest(nb)
        name = path.stem
        if path in self.failed:
            _write_stamp(name, "failed", digest, self.failed[path])
            return
        try:
            executed = assemble_notebook(nb, self.runs.pop(path, {}))
            out = EXECUTED / "chapters" / path.name
            out.parent.mkdir(parents=True, exist_ok=True)
            nbformat.write(executed, out)
        except Exception as exc:  # never break the test run; the book test reports it
            _write_stamp(name, "failed", digest, f"recording its executed copy failed: {exc!r}")
            return
        _write_stamp(name, "passed", digest)


# --------------------------------------------------------------------------------------------------
# Staging and building


def chapter_notebooks() -> list[Path]:
    return sorted(CHAPTERS.glob("*.ipynb"))


def wait_for_stamps(names, session: str, timeout: float = 1800, poll: float = 1.0) -> list[str]:
    """Wait until every chapter in ``names`` has a stamp of ``session``: under pytest-xdist another worker may still
    be running it. Returns the names still without one after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        missing = [name for name in names if (read_stamp(name) or {}).get("session") != session]
        if not missing or time.monotonic() > deadline:
            return missing
        time.sleep(poll)


def stage_book(session: str | None = None, timeout: int = 600, log=print, wait_for=()) -> dict[str, str]:
    """Fill ``_build/book_src/`` from scratch. Returns {chapter: "nbval" or "nbclient"}.

    ``wait_for``: chapters that this session's nbval runs elsewhere (another xdist worker): their stamps are
    awaited first; one still missing after 30 minutes is executed here.

    Raises:
        BookError: a chapter failed in this session's nbval run, or failed to execute here.
    """
    import nbformat
    import yaml

    if session and wait_for:
        for name in wait_for_stamps(list(wait_for), session):
            log(f"[book] gave up waiting for nbval to finish {name}")
    failed = []
    sources = {}
    for path in chapter_notebooks():
        stamp = read_stamp(path.stem)
        if session and stamp and stamp["session"] == session and stamp["status"] == "failed":
            failed.append(f"{path.name}: {stamp['detail']}")
        sources[path] = stamp
    if failed:
        raise BookError(
            "not building the book from notebooks that failed their tests in this session:\n  " + "\n  ".join(failed)
        )

    if STAGE.exists():
        shutil.rmtree(STAGE)
    STAGE.mkdir(parents=True)
    config = yaml.safe_load((ROOT / "_config.yml").read_text())
    config.setdefault("execute", {})["execute_notebooks"] = "off"
    (STAGE / "_config.yml").write_text(yaml.safe_dump(config, sort_keys=False, allow_unicode=True))
    shutil.copy2(ROOT / "_toc.yml", STAGE / "_toc.yml")
    junk = (".ipynb_checkpoints", "__pycache__", "_build")
    for folder in ("book", "exercises"):
        if (ROOT / folder).is_dir():
            shutil.copytree(ROOT / folder, STAGE / folder, ignore=shutil.ignore_patterns(*junk))
    (STAGE / "tools").mkdir()
    shutil.copy2(ROOT / "tools" / "book_fixes.py", STAGE / "tools" / "book_fixes.py")  # local_extensions
    # the chapters' other files (images, data), then each notebook as executed
    shutil.copytree(CHAPTERS, STAGE / "chapters", ignore=shutil.ignore_patterns("*.ipynb", *junk))

    how = {}
    for path, stamp in sources.items():
        executed = EXECUTED / "chapters" / path.name
        current = notebook_digest(nbformat.read(path, as_version=4))
        if (
            session
            and stamp
            and stamp["session"] == session
            and stamp["status"] == "passed"
            and stamp["digest"] == current
            and executed.is_file()
        ):
            shutil.copy2(executed, STAGE / "chapters" / path.name)
            how[path.stem] = "nbval"
            continue
        reason = (
            "not run by nbval in this session"
            if not (session and stamp and stamp["session"] == session)
            else "changed since nbval ran it"
        )
        log(f"[book] executing {path.name} with nbclient ({reason})")
        start = time.perf_counter()
        try:
            nb = execute_notebook(path, timeout=timeout)
        except Exception as exc:  # CellExecutionError, timeouts, dead kernels
            raise BookError(f"{path.name} failed to execute: {exc}") from exc
        nbformat.write(nb, STAGE / "chapters" / path.name)
        how[path.stem] = f"nbclient ({time.perf_counter() - start:.0f} s)"
    return how


def build_book(timeout: int = 900) -> tuple[int, str]:
    """``jupyter-book build _build/book_src --all -W --keep-going``; returns (exit code, output)."""
    cmd = [
        sys.executable,
        "-c",
        "import sys; from jupyter_book.cli.main import main; sys.exit(main())",
        "build",
        str(STAGE),
        "--all",
        "-W",
        "--keep-going",
    ]
    env = dict(os.environ, PYTHONWARNINGS="ignore::DeprecationWarning")
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)
    return proc.returncode, proc.stdout + proc.stderr


def warnings_of(output: str) -> list[str]:
    """The warning and error lines of a Sphinx log."""
    return [line for line in output.splitlines() if re.search(r"WARNING|ERROR|CRITICAL|Exception|Error:", line)]


def main() -> int:
    start = time.perf_counter()
    try:
        how = stage_book(session=None)
    except BookError as exc:
        print(exc, file=sys.stderr)
        return 1
    print("[book] staged:", ", ".join(f"{k} ({v})" for k, v in how.items()))
    rc, output = build_book()
    if rc:
        print(output[-5000:])
        print("\n".join(warnings_of(output)), file=sys.stderr)
        return rc
    print(f"[book] built {HTML / 'index.html'} in {time.perf_counter() - start:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
