"""``python -m ppo_core.train_rm [--config PRESET_OR_PATH] [key=value ...]``: train a reward model (chapter 06).

The entry point of the command; ``ppo_core/run/rm.py`` implements it.
"""

import sys

from .run.rm import main

__all__ = ["main"]

if __name__ == "__main__":
    sys.exit(main())
