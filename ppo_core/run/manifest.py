"""Chapter 05 - checkpoints that prove they are whole: a manifest of every file's size and hash.

``write_manifest`` lists each file of a checkpoint folder (``manifest.json``: size and xxh3-128 hash,
or sha256 where ``xxhash`` is missing) as the last file written, before the rename that publishes the
folder. ``damage`` checks a folder against it and returns one line naming the first bad file, or None;
a checkpoint saved before manifests existed is checked by reading every weights, state and JSON file.
"""

import hashlib
import json
from pathlib import Path

__all__ = ["MANIFEST", "STATE_FILE", "write_manifest", "damage", "is_write_failure"]

MANIFEST = "manifest.json"
STATE_FILE = "trainer_state.pt"
"""The trainer state a checkpoint ends with (written last: its presence marks a complete checkpoint)."""
CHUNK = 1 << 24  # 16 MiB reads: flat memory whatever the file's size


def _hashers() -> dict:
    found = {"sha256": hashlib.sha256}
    try:  # installed with datasets; ~15x faster than sha256 (a few GB of optimizer state hash in well under 1 s)
        import xxhash

        found = {"xxh3_128": xxhash.xxh3_128, **found}
    except ImportError:
        pass
    return found


HASHERS = _hashers()


def file_hash(path: Path, algorithm: str) -> str:
    h = HASHERS[algorithm]()
    with open(path, "rb") as f:
        while block := f.read(CHUNK):
            h.update(block)
    return h.hexdigest()


def write_manifest(folder) -> None:
    """Write ``folder/manifest.json``: every other file under ``folder`` with its size and hash."""
    folder, algorithm = Path(folder), next(iter(HASHERS))
    files = {
        p.relative_to(folder).as_posix(): {"size": p.stat().st_size, algorithm: file_hash(p, algorithm)}
        for p in sorted(folder.rglob("*"))
        if p.is_file() and p.name != MANIFEST
    }
    (folder / MANIFEST).write_text(json.dumps({"algorithm": algorithm, "files": files}, indent=1) + "\n")


def damage(folder) -> str | None:
    """None for an intact checkpoint folder; else one line naming the first damaged or missing file."""
    folder = Path(folder)
    if not folder.is_dir():
        return f"{folder}: no such folder"
    if not (folder / MANIFEST).is_file():
        return _damage_by_loading(folder)  # saved before manifests existed
    try:
        manifest = json.loads((folder / MANIFEST).read_text())
        algorithm, files = manifest["algorithm"], manifest["files"]
    except (OSError, ValueError, KeyError, TypeError) as err:
        return f"{folder / MANIFEST}: unreadable ({type(err).__name__}: {_first_line(err)})"
    if algorithm not in HASHERS:
        return f"{folder / MANIFEST}: hashed with {algorithm}, which is not installed here (pip install xxhash)"
    for name, want in files.items():
        path = folder / name
        if not path.is_file():
            return f"{path}: missing (the manifest lists it)"
        size = path.stat().st_size
        if size != want["size"]:
            return f"{path}: {size} bytes where the manifest says {want['size']} (cut short or changed)"
        if file_hash(path, algorithm) != want[algorithm]:
            return f"{path}: contents differ from the manifest's hash (damaged or changed after the save)"
    return None


def _damage_by_loading(folder: Path) -> str | None:
    """A checkpoint without a manifest: every safetensors, torch and JSON file must load, and the weights
    and the optimizer state must be there."""
    import torch
    from safetensors import safe_open

    weights = ("model.safetensors", "model.safetensors.index.json", "adapter_model.safetensors", "pytorch_model.bin")
    if not any((folder / name).is_file() for name in weights):
        return f"{folder}: no weights file (model.safetensors or adapter_model.safetensors)"
    state = None
    for path in sorted(folder.rglob("*")):
        try:
            if path.suffix == ".safetensors":
                with safe_open(path, "pt") as f:  # checks the header against the file's length
                    for key in f.keys():
                        f.get_tensor(key)
            elif path.suffix in (".pt", ".bin"):
                loaded = torch.load(path, map_location="cpu", weights_only=False)
                state = loaded if path.name == STATE_FILE else state
            elif path.suffix == ".json":
                json.loads(path.read_text())
        except Exception as err:  # noqa: BLE001 - whatever the reader raises, the file is what is wrong
            return f"{path}: unreadable ({_first_line(err)})"
    if isinstance(state, dict) and "optimizer" not in state and not (folder / "optimizer.pt").is_file():
        return f"{folder / 'optimizer.pt'}: missing (the optimizer state)"
    return None


def is_write_failure(err: BaseException) -> bool:
    """Whether ``err``, raised while writing a checkpoint, is the disk's (full, read-only, I/O error) rather than
    a bug: torch.save reports a full disk as ``RuntimeError: [enforce fail at inline_container.cc] ...``."""
    text = str(err)
    return (
        isinstance(err, OSError)
        or type(err).__name__ == "SafetensorError"
        or (isinstance(err, RuntimeError) and ("inline_container" in text or "PytorchStreamWriter" in text))
    )


def _first_line(err: BaseException) -> str:
    lines = str(err).strip().splitlines()
    return (lines[0] if lines else type(err).__name__)[:200]
