"""PPO, GRPO, a DAPO-style run, GSPO and CISPO on the same budget: accuracy, entropy, length, time (chapter 08).

    .venv/bin/python benchmarks/compare_objectives.py [--seeds 0 1 2] [--steps 20] [key=value ...]

Each run is the training command with one preset (cpu, cpu-grpo, cpu-dapo, cpu-gspo, cpu-cispo), one at a time
in a fresh process, through ``compare_algos.run_one`` (same episodes per step, held-out evaluation every
``--eval-every`` steps). Beside its accuracy curve each run records the policy's entropy per step
(``policy/entropy``), the mean response length, the training time per step and, for DAPO, the groups dynamic
sampling dropped and the extra samples it drew. Results: ``benchmarks/results/objectives/compare.json``
(``results_meta.save_result``, rewritten after every run), shown by chapter 08.
"""

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import compare_algos  # benchmarks/ is on sys.path when this script runs
from results_meta import save_result

METHODS = {"ppo": "cpu", "grpo": "cpu-grpo", "dapo": "cpu-dapo", "gspo": "cpu-gspo", "cispo": "cpu-cispo"}
LABELS = {"ppo": "PPO", "grpo": "GRPO", "dapo": "DAPO-style", "gspo": "GSPO", "cispo": "CISPO"}
ROOT = Path(__file__).resolve().parents[1]


def run(method: str, seed: int, steps: int, eval_every: int, overrides: list[str], work: Path) -> dict:
    compare_algos.METHODS[method] = METHODS[method]  # run_one looks the preset up there
    out = compare_algos.run_one(method, seed, steps, eval_every, overrides, work)
    lines = [json.loads(x) for x in (work / f"{method}-seed{seed}" / "metrics.jsonl").read_text().splitlines()]
    per_step = [r for r in lines if "time/step" in r]
    out["entropy"] = [r["policy/entropy"] for r in per_step]
    out["response_lengths"] = [r["rollout/response_length"] for r in per_step]
    out["s_per_step"] = out["train_s"] / len(per_step)
    out["dropped_groups"] = sum(r.get("rollout/dropped_groups", 0.0) for r in per_step)
    out["extra_samples"] = sum(r.get("rollout/extra_samples", 0.0) for r in per_step)
    return out


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--methods", nargs="+", default=list(METHODS), choices=list(METHODS))
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--eval-every", type=int, default=5)
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "objectives" / "compare.json")
    ap.add_argument("overrides", nargs="*", help="key=value overrides for every run (e.g. train.eval_samples=200)")
    args = ap.parse_args(argv)
    command = " ".join(["python benchmarks/compare_objectives.py", *sys.argv[1:]])
    eval_samples = next((o.split("=", 1)[1] for o in args.overrides if o.startswith("train.eval_samples=")), "500")
    results = {"steps": args.steps, "eval_samples": int(eval_samples), "labels": LABELS, "runs": []}
    work = Path(tempfile.mkdtemp(prefix="compare_objectives_"))
    for seed in args.seeds:  # seed-major: an interrupted benchmark has every method on the first seeds
        for method in args.methods:
            t0 = time.perf_counter()
            results["runs"].append(run(method, seed, args.steps, args.eval_every, args.overrides, work))
            r = results["runs"][-1]
            took = time.perf_counter() - t0
            print(f"{LABELS[method]:11s} seed {seed}: {r['before']:.3f} -> {r['after']:.3f}, entropy "
                  f"{r['entropy'][0]:.3f} -> {r['entropy'][-1]:.3f} ({took:.0f} s)", flush=True)  # fmt: skip
            save_result(args.out, results, command)
    print(f"results: {args.out}")


if __name__ == "__main__":
    main()
