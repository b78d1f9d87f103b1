"""What a checkpoint holds, and how a run starts fresh or continues from one.

A checkpoint folder (``step_N/`` or ``final/``) holds the actor (loadable with
``AutoModelForCausalLM.from_pretrained``), its value head, the tokenizer, the optimizer state, and
``trainer_state.pt``: step count, KL coefficient, every RNG state (torch, the shuffle generator,
numpy, Python, CUDA) and the config. The step count fixes the data position (``prompt_batch`` is a
pure function of the step), so a resumed CPU run repeats an uninterrupted one exactly.
"""

import json
import os
import random
import shutil
import time
import warnings
from pathlib import Path

import numpy as np
import torch
from omegaconf import OmegaConf

from . import lora
from .checkpoint import (
    STATE_FILE,
    checkpoint_step,
    clear_run,
    config_changes,
    later_checkpoints,
    latest_intact_checkpoint,
    prune,
    write_atomically,
)
from .config import ConfigError, to_dict
from .guards import NonFiniteError, nonfinite_parameters
from .manifest import MANIFEST, damage
from .metrics import MetricsLogger, last_logged_step

__all__ = ["resume_path", "open_run", "save_checkpoint", "load_checkpoint", "set_aside_after"]


def resume_path(cfg) -> Path | None:
    """The checkpoint to resume from, or None for a fresh run; refuses to mix a fresh run into an old one.

    Checks the checkpoint is whole first (``run/manifest.py``): ``train.resume=auto`` skips damaged ones, with a
    warning each, to the newest intact one; a damaged checkpoint named by path is refused (one line)."""
    t, out = cfg.train, Path(cfg.train.output_dir)
    if t.resume == "auto":
        path, skipped = latest_intact_checkpoint(out)  # None and nothing skipped: nothing saved yet, start afresh
        for bad, why in skipped:
            warnings.warn(f"train.resume=auto: skipping the damaged checkpoint {bad.name} ({why})", stacklevel=2)
        if path is None and skipped:
            raise ConfigError(
                f"train.resume=auto: no intact checkpoint in {out} (damaged: {', '.join(p.name for p, _ in skipped)}); "
                "pass train.resume=PATH to an intact copy, or start over with train.overwrite=true"
            )
        return path
    if t.resume:
        path = Path(t.resume).expanduser()
        if not (path / STATE_FILE).is_file() and not (path / MANIFEST).is_file():
            raise ConfigError(
                f"train.resume={t.resume} is not a complete checkpoint (no {STATE_FILE}); "
                "pass a step_N or final folder, or train.resume=auto"
            )
        why = damage(path)
        if why is not None:
            raise ConfigError(
                f"train.resume={t.resume} is damaged: {why}; resume from another checkpoint "
                "(train.resume=auto takes the newest intact one)"
            )
        return path
    previous = sorted(
        p.name for p in out.glob("*") if p.name in ("final", "metrics.jsonl") or p.name.startswith("step_")
    )
    if previous and not t.overwrite:
        raise ConfigError(
            f"train.output_dir={out} already holds a run ({', '.join(previous)}); continue it with "
            "train.resume=auto, start over with train.overwrite=true, or choose another train.output_dir"
        )
    return None


def open_run(trainer, resume: Path | None) -> MetricsLogger:
    """Prepare ``trainer.out`` for the run and return its metrics logger.

    Fresh: clear what an earlier run left. Resumed: restore the trainer from ``resume``, set aside what
    an abandoned attempt saved after it, and cut the logs back to its step.
    """
    cfg, out = trainer.cfg, trainer.out
    if resume is None:
        clear_run(out)  # a previous run here was allowed (overwrite, or auto with nothing saved)
    out.mkdir(parents=True, exist_ok=True)
    if resume is not None:
        load_checkpoint(trainer, resume)
        set_aside_after(out, trainer.step_count, resume)
    OmegaConf.save(OmegaConf.structured(cfg), out / "effective_config.yaml")
    wandb_cfg = {"project": cfg.train.wandb_project, "config": to_dict(cfg)} if cfg.train.wandb else None
    logger = MetricsLogger(out, cfg.train.tensorboard, wandb_cfg)
    if resume is not None:
        logger.truncate_after(trainer.step_count)  # lines logged after the checkpoint are redone
    return logger


