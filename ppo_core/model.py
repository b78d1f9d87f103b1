"""Chapter 05 - the actor-critic: a causal LM with a value head, and its frozen reference copy.

The value head is a single linear layer on the last hidden state (as in TRL's value-head models),
not an MLP: the transformer trunk already computes rich features, a linear probe on
them is enough to predict the return, and a tiny zero-initialised head starts at V = 0 without
disturbing the language model. It is kept in float32 even when the trunk runs in bf16, because
values and returns are small differences of rewards that bf16 rounds badly.
"""

import copy
from pathlib import Path

import torch
from torch import nn
from transformers import AutoModelForCausalLM

from .precision import autocast, load_weights_

__all__ = [
    "ActorWithValueHead",
    "lm_logits",
    "position_ids_from_mask",
    "make_reference",
    "disable_dropout",
]

VALUE_HEAD_FILE = "value_head.pt"
CRITIC_DIR = "critic"
"""The separate critic's transformer, saved beside the LM (``save_pretrained``) in this sub-folder."""


def position_ids_from_mask(attention_mask: torch.Tensor) -> torch.Tensor:
    """Position ids that count only real tokens: 0 at each row's first real token (left padding).

    ``generate`` derives them like this; a plain forward does not, and absolute-position models
    (GPT-2) then give different logprobs for left-padded rows. (B, L) -> (B, L).
    """
    return (attention_mask.long().cumsum(-1) - 1).clamp(min=0)


DROPOUT_ATTRIBUTES = ("dropout", "attention_dropout", "attn_dropout", "dropout_p", "hidden_dropout", "resid_dropout")
"""Float attributes that attention modules copy from the config at init and pass to the attention kernel
(Llama, Qwen2, Mistral: ``self.attention_dropout = config.attention_dropout``): the config alone is too late."""


def disable_dropout(model: nn.Module) -> nn.Module:
    """Set every dropout probability to 0: PPO's ratio must be 1 before the first update.

    Three places hold one: ``nn.Dropout`` modules, float attributes that modules copied from the config
    at init (``DROPOUT_ATTRIBUTES``), and the config itself (for modules built later).
    """
    for module in model.modules():
        if isinstance(module, nn.Dropout):
            module.p = 0.0
        for key in DROPOUT_ATTRIBUTES:
            if isinstance(getattr(module, key, None), float):
                setattr(module, key, 0.0)
    for key in (
        "dropout",
        "attention_dropout",
        "hidden_dropout",
        "resid_pdrop",
        "embd_pdrop",
        "attn_pdrop",
        "summary_first_dropout",
    ):
        if hasattr(model.config, key) and isinstance(getattr(model.config, key), float):
            setattr(model.config, key, 0.0)
    return model


def lm_logits(lm, input_ids, attention_mask, position_ids=None, keep: slice | None = None, past_key_values=None):
    """Logits of a causal LM at the positions in ``keep`` only, and the final hidden states there.

    Runs the trunk (``lm.base_model``) on every position, then the LM head on the kept ones: the
    prompt's outputs are never used, and skipping them saves time and memory (V can be 150 k).
    Returns (B, L', V) logits and (B, L', H) hidden states.

    ``past_key_values``: keys and values of earlier positions (a transformers cache, e.g. the one
    ``generate`` returns); ``input_ids`` then holds only the positions after them, while
    ``attention_mask`` covers the cached positions too (B, cached + L). ``fastpaths.py`` uses it.
    """
    if position_ids is None:
        position_ids = position_ids_from_mask(attention_mask)[:, -input_ids.shape[1] :]
    out = lm.base_model(
        input_ids=input_ids,
        attention_mask=attention_mask,
        position_ids=position_ids,
        past_key_values=past_key_values,
        use_cache=past_key_values is not None,
    )
    hidden = out.last_hidden_state  # (B, L, H), after the final norm
    if keep is not None:
        hidden = hidden[:, keep]  # (B, L', H)
    return lm.get_output_embeddings()(hidden), hidden


def trunk_hidden(trunk, input_ids, attention_mask, position_ids, keep: slice | None = None) -> torch.Tensor:
    """A transformer trunk's final hidden states (B, L', H) at the positions in ``keep`` (all if None)."""
    hidden = trunk(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids).last_hidden_state
    return hidden if keep is None else hidden[:, keep]


