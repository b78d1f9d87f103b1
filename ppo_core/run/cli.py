"""The two commands (``ppo_core/train.py`` and ``ppo_core/evaluate.py`` are their entry points).

    python -m ppo_core.train [--config PRESET_OR_PATH] [key=value ...]      # train_main
    python -m ppo_core.evaluate CHECKPOINT [--config ...] [key=value ...]   # evaluate_main

With no arguments training runs the CPU default (offline: a tiny warm-started model on a synthetic task).

OpenMP reads ``OMP_WAIT_POLICY`` once, when torch loads: the entry points set it (``_passive_openmp``'s
default) before they import this module.

The config is checked before the rest of the package loads (the trainer, the models, transformers' model code):
a mistyped key or value gets its one-line error without waiting for them (1.9 s instead of 5 on two CPU cores).
"""

import argparse
import contextlib
import errno
import os
import signal
import sys
import time
import warnings

import torch

from ..utils import no_transformers_bars
from .config import PRESETS, ConfigError, load_config

__all__ = ["train_main", "evaluate_main", "EXIT_CODES"]


TRAIN_DESCRIPTION = "Train a policy with PPO (offline CPU default: a tiny warm-started model on a synthetic task)."
EVALUATE_DESCRIPTION = "Greedy and sampled accuracy of a checkpoint on the held-out split of its run's task."


def parse_args(argv=None):
    codes = "; ".join(f"{k} {v}" for k, v in EXIT_CODES.items())
    ap = argparse.ArgumentParser(
        prog="python -m ppo_core.train", description=TRAIN_DESCRIPTION, epilog=f"exit codes: {codes}"
    )
    ap.add_argument("--config", default="cpu", help=f"a preset ({', '.join(PRESETS)}) or a YAML file (default: cpu)")
    ap.add_argument("overrides", nargs="*", help="dotted key=value overrides, e.g. ppo.lr=1e-4 train.steps=10")
    return ap.parse_args(argv)


def _passive_openmp() -> None:
    """Busy-waiting OpenMP threads collapse on a shared 2-core machine (10-20x slower steps): ask for passive
    waiting, unless the user chose a policy. Must run before torch loads."""
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")


def train_main(argv=None) -> int:
    """Run training; returns the exit code (see EXIT_CODES). Every error is one line on stderr."""
    _passive_openmp()
    args = parse_args(argv)
    with _terse_output():
        return _run(args)


def _run(args) -> int:
    t0, cfg = time.perf_counter(), None
    try:
        cfg = load_config(args.config, args.overrides)
        from .runner import build_trainer  # the rest of the package, once the config is good

        bars = contextlib.nullcontext() if cfg.train.progress else no_transformers_bars()  # loading, writing weights
        with bars:
            summary = build_trainer(cfg).train()  # under torchrun --nproc_per_node=N: data parallel (distributed.py)
    except ConfigError as err:  # bad config, data, model path or device: nothing was written
        return _fail(err, 2)
    except KeyboardInterrupt:  # a second Ctrl-C, or one during start-up
        return _fail("interrupted; the last complete checkpoint is intact (continue with train.resume=auto)", 130)
    except Exception as err:
        code = _diagnosis(err, cfg.train.output_dir if cfg else ".")
        if code is None:
            raise  # a bug: keep the traceback
        return code
    if "interrupted" in summary:
        where = f"saved {summary['checkpoint']}" if summary["checkpoint"] else "nothing to save before the first step"
        print(
            f"{summary['interrupted']} at step {summary['step']}: {where}; continue with train.resume=auto",
            file=sys.stderr,
        )
        return 128 + getattr(signal, summary["interrupted"])
    before, after = summary.get("before/sampled_accuracy"), summary["after/sampled_accuracy"]
    print(f"run folder: {cfg.train.output_dir}  ({time.perf_counter() - t0:.0f} s)")
    if before is not None:
        print(f"held-out sampled accuracy: {before:.3f} -> {after:.3f} ({100 * (after - before):+.1f} points)")
        print(
            f"held-out greedy accuracy:  {summary['before/greedy_accuracy']:.3f} -> "
            f"{summary['after/greedy_accuracy']:.3f}"
        )
    else:
        print(f"held-out sampled accuracy after training: {after:.3f}")
    if "last10/value/explained_variance" in summary:
        print(f"critic explained variance, mean of the last 10 steps: {summary['last10/value/explained_variance']:.2f}")
    return 0


@contextlib.contextmanager
def _terse_output():
    """Warnings as one 'warning: ...' line each, without the source line; put back afterwards (main may run
    in-process)."""
    old_format = warnings.formatwarning
    warnings.formatwarning = lambda message, category, *_, **__: f"warning: {message}\n"
    try:
        yield
    finally:
        warnings.formatwarning = old_format


EXIT_CODES = {
    0: "done",
    2: "bad input (config, data, model, device, a damaged checkpoint): nothing written",
    3: "the run stopped with a diagnosis (NaN/inf, ratio check, out of memory, a full disk); earlier checkpoints "
    "intact",
    130: "stopped by SIGINT (Ctrl-C) after saving step_N",
    143: "stopped by SIGTERM after saving step_N",
}
OOM_HINT = (
    "lower rollout.generation_batch_size, ppo.minibatch_size (raise ppo.grad_accum_steps to keep the "
    "minibatch), rollout.max_new_tokens or data.max_prompt_len; or set model.gradient_checkpointing=true"
)


def _fail(message, code: int) -> int:
    print(f"error: {message}", file=sys.stderr)
    return code


def _diagnosis(err: Exception, output_dir: str) -> int | None:
    """Exit code 3 and one line for a run that stopped for a known reason; None for anything else (a bug)."""
    from ..update import RatioCheckError
    from .checkpoint import CheckpointWriteError, latest_checkpoint
    from .guards import NonFiniteError

    if isinstance(err, (NonFiniteError, RatioCheckError, CheckpointWriteError)):
        return _fail(err, 3)
    if isinstance(err, OSError) and err.errno in (errno.ENOSPC, errno.EDQUOT):  # a log, not a checkpoint
        last = latest_checkpoint(output_dir)
        return _fail(f"{err}; free disk space, then resume from {last or 'the start'} with train.resume=auto", 3)
    if isinstance(err, torch.OutOfMemoryError):
        last = latest_checkpoint(output_dir)
        return _fail(
            f"out of memory ({str(err).splitlines()[0][:120]}); {OOM_HINT}; then resume from "
            f"{last or 'the start'} with train.resume=auto",
            3,
        )
    return None


def evaluate_main(argv=None) -> int:
    """Score a checkpoint; returns the exit code (0, or 2 for bad input)."""
    ap = argparse.ArgumentParser(prog="python -m ppo_core.evaluate", description=EVALUATE_DESCRIPTION)
    ap.add_argument("checkpoint", help="a step_N or final folder written by ppo_core.train")
    ap.add_argument(
        "--config", default="auto", help="'auto' (the run's effective_config.yaml), a preset or a YAML file"
    )
    ap.add_argument("overrides", nargs="*", help="dotted key=value overrides, e.g. train.eval_samples=200")
    args = ap.parse_args(argv)
    _passive_openmp()
    from .evaluation import evaluate_checkpoint

    try:
        res = evaluate_checkpoint(args.checkpoint, args.config, args.overrides)
    except (ConfigError, FileNotFoundError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(
        f"held-out ({res['n']} problems): sampled accuracy {res['sampled_accuracy']:.3f}, greedy accuracy "
        f"{res['greedy_accuracy']:.3f}"
    )
    return 0
