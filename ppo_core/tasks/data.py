"""Chapter 05 - the prompts of the full loop: GSM8K records and the text the policy continues.

``load_gsm8k`` returns a list of ``{"question": str, "answer": str}`` from either

* a Hugging Face Hub id (``"openai/gsm8k"``), read with ``datasets.load_dataset`` - for users
  online, or offline with the data set already in the ``datasets`` cache; or
* a local path: a ``.jsonl`` file, or a folder holding ``{split}.jsonl`` (GSM8K's own layout).
  Local files are read line by line with the ``json`` module, not with ``datasets``: that needs
  no network and no cache folder, and lets an error name its line.

Both sources then go through the same check, one record at a time: each must have string
``question`` and ``answer`` fields, and the answer must hold a final number (``#### 72``, or a
bare ``72``), so a broken record fails at load time, not in the middle of training.
"""

import json
import os
from pathlib import Path

from ..utils import hub_offline, hub_unreachable
from .rewards import ANSWER_MARKER, gold_number

__all__ = [
    "SYSTEM_PROMPT",
    "ANSWER_FORMAT",
    "PROMPT_STYLES",
    "chat_messages",
    "load_gsm8k",
    "gold_number",
    "build_prompt",
]

SYSTEM_PROMPT = (
    "Solve the math problem step by step, then give the final answer on its own last line "
    f"as '{ANSWER_MARKER} <number>'."
)
ANSWER_FORMAT = f"Give the calculation, then the final answer on its own line as '{ANSWER_MARKER} <number>'."
"""Restated after the question in the user turn: a small chat model heeds the user turn more than the system's
(SmolLM2-135M-Instruct, greedy, 64 held-out synthetic problems: well-formed answers 0.27 with it, fewer without)."""
PROMPT_STYLES = ("plain", "chat")


def _looks_local(source: str) -> bool:
    """A path, not a hub id (``name`` or ``owner/name``): it exists, or it cannot be a hub id."""
    if Path(source).expanduser().exists():
        return True
    return source.endswith((".jsonl", ".json")) or source.startswith(("/", ".", "~")) or source.count("/") > 1


def _jsonl_path(source: str, split: str) -> Path:
    """The file to read: ``source`` itself, or ``source/{split}.jsonl`` for a folder."""
    path = Path(source).expanduser()
    if path.is_dir():
        found = sorted(p.name for p in path.glob("*.jsonl"))
        path = path / f"{split}.jsonl"
        if not path.is_file():
            raise FileNotFoundError(
                f"GSM8K split file not found: {path} (that folder holds: {', '.join(found) or 'no .jsonl files'});"
                " pass split= one of those, or the path of a .jsonl file."
            )
    elif not path.is_file():
        raise FileNotFoundError(
            f"GSM8K file not found: {path}; pass an existing .jsonl file or a folder holding {split}.jsonl "
            f"(make one online with datasets.load_dataset('openai/gsm8k', 'main', split='{split}').to_json(...))."
        )
    return path


def _read_jsonl(path: Path) -> list[tuple[int, object]]:
    """(1-based line number, parsed JSON) for every non-blank line of a JSON Lines file."""
    rows = []
    with path.open(encoding="utf-8") as f:
        for line_no, line in enumerate(f, start=1):
            if not line.strip():
                continue
            try:
                rows.append((line_no, json.loads(line)))
            except json.JSONDecodeError as err:
                message = f"{path}, line {line_no}: not valid JSON ({err.msg}); expected one JSON object per line"
                raise ValueError(message) from None
    return rows


def _hub_offline_by_env() -> bool:
    """What the environment asks for (``HF_DATASETS_OFFLINE`` wins over ``HF_HUB_OFFLINE``, as in datasets)."""
    return hub_offline("HF_DATASETS_OFFLINE", "HF_HUB_OFFLINE")


def _unreachable(source: str, split: str, reason: str) -> ConnectionError:
    """The one-line error for a hub id that cannot be loaded: what happened and the local-path fix."""
    fix = (
        f"use a local copy instead: load_gsm8k('path/to/gsm8k', split='{split}') with a folder holding "
        f"{split}.jsonl, or the path of a .jsonl file."
    )
    return ConnectionError(hub_unreachable(source, reason, fix))


