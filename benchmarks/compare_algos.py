"""PPO and its relatives on the same budget: held-out accuracy against episodes and wall time (chapter 07).

    .venv/bin/python benchmarks/compare_algos.py [--seeds 0 1 2] [--methods ppo grpo ...] [key=value ...]

Each run is the README's training command with one preset (``python -m ppo_core.train --config cpu-grpo``
...) in a fresh process, one at a time, with the same number of sampled episodes per step
(``rollout.batch_size`` = 128: PPO and REINFORCE++ sample 128 prompts once, GRPO, Dr. GRPO and RLOO 16
prompts 8 times) and the same number of steps. The held-out split is evaluated every
``--eval-every`` steps (sampled at temperature 1, ``train.eval_samples`` problems). For every method it
prints, as mean and range over the seeds:

* held-out sampled accuracy against episodes (steps x 128) and against training wall time (the summed
  ``time/step`` of the steps before each evaluation: sampling, scoring and updates, not the evaluations);
* peak memory (the run's process, maximum resident set size) and the mean response length.

Results go to ``--out`` (default ``benchmarks/results/algorithms/compare.json``, rewritten after every run, so an
interrupted benchmark keeps what it finished) and a plot beside it (``compare_algos.png``). ``--plot-only``
redraws the plot and reprints the tables from that file; ``--merge A.json B.json`` combines the runs of
several results files (seeds run as separate processes) into ``--out``. The warm-started models (one per seed) are
cached where every run caches them (``warmstart.cache_dir``); their building is not in the training time.
"""

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from results_meta import meta  # benchmarks/ is on sys.path when this script runs

METHODS = {  # name -> preset
    "ppo": "cpu",
    "grpo": "cpu-grpo",
    "drgrpo": "cpu-drgrpo",
    "rloo": "cpu-rloo",
    "reinforcepp": "cpu-reinforcepp",
}
LABELS = {"ppo": "PPO", "grpo": "GRPO", "drgrpo": "Dr. GRPO", "rloo": "RLOO", "reinforcepp": "REINFORCE++"}
ROOT = Path(__file__).resolve().parents[1]


def _child(cmd: list[str]) -> None:
    """Run ``cmd`` as this process's only child; print its wall time and peak RSS as JSON (its last line)."""
    t0 = time.perf_counter()
    rc = subprocess.run(cmd).returncode
    wall = time.perf_counter() - t0
    peak_kb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss  # kB on Linux
    print(json.dumps({"rc": rc, "wall_s": wall, "peak_rss_mb": peak_kb / 1024}))


def run_one(method: str, seed: int, steps: int, eval_every: int, overrides: list[str], out_root: Path) -> dict:
    run_dir = out_root / f"{method}-seed{seed}"
    cmd = [sys.executable, "-m", "ppo_core.train", "--config", METHODS[method], f"train.seed={seed}",
           f"train.steps={steps}", f"train.eval_every={eval_every}", f"train.output_dir={run_dir}",
           "train.overwrite=true", "train.progress=false",
           "train.tensorboard=false", "train.save_every=0", "train.log_every=0", *overrides]  # fmt: skip
    proc = subprocess.run([sys.executable, __file__, "--child", *cmd], capture_output=True, text=True)
    usage = json.loads(proc.stdout.strip().splitlines()[-1])
    if usage["rc"] != 0:
        raise SystemExit(f"{method} seed {seed} failed (exit {usage['rc']}):\n{proc.stderr[-3000:]}")
    lines = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    steps_log = [r for r in lines if "time/step" in r]
    evals = [r for r in lines if "eval/sampled_accuracy" in r]
    batch = _effective(run_dir)["rollout"]["batch_size"]
    curve = []
    for r in evals:
        done = [s for s in steps_log if s["step"] <= r["step"]]
        train_s = sum(s["time/step"] for s in done)
        curve.append({"step": r["step"], "episodes": r["step"] * batch, "train_s": train_s,
                      "accuracy": r["eval/sampled_accuracy"]})  # fmt: skip
    summary = json.loads((run_dir / "summary.json").read_text())
    return {
        "method": method,
        "seed": seed,
        "curve": curve,
        "before": summary["before/sampled_accuracy"],
        "after": summary["after/sampled_accuracy"],
        "greedy_after": summary["after/greedy_accuracy"],
        "response_length": sum(s["rollout/response_length"] for s in steps_log) / len(steps_log),
        "peak_rss_mb": usage["peak_rss_mb"],
        "process_wall_s": usage["wall_s"],
        "train_s": sum(s["time/step"] for s in steps_log),
    }


def _effective(run_dir: Path) -> dict:
    from omegaconf import OmegaConf

    return OmegaConf.to_container(OmegaConf.load(run_dir / "effective_config.yaml"))


def _stats(values: list[float]) -> str:
    mean = sum(values) / len(values)
    return f"{mean:.3f} [{min(values):.3f}, {max(values):.3f}]" if len(values) > 1 else f"{mean:.3f}"