class ActorWithValueHead(nn.Module):
    """Policy (the LM) and critic (a linear value head) sharing one transformer trunk, or, with
    ``separate_critic=True``, the head on a transformer of its own (``critic_trunk``, a copy of the LM's
    trunk at the start: PPO's separate value model, as in TRL, OpenRLHF and veRL).

    ``forward(input_ids, attention_mask)`` returns ``(logits, values)``: (B, L, V) and (B, L), where
    ``values[:, t]`` is the value of the state after tokens 0..t. With ``with_value_head=False`` there is
    no critic: ``value_head`` is None and ``values`` comes back None.
    """

    logits_fn = staticmethod(lm_logits)
    """How ``forward`` runs the LM: ``lm_logits``; ``fastpaths.enable`` swaps in a faster equal one."""
    critic_hidden_fn = staticmethod(trunk_hidden)
    """How ``critic_values`` runs the separate critic's trunk: ``trunk_hidden``; ``fastpaths.enable`` swaps it too."""

    def __init__(
        self,
        lm: nn.Module,
        value_head_init_std: float = 0.0,
        compute_dtype: torch.dtype | None = None,
        with_value_head: bool = True,
        separate_critic: bool = False,
    ):
        super().__init__()
        self.lm = disable_dropout(lm)
        self.compute_dtype = compute_dtype  # bf16/fp16: the trunk's forward runs under autocast (weights as they are)
        self.value_head = None  # the critic-free methods of chapter 07 (GRPO, RLOO, REINFORCE++) build none
        self.critic_trunk = None  # the value head reads the policy's own hidden states
        if with_value_head and separate_critic:  # its own transformer, starting from the policy's weights
            self.critic_trunk = copy.deepcopy(self.lm.base_model)
        if with_value_head:
            hidden = lm.config.get_text_config().hidden_size
            self.value_head = nn.Linear(hidden, 1, dtype=torch.float32)
            nn.init.normal_(self.value_head.weight, std=value_head_init_std)  # std 0 gives zeros: V starts at 0
            nn.init.zeros_(self.value_head.bias)

    @property
    def config(self):
        return self.lm.config

    def critic_parameters(self) -> list:
        """The critic's parameters: the value head's, and the separate critic's trunk if any."""
        if self.value_head is None:
            return []
        trunk = [] if self.critic_trunk is None else list(self.critic_trunk.parameters())
        return trunk + list(self.value_head.parameters())

    @classmethod
    def from_pretrained(cls, path_or_id: str, with_value_head: bool = True, **lm_kwargs) -> "ActorWithValueHead":
        """Load the LM with ``AutoModelForCausalLM.from_pretrained`` and, if saved beside it, the value head
        and the separate critic's trunk (``critic/``)."""
        lm = AutoModelForCausalLM.from_pretrained(path_or_id, **lm_kwargs)
        separate = with_value_head and (Path(path_or_id) / CRITIC_DIR).is_dir()
        actor = cls(lm, with_value_head=with_value_head, separate_critic=separate)
        if separate:
            load_weights_(actor.critic_trunk, Path(path_or_id) / CRITIC_DIR)
        head = Path(path_or_id) / VALUE_HEAD_FILE
        if with_value_head and head.is_file():
            actor.value_head.load_state_dict(torch.load(head, map_location="cpu", weights_only=True))
        return actor

    def save_pretrained(self, path) -> None:
        """Save the LM (loadable by ``AutoModelForCausalLM.from_pretrained``) and the value head beside it
        (and a separate critic's trunk in ``critic/``)."""
        self.lm.save_pretrained(path)
        if self.value_head is not None:
            torch.save(self.value_head.state_dict(), Path(path) / VALUE_HEAD_FILE)
        if self.critic_trunk is not None:
            self.critic_trunk.save_pretrained(Path(path) / CRITIC_DIR)

    def forward(self, input_ids, attention_mask, position_ids=None, keep: slice | None = None, past_key_values=None):
        """(B, L) ids -> logits (B, L', V) and values (B, L'), where L' = L, or the positions in ``keep``.

        Pass ``keep=slice(P - 1, P + T - 1)`` to apply the LM head and value head to the response
        positions only (the prompt's outputs are never used; skipping them saves time and memory).
        ``past_key_values``: a cache of earlier positions, as in ``lm_logits``.
        """
        if self.critic_trunk is not None and past_key_values is not None:
            raise ValueError("a separate critic cannot reuse the policy's key/value cache: call critic_values")
        with autocast(input_ids.device, self.compute_dtype):
            logits, hidden = self.logits_fn(self.lm, input_ids, attention_mask, position_ids, keep, past_key_values)
        if self.value_head is None:
            return logits, None
        if self.critic_trunk is not None:  # the critic's own transformer reads the same tokens
            return logits, self.critic_values(input_ids, attention_mask, position_ids, keep)
        return logits, self.head_values(hidden)

    def critic_values(self, input_ids, attention_mask, position_ids=None, keep: slice | None = None):
        """(B, L) ids -> values (B, L') of the separate critic alone (its trunk, then the value head)."""
        if position_ids is None:
            position_ids = position_ids_from_mask(attention_mask)
        with autocast(input_ids.device, self.compute_dtype):
            hidden = self.critic_hidden_fn(self.critic_trunk, input_ids, attention_mask, position_ids, keep)
        return self.head_values(hidden)

    def head_values(self, hidden: torch.Tensor) -> torch.Tensor:
        """Hidden states (B, L', H) of whichever trunk the critic reads -> values (B, L'), in the head's float32."""
        return self.value_head(hidden.to(self.value_head.weight.dtype)).squeeze(-1)

    def generate(self, *args, **kwargs):
        return self.lm.generate(*args, **kwargs)


def make_reference(actor: ActorWithValueHead) -> nn.Module:
    """A frozen copy of the actor's LM: eval mode, no gradients, never updated during the run."""
    ref = copy.deepcopy(actor.lm)
    ref.eval()
    ref.requires_grad_(False)
    return ref
