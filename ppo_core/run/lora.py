"""LoRA through ``peft``: low-rank adapters on the trunk, and the reference for free.

With ``model.lora.r > 0`` the policy's linear layers get adapters ``W x + (alpha / r) B A x``
(A: r x in, B: out x r, B starts at 0, so the starting policy *is* the base model). Only the adapters
and the value head are trained; the base weights are frozen. The frozen reference is then the same
base model with the adapters switched off (``peft``'s ``disable_adapter()`` context), so a LoRA run
holds one copy of the base weights instead of two.

A LoRA checkpoint holds the adapters (``adapter_model.safetensors`` + ``adapter_config.json``, as
``peft`` writes them), the value head and the tokenizer, not the base weights: resuming loads the
adapters back into the live model; ``python -m ppo_core.evaluate`` loads the base named in
``adapter_config.json`` and merges the adapters into it (``merge_and_unload``).
"""

import json
from pathlib import Path

import torch

__all__ = ["apply_lora", "is_lora", "AdapterOffReference", "save_actor", "load_actor", "is_lora_checkpoint"]

ADAPTER_CONFIG = "adapter_config.json"


def _target_modules(spec: str):
    """'all-linear' (peft's shorthand: every linear layer but the LM head) or comma-separated names."""
    spec = spec.strip()
    return spec if spec == "all-linear" else [name.strip() for name in spec.split(",") if name.strip()]


def apply_lora(actor, lora_cfg, gradient_checkpointing: bool = False):
    """Put adapters on ``actor.lm`` in place; return ``(actor, reference)``.

    ``actor.lm`` stays the same transformers model (its linear layers now carry adapters), so every
    forward in the package (``model.lm_logits``, the fast paths, ``generate``) runs unchanged. The
    ``peft`` wrapper is kept beside it (``actor.peft_model``, not a submodule, so it adds no
    parameters to the actor) for ``disable_adapter`` and for saving.
    """
    from peft import LoraConfig, get_peft_model

    config = LoraConfig(
        r=lora_cfg.r,
        lora_alpha=lora_cfg.alpha,
        lora_dropout=lora_cfg.dropout,
        target_modules=_target_modules(lora_cfg.target_modules),
        bias="none",
    )
    lm = actor.lm
    peft_model = get_peft_model(lm, config)  # injects the adapters into lm's modules, freezes the rest of lm
    assert peft_model.get_base_model() is lm
    if gradient_checkpointing:
        lm.enable_input_require_grads()  # frozen embeddings: checkpointed blocks need an input that requires grad
    object.__setattr__(actor, "peft_model", peft_model)  # plain attribute: not a submodule, not in state_dict
    actor.value_head.requires_grad_(True)  # trained in full
    return actor, AdapterOffReference(peft_model)


def is_lora(actor) -> bool:
    return getattr(actor, "peft_model", None) is not None


class _AdaptersOff:
    """Call ``fn`` with the adapters switched off and no gradient."""

    def __init__(self, peft_model, fn):
        self.peft_model, self.fn = peft_model, fn

    def __call__(self, *args, **kwargs):
        with self.peft_model.disable_adapter(), torch.no_grad():
            return self.fn(*args, **kwargs)


class AdapterOffReference:
    """The frozen reference of a LoRA run: the policy's own base weights with the adapters off.

    Offers what the scorer needs from a reference LM (``model.lm_logits`` calls ``base_model(...)``
    and ``get_output_embeddings()(hidden)``), plus ``parameters()`` (the frozen base weights),
    ``eval()`` and ``to()`` (no-ops: it shares the actor's weights and device). Both calls run inside
    ``disable_adapter()``, the LM head too (it may carry an adapter when ``target_modules`` names it).
    """

    def __init__(self, peft_model):
        self.peft_model = peft_model
        self.lm = peft_model.get_base_model()
        self.config = self.lm.config

    @property
    def base_model(self):
        return _AdaptersOff(self.peft_model, self.lm.base_model)

    def get_output_embeddings(self):
        return _AdaptersOff(self.peft_model, self.lm.get_output_embeddings())

    def __call__(self, *args, **kwargs):
        return _AdaptersOff(self.peft_model, self.lm)(*args, **kwargs)

    def parameters(self):
        return (p for name, p in self.lm.named_parameters() if "lora_" not in name)

    def eval(self):
        return self

    def to(self, *args, **kwargs):
        return self

    def requires_grad_(self, requires_grad: bool = True):
        return self


def save_actor(actor, path) -> None:
    """Write the actor to ``path``: full weights (``save_pretrained``), or for LoRA the adapters + value head."""
    if not is_lora(actor):
        actor.save_pretrained(path)
        return
    from ..model import VALUE_HEAD_FILE

    actor.peft_model.save_pretrained(path)  # adapter_model.safetensors + adapter_config.json (names the base)
    torch.save(actor.value_head.state_dict(), Path(path) / VALUE_HEAD_FILE)


def load_actor(actor, path) -> None:
    """Restore ``actor``'s trained weights from a checkpoint written by ``save_actor`` (in place)."""
    from ..model import VALUE_HEAD_FILE, ActorWithValueHead

    path = Path(path)
    if not is_lora(actor):
        if is_lora_checkpoint(path):
            raise ValueError(f"{path} holds LoRA adapters; resume it with the run's model.lora.r (see its config)")
        actor.load_state_dict(ActorWithValueHead.from_pretrained(str(path)).state_dict())
        return
    if not is_lora_checkpoint(path):
        raise ValueError(f"{path} holds full weights, not LoRA adapters; resume it with model.lora.r=0")
    from peft import set_peft_model_state_dict
    from safetensors.torch import load_file

    result = set_peft_model_state_dict(actor.peft_model, load_file(path / "adapter_model.safetensors"))
    if getattr(result, "unexpected_keys", None):
        raise ValueError(f"{path}: adapters that this model has no place for: {result.unexpected_keys[:3]}")
    actor.value_head.load_state_dict(torch.load(path / VALUE_HEAD_FILE, map_location="cpu", weights_only=True))


def is_lora_checkpoint(path) -> bool:
    return (Path(path) / ADAPTER_CONFIG).is_file()


def load_merged(path, base: str | None = None):
    """A plain transformers LM: the base named in the checkpoint's adapter config, adapters merged in.

    ``merge_and_unload`` folds ``(alpha / r) B A`` into each adapted weight, so generation runs at
    the base model's speed with no ``peft`` wrapper.
    """
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = Path(path)
    base = base or json.loads((path / ADAPTER_CONFIG).read_text())["base_model_name_or_path"]
    lm = AutoModelForCausalLM.from_pretrained(base)
    tokenizer = AutoTokenizer.from_pretrained(path)
    if len(tokenizer) > lm.get_input_embeddings().num_embeddings:  # the run added a pad token (run/setup.py)
        lm.resize_token_embeddings(len(tokenizer))
    lm.config.pad_token_id = tokenizer.pad_token_id
    return PeftModel.from_pretrained(lm, str(path)).merge_and_unload()
