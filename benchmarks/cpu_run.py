"""The default CPU run on several seeds: held-out gain, the critic's explained variance, wall time.

    .venv/bin/python benchmarks/cpu_run.py [--seeds 0 1 2 3 4] [--save PATH] [key=value ...]

For each seed it runs the README's training command (``python -m ppo_core.train``, the cpu preset) in a
fresh process. Each seed has its own warm-started model: it is trained first, in a separate process, into a
warm-start cache shared by the runs, so ``wall_s`` is the PPO run alone (model loading, two evaluations,
40 steps, checkpoints) and ``warmstart_s`` the warm start. Targets: a held-out sampled gain of at least
+60 points and a mean explained variance over the last 10 steps of at least 0.3, on every seed.
"""

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from results_meta import save_result

GAIN_TARGET, EV_TARGET = 60.0, 0.3


def train(seed: int, overrides: list[str], out: Path, cache: Path, steps: int | None = None) -> float:
    """Run the train command; returns its wall time in seconds."""
    cmd = [sys.executable, "-m", "ppo_core.train", f"train.seed={seed}", f"train.output_dir={out}",
           f"warmstart.cache_dir={cache}", "train.progress=false", "train.overwrite=true", *overrides]  # fmt: skip
    if steps is not None:
        cmd.append(f"train.steps={steps}")
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"seed {seed} failed:\n{proc.stderr[-3000:]}")
    return time.perf_counter() - t0


def run_seed(seed: int, overrides: list[str], workdir: Path) -> dict:
    cache = workdir / "cache"
    warm = train(seed, [*overrides, "train.eval_samples=1"], workdir / f"warm{seed}", cache, steps=0)
    out = workdir / f"seed{seed}"
    wall = train(seed, overrides, out, cache)
    summary = json.loads((out / "summary.json").read_text())
    steps = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in steps if "policy/approx_kl" in r]
    before, after = summary["before/sampled_accuracy"], summary["after/sampled_accuracy"]
    return {
        "seed": seed,
        "before": before,
        "after": after,
        "gain_points": round(100 * (after - before), 1),
        "greedy_before": summary["before/greedy_accuracy"],
        "greedy_after": summary["after/greedy_accuracy"],
        "ev_last10": summary["last10/value/explained_variance"],
        "wall_s": round(wall, 1),
        "warmstart_s": round(warm, 1),
        "step_s": round(sum(r["time/step"] for r in steps) / len(steps), 2),
        "kl_to_ref_last": steps[-1]["kl/to_ref"],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    ap.add_argument("--save", help="write the rows here (save_result), e.g. benchmarks/results/default_run/seeds.json")
    ap.add_argument("--load", default="", help="the machine's load while it ran, recorded with the rows")
    ap.add_argument("overrides", nargs="*")
    args = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for seed in args.seeds:
            rows.append(run_seed(seed, args.overrides, Path(tmp)))
            r = rows[-1]
            print(f"seed {seed}: sampled {r['before']:.3f} -> {r['after']:.3f} ({r['gain_points']:+.1f} points), "
                  f"critic EV last 10 {r['ev_last10']:+.2f}, {r['wall_s']:.0f} s ({r['step_s']:.2f} s/step; "
                  f"warm start {r['warmstart_s']:.0f} s)", flush=True)  # fmt: skip
            if args.save:  # after every seed: a run cut short keeps the seeds it finished
                data = {"targets": {"gain_points": GAIN_TARGET, "ev_last10": EV_TARGET}, "overrides": args.overrides,
                        "load": args.load, "seeds_asked": args.seeds, "rows": rows}  # fmt: skip
                save_result(args.save, data, command=" ".join(["python", *sys.argv]))
    met = [r["seed"] for r in rows if r["gain_points"] >= GAIN_TARGET and r["ev_last10"] >= EV_TARGET]
    print(f"gain >= +{GAIN_TARGET:.0f} and EV >= {EV_TARGET} on seeds {met} of {[r['seed'] for r in rows]}")


if __name__ == "__main__":
    main()
