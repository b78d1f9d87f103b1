"""Chapter 05 - stopping and resuming safely: atomic checkpoints, signal handling, resume checks.

A run folder (``train.output_dir``) holds ``step_N/`` checkpoints, ``final/``, and the run's logs.
A checkpoint is written into ``.tmp-<name>-<pid>/``, flushed to disk, then renamed to ``<name>/``: a
rename is atomic, so a process killed during a save (even with kill -9) leaves either the complete
new checkpoint or none, never a folder that looks complete but is not. ``manifest.json`` (``run/manifest.py``:
each file's size and hash) is the last file written, so a checkpoint can prove it is whole:
``latest_intact_checkpoint`` skips damaged ones. A save the disk refuses (full, read-only) leaves no
temporary folder and raises ``CheckpointWriteError``; the checkpoints before it stay intact.

``StopOnSignal`` turns SIGINT (Ctrl-C) and SIGTERM into a request the training loop answers after
the step in flight (it saves ``step_N`` and returns); ``config_changes`` lists the settings a resume
changed that would make it leave the trajectory of the run it continues.
"""

import json
import os
import shutil
import signal
import threading
from pathlib import Path

from ..utils import write_folder_atomically
from .manifest import MANIFEST, STATE_FILE, damage, is_write_failure, write_manifest

__all__ = [
    "STATE_FILE",
    "checkpoint_step",
    "latest_checkpoint",
    "latest_intact_checkpoint",
    "write_atomically",
    "CheckpointWriteError",
    "recover_interrupted_saves",
    "clear_run",
    "prune",
    "later_checkpoints",
    "config_changes",
    "StopOnSignal",
]

RUN_FILES = ("metrics.jsonl", "samples.jsonl", "summary.json", "dashboard.png", "effective_config.yaml", "tb")
"""What a run writes beside its checkpoints (removed with them when a run is started over)."""
RESUMABLE_CHANGES = {
    "train." + k
    for k in (
        "steps",
        "resume",
        "output_dir",
        "progress",
        "tensorboard",
        "wandb",
        "wandb_project",
        "log_every",
        "save_every",
        "keep_last",
        "eval_every",
        "eval_samples",
        "num_threads",
        "overwrite",
        "max_skipped_steps",
        "check_ratio",
        "ratio_tol",
    )
} | {"warmstart.cache_dir"}
"""Settings a resumed run may change without leaving the trajectory of the run it continues."""


def step_of_name(name: str) -> int | None:
    """N for a folder named ``step_N``, else None."""
    return int(name[5:]) if name.startswith("step_") and name[5:].isdigit() else None


def _is_checkpoint_name(name: str) -> bool:
    return name == "final" or step_of_name(name) is not None


def checkpoint_step(path) -> int | None:
    """The step of a complete checkpoint folder (step_N or final), or None if it is not one."""
    path = Path(path)
    if not (path / STATE_FILE).is_file():
        return None
    if step_of_name(path.name) is not None:
        return step_of_name(path.name)
    try:
        return int(json.loads((path / "trainer_state.json").read_text())["step"])
    except (OSError, ValueError, KeyError):
        return None


def latest_checkpoint(output_dir) -> Path | None:
    """The complete checkpoint with the largest step in ``output_dir`` (final/ wins a tie), or None."""
    found = []
    for path in Path(output_dir).glob("*"):
        step = checkpoint_step(path) if _is_checkpoint_name(path.name) else None
        if step is not None:
            found.append((step, path.name == "final", path))
    return max(found, default=(None, None, None))[2]


def latest_intact_checkpoint(output_dir) -> tuple[Path | None, list[tuple[Path, str]]]:
    """The newest checkpoint in ``output_dir`` that its manifest (or, saved before manifests, a full read) proves
    whole, and the newer ones skipped as ``(path, what is wrong)``."""
    found = []
    for path in Path(output_dir).glob("*"):
        if _is_checkpoint_name(path.name) and path.is_dir():
            step = checkpoint_step(path) if (path / STATE_FILE).is_file() else step_of_name(path.name)
            found.append((float("inf") if step is None else step, path.name == "final", path))  # final unreadable
    skipped = []
    for _, _, path in sorted(found, reverse=True):
        has_state = (path / STATE_FILE).is_file()
        why = damage(path) if has_state or (path / MANIFEST).is_file() else None
        why = why or (None if has_state else f"{path / STATE_FILE}: missing")
        if why is None:
            return path, skipped
        skipped.append((path, why))
    return None, skipped


