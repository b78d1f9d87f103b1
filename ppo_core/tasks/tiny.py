"""Chapter 05 - a tiny causal LM and its character-level tokenizer, built offline.

The offline default run needs a policy that trains in minutes on two CPU cores and downloads
nothing. So we build both halves from scratch with the same libraries a real run uses:

* a **character-level tokenizer** from the ``tokenizers`` library (one token per character, plus
  ``<pad>``, ``<bos>``, ``<eos>``, ``<unk>``), wrapped as a transformers fast tokenizer with left
  padding and a post-processor that puts ``<bos>`` in front of every encoded text;
* a **tiny Llama-shaped model** (about 1.2 M parameters: two wide layers) from a transformers config.

Both save with ``save_pretrained`` and load back with the plain Auto classes, so the trainer treats
this model exactly like a hub checkpoint. Two traps this module avoids, measured with
transformers 5.x:

* ``from_config`` returns a model in **train mode**; dropout would make the rollout's logprobs and
  the update's logprobs disagree. We zero every dropout and return the model in ``eval()`` mode.
* ``AutoTokenizer`` picks the tokenizer class from the model type for some architectures: a folder
  whose config says ``qwen2`` loads as ``Qwen2Tokenizer``, which drops our spaces and newlines. Llama
  and GPT-2 folders keep the saved class, so those are the architectures offered here.
"""

import json
from pathlib import Path

import torch
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, processors
from transformers import AutoModelForCausalLM, AutoTokenizer, GPT2Config, LlamaConfig, PreTrainedTokenizerFast

from ..utils import no_transformers_bars

__all__ = [
    "SPECIAL_TOKENS",
    "DEFAULT_SIZES",
    "model_size",
    "build_char_tokenizer",
    "build_tiny_model",
    "count_parameters",
    "save_tiny",
    "load_tiny",
]

SPECIAL_TOKENS = ("<pad>", "<bos>", "<eos>", "<unk>")
"""Ids 0-3, in this order. Padding is its own token, never EOS, so a real EOS is never masked out."""

DEFAULT_SIZES = {
    "llama": dict(hidden_size=192, num_hidden_layers=2, num_attention_heads=6, intermediate_size=768),
    "gpt2": dict(n_embd=192, n_layer=2, n_head=6),
}
"""Default sizes: about 1.2 M parameters with the synthetic task's 74-token vocabulary. Two wide
layers learned the task's arithmetic faster per CPU-second than four narrow ones (128 wide)."""


def model_size(arch: str, size: dict | None = None) -> dict:
    """The default size fields of ``arch``, updated with ``size``."""
    if arch not in DEFAULT_SIZES:
        raise ValueError(f"arch must be 'llama' or 'gpt2', got {arch!r} (a qwen2 folder reloads the wrong tokenizer)")
    return {**DEFAULT_SIZES[arch], **(size or {})}


def build_char_tokenizer(alphabet: str) -> PreTrainedTokenizerFast:
    """A tokenizer with one token per character of ``alphabet``, plus the four ``SPECIAL_TOKENS``.

    Encoding prepends ``<bos>``; ``decode(ids, skip_special_tokens=True)`` gives the text back
    exactly (spaces and newlines included). Padding is on the left, as generation needs.
    """
    chars = list(dict.fromkeys(alphabet))  # unique, order kept
    if not chars:
        raise ValueError("alphabet must contain at least one character")
    vocab = {token: i for i, token in enumerate(list(SPECIAL_TOKENS) + chars)}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")  # every character
    tok.decoder = decoders.Fuse()  # join the characters with nothing in between
    tok.post_processor = processors.TemplateProcessing(
        single="<bos> $A", pair="<bos> $A $B", special_tokens=[("<bos>", vocab["<bos>"])]
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        pad_token="<pad>",
        bos_token="<bos>",
        eos_token="<eos>",
        unk_token="<unk>",
        padding_side="left",
        clean_up_tokenization_spaces=False,  # the default clean-up would eat the space in " ."
    )


def _config(tokenizer, arch: str, size: dict):
    """A transformers config for ``arch`` with every dropout 0 and the tokenizer's special ids."""
    ids = dict(
        pad_token_id=tokenizer.pad_token_id, bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id
    )
    size = model_size(arch, size)
    if arch == "llama":
        size.setdefault("num_key_value_heads", size["num_attention_heads"])
        return LlamaConfig(
            vocab_size=len(tokenizer),
            max_position_embeddings=256,
            attention_dropout=0.0,
            tie_word_embeddings=True,
            **size,
            **ids,
        )
    return GPT2Config(
        vocab_size=len(tokenizer),
        n_positions=256,
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
        summary_first_dropout=0.0,
        **size,
        **ids,
    )


def build_tiny_model(tokenizer, arch: str = "llama", **size) -> torch.nn.Module:
    """A freshly initialised causal LM sized for ``tokenizer``, in ``eval()`` mode, float32.

    ``size`` overrides the config's size fields (e.g. ``hidden_size=64`` for Llama, ``n_embd=64``
    for GPT-2). The model's ``generation_config`` carries the pad / bos / eos ids too, so
    ``generate`` stops at EOS and pads with ``<pad>`` without being told.
    """
    config = _config(tokenizer, arch, size)
    model = AutoModelForCausalLM.from_config(config)
    for name in ("pad_token_id", "bos_token_id", "eos_token_id"):
        setattr(model.generation_config, name, getattr(config, name))
    return model.eval()


def count_parameters(model: torch.nn.Module) -> int:
    """Number of distinct parameters (tied embeddings counted once)."""
    return sum(p.numel() for p in model.parameters())


def save_tiny(model, tokenizer, path) -> Path:
    """Save model and tokenizer into one folder that the plain Auto classes load back.

    The tokenizer config names ``PreTrainedTokenizerFast`` (transformers 5 writes its alias
    ``TokenizersBackend``, which transformers 4 cannot read); both load as the same fast tokenizer.
    """
    path = Path(path)
    with no_transformers_bars():  # a bar for one small file
        model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    config_file = path / "tokenizer_config.json"
    config = json.loads(config_file.read_text())
    config["tokenizer_class"] = "PreTrainedTokenizerFast"
    config_file.write_text(json.dumps(config, indent=2) + "\n")
    return path


def load_tiny(path, dtype: torch.dtype | None = None) -> tuple[torch.nn.Module, PreTrainedTokenizerFast]:
    """``(model, tokenizer)`` from a folder written by ``save_tiny``; the model in ``eval()`` mode, in ``dtype``
    if given (else as saved)."""
    model = AutoModelForCausalLM.from_pretrained(path, **({"dtype": dtype} if dtype is not None else {}))
    return model.eval(), AutoTokenizer.from_pretrained(path)
