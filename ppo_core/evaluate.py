"""``python -m ppo_core.evaluate CHECKPOINT [--config ...] [key=value ...]``: score a checkpoint.

The entry point of the command (and of the ``ppo-eval`` script); ``ppo_core/run/cli.py`` implements it.
"""

import sys

from .run.cli import evaluate_main as main

__all__ = ["main"]

if __name__ == "__main__":
    sys.exit(main())
