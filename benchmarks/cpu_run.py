"""Measure the default CPU run against the course's bars, on several seeds.

    .venv/bin/python benchmarks/cpu_run.py [--seeds 0 1] [key=value ...]

For each seed it runs the README's training command (`python -m ppo_core.train`, the cpu preset) in a
fresh process with an empty warm-start cache (so the warm start is included in the time), then prints
wall time, peak memory, held-out sampled/greedy accuracy before and after PPO, and the ranges of
approx_kl and the clip fractions. Bars: <= 300 s, >= +40 points sampled accuracy, <= 2 GB.
"""

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def run_seed(seed: int, overrides: list[str], workdir: Path) -> dict:
    out = workdir / f"seed{seed}"
    cmd = [
        sys.executable,
        "-m",
        "ppo_core.train",
        f"train.seed={seed}",
        f"train.output_dir={out}",
        f"warmstart.cache_dir={workdir / 'cache'}",
        "train.progress=false",
        *overrides,
    ]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"seed {seed} failed:\n{proc.stderr[-3000:]}")
    summary = json.loads((out / "summary.json").read_text())
    steps = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in steps if "policy/approx_kl" in r]
    rng = lambda k: (min(r[k] for r in steps), max(r[k] for r in steps))  # noqa: E731
    return {
        "seed": seed,
        "wall_s": wall,
        **summary,
        "approx_kl": rng("policy/approx_kl"),
        "policy_clipfrac": rng("policy/clipfrac"),
        "value_clipfrac": rng("value/clipfrac"),
        "kl_to_ref_last": steps[-1]["kl/to_ref"],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    ap.add_argument("overrides", nargs="*")
    args = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for seed in args.seeds:
            # each seed gets its own empty warm-start cache: the warm start is part of the measured run
            rows.append(run_seed(seed, args.overrides, Path(tmp) / f"s{seed}"))
            r = rows[-1]
            peak_mb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
            gain = 100 * (r["after/sampled_accuracy"] - r["before/sampled_accuracy"])
            print(
                f"seed {seed}: {r['wall_s']:.0f} s, peak RSS {peak_mb:.0f} MB (max over runs so far) | sampled "
                f"{r['before/sampled_accuracy']:.3f} -> {r['after/sampled_accuracy']:.3f} ({gain:+.1f} pts) | greedy "
                f"{r['before/greedy_accuracy']:.3f} -> {r['after/greedy_accuracy']:.3f} | approx_kl "
                f"{r['approx_kl'][0]:.4f}..{r['approx_kl'][1]:.4f} | policy clipfrac {r['policy_clipfrac'][0]:.3f}.."
                f"{r['policy_clipfrac'][1]:.3f} | value clipfrac "
                f"{r['value_clipfrac'][0]:.3f}..{r['value_clipfrac'][1]:.3f}"
                f" | KL to ref (last) {r['kl_to_ref_last']:.2f} nats",
                flush=True,
            )
    ok = all(r["wall_s"] <= 300 and r["after/sampled_accuracy"] - r["before/sampled_accuracy"] >= 0.40 for r in rows)
    print(f"bars (<= 300 s and >= +40 points on every seed): {'met' if ok else 'NOT met'}")


if __name__ == "__main__":
    main()
