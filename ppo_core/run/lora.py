"""LoRA through ``peft``: low-rank adapters on the trunk, and the reference for free.

With ``model.lora.r > 0`` the policy's linear layers get adapters ``W x + (alpha / r) B A x``
(A: r x in, B: out x r, B starts at 0, so the starting policy *is* the base model). Only the adapters
and the value head are trained; the base weights are frozen. The frozen reference is then the same
base model with the adapters switched off (``peft``'s ``disable_adapter()`` context), so a LoRA run
holds one copy of the base weights instead of two.

Precision (``precision.py``): the trained weights (adapters, value head) are float32 master
weights, and the forwards run under autocast at ``model.dtype``, as for full fine-tuning. The frozen
base is never updated, so it is stored in ``model.dtype`` itself (bf16: 2 bytes per base parameter
instead of the float32 policy + bf16 reference of full fine-tuning); the reference runs under the same
autocast, so at step 0 its logprobs equal the policy's exactly.

A LoRA checkpoint holds the adapters (``adapter_model.safetensors`` + ``adapter_config.json``, as
``peft`` writes them), the value head and the tokenizer, not the base weights: resuming loads the
adapters back into the live model; ``python -m ppo_core.evaluate`` loads the base named in
``adapter_config.json`` and merges the adapters into it (``merge_and_unload``, in float32, then cast to
the run's ``model.dtype``). Without a critic (chapter 07) there is no value head to save or load.
"""

import copy
import json
from pathlib import Path

import torch

from ..model import CRITIC_DIR, VALUE_HEAD_FILE
from ..precision import autocast, load_weights_
from ..utils import no_peft_deprecation as _no_peft_deprecation
from ..utils import no_transformers_bars
from ..utils import quiet_peft as _peft

__all__ = [
    "apply_lora",
    "is_lora",
    "merged_copy",
    "AdapterOffReference",
    "save_actor",
    "load_actor",
    "is_lora_checkpoint",
]

ADAPTER_CONFIG = "adapter_config.json"


def _target_modules(spec: str):
    """'all-linear' (peft's shorthand: every linear layer but the LM head) or comma-separated names."""
    spec = spec.strip()
    return spec if spec == "all-linear" else [name.strip() for name in spec.split(",") if name.strip()]


def apply_lora(actor, lora_cfg, gradient_checkpointing: bool = False, base_dtype: torch.dtype | None = None):
    """Put adapters on ``actor.lm`` in place; return ``(actor, reference)``.

    ``base_dtype``: store the frozen base weights in this dtype (``model.dtype``); the adapters are
    float32 whatever it is (peft's ``autocast_adapter_dtype``), like the value head.

    ``actor.lm`` stays the same transformers model (its linear layers now carry adapters), so every
    forward in the package (``model.lm_logits``, the fast paths, ``generate``) runs unchanged. The
    ``peft`` wrapper is kept beside it (``actor.peft_model``, not a submodule, so it adds no
    parameters to the actor) for ``disable_adapter`` and for saving.
    """
    peft = _peft()
    config = peft.LoraConfig(
        r=lora_cfg.r,
        lora_alpha=lora_cfg.alpha,
        lora_dropout=lora_cfg.dropout,
        target_modules=_target_modules(lora_cfg.target_modules),
        bias="none",
    )
    lm = actor.lm
    if base_dtype is not None:
        lm.to(base_dtype)  # frozen: never updated, so it needs no float32 master copy
    with _no_peft_deprecation():  # injects the adapters into lm's modules (float32), freezes the rest of lm
        peft_model = peft.get_peft_model(lm, config, autocast_adapter_dtype=True)
    assert peft_model.get_base_model() is lm
    if gradient_checkpointing:
        lm.enable_input_require_grads()  # frozen embeddings: checkpointed blocks need an input that requires grad
    object.__setattr__(actor, "peft_model", peft_model)  # plain attribute: not a submodule, not in state_dict
    if actor.value_head is not None:  # chapter 07's critic-free methods have none
        actor.value_head.requires_grad_(True)  # trained in full
    return actor, AdapterOffReference(peft_model, getattr(actor, "compute_dtype", None))


def is_lora(actor) -> bool:
    return getattr(actor, "peft_model", None) is not None


def merged_copy(actor):
    """A plain transformers LM: a copy of the policy with its adapters merged in, for generation alone.

    ``merge_and_unload`` folds ``(alpha / r) B A`` into each adapted weight of the copy, so generating
    runs at the base model's speed (no second, low-rank matmul per adapted layer). The live model is left
    as it is: merging in place and unmerging afterwards would not give back the base weights bit for bit,
    and those weights are also the reference. The copy's outputs equal the policy's up to float rounding
    (exactly, while B = 0), as those of ``python -m ppo_core.evaluate`` (``load_merged``) do.
    """
    with _no_peft_deprecation():
        return copy.deepcopy(actor.peft_model).merge_and_unload().eval()


class _AdaptersOff:
    """Call ``fn`` with the adapters switched off, no gradient, under the actor's autocast."""

    def __init__(self, peft_model, fn, dtype):
        self.peft_model, self.fn, self.dtype = peft_model, fn, dtype

    def __call__(self, *args, **kwargs):
        device = next(self.peft_model.parameters()).device
        with self.peft_model.disable_adapter(), torch.no_grad(), autocast(device, self.dtype):
            return self.fn(*args, **kwargs)


