"""Chapter 05 - turn a Config into the things a run needs: task data, models, tokenizer, optimizer.

Every failure here is a one-line ``ConfigError`` that names the fix (a missing path, the hub
unreachable, a broken data file, no CUDA, a response longer than the model's context). Two problems
are repaired with a warning instead: a tokenizer without a pad token distinct from EOS gets one, and
``ppo.optimizer=adamw8bit`` falls back to torch AdamW where bitsandbytes cannot run.
"""

import functools
import os
import warnings
from pathlib import Path

import torch

from ..model import ActorWithValueHead, make_reference
from .config import Config, ConfigError

__all__ = [
    "resolve_device",
    "load_task",
    "load_models",
    "build_optimizer",
    "fit_prompt_len",
    "model_context",
    "uses_critic",
    "DTYPES",
]

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def resolve_device(device: str) -> torch.device:
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device == "cuda" and not torch.cuda.is_available():
        raise ConfigError("model.device=cuda but no CUDA GPU is visible; use model.device=cpu (or auto)")
    return torch.device(device)


def load_task(cfg: Config):
    """(train records, test records, reward_fn, correct_fn); records are {'question', 'answer'} dicts."""
    from ..tasks.rewards import gsm8k_reward, is_correct

    d = cfg.data
    if d.task == "synthetic":
        from ..tasks.synthetic import make_synthetic_task

        train, test = make_synthetic_task(seed=cfg.train.seed, n_train=d.n_train, n_test=d.n_test)
    else:
        from ..tasks.data import load_gsm8k

        try:
            train = load_gsm8k(d.source, split="train")
            test = load_gsm8k(d.source, split="test", limit=d.n_test)
        except (OSError, ValueError) as err:  # missing/empty file, a bad line (named), the hub unreachable
            raise ConfigError(f"data.source={d.source}: {str(err).splitlines()[0]}") from None
        if Path(d.source).expanduser().is_file():
            warnings.warn(
                f"data.source={d.source} is one file: the held-out evaluation reuses training records; "
                "pass a folder holding train.jsonl and test.jsonl for a real held-out split"
            )
    return train, test, gsm8k_reward, is_correct


def _warm_started_tiny(cfg: Config) -> Path:
    from ..tasks.warmstart import warm_start

    w = cfg.warmstart
    return warm_start(
        Path(w.cache_dir).expanduser(),
        seed=cfg.train.seed,
        steps=w.steps,
        batch_size=w.batch_size,
        lr=w.lr,
        answer_noise=w.answer_noise,
        n_train=cfg.data.n_train,
        n_test=cfg.data.n_test,
        progress=cfg.train.progress,
    )


def _load_tokenizer(path: str):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(path)
    tok.padding_side = "left"
    if tok.pad_token_id is None or tok.pad_token_id == tok.eos_token_id:
        tok.add_special_tokens({"pad_token": "<|ppo_pad|>"})
        warnings.warn(
            f"the tokenizer of {path} had no pad token distinct from EOS; added '<|ppo_pad|>' (pad must differ from EOS, see chapter 02)"
        )
    return tok


def _hub_error(path: str, err: Exception) -> ConfigError:
    """One line for a model that will not load: a broken folder, a missing folder, or a hub id out of reach."""
    if Path(path).expanduser().exists():
        return ConfigError(f"cannot load the model in {path}: {str(err).splitlines()[0]}")
    if path.startswith(("/", ".", "~")) or path.count("/") > 1:
        return ConfigError(
            f"model.name_or_path={path}: no such folder; pass a folder written by save_pretrained, or a hub id"
        )
    offline = os.environ.get("HF_HUB_OFFLINE", "").upper() in ("1", "ON", "YES", "TRUE")
    why = (
        "the Hugging Face Hub is unreachable (HF_HUB_OFFLINE=1)"
        if offline
        else "the Hugging Face Hub is unreachable or has no such model"
    )
    return ConfigError(
        f"cannot load model {path!r}: {why} and it is not in the local cache; on a machine with network run "
        f"`hf download {path} --local-dir DIR`, then pass model.name_or_path=DIR"
    )


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
    critic = uses_critic(cfg)  # GRPO, RLOO and REINFORCE++ (chapter 07) build no value head
    actor = ActorWithValueHead(lm, m.value_head_init_std, with_value_head=critic).to(device)
    ref = make_reference(actor).to(device)
    return actor, ref, tokenizer, path


def uses_critic(cfg: Config) -> bool:
    """Whether the run learns a value function: only GAE (PPO) needs one (``algo.adv_estimator``, chapter 07)."""
    return cfg.algo.adv_estimator == "gae"


def model_context(lm) -> int | None:
    """The longest sequence (prompt + response) the model's position embeddings cover, if it says."""
    config = lm.config.get_text_config()
    return getattr(config, "max_position_embeddings", None) or getattr(config, "n_positions", None)


def fit_prompt_len(cfg: Config, lm) -> None:
    """Make prompt + response fit the model's context: lower ``data.max_prompt_len`` (with a warning) if needed.

    Prompts longer than ``data.max_prompt_len`` are then cut from the left at sampling time, with a
    warning (``rollout.tokenize_prompts``). A response limit that leaves no room for a prompt is refused.
    """
    context, T = model_context(lm), cfg.rollout.max_new_tokens
    if context is None or cfg.data.max_prompt_len + T <= context:
        return
    if T >= context:
        raise ConfigError(
            f"rollout.max_new_tokens={T} leaves no room for a prompt in the model's context of {context} tokens; lower it"
        )
    warnings.warn(
        f"data.max_prompt_len={cfg.data.max_prompt_len} + rollout.max_new_tokens={T} exceed the model's context of "
        f"{context} tokens: prompts will be cut to their last {context - T} tokens"
    )
    cfg.data.max_prompt_len = context - T


@functools.lru_cache(maxsize=4)
def _bitsandbytes_error(device_type: str) -> str | None:
    """Why bitsandbytes' AdamW8bit cannot run on this device (None if it can): import it and take one step."""
    try:
        import bitsandbytes as bnb

        p = torch.nn.Parameter(torch.zeros(4096, device=device_type))  # 4096: the size at which 8-bit state starts
        opt = bnb.optim.AdamW8bit([p], lr=1e-3)
        p.grad = torch.ones_like(p)
        opt.step()
    except Exception as err:  # ImportError, no binary for this platform, no kernel for this device, ...
        return f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}"
    return None


def build_optimizer(actor, ppo) -> torch.optim.Optimizer:
    """AdamW over the trunk and the value head (if the actor has one), or bitsandbytes' AdamW8bit when
    ppo.optimizer=adamw8bit.

    If bitsandbytes cannot run here, ``adamw8bit`` falls back to torch AdamW with a warning (the same
    update, with more optimizer memory) rather than stopping the run.
    """
    params = [p for p in actor.parameters() if p.requires_grad]
    if ppo.optimizer == "adamw8bit":
        why = _bitsandbytes_error(params[0].device.type)
        if why is None:
            import bitsandbytes as bnb

            return bnb.optim.AdamW8bit(params, lr=ppo.lr, weight_decay=ppo.weight_decay)
        warnings.warn(
            f"ppo.optimizer=adamw8bit but bitsandbytes cannot run here ({why}); falling back to torch AdamW, "
            "whose two moment estimates take 2 (bf16) to 4 (fp32) times the memory of 8-bit ones"
        )
    return torch.optim.AdamW(params, lr=ppo.lr, weight_decay=ppo.weight_decay)
