"""``python -m ppo_core.evaluate CHECKPOINT [--config ...] [key=value ...]``: score a checkpoint.

The entry point of the command (and of the ``ppo-eval`` script); ``ppo_core/run/cli.py`` implements it.
"""

import os
import sys

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # read once, when torch loads (run/cli.py _passive_openmp)

from .run.cli import evaluate_main as main  # noqa: E402

__all__ = ["main"]

if __name__ == "__main__":
    sys.exit(main())
