"""``python -m ppo_core.train_rm [--config PRESET_OR_PATH] [key=value ...]``: train a reward model (chapter 06).

The entry point of the command; ``ppo_core/run/rm.py`` implements it.
"""

import os
import sys

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # read once, when torch loads (run/cli.py _passive_openmp)

from .run.rm import main  # noqa: E402

__all__ = ["main"]

if __name__ == "__main__":
    sys.exit(main())
