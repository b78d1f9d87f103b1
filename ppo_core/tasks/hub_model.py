"""A hub-shaped model built offline: a small Qwen2 checkpoint with every quirk of a real chat model.

The course's ``tiny`` model is friendly on purpose (one token per character, one EOS, a BOS, a plain
generation config). A real instruct checkpoint such as Qwen2.5-0.5B-Instruct is not, and each of
its differences has hidden a bug that every metric missed. This module builds a folder that has
them all, with the same libraries, and saves it with ``save_pretrained`` so that it loads through
the very ``AutoModelForCausalLM.from_pretrained`` / ``AutoTokenizer.from_pretrained`` path a hub id
takes:

* a **byte-level BPE tokenizer** trained with ``tokenizers`` on the task's text (the synthetic task,
  GSM8K-style sentences, the chat markup), with Qwen2's pre-tokenizer split and byte-level decoder;
* a **chat template** in Qwen's ChatML form (``<|im_start|>role\\n ... <|im_end|>``), **no BOS**;
* **two EOS ids**: the tokenizer's EOS is ``<|im_end|>``, the generation config stops on
  ``[<|im_end|>, <|endoftext|>]``; the pad token ``<|endoftext|>`` differs from the tokenizer's EOS
  (as in Qwen2.5-Instruct, where it is also the second stop id);
* a ``generation_config.json`` with a chat model's **sampling defaults** (``do_sample``,
  temperature 0.7, top-k 20, top-p 0.8, repetition penalty 1.1, as Qwen2.5-Instruct ships);
* a Qwen2 architecture (grouped-query attention, q/k/v biases, RMSNorm, rotary positions, tied
  embeddings like Qwen2.5-0.5B/1.5B), two small layers: about 0.13 M parameters.

``build_hub_model(cache_dir)`` returns the folder, ``cache_dir/hub-<hash>``; the hash covers the
settings and the training text, so a second call returns at once (like the warm start's cache).
"""

import hashlib
import json
import os
import shutil
from pathlib import Path

import torch
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers

from .data import SYSTEM_PROMPT
from .synthetic import make_synthetic_task

__all__ = [
    "HUB_SPECIAL_TOKENS",
    "CHAT_TEMPLATE",
    "CHAT_GENERATION_DEFAULTS",
    "HUB_DEFAULT_SIZE",
    "training_text",
    "build_bpe_tokenizer",
    "build_hub_model",
    "load_hub_model",
]

HUB_MODEL_VERSION = 1
"""Part of the cache key: bump it when a code change makes cached folders stale."""

HUB_SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
"""Qwen2's special tokens, in Qwen's order (ids 0, 1, 2 here; 151643-151645 in Qwen2.5)."""

QWEN2_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
"""Qwen2's pre-tokenizer split (digits one by one, words with their leading space)."""

CHAT_TEMPLATE = (
    "{%- for message in messages %}"
    "{%- if loop.first and message['role'] != 'system' %}"
    "{{- '<|im_start|>system\\nYou are a helpful assistant.<|im_end|>\\n' }}"
    "{%- endif %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)
"""Qwen2.5's ChatML template without the tool-calling branches: no BOS, each turn ends with <|im_end|>."""

CHAT_GENERATION_DEFAULTS = dict(do_sample=True, temperature=0.7, top_k=20, top_p=0.8, repetition_penalty=1.1)
"""The sampling fields Qwen2.5-Instruct's generation_config.json sets (the 0.5B-7B instruct models)."""

HUB_DEFAULT_SIZE = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                        intermediate_size=192)  # fmt: skip
"""Qwen2's shape at toy scale: 4 query heads sharing 2 key/value heads (Qwen2.5-0.5B: 14 and 2)."""

_GSM8K_STYLE = (
    "Natalia sold clips to 48 of her friends in April, and then she sold half as many clips in May. "
    "How many clips did Natalia sell altogether in April and May?\n"
    "Natalia sold 48/2 = <<48/2=24>>24 clips in May.\nNatalia sold 48+24 = <<48+24=72>>72 clips altogether.\n#### 72",
    "Weng earns $12 an hour for babysitting. Yesterday, she just did 50 minutes of babysitting. How much did she "
    "earn?\nWeng earns 12/60 = $<<12/60=0.2>>0.2 per minute.\nWorking 50 minutes, she earned 0.2 x 50 = "
    "$<<0.2*50=10>>10.\n#### 10",
    "Betty is saving money for a new wallet which costs $100. Betty has only half of the money she needs. "
    "What is the total? 3 * 4 = 12, 100 - 50 = 50, 15 + 20 = 35.\n#### 5",
)


