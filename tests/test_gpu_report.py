"""The GPU report's scripts on the CPU, at toy sizes: a mistake in them costs GPU time to find.

``benchmarks/vs_trl.py --qwen-0.5b`` (the Qwen-shaped throughput report) builds the optimizers as the trainer
does; it once passed a namespace without ``ppo.value_lr`` and stopped after the generation figures. Run as a
script (tests import nothing from ``benchmarks/``), with one layer and a few tokens.
"""

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.slow
def test_qwen_shaped_report_runs_every_phase_on_the_cpu(tmp_path):
    out = tmp_path / "qwen.json"
    cmd = [sys.executable, "benchmarks/vs_trl.py", "--device", "cpu", "--qwen-0.5b", "--qwen-layers", "1",
           "--qwen-vocab", "512", "--batch-size", "2", "--minibatch-size", "2", "--response-length", "3",
           "--threads", "1", "--qwen-json", str(out)]  # fmt: skip
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    report = json.loads(out.read_text())
    assert report["parameters"] > 14_000_000  # one layer of Qwen2.5 0.5B's shape
    assert report["generation"]["decode_tok_s"] > 0
    for opt in ("adamw", "adamw8bit"):
        assert report[f"update_{opt}"]["tok_s"] > 0 and report[f"update_{opt}"]["tokens"] > 0
