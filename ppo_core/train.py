"""``python -m ppo_core.train [--config PRESET_OR_PATH] [key=value ...]``: train a policy with PPO.

The entry point of the command (and of the ``ppo-train`` script); ``ppo_core/run/cli.py`` implements it.
"""

import sys

from .run.cli import train_main as main

__all__ = ["main"]

if __name__ == "__main__":
    sys.exit(main())
