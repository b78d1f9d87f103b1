"""Chapter 05 - turn a Config into the things a run needs: task data, models, tokenizer, optimizer.

Every failure here is a one-line ``ConfigError`` that names the fix (a missing path, the hub
unreachable, a broken data file, no CUDA, a response longer than the model's context). Two problems
are repaired with a warning instead: a tokenizer without a pad token distinct from EOS gets one, and
``ppo.optimizer=adamw8bit`` falls back to torch AdamW where bitsandbytes cannot run.
"""

import functools
import random
import warnings
from pathlib import Path

import numpy as np
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from ..kl import AdaptiveKLController, FixedKLController
from ..model import ActorWithValueHead, make_reference
from ..precision import DTYPES
from ..reward_model import RewardModel
from ..tasks.data import load_gsm8k
from ..tasks.long_synthetic import make_long_task, warm_start_long
from ..tasks.rewards import gsm8k_reward, is_correct
from ..tasks.smollm import build_smollm, is_smollm
from ..tasks.synthetic import make_synthetic_task
from ..tasks.warmstart import warm_start, warm_start_from
from ..update import policy_and_critic
from ..utils import hub_offline, hub_unreachable
from .config import DEVICES, OPTIMIZERS, TASKS, Config, ConfigError, derive, uses_critic
from .lora import apply_lora
from .manifest import MANIFEST, damage

__all__ = [
    "resolve_device",
    "load_reward_model",
    "load_task",
    "load_models",
    "build_optimizer",
    "param_groups",
    "fit_prompt_len",
    "model_context",
    "uses_critic",
    "DTYPES",
    "DEVICES",
    "TASKS",
    "OPTIMIZERS",
    "seed_everything",
    "build_kl_controller",
]


def resolve_device(device: str) -> torch.device:
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device == "cuda" and not torch.cuda.is_available():
        raise ConfigError("model.device=cuda but no CUDA GPU is visible; use model.device=cpu (or auto)")
    return torch.device(device)


def load_task(cfg: Config):
    """(train records, test records, reward_fn, correct_fn); records are {'question', 'answer'} dicts."""
    d = cfg.data
    if d.task == "synthetic":
        train, test = make_synthetic_task(seed=cfg.train.seed, n_train=d.n_train, n_test=d.n_test)
    elif d.task == "long_synthetic":
        train, test = make_long_task(seed=cfg.train.seed, n_train=d.n_train, n_test=d.n_test)
    else:
        try:
            train = load_gsm8k(d.source, split="train")
            test = load_gsm8k(d.source, split="test", limit=d.n_test)
        except (OSError, ValueError) as err:  # missing/empty file, a bad line (named), the hub unreachable
            raise ConfigError(f"data.source={d.source}: {str(err).splitlines()[0]}") from None
        if Path(d.source).expanduser().is_file():
            warnings.warn(
                f"data.source={d.source} is one file: the held-out evaluation reuses training records; "
                "pass a folder holding train.jsonl and test.jsonl for a real held-out split",
                stacklevel=2,
            )
    return train, test, gsm8k_reward, is_correct


def _warm_started_tiny(cfg: Config) -> Path:
    fn = warm_start_long if cfg.data.task == "long_synthetic" else warm_start  # the long task has its own
    return warm_start_from(cfg.warmstart, seed=cfg.train.seed, progress=cfg.train.progress, fn=fn,
                           n_train=cfg.data.n_train, n_test=cfg.data.n_test)  # fmt: skip


PAD_CANDIDATES = ("<|endoftext|>", "<|end_of_text|>", "<pad>", "<|pad|>")
"""Existing special tokens used as pad when a tokenizer's pad is its EOS, before adding a token of our own."""


def _existing_pad(tok) -> str | None:
    """A special token of ``tok`` that can pad: in ``PAD_CANDIDATES``, one id, distinct from EOS and BOS."""
    special = set(tok.all_special_tokens) | {t.content for t in tok.added_tokens_decoder.values() if t.special}
    for token in PAD_CANDIDATES:
        ids = tok.convert_tokens_to_ids([token]) if token in special else [None]
        if ids[0] is not None and ids[0] not in (tok.eos_token_id, tok.bos_token_id):
            return token
    return None


