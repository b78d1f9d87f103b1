"""Chapter 05 - turn a Config into the things a run needs: task data, models, tokenizer, optimizer.

Every failure here is a one-line error that names the fix (a missing path, the hub offline, no CUDA).
"""

import functools
import os
import warnings
from pathlib import Path

import torch

from .config import Config, ConfigError
from .model import ActorWithValueHead, make_reference

__all__ = ["resolve_device", "load_task", "load_models", "build_optimizer", "DTYPES"]

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def resolve_device(device: str) -> torch.device:
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device == "cuda" and not torch.cuda.is_available():
        raise ConfigError("model.device=cuda but no CUDA GPU is visible; use model.device=cpu (or auto)")
    return torch.device(device)


def load_task(cfg: Config):
    """(train records, test records, reward_fn, correct_fn); records are {'question', 'answer'} dicts."""
    from .rewards import gsm8k_reward, is_correct

    d = cfg.data
    if d.task == "synthetic":
        from .synthetic import make_synthetic_task

        train, test = make_synthetic_task(seed=cfg.train.seed, n_train=d.n_train, n_test=d.n_test)
    else:
        from .data import load_gsm8k

        train = load_gsm8k(d.source, split="train")
        test = load_gsm8k(d.source, split="test", limit=d.n_test)
    return train, test, gsm8k_reward, is_correct


def _warm_started_tiny(cfg: Config) -> Path:
    from .warmstart import warm_start

    w = cfg.warmstart
    return warm_start(
        Path(w.cache_dir).expanduser(), seed=cfg.train.seed, steps=w.steps, batch_size=w.batch_size, lr=w.lr,
        answer_noise=w.answer_noise, n_train=cfg.data.n_train, n_test=cfg.data.n_test, progress=cfg.train.progress,
    )


def _load_tokenizer(path: str):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(path)
    tok.padding_side = "left"
    if tok.pad_token_id is None or tok.pad_token_id == tok.eos_token_id:
        tok.add_special_tokens({"pad_token": "<|ppo_pad|>"})
        warnings.warn(f"the tokenizer of {path} had no pad token distinct from EOS; added '<|ppo_pad|>' (pad must differ from EOS, see chapter 02)")
    return tok


def _hub_error(path: str, err: Exception) -> ConfigError:
    if Path(path).expanduser().exists():
        return ConfigError(f"cannot load the model in {path}: {str(err).splitlines()[0]}")
    offline = os.environ.get("HF_HUB_OFFLINE", "0") not in ("0", "", "false")
    why = "the hub is offline (HF_HUB_OFFLINE is set)" if offline else "it is not a local folder and the hub is unreachable or has no such model"
    return ConfigError(f"cannot load model {path!r}: {why}; download it elsewhere and pass model.name_or_path=/path/to/local/folder")


def load_models(cfg: Config, device: torch.device):
    """(actor with value head, frozen reference LM, tokenizer, path of the initial policy)."""
    from transformers import AutoModelForCausalLM

    m = cfg.model
    path = str(_warm_started_tiny(cfg)) if m.name_or_path == "tiny" else m.name_or_path
    try:
        tokenizer = _load_tokenizer(path)
        lm = AutoModelForCausalLM.from_pretrained(path, dtype=DTYPES[m.dtype])
    except (OSError, ValueError) as err:
        raise _hub_error(path, err) from None
    if len(tokenizer) > lm.get_input_embeddings().num_embeddings:
        lm.resize_token_embeddings(len(tokenizer))
    lm.config.pad_token_id = tokenizer.pad_token_id
    if m.gradient_checkpointing:
        lm.gradient_checkpointing_enable()
        lm.config.use_cache = False
    actor = ActorWithValueHead(lm, m.value_head_init_std).to(device)
    ref = make_reference(actor).to(device)
    return actor, ref, tokenizer, path


@functools.lru_cache(maxsize=1)
def _bitsandbytes_ok() -> bool:
    try:
        import bitsandbytes  # noqa: F401
    except Exception:
        return False
    return True


def build_optimizer(actor, ppo) -> torch.optim.Optimizer:
    """AdamW over the trunk and the value head, or bitsandbytes' AdamW8bit when ppo.optimizer=adamw8bit."""
    params = [p for p in actor.parameters() if p.requires_grad]
    if ppo.optimizer == "adamw8bit":
        if _bitsandbytes_ok():
            import bitsandbytes as bnb

            return bnb.optim.AdamW8bit(params, lr=ppo.lr, weight_decay=ppo.weight_decay)
        warnings.warn("ppo.optimizer=adamw8bit but bitsandbytes cannot be imported here; falling back to torch AdamW")
    return torch.optim.AdamW(params, lr=ppo.lr, weight_decay=ppo.weight_decay)
