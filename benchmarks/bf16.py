"""Learning in bf16, measured: the CPU run with bf16 compute against the same run in float32.

    .venv/bin/python benchmarks/bf16.py [--seed 0] [key=value ...]

Both runs start from the same warm-started tiny model with the same seed and settings (the ``cpu``
preset plus any overrides); only ``model.dtype`` differs. ``model.dtype=bfloat16`` means bf16
*compute* (``torch.autocast``) with float32 trainable weights and optimizer state, as ``bf16=True``
does in the HF Trainer. For each run the script prints held-out sampled and greedy accuracy before
and after PPO, wall time, and how far the policy's weights moved: the relative L2 distance
||w_final - w_init|| / ||w_init|| over the LM's parameters, and the share of entries that changed.
"""

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch


def weight_change(init: Path, final: Path) -> tuple[float, float]:
    """(relative L2 distance, share of entries changed) between two saved LM folders."""
    from safetensors.torch import load_file

    a, b = load_file(init / "model.safetensors"), load_file(final / "model.safetensors")
    num = den = changed = total = 0.0
    for k, w0 in a.items():
        w0, w1 = w0.double(), b[k].double()
        num += float((w1 - w0).pow(2).sum())
        den += float(w0.pow(2).sum())
        changed += float((w1 != w0).sum())
        total += w0.numel()
    return (num / den) ** 0.5, changed / total


def run(dtype: str, seed: int, overrides: list[str], work: Path) -> dict:
    out = work / dtype
    cmd = [sys.executable, "-m", "ppo_core.train", f"model.dtype={dtype}", f"train.seed={seed}",
           f"train.output_dir={out}", "train.progress=false", "train.tensorboard=false", *overrides]  # fmt: skip
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"model.dtype={dtype} failed:\n{proc.stderr[-3000:]}")
    summary = json.loads((out / "summary.json").read_text())
    init = Path(torch.load(out / "final" / "trainer_state.pt", weights_only=False)["init_path"])
    rel, share = weight_change(init, out / "final")
    return {"dtype": dtype, "wall_s": time.perf_counter() - t0, **summary, "rel_change": rel, "share_changed": share}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("overrides", nargs="*", help="dotted key=value overrides for both runs")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        rows = [run(dtype, args.seed, args.overrides, Path(tmp)) for dtype in ("float32", "bfloat16")]
    print(f"seed {args.seed}, overrides {args.overrides or 'none'}")
    print(f"{'compute':9s} {'sampled before':>14s} {'after':>6s} {'greedy before':>13s} {'after':>6s} "
          f"{'|dw|/|w|':>9s} {'entries moved':>13s} {'wall s':>7s}")  # fmt: skip
    for r in rows:
        print(f"{r['dtype']:9s} {r['before/sampled_accuracy']:14.3f} {r['after/sampled_accuracy']:6.3f} "
              f"{r['before/greedy_accuracy']:13.3f} {r['after/greedy_accuracy']:6.3f} {r['rel_change']:9.2e} "
              f"{r['share_changed']:13.1%} {r['wall_s']:7.0f}")  # fmt: skip
    f32, b16 = rows
    print(f"bf16 - float32: sampled accuracy {b16['after/sampled_accuracy'] - f32['after/sampled_accuracy']:+.3f}, "
          f"weight movement ratio {b16['rel_change'] / f32['rel_change']:.2f}")  # fmt: skip


if __name__ == "__main__":
    main()