def save_checkpoint(trainer, name: str) -> Path:
    """Write ``output_dir/name`` atomically: into a temporary folder, flushed to disk, then one rename.

    Refuses (``NonFiniteError``) to save parameters that hold NaN/inf.
    """
    bad = nonfinite_parameters(trainer.actor)
    if bad:
        raise NonFiniteError(f"refusing to save {name} at step {trainer.step_count}: {', '.join(bad[:3])} hold NaN/inf")
    state = {
        "step": trainer.step_count,
        "kl_coef": trainer.kl_ctl.value,
        "init_path": str(trainer.init_path),
        "torch_rng": torch.get_rng_state(),
        "shuffle_rng": trainer.ppo.shuffle_gen.get_state(),
        "numpy_rng": np.random.get_state(),
        "python_rng": random.getstate(),
        "cuda_rng": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None,
        "config": to_dict(trainer.cfg),
    }

    def write(tmp: Path) -> None:
        lora.save_actor(trainer.actor, tmp)  # full weights, or adapters + value head (run/lora.py)
        trainer.tokenizer.save_pretrained(tmp)
        torch.save(trainer.optimizer.state_dict(), tmp / "optimizer.pt")
        summary = {"step": trainer.step_count, "kl_coef": trainer.kl_ctl.value}
        (tmp / "trainer_state.json").write_text(json.dumps(summary))
        torch.save(state, tmp / STATE_FILE)  # written last: its presence marks a complete checkpoint

    path = write_atomically(trainer.out, name, write)
    prune(trainer.out, trainer.cfg.train.keep_last)
    return path


def load_checkpoint(trainer, path) -> None:
    """Restore model, value head, optimizer, KL controller, RNG states and step count from a checkpoint."""
    path = Path(path)
    if checkpoint_step(path) is None:
        raise ConfigError(
            f"{path} is not a complete checkpoint (no {STATE_FILE}); pass a step_N folder or train.resume=auto"
        )
    state = torch.load(path / STATE_FILE, weights_only=False)
    changed = config_changes(state.get("config"), to_dict(trainer.cfg))
    if changed:
        warnings.warn(
            f"resuming {path} with settings that differ from its run ({'; '.join(changed)}): "
            "the continuation will not match an uninterrupted run",
            stacklevel=2,
        )
    try:  # full weights in place (no second model in memory), or adapters; the value head if any (run/lora.py)
        lora.load_actor(trainer.actor, path)
    except ValueError as err:
        raise ConfigError(str(err)) from None
    optimizer_state = torch.load(path / "optimizer.pt", map_location=trainer.device, weights_only=False)
    lrs = [group["lr"] for group in trainer.optimizer.param_groups]  # this run's settings
    saved, here = len(optimizer_state["param_groups"]), len(lrs)
    if saved != here:  # one group at ppo.lr, or a second at ppo.value_lr (run/setup.py param_groups)
        value_lr = (state.get("config") or {}).get("ppo", {}).get("value_lr", "its value")
        raise ConfigError(
            f"{path}'s optimizer has {saved} parameter group(s) and this run's settings give {here} "
            f"(ppo.value_lr > 0 adds the critic's): resume it with ppo.value_lr={value_lr}"
        )
    try:
        trainer.optimizer.load_state_dict(optimizer_state)
    except ValueError as err:  # e.g. a group of another size: the checkpoint trains other parameters
        raise ConfigError(f"{path}'s optimizer state does not fit this run's parameters ({err}): resume it with the "
                          "settings it was saved with") from None  # fmt: skip
    for group, lr in zip(trainer.optimizer.param_groups, lrs):
        group["lr"] = lr  # load_state_dict brought back the saved learning rates; a changed ppo.lr/value_lr wins
    trainer.ppo.step_count, trainer.kl_ctl.value = state["step"], state["kl_coef"]
    torch.set_rng_state(state["torch_rng"])
    trainer.ppo.shuffle_gen.set_state(state["shuffle_rng"])
    np.random.set_state(state["numpy_rng"])
    random.setstate(state["python_rng"])
    if state.get("cuda_rng") is not None and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda_rng"])


def set_aside_after(out: Path, step: int, resumed: Path | None = None) -> None:
    """Resuming from step N abandons what a previous attempt saved after N (it belongs to another
    trajectory), and a damaged final/ of step N. Nothing is deleted: those checkpoints, the summary and a copy
    of the full logs move to ``abandoned/after_step_N-<time>/``, out of the way of ``resume=auto`` and ``keep_last``."""
    later = later_checkpoints(out, step)
    final = out / "final"
    other = resumed is None or final.resolve() != Path(resumed).resolve()
    if final.is_dir() and other and checkpoint_step(final) == step and damage(final) is not None:
        later.append(final)  # else a resumed finished run would keep it and skip saving a new one
    logs = [out / name for name in ("metrics.jsonl", "samples.jsonl")]
    logged_after = any((last_logged_step(path) or 0) > step for path in logs if path.exists())
    if not later and not logged_after:
        return
    aside = out / "abandoned" / f"after_step_{step}-{time.strftime('%Y%m%d-%H%M%S')}"
    aside.mkdir(parents=True, exist_ok=True)
    for path in logs:
        if path.exists():
            shutil.copy2(path, aside / path.name)  # the full logs; the run's own copies are cut back by the logger
    for path in [*later, out / "summary.json"]:
        if path.exists():
            os.replace(path, aside / path.name)
    if later:
        warnings.warn(
            f"resuming from step {step}: moved later checkpoints {', '.join(sorted(p.name for p in later))} "
            f"to {aside.relative_to(out)}",
            stacklevel=2,
        )