def training_text(seed: int = 0, n: int = 2000) -> list[str]:
    """The texts the BPE tokenizer is trained on: synthetic problems and solutions, GSM8K-style text, chat markup."""
    train, _ = make_synthetic_task(seed=seed, n_train=n, n_test=1)
    chat = f"<|im_start|>system\n{SYSTEM_PROMPT}<|im_end|>\n<|im_start|>user\n"
    return [chat] + [f"{r['question']}\n{r['answer']}" for r in train] + list(_GSM8K_STYLE)


def build_bpe_tokenizer(texts: list[str], vocab_size: int = 512):
    """A byte-level BPE tokenizer trained on ``texts``, wrapped as a Qwen-style transformers fast tokenizer.

    Every byte is in the initial alphabet, so no text is ever unknown. Special tokens: ``<|endoftext|>``
    (pad), ``<|im_start|>``, ``<|im_end|>`` (EOS); no BOS, nothing added around an encoded text.
    """
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Split(Regex(QWEN2_SPLIT), behavior="isolated"),
         pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)]
    )  # fmt: skip
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(HUB_SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        additional_special_tokens=["<|im_start|>"],
        padding_side="left",
        clean_up_tokenization_spaces=False,
        chat_template=CHAT_TEMPLATE,
        model_max_length=1024,
    )


def _build(tokenizer, seed: int, size: dict, tie: bool):
    from transformers import AutoModelForCausalLM, Qwen2Config

    endoftext, im_end = tokenizer.convert_tokens_to_ids(["<|endoftext|>", "<|im_end|>"])
    config = Qwen2Config(vocab_size=len(tokenizer), max_position_embeddings=1024, tie_word_embeddings=tie,
                         bos_token_id=endoftext, eos_token_id=im_end, pad_token_id=endoftext, **size)  # fmt: skip
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = AutoModelForCausalLM.from_config(config).eval()
    gc = model.generation_config
    gc.bos_token_id, gc.pad_token_id, gc.eos_token_id = endoftext, endoftext, [im_end, endoftext]
    for key, value in CHAT_GENERATION_DEFAULTS.items():
        setattr(gc, key, value)
    return model


def build_hub_model(
    cache_dir: str | os.PathLike = "~/.cache/ppo_core",
    seed: int = 0,
    vocab_size: int = 512,
    size: dict | None = None,
    tie_word_embeddings: bool = True,
    force: bool = False,
) -> Path:
    """Build (or reuse) the hub-shaped checkpoint; returns its folder ``cache_dir/hub-<hash>``.

    Random init (seeded, without touching the caller's RNG); load it with ``load_hub_model`` or the
    plain Auto classes. ``size`` overrides ``HUB_DEFAULT_SIZE``'s fields.
    """
    from transformers import __version__ as tf_version

    size = {**HUB_DEFAULT_SIZE, **(size or {})}
    texts = training_text(seed)
    settings = dict(seed=seed, vocab_size=vocab_size, size=dict(sorted(size.items())), tie=tie_word_embeddings,
                    version=HUB_MODEL_VERSION, transformers=tf_version,
                    text=hashlib.sha256("\x00".join(texts).encode()).hexdigest()[:12])  # fmt: skip
    key = hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()[:12]
    final = Path(cache_dir).expanduser() / f"hub-{key}"
    if (final / "hub_model.json").is_file() and not force:
        return final
    tokenizer = build_bpe_tokenizer(texts, vocab_size)
    model = _build(tokenizer, seed, size, tie_word_embeddings)
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = final.with_name(f".{final.name}-tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    (tmp / "hub_model.json").write_text(json.dumps(settings, indent=2) + "\n")  # written last: marks it complete
    if force and final.exists():
        shutil.rmtree(final)
    try:
        tmp.rename(final)
    except OSError:  # another process built the same folder first: keep theirs
        shutil.rmtree(tmp, ignore_errors=True)
    return final


def load_hub_model(path, dtype=None):
    """``(model, tokenizer)`` through the Auto classes, exactly as a hub id loads; the model in ``eval()`` mode."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    kwargs = {} if dtype is None else {"dtype": dtype}
    return AutoModelForCausalLM.from_pretrained(path, **kwargs).eval(), AutoTokenizer.from_pretrained(path)
