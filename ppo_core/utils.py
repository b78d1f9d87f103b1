"""Small helpers shared across the package: atomic writes, Hugging Face Hub messages, notebook display."""

import contextlib
import inspect
import os
import shutil
import warnings
from pathlib import Path

__all__ = [
    "show_source",
    "write_folder_atomically",
    "write_text_atomically",
    "hub_offline",
    "hub_unreachable",
    "fsync",
    "no_transformers_bars",
    "stream_seed",
    "dotted_get",
    "quiet_peft",
    "no_peft_deprecation",
]


def dotted_get(obj, dotted: str):
    """``obj.a.b`` for ``dotted`` = "a.b" (a config key)."""
    for part in dotted.split("."):
        obj = getattr(obj, part)
    return obj


SEED_STREAMS = {"prompts": 100_003, "refill": 1_000_033, "rank_sampling": 1_000_003}
"""The random streams a run derives from ``train.seed``, each with its own multiplier so that they never coincide."""


def stream_seed(seed: int, stream: str, step: int = 0, index: int = 0) -> int:
    """The seed of one draw of ``stream`` (``SEED_STREAMS``): a pure function of (``train.seed``, step, index), so
    that a resumed run draws the same. prompts: index = the pass over the data; refill: step and round of dynamic
    sampling; rank_sampling: step and rank of a data-parallel rank's sampling."""
    return (seed * SEED_STREAMS[stream] + step * 1_009 + index) % 2**63


TRUE_STRINGS = {"1", "ON", "YES", "TRUE"}


def show_source(obj):
    """Show the source of a package function in a notebook (syntax-highlighted), e.g. ``show_source(compute_gae)``."""
    from IPython.display import Code  # only in notebooks: the package does not need IPython

    return Code(inspect.getsource(obj), language="python")


@contextlib.contextmanager
def no_transformers_bars():
    """transformers' progress bars off for the block, then as they were. Checkpoints are written under it: a
    "Writing model shards" bar at every save breaks the run's own (``train.progress=false`` turns both off)."""
    from transformers.utils import logging as hf_logging

    was_on = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if was_on:
            hf_logging.enable_progress_bar()


def fsync(path) -> None:
    """Flush a file or folder to disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_text_atomically(path, text: str) -> None:
    """Write ``text`` to a temporary sibling, then rename it over ``path``: a crash leaves the old or the new file."""
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def write_folder_atomically(final, write, replace: bool = True) -> Path:
    """Call ``write(tmp)`` on an empty ``.tmp-<name>-<pid>`` sibling folder, flush it, then publish it as ``final``
    by a rename, so a process killed at any moment (even by kill -9) leaves the complete new folder or none.

    An existing ``final`` is replaced (``replace=True``; moved aside to ``.old-<name>-<pid>`` for the instant
    between two renames, see ``run.checkpoint.recover_interrupted_saves``) or kept (``replace=False``: another
    process finished the same folder first).
    """
    final = Path(final)
    out, pid = final.parent, os.getpid()
    out.mkdir(parents=True, exist_ok=True)
    tmp = out / f".tmp-{final.name}-{pid}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    write(tmp)
    for path in [*tmp.rglob("*"), tmp]:
        if path.is_file() or path == tmp:
            fsync(path)
    if final.exists() and not replace:
        shutil.rmtree(tmp, ignore_errors=True)
        return final
    try:
        if final.exists():
            old = out / f".old-{final.name}-{pid}"
            os.replace(final, old)
            os.replace(tmp, final)  # a kill between the two renames is undone by recover_interrupted_saves
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, final)
    except OSError:  # another process published ``final`` between the check and the rename
        if replace:
            raise
        shutil.rmtree(tmp, ignore_errors=True)
    fsync(out)
    return final


def hub_offline(*variables: str) -> bool:
    """Whether the first of the environment ``variables`` that is set (default HF_HUB_OFFLINE) asks for offline."""
    value = next((os.environ[v] for v in variables or ("HF_HUB_OFFLINE",) if os.environ.get(v)), "")
    return value.upper() in TRUE_STRINGS


def hub_unreachable(name: str, why: str, fix: str) -> str:
    """The one line for something the Hugging Face Hub could not give: what, why, and the fix without the hub."""
    return f"Cannot load {name!r} from the Hugging Face Hub ({why}); {fix}"


def quiet_peft():
    """``import peft``, without the warning bitsandbytes logs on import on CPUs with AVX512-bf16 (an optional
    4-bit kernel package is missing; LoRA here uses no 4-bit weights), which would land in every LoRA run's
    output. Later imports are free: Python caches modules."""
    import logging

    quiet = logging.getLogger("bitsandbytes.backends.cpu.ops")
    level = quiet.level
    quiet.setLevel(logging.ERROR)
    try:
        import peft
    finally:
        quiet.setLevel(level)
    return peft


@contextlib.contextmanager
def no_peft_deprecation():
    """peft reads an attribute transformers has deprecated: a FutureWarning no user can act on, kept out of runs."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "`is_gradient_checkpointing` is deprecated", FutureWarning)
        yield
