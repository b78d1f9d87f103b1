"""Tests for ppo_core.tasks.data (chapter 05): loading GSM8K records and building prompts, all offline."""

import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ppo_core.tasks.data import ANSWER_FORMAT, SYSTEM_PROMPT, build_prompt, gold_number, load_gsm8k

FIXTURE = Path(__file__).resolve().parent / "fixtures" / "gsm8k_tiny.jsonl"
GSM8K_DIR = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "gsm8k"


def _write_jsonl(path: Path, lines: list[str]) -> Path:
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


def _fixture_records() -> list[dict]:
    return [json.loads(line) for line in FIXTURE.read_text(encoding="utf-8").splitlines()]


# ---- loading -------------------------------------------------------------------------------------


def test_load_fixture_file():
    records = load_gsm8k(str(FIXTURE))
    assert records == _fixture_records()  # same order, same text
    assert len(records) == 10
    assert all(set(r) == {"question", "answer"} for r in records)
    assert gold_number(records[1]["answer"]) == "1200"  # "#### 1,200"


def test_load_fixture_folder_by_split(tmp_path):
    shutil.copy(FIXTURE, tmp_path / "train.jsonl")
    _write_jsonl(tmp_path / "test.jsonl", [json.dumps({"question": "1+1?", "answer": "1+1=2\n#### 2"})])
    assert load_gsm8k(str(tmp_path)) == _fixture_records()  # split defaults to train
    assert load_gsm8k(tmp_path, split="test") == [{"question": "1+1?", "answer": "1+1=2\n#### 2"}]


def test_limit_keeps_the_first_records():
    assert load_gsm8k(str(FIXTURE), limit=3) == _fixture_records()[:3]
    assert len(load_gsm8k(str(FIXTURE), limit=100)) == 10
    with pytest.raises(ValueError, match="limit"):
        load_gsm8k(str(FIXTURE), limit=0)


def test_extra_fields_dropped_blank_lines_skipped(tmp_path):
    path = _write_jsonl(tmp_path / "x.jsonl", ["", json.dumps({"question": "q", "answer": "#### 3", "id": 7}), "  "])
    assert load_gsm8k(str(path)) == [{"question": "q", "answer": "#### 3"}]


def test_missing_file(tmp_path):
    missing = tmp_path / "nope" / "train.jsonl"
    with pytest.raises(FileNotFoundError) as info:
        load_gsm8k(str(missing))
    message = str(info.value)
    assert str(missing) in message and ".jsonl" in message and "\n" not in message


def test_folder_without_the_split(tmp_path):
    shutil.copy(FIXTURE, tmp_path / "train.jsonl")
    with pytest.raises(FileNotFoundError, match=r"test\.jsonl.*train\.jsonl"):
        load_gsm8k(str(tmp_path), split="test")


@pytest.mark.parametrize("content", ["", "\n\n  \n"])
def test_empty_file(tmp_path, content):
    path = tmp_path / "empty.jsonl"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(ValueError, match="no records"):
        load_gsm8k(str(path))


@pytest.mark.parametrize("missing, kept", [("question", "answer"), ("answer", "question")])
def test_missing_field_names_the_line(tmp_path, missing, kept):
    good = json.dumps({"question": "q", "answer": "#### 1"})
    bad = json.dumps({kept: "#### 1"})
    path = _write_jsonl(tmp_path / "bad.jsonl", [good, "", good, bad, good])  # bad is line 4 (1-based)
    with pytest.raises(ValueError, match=rf"line 4: missing field '{missing}'"):
        load_gsm8k(str(path))


@pytest.mark.parametrize(
    "line, match",
    [
        ("not json", r"line 2: not valid JSON"),
        ('["q", "a"]', r"line 2: expected a JSON object"),
        ('{"question": "q", "answer": 72}', r"line 2: field 'answer' must be a string"),
        ('{"question": "q", "answer": "no final number"}', r"line 2: gold answer"),
    ],
)
def test_malformed_lines_name_the_line(tmp_path, line, match):
    path = _write_jsonl(tmp_path / "bad.jsonl", [json.dumps({"question": "q", "answer": "#### 1"}), line])
    with pytest.raises(ValueError, match=match):
        load_gsm8k(str(path))


def test_hub_id_offline_fails_fast_with_the_local_path_fix(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))  # if datasets is imported here, nothing lands in ~/.cache
    monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path / "hf" / "datasets"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.delenv("HF_DATASETS_OFFLINE", raising=False)
    waits = []  # the network retries wait between attempts (~23 s in all); failing fast means none
    monkeypatch.setattr(time, "sleep", lambda s: waits.append(s))
    with pytest.raises(ConnectionError) as info:
        load_gsm8k("openai/gsm8k", split="test")
    assert not [s for s in waits if s >= 0.5], f"waited on retries: {waits}"
    message = str(info.value)
    assert "openai/gsm8k" in message and "Hub" in message and "local" in message and ".jsonl" in message
    assert "\n" not in message
    assert isinstance(info.value, OSError)  # ConnectionError is an OSError


def _fake_hub(monkeypatch, load_dataset, offline: bool):
    """Replace datasets.load_dataset (no network in tests) and set what datasets believes about offline mode."""
    datasets = pytest.importorskip("datasets")
    monkeypatch.setattr(datasets, "load_dataset", load_dataset)
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", offline)


