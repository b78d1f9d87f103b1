"""Test-wide settings: offline, quiet, headless. Applies to unit tests and to the notebook kernels nbval starts.

Also: the chapter notebooks that nbval executes are kept (``_build/executed/``, see tools/book.py),
and tests/test_book.py runs after them, building the book from them: one execution serves both.
"""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # no hub access anywhere in the suite
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
os.environ.setdefault("PYDEVD_DISABLE_FILE_VALIDATION", "1")
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # see ppo_core/run/cli.py
os.environ.setdefault("PPO_NOTEBOOK_QUICK", "1")  # chapter 05's full run: 1 step under the suite, 40 for a reader
# glibc's malloc, in the processes the suite starts (workers, kernels, commands): blocks up to 32 MiB (the most
# glibc's adaptive threshold reaches by itself) come from the heap, and freed memory is kept for reuse instead of
# being handed back and faulted in again at the next step. The same runs with a third of the page faults: the
# reward-model training of chapter 06 took 4-7 % less time (2 cores). Larger blocks (a real vocabulary's logits)
# are still mapped and unmapped, so tests/test_logprobs.py's peak-memory checks measure what a user's process does.
for _name, _value in (("MALLOC_TRIM_THRESHOLD_", "4000000000"), ("MALLOC_MMAP_THRESHOLD_", str(32 * 2**20))):
    os.environ.setdefault(_name, _value)
if "PYTEST_XDIST_WORKER_COUNT" in os.environ:  # -n N: share the cores among the workers (and their kernels)
    _workers = int(os.environ["PYTEST_XDIST_WORKER_COUNT"])
    os.environ.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // _workers)))

import matplotlib  # noqa: E402

matplotlib.use("Agg")  # this process only; notebook kernels keep their inline backend

from tools import book, kernel_fork  # noqa: E402

BOOK_TESTS = "tests/test_book.py"

SLOW = (
    "chapters/",
    "exercises/",
    BOOK_TESTS,
    "tests/test_exercises.py",
    "tests/test_long_synthetic.py",
    "tests/test_cuda_preset.py",
    "tests/test_smollm.py",
)
"""The end-to-end tier (``-m slow``) by file: notebooks, the book in Chromium, the learner copies' harness and the
two files whose every test warm-starts a model or needs the cuda preset's packages. Elsewhere a test that runs the
trainer end to end, a warm start or several processes is marked ``@pytest.mark.slow`` itself, so that the
unit-sized tests beside it stay in the unit tier (``pytest -m "not slow"``)."""


LONGEST_FIRST = (
    "chapters/06_reward_models.ipynb",
    "chapters/05_full_loop.ipynb",
    "tests/test_distributed.py",
    "chapters/08_reasoning_objectives.ipynb",
    "tests/test_smollm.py",
    "chapters/10_real_llm.ipynb",
    "exercises/06_reward_models.ipynb",  # learner copies run whole with the second solutions (exercises/conftest.py)
    "exercises/08_reasoning_objectives.ipynb",
    "exercises/05_full_loop.ipynb",
)
"""The files that take longest, started first under pytest-xdist; the other slow-tier files follow, then the rest."""


def pytest_configure(config):
    if not hasattr(config, "workerinput"):  # the controller (or a plain run); xdist workers inherit its id
        book.new_session()
    config.pluginmanager.register(book.NotebookRecorder(), "ppo-notebook-recorder")
    kernel_fork.install()  # notebook kernels forked from a process that imported torch once (tools/kernel_fork.py)


def pytest_unconfigure(config):
    kernel_fork.uninstall()


def pytest_collection_modifyitems(config, items):
    """Mark the end-to-end tier ``slow``. The book test goes last: it builds the book from the notebooks nbval ran
    before it.

    Under pytest-xdist (``-n N --dist loadfile --no-loadscope-reorder``) each file runs whole on one worker, in this
    order: ``LONGEST_FIRST``, the other slow files, the book test, then the unit tier, whose many short files let
    the workers finish together. The book test waits for the chapters that other workers still run
    (``tools.book.stage_book``).
    """
    for item in items:
        if item.nodeid.startswith(SLOW):
            item.add_marker("slow")
    last = [item for item in items if item.nodeid.startswith(BOOK_TESTS)]
    if last:
        items[:] = [item for item in items if not item.nodeid.startswith(BOOK_TESTS)] + last
    if hasattr(config, "workerinput"):  # longest first; the short unit files last, so that the workers end together
        rank = {name: i for i, name in enumerate(LONGEST_FIRST)}

        def order(item):
            file = item.nodeid.split("::")[0]
            tier = 2 if "slow" not in item.keywords else 1 if item.nodeid.startswith(BOOK_TESTS) else 0
            return (rank.get(file, len(rank)), tier)

        items.sort(key=order)  # stable: each file's tests keep their order


def pytest_terminal_summary(terminalreporter):
    """Say once, in plain words, when the book's browser checks were skipped and how to get them."""
    pages = [
        report
        for report in terminalreporter.stats.get("skipped", [])
        if report.nodeid.startswith(BOOK_TESTS) and "Chromium is not installed" in str(report.longrepr)
    ]
    if pages:
        terminalreporter.write_line(
            f"[book] the browser checks of {len(pages)} pages were skipped: headless Chromium is not installed "
            "(Debian/Ubuntu: sudo apt-get install -y chromium chromium-driver, then run pytest again)",
            yellow=True,
            bold=True,
        )
