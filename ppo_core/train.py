"""Chapter 05 - the command line: ``python -m ppo_core.train [--config PRESET_OR_PATH] [key=value ...]``.

With no arguments it runs the CPU default (offline: a tiny warm-started model on a synthetic task).
"""

import argparse
import os
import sys

# Busy-waiting OpenMP threads collapse on a shared 2-core machine (10-20x slower steps); must be set before torch loads.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
import time

from .config import PRESETS, ConfigError, load_config

__all__ = ["main"]


def parse_args(argv=None):
    ap = argparse.ArgumentParser(prog="python -m ppo_core.train", description=__doc__.splitlines()[0])
    ap.add_argument("--config", default="cpu", help=f"a preset ({', '.join(PRESETS)}) or a YAML file (default: cpu)")
    ap.add_argument("overrides", nargs="*", help="dotted key=value overrides, e.g. ppo.lr=1e-4 train.steps=10")
    return ap.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    try:
        cfg = load_config(args.config, args.overrides)
        from .trainer import PPOTrainer

        t0 = time.perf_counter()
        trainer = PPOTrainer(cfg)
        summary = trainer.train()
    except (ConfigError, FileNotFoundError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    before, after = summary.get("before/sampled_accuracy"), summary["after/sampled_accuracy"]
    print(f"run folder: {cfg.train.output_dir}  ({time.perf_counter() - t0:.0f} s)")
    if before is not None:
        print(f"held-out sampled accuracy: {before:.3f} -> {after:.3f} ({100 * (after - before):+.1f} points)")
        print(f"held-out greedy accuracy:  {summary['before/greedy_accuracy']:.3f} -> {summary['after/greedy_accuracy']:.3f}")
    else:
        print(f"held-out sampled accuracy after training: {after:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