class AdapterOffReference:
    """The frozen reference of a LoRA run: the policy's own base weights with the adapters off.

    Offers what the scorer needs from a reference LM (``model.lm_logits`` calls ``base_model(...)``
    and ``get_output_embeddings()(hidden)``), plus ``parameters()`` (the frozen base weights),
    ``eval()`` and ``to()`` (no-ops: it shares the actor's weights and device). Both calls run inside
    ``disable_adapter()``, the LM head too (it may carry an adapter when ``target_modules`` names it),
    under autocast at the actor's ``compute_dtype``: the policy's forward with B A = 0.
    """

    def __init__(self, peft_model, compute_dtype: torch.dtype | None = None):
        self.peft_model, self.compute_dtype = peft_model, compute_dtype
        self.lm = peft_model.get_base_model()
        self.config = self.lm.config

    def _off(self, fn):
        return _AdaptersOff(self.peft_model, fn, self.compute_dtype)

    @property
    def base_model(self):
        return self._off(self.lm.base_model)

    def get_output_embeddings(self):
        return self._off(self.lm.get_output_embeddings())

    def __call__(self, *args, **kwargs):
        return self._off(self.lm)(*args, **kwargs)

    def parameters(self):
        return (p for name, p in self.lm.named_parameters() if "lora_" not in name)

    def eval(self):
        return self

    def to(self, *args, **kwargs):
        return self

    def requires_grad_(self, requires_grad: bool = True):
        return self


def save_actor(actor, path) -> None:
    """Write the actor to ``path``: full weights (``save_pretrained``), or for LoRA the adapters + value head.
    Without transformers' "Writing model shards" bars, which would break the run's progress bar at every checkpoint."""
    with no_transformers_bars():
        if not is_lora(actor):
            actor.save_pretrained(path)
            return
        actor.peft_model.save_pretrained(path)  # adapter_model.safetensors + adapter_config.json (names the base)
    if actor.value_head is not None:
        torch.save(actor.value_head.state_dict(), Path(path) / VALUE_HEAD_FILE)


def load_actor(actor, path) -> None:
    """Restore ``actor``'s trained weights from a checkpoint written by ``save_actor`` (in place)."""
    path = Path(path)
    if not is_lora(actor):
        if is_lora_checkpoint(path):
            raise ValueError(f"{path} holds LoRA adapters; resume it with the run's model.lora.r (see its config)")
        load_weights_(actor.lm, path)  # in place, one tensor at a time: no second model in memory
        _load_value_head(actor, path)
        _load_critic_trunk(actor, path)
        return
    if not is_lora_checkpoint(path):
        raise ValueError(f"{path} holds full weights, not LoRA adapters; resume it with model.lora.r=0")
    set_peft_model_state_dict = _peft().set_peft_model_state_dict
    from safetensors.torch import load_file

    result = set_peft_model_state_dict(actor.peft_model, load_file(path / "adapter_model.safetensors"))
    if getattr(result, "unexpected_keys", None):
        raise ValueError(f"{path}: adapters that this model has no place for: {result.unexpected_keys[:3]}")
    _load_value_head(actor, path)


def _load_critic_trunk(actor, path: Path) -> None:
    """A separate critic's trunk (ppo.separate_critic) from ``critic/``; refuse a checkpoint of the other kind."""
    has_trunk = getattr(actor, "critic_trunk", None) is not None
    saved = (path / CRITIC_DIR).is_dir()
    if has_trunk and not saved:
        raise ValueError(f"{path} has no separate critic ({CRITIC_DIR}/): resume it with ppo.separate_critic=false")
    if saved and not has_trunk and getattr(actor, "value_head", None) is not None:
        raise ValueError(f"{path} holds a separate critic ({CRITIC_DIR}/): resume it with ppo.separate_critic=true")
    if has_trunk:
        load_weights_(actor.critic_trunk, path / CRITIC_DIR)


def _load_value_head(actor, path) -> None:
    """The value head, if the actor has one (chapter 07's critic-free methods have none)."""
    if actor.value_head is not None:
        device = actor.value_head.weight.device
        actor.value_head.load_state_dict(torch.load(path / VALUE_HEAD_FILE, map_location=device, weights_only=True))


def is_lora_checkpoint(path) -> bool:
    return (Path(path) / ADAPTER_CONFIG).is_file()


def load_merged(path, base: str | None = None, dtype: torch.dtype | None = None):
    """A plain transformers LM: the base named in the checkpoint's adapter config, adapters merged in.

    ``merge_and_unload`` folds ``(alpha / r) B A`` into each adapted weight, so generation runs at
    the base model's speed with no ``peft`` wrapper. The merge is done in float32 (the adapters'
    dtype), then the model is cast to ``dtype`` (the run's ``model.dtype``) if given.
    """
    PeftModel = _peft().PeftModel  # noqa: N806
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = Path(path)
    base = base or json.loads((path / ADAPTER_CONFIG).read_text())["base_model_name_or_path"]
    lm = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(path)
    if len(tokenizer) > lm.get_input_embeddings().num_embeddings:  # the run added a pad token (run/setup.py)
        lm.resize_token_embeddings(len(tokenizer))
    lm.config.pad_token_id = tokenizer.pad_token_id
    with _no_peft_deprecation():
        merged = PeftModel.from_pretrained(lm, str(path)).merge_and_unload()
    return merged if dtype is None else merged.to(dtype)
