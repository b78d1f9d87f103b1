"""Where and how a result was made: every results file under ``benchmarks/results/`` carries this as ``"meta"``.

    from results_meta import save_result          # run from the repository root: benchmarks/ is on sys.path
    save_result("benchmarks/results/<study>/<name>.json", {"rows": rows}, command=" ".join(sys.argv))

The same seed on another CPU is another run (other vector kernels, another summation order), so a page that
shows a result shows its ``meta`` beside it.
"""

import datetime
import json
import platform
import subprocess
from pathlib import Path

import torch


def machine() -> dict:
    """The CPU (or GPU), its vector kernels, the torch version and its thread count."""
    info = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").is_file() else ""
    cpu = next((line.split(":", 1)[1].strip() for line in info.splitlines() if line.startswith("model name")), "")
    out = {
        "cpu": cpu or platform.processor() or platform.machine(),
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
    }
    if torch.cuda.is_available():
        out["gpu"] = torch.cuda.get_device_name(0)
    return out


def commit() -> str:
    """The repository's HEAD, with ``+dirty`` when the working tree has uncommitted changes outside
    ``benchmarks/results/`` (a benchmark that saves after every run has changed its own results file by its second
    save)."""
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True)
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no", "--", ".",
                                ":(exclude)benchmarks/results"], capture_output=True, text=True)  # fmt: skip
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return head.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "")


def meta(command: str) -> dict:
    """``{"machine", "date", "commit", "command"}`` for a result made now by ``command``."""
    return {
        "machine": machine(),
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d"),
        "commit": commit(),
        "command": command,
    }


def save_result(path: str | Path, data: dict, command: str, **more_meta) -> Path:
    """Write ``data`` with its ``meta`` (and ``more_meta``, e.g. the load average) as indented JSON at ``path``
    (folders made as needed); returns the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"meta": {**meta(command), **more_meta}, **data}, indent=1) + "\n")
    return path