def test_hub_records_go_through_the_same_checks(monkeypatch):
    rows = [{"question": "q1", "answer": "#### 1"}, {"question": "q2", "answer": "#### 2"}]
    calls = []

    def load_dataset(path, name, split):
        calls.append((path, name, split))
        return rows

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("HF_DATASETS_OFFLINE", raising=False)
    _fake_hub(monkeypatch, load_dataset, offline=False)
    assert load_gsm8k("openai/gsm8k", split="test", limit=1) == rows[:1]
    assert calls == [("openai/gsm8k", "main", "test")]
    rows.append({"question": "q3"})
    with pytest.raises(ValueError, match=r"openai/gsm8k \[test\], row 3: missing field 'answer'"):
        load_gsm8k("openai/gsm8k", split="test")


def test_hub_unreachable_is_one_line_with_the_fix(monkeypatch):
    def load_dataset(path, name, split):
        raise ConnectionError("Couldn't reach 'openai/gsm8k' on the Hub (ConnectTimeout)")

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("HF_DATASETS_OFFLINE", raising=False)
    _fake_hub(monkeypatch, load_dataset, offline=False)
    with pytest.raises(ConnectionError, match=r"^Cannot load 'openai/gsm8k' from the Hugging Face Hub.*local copy"):
        load_gsm8k("openai/gsm8k")


def test_offline_env_set_late_fails_before_touching_the_network(monkeypatch):
    def load_dataset(path, name, split):
        raise AssertionError("datasets would have tried the network")

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    _fake_hub(monkeypatch, load_dataset, offline=False)  # datasets was imported before the variable was set
    with pytest.raises(ConnectionError, match="HF_HUB_OFFLINE is set"):
        load_gsm8k("openai/gsm8k")


def test_local_files_do_not_import_datasets():
    code = (
        "import sys; from ppo_core.tasks.data import load_gsm8k; "
        f"assert len(load_gsm8k({str(FIXTURE)!r})) == 10; assert 'datasets' not in sys.modules"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


@pytest.mark.parametrize("split, count", [("train", 7473), ("test", 1319)])
def test_real_gsm8k_loads(split, count):
    if not (GSM8K_DIR / f"{split}.jsonl").is_file():
        pytest.skip(f"real GSM8K not found at {GSM8K_DIR} (only the course's build machines have ../shared/data/gsm8k)")
    records = load_gsm8k(str(GSM8K_DIR), split=split)
    assert len(records) == count
    assert load_gsm8k(str(GSM8K_DIR / f"{split}.jsonl"), limit=5) == records[:5]


# ---- prompts -------------------------------------------------------------------------------------


def test_plain_prompt_is_the_question_and_a_newline():
    assert build_prompt("How many apples?") == "How many apples?\n"
    assert build_prompt("Q", style="plain") == "Q\n"


def test_unknown_style_lists_the_options():
    with pytest.raises(ValueError, match="plain, chat"):
        build_prompt("Q", style="instruct")


@pytest.fixture(scope="module")
def chat_tokenizer():
    """A tiny offline tokenizer with a chat template (no hub download)."""
    from tokenizers import Tokenizer, models
    from transformers import PreTrainedTokenizerFast

    template = (
        "{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}\n{% endfor %}"
        "{% if add_generation_prompt %}<|assistant|>{% endif %}"
    )
    backend = Tokenizer(models.WordLevel({"[UNK]": 0}, unk_token="[UNK]"))
    return PreTrainedTokenizerFast(tokenizer_object=backend, unk_token="[UNK]", chat_template=template)


def test_chat_prompt_uses_the_template(chat_tokenizer):
    got = build_prompt("How many apples?", chat_tokenizer, style="chat")
    assert got == f"<|system|>{SYSTEM_PROMPT}\n<|user|>How many apples?\n{ANSWER_FORMAT}\n<|assistant|>"
    assert "####" in SYSTEM_PROMPT


def test_chat_prompt_needs_a_template():
    with pytest.raises(ValueError, match="chat template"):
        build_prompt("Q", None, style="chat")
    without_template = type("NoTemplate", (), {"chat_template": None})()
    with pytest.raises(ValueError, match="style='plain'"):
        build_prompt("Q", without_template, style="chat")


def test_datasets_offline_variable_wins_over_the_hub_one(monkeypatch):
    """As in datasets: HF_DATASETS_OFFLINE, when set, decides; HF_HUB_OFFLINE only when it is not."""
    rows = [{"question": "q1", "answer": "#### 1"}]
    _fake_hub(monkeypatch, lambda path, name, split: rows, offline=False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "0")  # datasets is online: load through it
    assert load_gsm8k("openai/gsm8k") == rows
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")  # datasets is offline, but was imported online: refuse
    with pytest.raises(ConnectionError, match="Hugging Face Hub"):
        load_gsm8k("openai/gsm8k")


@pytest.mark.parametrize("value, offline", [("1", True), ("true", True), ("Yes", True), ("ON", True), ("0", False),
                                            ("false", False)])  # fmt: skip
def test_hub_offline_reads_the_usual_true_strings_in_any_case(value, offline, monkeypatch):
    from ppo_core.utils import hub_offline

    monkeypatch.setenv("HF_HUB_OFFLINE", value)
    assert hub_offline() is offline