def later_checkpoints(output_dir, step: int) -> list[Path]:
    """The checkpoints in ``output_dir`` saved after ``step`` (by an attempt that a resume abandons), damaged
    ones too (a step_N by its name; a final/ whose step is unreadable counts as later)."""

    def step_of(p):
        saved = checkpoint_step(p)
        return saved if saved is not None else step_of_name(p.name) if p.name != "final" else float("inf")

    return sorted(p for p in Path(output_dir).glob("*") if _is_checkpoint_name(p.name) and step_of(p) > step)


class CheckpointWriteError(RuntimeError):
    """The disk refused a checkpoint (full, read-only, I/O error): nothing of it was kept, earlier ones are intact."""


def write_atomically(output_dir, name: str, write) -> Path:
    """Call ``write(tmp_folder)``, add the manifest, flush it to disk, then publish it as ``output_dir/name``
    with a rename. On failure the temporary folder is removed (an I/O failure: ``CheckpointWriteError``)."""

    def write_then_manifest(tmp: Path) -> None:
        write(tmp)
        write_manifest(tmp)  # last: it hashes every file written above

    try:
        return write_folder_atomically(Path(output_dir) / name, write_then_manifest)
    except BaseException as err:
        recover_interrupted_saves(output_dir)  # drops our .tmp-*, puts back a checkpoint moved aside
        if not is_write_failure(err):
            raise
        last = latest_intact_checkpoint(output_dir)[0]
        kept = f"the last checkpoint {last} is intact" if last else "no checkpoint was saved before it"
        reason = str(err).strip().splitlines()[0][:160] if str(err).strip() else type(err).__name__
        raise CheckpointWriteError(
            f"could not write {Path(output_dir) / name} ({reason}): what was written of it is removed, {kept}; "
            "free disk space (or choose another train.output_dir), then continue with train.resume=auto"
        ) from err


def prune(output_dir, keep_last: int) -> None:
    """Delete all but the ``keep_last`` newest step_N checkpoints (final/ is never pruned)."""
    steps = sorted(
        (p for p in Path(output_dir).glob("step_*") if step_of_name(p.name) is not None),
        key=lambda p: step_of_name(p.name),
    )
    for old in steps[:-keep_last]:
        shutil.rmtree(old, ignore_errors=True)


def recover_interrupted_saves(output_dir) -> None:
    """After a killed save: drop unpublished .tmp-* folders, put back a checkpoint caught between two renames."""
    out = Path(output_dir)
    if not out.is_dir():
        return
    for path in [*out.glob(".tmp-*"), *out.glob(".old-*")]:
        name, _, pid = path.name.split("-", 1)[1].rpartition("-")
        if pid.isdigit() and int(pid) != os.getpid() and _pid_alive(int(pid)):
            continue  # another live process is saving into this folder
        if path.name.startswith(".old-") and not (out / name).exists():
            os.replace(path, out / name)  # the new one was never published: the old one is still whole
        else:
            shutil.rmtree(path, ignore_errors=True)


def clear_run(output_dir) -> None:
    """Delete what a previous run wrote into ``output_dir`` (checkpoints, logs, summary); keep other files."""
    for path in Path(output_dir).glob("*"):
        if path.name in RUN_FILES or _is_checkpoint_name(path.name):
            shutil.rmtree(path) if path.is_dir() else path.unlink()


def config_changes(saved: dict | None, now: dict) -> list[str]:
    """'section.key (old -> new)' for every setting that differs and would change the trajectory."""
    if saved is None:
        return []
    return [
        f"{s}.{k} ({saved[s][k]!r} -> {v!r})"
        for s, sec in now.items()
        for k, v in sec.items()
        if f"{s}.{k}" not in RESUMABLE_CHANGES and k in saved.get(s, {}) and saved[s][k] != v
    ]


class StopOnSignal:
    """While active, SIGINT/SIGTERM set ``signum`` (the loop then saves and returns); a second one stops at once."""

    SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __enter__(self):
        self.signum, self.previous = None, {}
        if threading.current_thread() is threading.main_thread():  # signal handlers live in the main thread only
            self.previous = {s: signal.signal(s, self._handle) for s in self.SIGNALS}
        return self

    def _handle(self, signum, frame) -> None:
        if self.signum is not None:  # the second signal: stop now (the last checkpoint stays intact)
            raise KeyboardInterrupt if signum == signal.SIGINT else SystemExit(128 + signum)
        self.signum = signum
        os.write(
            2,
            f"\n{signal.Signals(signum).name}: finishing the step in flight, then saving a checkpoint "
            "(send it again to stop at once)\n".encode(),
        )

    def __exit__(self, *exc) -> None:
        for s, handler in self.previous.items():
            signal.signal(s, handler)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, owned by someone else
        return True
    return True