def _load_tokenizer(path: str):
    tok = AutoTokenizer.from_pretrained(path)
    tok.padding_side = "left"
    if tok.pad_token_id is None or tok.pad_token_id == tok.eos_token_id:
        existing = _existing_pad(tok)
        if existing is not None:  # a token the vocabulary already has: no new embedding row to sample or score
            tok.pad_token = existing
            return tok
        tok.add_special_tokens({"pad_token": "<|ppo_pad|>"})
        warnings.warn(
            f"the tokenizer of {path} had no pad token distinct from EOS; added '<|ppo_pad|>' (pad must differ "
            "from EOS, see chapter 02)",
            stacklevel=2,
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
    why = "HF_HUB_OFFLINE is set" if hub_offline() else "the hub is unreachable or has no such model"
    fix = f"on a machine with network run `hf download {path} --local-dir DIR`, then pass model.name_or_path=DIR"
    return ConfigError(hub_unreachable(path, f"{why}, and it is not in the local cache", fix))


def load_models(cfg: Config, device: torch.device):
    """(actor with value head, frozen reference LM, tokenizer, path of the initial policy).

    Mixed precision the standard way (``precision``): the actor's weights are loaded in float32
    whatever ``model.dtype`` says, and ``model.dtype`` is the *compute* dtype its forward passes run in
    (autocast); the frozen reference, which is never updated, is stored in ``model.dtype``. With LoRA
    (``model.lora.r > 0``) the base is frozen too, so it is loaded in ``model.dtype`` (``run.lora``).
    """
    m = cfg.model
    path = str(_warm_started_tiny(cfg)) if m.name_or_path == "tiny" else m.name_or_path
    if is_smollm(m.name_or_path):  # SmolLM2-135M-Instruct from its GGUF file, built into the cache once
        try:
            path = str(build_smollm(cfg.warmstart.cache_dir))
        except (FileNotFoundError, ValueError) as err:
            raise ConfigError(f"model.name_or_path={m.name_or_path}: {err}") from None
    try:
        tokenizer = _load_tokenizer(path)
        lm = AutoModelForCausalLM.from_pretrained(path, dtype=DTYPES[m.dtype] if m.lora.r > 0 else torch.float32)
    except (OSError, ValueError) as err:
        raise _hub_error(path, err) from None
    if len(tokenizer) > lm.get_input_embeddings().num_embeddings:
        lm.resize_token_embeddings(len(tokenizer))
    lm.config.pad_token_id = tokenizer.pad_token_id
    if m.gradient_checkpointing:
        lm.gradient_checkpointing_enable()
        lm.config.use_cache = False
    critic = uses_critic(cfg)  # GRPO, RLOO and REINFORCE++ (chapter 07) build no value head
    separate = critic and cfg.ppo.separate_critic  # the critic's own trunk: a copy of the starting policy's
    actor = ActorWithValueHead(
        lm,
        m.value_head_init_std,
        compute_dtype=DTYPES[m.dtype],
        with_value_head=critic,
        separate_critic=separate,
    )
    actor = actor.to(device)
    if m.lora.r > 0:  # LoRA (run/lora.py): frozen base in model.dtype, the reference is it with the adapters off
        return (*apply_lora(actor, m.lora, m.gradient_checkpointing, base_dtype=DTYPES[m.dtype]), tokenizer, path)
    ref = make_reference(actor).to(device=device, dtype=DTYPES[m.dtype])
    return actor, ref, tokenizer, path


def model_context(lm) -> int | None:
    """The longest sequence (prompt + response) the model's position embeddings cover, if it says."""
    config = lm.config.get_text_config()
    return getattr(config, "max_position_embeddings", None) or getattr(config, "n_positions", None)


def fit_prompt_len(cfg: Config, lm) -> Config:
    """Make prompt + response fit the model's context: the config with ``data.max_prompt_len`` lowered (with a
    warning) if needed, a new one (``config.derive``); ``cfg`` itself if it fits.

    Prompts longer than ``data.max_prompt_len`` are then cut from the left at sampling time, with a
    warning (``rollout.tokenize_prompts``). A response limit that leaves no room for a prompt is refused.
    """
    context, T = model_context(lm), cfg.rollout.max_new_tokens
    if context is None or cfg.data.max_prompt_len + T <= context:
        return cfg
    if T >= context:
        raise ConfigError(
            f"rollout.max_new_tokens={T} leaves no room for a prompt in the model's context of {context} tokens; "
            "lower it"
        )
    warnings.warn(
        f"data.max_prompt_len={cfg.data.max_prompt_len} + rollout.max_new_tokens={T} exceed the model's context of "
        f"{context} tokens: prompts will be cut to their last {context - T} tokens",
        stacklevel=2,
    )
    return derive(cfg, {"data.max_prompt_len": context - T})


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


def param_groups(actor, ppo) -> list:
    """The optimizer's parameter groups: one group at ``ppo.lr``, or, with ``ppo.value_lr > 0`` and a value head,
    the policy (trunk and LM head) at ``ppo.lr`` and the critic (the value head, and a separate critic's trunk)
    in a second group at ``ppo.value_lr``. An actor without a value head (no critic, chapter 07) gets the one
    group whatever ``ppo.value_lr`` says."""
    if not ppo.value_lr or actor.value_head is None:
        return [p for p in actor.parameters() if p.requires_grad]
    policy, critic = policy_and_critic(actor)
    return [{"params": policy, "lr": ppo.lr}, {"params": critic, "lr": ppo.value_lr}]


def build_optimizer(actor, ppo) -> torch.optim.Optimizer:
    """AdamW over the trunk and the value head (if the actor has one), or bitsandbytes' AdamW8bit when
    ppo.optimizer=adamw8bit.

    With ``ppo.value_lr > 0`` the value head is a second parameter group at that learning rate
    (``param_groups``). If bitsandbytes cannot run here, ``adamw8bit`` falls back to torch AdamW with a
    warning (the same update, with more optimizer memory) rather than stopping the run.

    Torch's AdamW runs fused (one kernel per parameter group instead of a loop of elementwise operations per
    tensor), as transformers' Trainer does by default: the same update up to float rounding, and on a fully
    fine-tuned SmolLM2-135M (135 M parameters) about 0.07 s per step instead of 0.37 s (two CPU threads).
    """
    params = param_groups(actor, ppo)
    if ppo.optimizer == "adamw8bit":
        why = _bitsandbytes_error(next(actor.parameters()).device.type)
        if why is None:
            import bitsandbytes as bnb

            return bnb.optim.AdamW8bit(params, lr=ppo.lr, weight_decay=ppo.weight_decay)
        warnings.warn(
            f"ppo.optimizer=adamw8bit but bitsandbytes cannot run here ({why}); falling back to torch AdamW, "
            "whose two float32 moment estimates take 4 times the memory of 8-bit ones",
            stacklevel=2,
        )
    return torch.optim.AdamW(params, lr=ppo.lr, weight_decay=ppo.weight_decay, fused=_fused_ok(actor))


def _fused_ok(actor) -> bool:
    """Whether torch's fused AdamW kernel runs on every trained parameter (CPU or CUDA, floating point)."""
    trained = [p for p in actor.parameters() if p.requires_grad]
    return all(p.device.type in ("cpu", "cuda") and p.is_floating_point() for p in trained)


def load_reward_model(cfg: Config, device: torch.device):
    """The frozen reward model of ``reward.type=model`` (eval mode, no gradients, on ``device``); None: the rule."""
    if cfg.reward.type != "model":
        return None
    path = Path(cfg.reward.path).expanduser()
    why = damage(path) if (path / MANIFEST).is_file() else None  # a checkpoint of train_rm (run/manifest.py)
    if why is not None:
        raise ConfigError(f"reward.path={cfg.reward.path} is damaged: {why}; pass another checkpoint of its run")
    try:
        rm = RewardModel.from_pretrained(path)
    except (OSError, ValueError) as err:
        raise ConfigError(
            f"reward.path={cfg.reward.path}: cannot load a reward model ({str(err).splitlines()[0]})"
        ) from None
    return rm.to(device).eval().requires_grad_(False)


def seed_everything(seed: int) -> None:
    """Seed Python's, numpy's and torch's global generators."""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def build_kl_controller(ppo):
    """The adaptive KL controller (``ppo.adaptive_kl``) or a fixed coefficient."""
    if ppo.adaptive_kl:
        return AdaptiveKLController(ppo.kl_coef, ppo.kl_target, ppo.kl_horizon)
    return FixedKLController(ppo.kl_coef)