def _load_hub(source: str, config: str, split: str) -> list[tuple[int, object]]:
    """(1-based row number, record) for every row of a hub data set (or its ``datasets`` cache)."""
    import datasets  # only here: local files need neither datasets nor its import time

    if _hub_offline_by_env() and not datasets.config.HF_HUB_OFFLINE:
        # the variable was set after datasets was imported, so datasets would still try the network
        raise _unreachable(source, split, "HF_HUB_OFFLINE is set")
    try:
        rows = datasets.load_dataset(source, config, split=split)
    except ConnectionError as err:  # offline mode without a cached copy, or no network (after retries)
        raise _unreachable(source, split, f"hub unreachable: {type(err).__name__}") from err
    return list(enumerate(rows, start=1))


def _check_record(record: object, where: str) -> dict:
    """A validated ``{"question", "answer"}`` dict (other fields dropped), or a ValueError naming ``where``."""
    if not isinstance(record, dict):
        raise ValueError(f"{where}: expected a JSON object with 'question' and 'answer', got {type(record).__name__}")
    for field in ("question", "answer"):
        if field not in record:
            present = ", ".join(map(str, record)) or "none"
            raise ValueError(f"{where}: missing field '{field}' (fields present: {present})")
        if not isinstance(record[field], str):
            raise ValueError(f"{where}: field '{field}' must be a string, got {type(record[field]).__name__}")
    try:
        gold_number(record["answer"])
    except ValueError as err:
        raise ValueError(f"{where}: {err}") from None
    return {"question": record["question"], "answer": record["answer"]}


def load_gsm8k(
    source: str | os.PathLike = "openai/gsm8k",
    split: str = "train",
    config: str = "main",
    limit: int | None = None,
) -> list[dict]:
    """GSM8K as a list of ``{"question": str, "answer": str}``, in file order.

    Args:
        source: a hub id (``"openai/gsm8k"``), a ``.jsonl`` file, or a folder holding ``{split}.jsonl``.
        split: the split to read (``"train"`` or ``"test"``); for a ``.jsonl`` file it is not used.
        config: the hub configuration (``"main"`` or ``"socratic"``); not used for local files.
        limit: keep only the first ``limit`` records (None keeps all).
    Raises:
        FileNotFoundError: a local path that does not exist.
        ValueError: an empty file, a line that is not JSON, a record without a field (names the line).
        ConnectionError: a hub id while the hub cannot be reached (says how to use a local path).
    """
    if limit is not None and limit < 1:
        raise ValueError(f"limit must be a positive number of records or None, got {limit}")
    source = os.fspath(source)
    if _looks_local(source):
        path = _jsonl_path(source, split)
        rows, name, unit = _read_jsonl(path), str(path), "line"
    else:
        rows, name, unit = _load_hub(source, config, split), f"{source} [{split}]", "row"
    if not rows:
        raise ValueError(f"{name}: no records (the file is empty)")
    records = [_check_record(record, f"{name}, {unit} {n}") for n, record in rows]
    return records if limit is None else records[:limit]


def build_prompt(question: str, tokenizer=None, style: str = "plain") -> str:
    """The text the policy continues: the prompt of one GSM8K question.

    ``style="plain"`` (a small base model trained on GSM8K-format text): ``question + "\\n"``; the
    model goes on with the solution, ``#### N`` and EOS. ``style="chat"`` (an instruct model such
    as Qwen2.5-Instruct): the tokenizer's chat template over ``chat_messages`` (a system line, ``SYSTEM_PROMPT``,
    and the question followed by ``ANSWER_FORMAT``), ending with the assistant's generation prompt.
    """
    if style == "plain":
        return question + "\n"
    if style != "chat":
        raise ValueError(f"unknown prompt style {style!r}; choose one of {', '.join(PROMPT_STYLES)}")
    if tokenizer is None or not getattr(tokenizer, "chat_template", None):
        raise ValueError("style='chat' needs a tokenizer with a chat template; use style='plain' for a base model")
    return tokenizer.apply_chat_template(chat_messages(question), tokenize=False, add_generation_prompt=True)


def chat_messages(question: str) -> list[dict]:
    """The chat of one question: a system turn stating the answer format, the question with the format again."""
    return [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": f"{question}\n{ANSWER_FORMAT}"}]