def print_tables(results: dict) -> None:
    runs = results["runs"]
    methods = [m for m in METHODS if any(r["method"] == m for r in runs)]
    seeds = sorted({r["seed"] for r in runs})
    print(f"\nheld-out sampled accuracy, mean [min, max] over seeds {seeds} ({results['eval_samples']} problems)")
    points = sorted({p["episodes"] for r in runs for p in r["curve"]})
    print("each cell: accuracy at that many sampled episodes, and @ the mean training wall time (min) it took")
    print(f"{'episodes':>9s} " + " ".join(f"{LABELS[m]:>29s}" for m in methods))
    for ep in points:
        cells = []
        for m in methods:
            pts = [p for r in runs if r["method"] == m for p in r["curve"] if p["episodes"] == ep]
            minutes = sum(p["train_s"] for p in pts) / 60 / max(len(pts), 1)
            cell = f"{_stats([p['accuracy'] for p in pts])} @{minutes:.1f}" if pts else "-"
            cells.append(f"{cell:>29s}")
        print(f"{ep:>9d} " + " ".join(cells))
    print("\nper method: mean over seeds (training wall time = summed time/step: sampling, scoring, updates)")
    print(f"{'method':12s} {'final acc':>22s} {'train s':>9s} {'acc / train min':>15s} {'peak RSS MB':>11s} "
          f"{'resp. len':>9s} {'runs':>4s}")  # fmt: skip
    for m in methods:
        rs = [r for r in runs if r["method"] == m]
        train_s = sum(r["train_s"] for r in rs) / len(rs)
        gain = sum(r["after"] - r["before"] for r in rs) / len(rs)
        print(f"{LABELS[m]:12s} {_stats([r['after'] for r in rs]):>22s} {train_s:9.0f} {gain / (train_s / 60):15.3f} "
              f"{sum(r['peak_rss_mb'] for r in rs) / len(rs):11.0f} "
              f"{sum(r['response_length'] for r in rs) / len(rs):9.1f} {len(rs):4d}")  # fmt: skip
    print("(acc / train min: accuracy points gained per minute of training wall time, before -> after)")


def plot(results: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for i, m in enumerate(m for m in METHODS if any(r["method"] == m for r in results["runs"])):
        rs = [r for r in results["runs"] if r["method"] == m]
        for k, r in enumerate(rs):
            kw = dict(color=f"C{i}", alpha=0.8, marker=".", label=LABELS[m] if k == 0 else None)
            axes[0].plot([p["episodes"] for p in r["curve"]], [p["accuracy"] for p in r["curve"]], **kw)
            axes[1].plot([p["train_s"] / 60 for p in r["curve"]], [p["accuracy"] for p in r["curve"]], **kw)
    axes[0].set_xlabel("sampled episodes")
    axes[1].set_xlabel("training wall time (min, evaluations excluded)")
    for ax in axes:
        ax.set_ylabel("held-out sampled accuracy")
        ax.grid(alpha=0.3)
    axes[0].legend()
    fig.suptitle(f"seeds {sorted({r['seed'] for r in results['runs']})}, one line per run")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--methods", nargs="+", default=list(METHODS), choices=list(METHODS))
    ap.add_argument("--steps", type=int, default=40, help="PPO steps per run (the cpu preset's 40)")
    ap.add_argument("--eval-every", type=int, default=10)
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "algorithms" / "compare.json")
    ap.add_argument("--plot-only", action="store_true", help="redraw the plot and reprint the tables from --out")
    ap.add_argument("--merge", type=Path, nargs="+", help="combine the runs of these results files (e.g. one per seed)")
    ap.add_argument("overrides", nargs="*", help="key=value overrides for every run (e.g. train.eval_samples=200)")
    args = ap.parse_args(argv)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    png = args.out.with_suffix(".png")
    if args.merge:
        parts = [json.loads(path.read_text()) for path in args.merge]
        results = {**parts[0], "runs": [r for part in parts for r in part["runs"]]}
        results["command"] = " && ".join(part["command"] for part in parts)
        results["machine"] = "; ".join(part["machine"] for part in parts)
        results["meta"] = {**parts[0].get("meta", {}), "command": [p.get("meta", {}).get("command") for p in parts]}
        args.out.write_text(json.dumps(results, indent=1))
    elif args.plot_only:
        results = json.loads(args.out.read_text())
    else:
        eval_samples = next((o.split("=", 1)[1] for o in args.overrides if o.startswith("train.eval_samples=")), "500")
        results = {"command": " ".join(["python benchmarks/compare_algos.py", *sys.argv[1:]]),
                   "machine": f"{platform.machine()}, {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f} at start",
                   "eval_samples": int(eval_samples), "steps": args.steps, "runs": []}  # fmt: skip
        results["meta"] = meta(results["command"])  # machine, date, commit, command (benchmarks/results_meta.py)
        work = Path(tempfile.mkdtemp(prefix="compare_algos_"))
        for seed in args.seeds:  # seed-major: an interrupted benchmark has every method on the first seeds
            for method in args.methods:
                t0 = time.perf_counter()
                results["runs"].append(run_one(method, seed, args.steps, args.eval_every, args.overrides, work))
                r = results["runs"][-1]
                print(f"{LABELS[method]:12s} seed {seed}: {r['before']:.3f} -> {r['after']:.3f} "
                      f"({time.perf_counter() - t0:.0f} s)", flush=True)  # fmt: skip
                args.out.write_text(json.dumps(results, indent=1))
    print_tables(results)
    plot(results, png)
    print(f"\nresults: {args.out}\nplot:    {png}")


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        _child(sys.argv[2:])
    else:
        main()
