"""GRPO, GRPO without KL, clip-higher alone, a DAPO-style run, GSPO and CISPO on one schedule (chapter 08).

    .venv/bin/python benchmarks/compare_objectives.py [--seeds 0 1 2] [--steps 20] [--methods ...] [key=value ...]

Each run is the training command with one preset and, for the one-switch arms, a few overrides, one at a time in
a fresh process, through ``compare_algos.run_one`` (same steps and trained episodes per step, held-out
evaluation every ``--eval-every`` steps). The arms:

* ``grpo``: the ``cpu-grpo`` preset (KL loss 0.04, entropy bonus 0.001);
* ``grpo-nokl``: the same without the KL loss and the entropy bonus, as every reasoning preset runs, so that
  GSPO's and CISPO's differences from it are their objective's (and, for CISPO, its token mean);
* ``clip-higher``: ``grpo-nokl`` with ``ppo.clip_eps_high=0.28``, the one switch;
* ``dapo``, ``gspo``, ``cispo``: the presets; ``ppo`` (the ``cpu`` preset) on request.

Beside its accuracy curve each run records the policy's entropy per step (``policy/entropy``), the mean response
length, the training time per step, the share of responses that ended without EOS (``rollout/eos_rate``) and,
for dynamic sampling, the groups dropped and the episodes **drawn** (trained plus refilled). Results:
``benchmarks/results/objectives/compare.json`` (``results_meta.save_result``, rewritten after every run), shown
by chapter 08 and ``book/measurements/algorithms.md``.
"""

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import compare_algos  # benchmarks/ is on sys.path when this script runs
from results_meta import save_result

NO_KL = ["algo.use_kl_loss=false", "ppo.ent_coef=0.0"]
METHODS = {  # name -> (preset, overrides)
    "grpo": ("cpu-grpo", []),
    "grpo-nokl": ("cpu-grpo", NO_KL),
    "clip-higher": ("cpu-grpo", [*NO_KL, "ppo.clip_eps_high=0.28"]),
    "dapo": ("cpu-dapo", []),
    "gspo": ("cpu-gspo", []),
    "cispo": ("cpu-cispo", []),
    "ppo": ("cpu", []),
}
DEFAULT = ["grpo", "grpo-nokl", "clip-higher", "dapo", "gspo", "cispo"]
LABELS = {"grpo": "GRPO", "grpo-nokl": "GRPO, no KL", "clip-higher": "+ clip-higher", "dapo": "DAPO-style",
          "gspo": "GSPO", "cispo": "CISPO", "ppo": "PPO"}  # fmt: skip
ROOT = Path(__file__).resolve().parents[1]


def run(method: str, seed: int, steps: int, eval_every: int, overrides: list[str], work: Path) -> dict:
    preset, extra = METHODS[method]
    compare_algos.METHODS[method] = preset  # run_one looks the preset up there
    out = compare_algos.run_one(method, seed, steps, eval_every, [*extra, *overrides], work)
    lines = [json.loads(x) for x in (work / f"{method}-seed{seed}" / "metrics.jsonl").read_text().splitlines()]
    per_step = [r for r in lines if "time/step" in r]
    batch = compare_algos._effective(work / f"{method}-seed{seed}")["rollout"]["batch_size"]
    drawn = [batch + r.get("rollout/extra_samples", 0.0) for r in per_step]  # sampled this step, refills included
    for point in out["curve"]:
        point["drawn"] = sum(drawn[: point["step"]])
    out["overrides"] = extra
    out["entropy"] = [r["policy/entropy"] for r in per_step]
    out["response_lengths"] = [r["rollout/response_length"] for r in per_step]
    out["eos_rate"] = [r["rollout/eos_rate"] for r in per_step]
    out["s_per_step"] = out["train_s"] / len(per_step)
    out["dropped_groups"] = sum(r.get("rollout/dropped_groups", 0.0) for r in per_step)
    out["extra_samples"] = sum(r.get("rollout/extra_samples", 0.0) for r in per_step)
    out["trained_episodes"] = batch * len(per_step)
    out["drawn_episodes"] = sum(drawn)
    return out


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--methods", nargs="+", default=DEFAULT, choices=list(METHODS))
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--eval-every", type=int, default=5)
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "objectives" / "compare.json")
    ap.add_argument("overrides", nargs="*", help="key=value overrides for every run (e.g. train.eval_samples=200)")
    args = ap.parse_args(argv)
    command = " ".join(["python benchmarks/compare_objectives.py", *sys.argv[1:]])
    eval_samples = next((o.split("=", 1)[1] for o in args.overrides if o.startswith("train.eval_samples=")), "500")
    results = {"steps": args.steps, "eval_samples": int(eval_samples), "labels": LABELS, "runs": []}
    load = [round(x, 2) for x in os.getloadavg()]
    work = Path(tempfile.mkdtemp(prefix="compare_objectives_"))
    for seed in args.seeds:  # seed-major: an interrupted benchmark has every method on the first seeds
        for method in args.methods:
            t0 = time.perf_counter()
            results["runs"].append(run(method, seed, args.steps, args.eval_every, args.overrides, work))
            r = results["runs"][-1]
            r["load_at_end"] = round(os.getloadavg()[0], 2)
            took = time.perf_counter() - t0
            print(f"{LABELS[method]:13s} seed {seed}: {r['before']:.3f} -> {r['after']:.3f}, entropy "
                  f"{r['entropy'][0]:.3f} -> {r['entropy'][-1]:.3f}, drawn {r['drawn_episodes']:.0f} ({took:.0f} s)",
                  flush=True)  # fmt: skip
            save_result(args.out, results, command, load_at_start=load)
    print(f"results: {args.out}")


if __name__ == "__main__":
    main()
