"""When the sampler is not the learner (chapter 09): each mismatch without and with each correction, and staleness.

    .venv/bin/python benchmarks/mismatch.py [--seeds 0] [--steps 20] [--part grid stale] [-- key=value ...]

Every run is the cpu preset's training command (``python -m ppo_core.train --config cpu``) in a fresh process,
with one mismatch between the sampler mu and the trainer's pi_old (``sampler.*``) and one correction
(``correction.*``):

* grid:  mismatches bf16 (``sampler.dtype=bfloat16``), fp16, stale (``sampler.stale_steps=2``), top-p
  (``sampler.top_p=0.9``) and a noisy copy (``sampler.weight_noise=0.75``), each with no correction, token TIS,
  sequence TIS, token MIS, IcePop, bypass, bypass with a wider clip (the control for bypass's clipped tokens)
  and, for top-p, the fix itself (``sampler.keep_sampling_mask``); and the run without a mismatch
  (``--only`` and ``--corrections`` pick a part of the grid);
* stale: ``sampler.stale_steps`` k in {0, 1, 2, 4} without a correction, and with token TIS.

Per run it keeps the held-out sampled accuracy before and after, the training accuracy of each step, the
mismatch KL (k1, k3), the clip fraction, the shares of truncated and masked tokens, the largest gradient
norm and the skipped updates. Results: ``benchmarks/results/mismatch/mismatch.json`` (rewritten after every
run, so an interrupted study keeps what it finished), with ``results_meta``'s machine, date and commit.
"""

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from results_meta import save_result

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "benchmarks" / "results" / "mismatch" / "mismatch.json"

MISMATCHES = {
    "none": [],  # the stale sweep adds stale1 and stale4
    "bf16": ["sampler.dtype=bfloat16"],
    "fp16": ["sampler.dtype=float16"],
    "stale2": ["sampler.stale_steps=2"],
    "top_p0.9": ["sampler.top_p=0.9"],
    "noise0.75": ["sampler.weight_noise=0.75"],  # a copy with fixed weight noise: corrections act on > 5 % of tokens
}
CORRECTIONS = {
    "none": [],
    "token-TIS": ["correction.is_level=token", "correction.is_threshold=2.0"],
    "seq-TIS": ["correction.is_level=sequence", "correction.is_threshold=2.0"],
    "token-MIS": ["correction.rs_level=token", "correction.rs_threshold=2.0"],
    "IcePop": [
        "correction.is_level=token",
        "correction.is_threshold=5.0",
        "correction.rs_level=token",
        "correction.rs_threshold=5.0",
        "correction.rs_threshold_lower=0.5",
    ],  # fmt: skip
    "bypass": ["correction.mode=bypass"],
    "bypass-clip0.3": ["correction.mode=bypass", "ppo.clip_eps=0.3"],  # the control: does bypass's clip cost it?
    "keep-mask": ["sampler.keep_sampling_mask=true"],  # top-k/top-p only: pi_old, pi_theta on the sampler's support
}
LOGGED = ("mismatch/kl_k1", "mismatch/kl_k3", "mismatch/max_abs_log_ratio", "policy/clipfrac",
          "correction/truncated_frac", "correction/masked_frac", "correction/weight_max")  # fmt: skip


def runs(parts: list[str]) -> list[tuple[str, str, list[str]]]:
    """(mismatch, correction, overrides) of each run of the chosen parts, without repeats."""
    out = []
    if "grid" in parts:
        out.append(("none", "none", []))
        out += [(m, c, MISMATCHES[m] + CORRECTIONS[c]) for m in MISMATCHES if m != "none" for c in CORRECTIONS]
    if "stale" in parts:
        for k in (0, 1, 2, 4):
            for c in ("none", "token-TIS"):
                m = "none" if k == 0 else f"stale{k}"
                if k or c == "none":
                    out.append((m, c, [f"sampler.stale_steps={k}", *CORRECTIONS[c]]))
    seen, unique = set(), []
    for m, c, o in out:
        if (m, c) not in seen:
            seen.add((m, c))
            unique.append((m, c, o))
    return unique


def run_one(mismatch: str, correction: str, overrides: list[str], seed: int, steps: int, extra: list[str],
            work: Path) -> dict:  # fmt: skip
    """Train one run in a fresh process; its metrics, summarised."""
    run_dir = work / f"{mismatch}-{correction}-seed{seed}"
    cmd = [sys.executable, "-m", "ppo_core.train", "--config", "cpu", f"train.seed={seed}", f"train.steps={steps}",
           f"train.output_dir={run_dir}", "train.overwrite=true", "train.progress=false", "train.tensorboard=false",
           "train.save_every=0", "train.log_every=0", *overrides, *extra]  # fmt: skip
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    if proc.returncode != 0:
        return {"mismatch": mismatch, "correction": correction, "seed": seed, "failed": proc.stderr[-400:]}
    lines = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    steps_log = [r for r in lines if "time/step" in r]
    summary = json.loads((run_dir / "summary.json").read_text())
    mean = lambda key: sum(r.get(key, 0.0) for r in steps_log) / len(steps_log)  # noqa: E731
    return {
        "mismatch": mismatch,
        "correction": correction,
        "seed": seed,
        "overrides": overrides,
        "before": summary["before/sampled_accuracy"],
        "after": summary["after/sampled_accuracy"],
        "train_accuracy": [r["rollout/correct_rate"] for r in steps_log],
        **{key: mean(key) for key in LOGGED},
        "max_grad_norm": max(r["train/grad_norm"] for r in steps_log),
        "skipped": sum(r["train/skipped"] for r in steps_log),
        "wall_s": time.perf_counter() - t0,
    }


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0])
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--part", nargs="+", default=["grid", "stale"], choices=["grid", "stale"])
    ap.add_argument(
        "--only", nargs="*", default=None, choices=list(MISMATCHES), help="mismatches to run (default: all)"
    )
    ap.add_argument("--corrections", nargs="*", default=None, choices=list(CORRECTIONS), help="default: all")
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument("overrides", nargs="*", help="key=value overrides for every run (e.g. train.eval_samples=200)")
    args = ap.parse_args(argv)
    command = " ".join(["python benchmarks/mismatch.py", *(argv if argv is not None else sys.argv[1:])])
    saved = json.loads(args.out.read_text()) if args.out.is_file() else {"runs": [], "meta": {"command": []}}
    done, commands = saved["runs"], saved["meta"]["command"]  # runs and commands accumulate over invocations
    commands = [*(commands if isinstance(commands, list) else [commands]), command]
    have = {(r["mismatch"], r["correction"], r["seed"]) for r in done if "failed" not in r}
    work = Path(tempfile.mkdtemp(prefix="mismatch_"))
    for seed in args.seeds:
        for m, c, o in runs(args.part):
            skip = (args.only and m not in args.only) or (args.corrections and c not in args.corrections)
            if (m, c, seed) in have or skip:
                continue
            r = run_one(m, c, o, seed, args.steps, args.overrides, work)
            done.append(r)
            info = r.get("failed") or (f"{r['before']:.3f} -> {r['after']:.3f}, KL k3 {r['mismatch/kl_k3']:.2e}, "
                                       f"clipfrac {r['policy/clipfrac']:.3f}, {r['wall_s']:.0f} s")  # fmt: skip
            print(f"{m:9s} {c:10s} seed {seed}: {info}", flush=True)
            save_result(args.out, {"steps": args.steps, "overrides": args.overrides, "runs": done}, commands)


if __name__ == "__main__":
    main()
