"""Is the critic learning? Measure the value-model mechanisms on the default CPU run, seed by seed.

    .venv/bin/python benchmarks/critic.py [--seeds 0 1 2] [--steps 40] [--configs today value_lr ...] [key=value ...]

Each (config, seed) is the README's training command (``python -m ppo_core.train``, the cpu preset) in a
fresh process, with the config's overrides on top (the warm start is cached beforehand, so the wall time
is the PPO run's alone: its two evaluations and the PPO steps, value warm-up steps included). Per run it
prints the critic's explained variance (mean over the first and the last 10 PPO steps; warm-up steps
excluded), the value loss (mean of the last 10 steps), held-out sampled accuracy before and after, and
the wall time. Every config spells out all four critic keys, so a change of the preset's defaults does
not change what a row measures.

Target for the cpu preset: last-10-step explained variance >= 0.3 on every seed, accuracy gain >= +60
points, <= 180 s on two cores.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TODAY = {"ppo.value_lr": "0", "ppo.value_warmup_steps": "0", "ppo.lam_value": "null", "ppo.lam_policy_alpha": "0"}
"""The settings before this benchmark: one learning rate, no warm-up, one lambda (0.95) for both."""

CONFIGS = {
    "today": {},
    "value_lr": {"ppo.value_lr": "1e-3"},
    "lam_value": {"ppo.lam_value": "1.0"},
    "warmup": {"ppo.value_warmup_steps": "5"},
    "value_lr+lam_value": {"ppo.value_lr": "1e-3", "ppo.lam_value": "1.0"},
    "all": {"ppo.value_lr": "1e-3", "ppo.lam_value": "1.0", "ppo.value_warmup_steps": "5"},
}
"""Each config: overrides on top of ``TODAY`` (one mechanism on, or a combination)."""


def overrides_of(name: str) -> list[str]:
    """The full key=value list of a config name: ``TODAY`` updated with its overrides; or a 'k=v,k=v' spec."""
    extra = CONFIGS[name] if name in CONFIGS else dict(kv.split("=", 1) for kv in name.split(","))
    return [f"{k}={v}" for k, v in {**TODAY, **extra}.items()]


def mean(xs: list[float]) -> float:
    return sum(xs) / len(xs) if xs else float("nan")


def run(config: str, seed: int, steps: int, extra: list[str], workdir: Path) -> dict:
    out = workdir / f"{config.replace('/', '_')}-seed{seed}"
    cmd = [sys.executable, "-m", "ppo_core.train", f"train.seed={seed}", f"train.steps={steps}",
           f"train.output_dir={out}", "train.progress=false", "train.tensorboard=false", "train.overwrite=true",
           *overrides_of(config), *extra]  # fmt: skip
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"{config} seed {seed} failed:\n{proc.stderr[-3000:]}")
    summary = json.loads((out / "summary.json").read_text())
    recs = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    ppo = [r for r in recs if "params/explained_variance" in r and not r.get("value/warmup")]
    ev = [r["params/explained_variance"] for r in ppo]
    return {
        "config": config,
        "seed": seed,
        "ev_first10": mean(ev[:10]),
        "ev_last10": mean(ev[-10:]),
        "value_loss_last10": mean([r["loss/value"] for r in ppo[-10:]]),
        "before": summary["before/sampled_accuracy"],
        "after": summary["after/sampled_accuracy"],
        "wall_s": wall,
        "ev_curve": ev,
    }


def row(r: dict) -> str:
    gain = 100 * (r["after"] - r["before"])
    acc = f"{r['before']:.3f} -> {r['after']:.3f} ({gain:+.1f})"
    return (f"| {r['config']} | {r['seed']} | {r['ev_first10']:+.2f} | {r['ev_last10']:+.2f} | "
            f"{r['value_loss_last10']:.4f} | {acc} | {r['wall_s']:.0f} |")  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--configs", nargs="+", default=list(CONFIGS),
                    help=f"names ({', '.join(CONFIGS)}) or 'key=value,key=value' specs")  # fmt: skip
    ap.add_argument("--json", help="also write every run's numbers (and explained-variance curve) to this file")
    ap.add_argument("overrides", nargs="*", help="key=value overrides for every run")
    args = ap.parse_args()
    for c in args.configs:
        overrides_of(c)  # a bad name fails now, not after an hour of runs
    from ppo_core.config import load_config
    from ppo_core.setup import _warm_started_tiny

    for seed in args.seeds:  # cache the warm starts first: the timed runs are the PPO runs alone
        _warm_started_tiny(load_config("cpu", [f"train.seed={seed}", "train.progress=false", *args.overrides]))
    print(f"torch threads: {os.environ.get('OMP_NUM_THREADS', 'default')}; load before: {os.getloadavg()[0]:.2f}")
    print("| config | seed | EV first 10 | EV last 10 | value loss (last 10) | sampled accuracy | wall s |")
    print("|---|---|---|---|---|---|---|")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for config in args.configs:
            for seed in args.seeds:
                rows.append(run(config, seed, args.steps, args.overrides, Path(tmp)))
                print(row(rows[-1]), flush=True)
    print(f"load after: {os.getloadavg()[0]:.2f}")
    for config in args.configs:
        rs = [r for r in rows if r["config"] == config]
        ok = all(r["ev_last10"] >= 0.3 and r["after"] - r["before"] >= 0.6 and r["wall_s"] <= 180 for r in rs)
        print(
            f"{config}: EV last 10 >= 0.3, gain >= +60 points and <= 180 s on every seed: {'met' if ok else 'NOT met'}"
        )
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
