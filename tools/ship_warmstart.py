"""Write the default run's warm start into the package, in float16: ``ppo_core/tasks/warmstarts/warmstart-<hash>/``.

    python -m tools.ship_warmstart [key=value ...]     # the cpu preset's warm start (seed 0 unless overridden)

Trains it first if the cache lacks it (``tasks.warmstart.warm_start``, which rounds every warm start to
float16, so the shipped copy is exactly the trained model). Run it again after a change that bumps
``WARMSTART_VERSION`` and delete the old folder.
"""

import shutil
import sys

import torch

from ppo_core.run.config import load_config
from ppo_core.run.setup import _warm_started_tiny
from ppo_core.tasks.tiny import load_tiny, save_tiny
from ppo_core.tasks.warmstart import SHIPPED


def main(argv: list[str]) -> None:
    cfg = load_config("cpu", [*argv, f"warmstart.cache_dir={SHIPPED.parent / '.warmstart-cache'}"])
    cache = _warm_started_tiny(cfg)
    model, tokenizer = load_tiny(cache, dtype=torch.float32)
    target = SHIPPED / cache.name
    save_tiny(model.to(torch.float16), tokenizer, target)
    shutil.copy(cache / "warmstart.json", target / "warmstart.json")
    shutil.rmtree(cache.parent)
    size = sum(f.stat().st_size for f in target.iterdir())
    print(f"{target}: {size / 1e6:.2f} MB")


if __name__ == "__main__":
    main(sys.argv[1:])
