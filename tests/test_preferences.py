"""ppo_core.tasks.preferences: the gold reward, the noisy Bradley-Terry labeller, perturbations, the JSONL loader."""

import math
import random
from pathlib import Path

import pytest
import torch

from ppo_core.tasks.preferences import (
    gold_reward,
    label_pair,
    load_pairs,
    make_preference_pairs,
    perturb_response,
    save_pairs,
)

FIXTURE = Path(__file__).parent / "fixtures" / "pairs.jsonl"
ANSWER = "3+4=7\n#### 7"


def test_gold_reward_task_score_minus_length():
    assert gold_reward("3+4=7\n#### 7", ANSWER) == pytest.approx(1.0)
    assert gold_reward("3+4=7\n#### 3", ANSWER) == pytest.approx(0.1)
    assert gold_reward("3+4=7", ANSWER) == pytest.approx(0.0)
    assert gold_reward("3+4=7\n#### 7 and more", ANSWER, length_coef=0.05) == pytest.approx(1.0 - 0.05 * 9)
    assert gold_reward("#### 7", ANSWER) == pytest.approx(1.0)  # shorter than the reference costs nothing


def test_labeller_follows_bradley_terry():
    rng, n = random.Random(0), 20_000
    share = sum(label_pair(1.0, 0.8, beta=5.0, rng=rng) for _ in range(n)) / n
    assert share == pytest.approx(1 / (1 + math.exp(-1.0)), abs=0.015)  # sigma(5 * 0.2)
    assert sum(label_pair(0.3, 0.3, beta=5.0, rng=rng) for _ in range(n)) / n == pytest.approx(0.5, abs=0.015)


def test_perturb_edits_only_the_final_number():
    rng = random.Random(0)
    outs = {perturb_response("3+4=7\n#### 3", rng) for _ in range(50)}
    assert "3+4=7\n#### 7" in outs and all(o.startswith("3+4=7\n#### ") for o in outs)
    assert perturb_response("3+4=7", rng).startswith("3+4=7\n#### ")


def test_make_pairs_labels_by_gold(tmp_path):
    from ppo_core.tasks.synthetic import SYNTHETIC_ALPHABET, make_synthetic_task
    from ppo_core.tasks.tiny import build_char_tokenizer, build_tiny_model

    tok = build_char_tokenizer(SYNTHETIC_ALPHABET)
    model = build_tiny_model(tok, "llama", hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                             intermediate_size=64)  # fmt: skip
    train, _ = make_synthetic_task(0, n_train=40, n_test=5)
    pairs = make_preference_pairs(model, tok, train, beta=1e6, perturb=1.0, max_new_tokens=8)
    assert pairs and all(p["chosen"] != p["rejected"] for p in pairs)
    for p in pairs:  # a near-noiseless labeller never prefers the lower gold score
        assert p["gold_chosen"] >= p["gold_rejected"]
        assert p["gold_chosen"] == pytest.approx(gold_reward(p["chosen"], p["answer"]))
    assert load_pairs(save_pairs(pairs, tmp_path / "p.jsonl"))[0] == {
        k: pairs[0][k] for k in ("prompt", "chosen", "rejected")
    }


def test_load_fixture():
    pairs = load_pairs(FIXTURE)
    assert len(pairs) == 6 and set(pairs[0]) == {"prompt", "chosen", "rejected"}  # the blank line is skipped
    assert pairs[1]["rejected"].endswith("7 7 7 7") and len(load_pairs(FIXTURE, limit=2)) == 2


@pytest.mark.parametrize(
    "line, message",
    [
        ('{"prompt": "a", "chosen": "b"', "line 2: not valid JSON"),
        ('{"prompt": "a", "chosen": "b", "reject": "c"}', "line 2: missing rejected (has prompt, chosen, reject)"),
        ('{"prompt": "a", "chosen": [{"role": "user"}], "rejected": "c"}', "chosen must be a string"),
        ('{"prompt": "a", "chosen": "b", "rejected": "b"}', "are the same text"),
        ('["a", "b", "c"]', "expected a JSON object"),
    ],
)
def test_bad_rows_name_the_line(tmp_path, line, message):
    path = tmp_path / "bad.jsonl"
    path.write_text(FIXTURE.read_text().splitlines()[0] + "\n" + line + "\n")
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        load_pairs(path)


def test_missing_file_and_unreachable_hub(tmp_path, monkeypatch):
    with pytest.raises(FileNotFoundError, match="preference file not found"):
        load_pairs(tmp_path / "nope.jsonl")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    with pytest.raises(ConnectionError, match="cannot load hub data set 'someone/prefs'.*local .jsonl"):
        load_pairs("someone/prefs")


def _head(text: str) -> str:
    """A response without its final ``#### N`` line: what a perturbation keeps."""
    return text.rsplit("####", 1)[0].rstrip("\n")


def test_perturb_sets_how_many_pairs_are_edits_and_the_rest_are_two_samples():
    from ppo_core.tasks.synthetic import SYNTHETIC_ALPHABET, make_synthetic_task
    from ppo_core.tasks.tiny import build_char_tokenizer, build_tiny_model

    torch.manual_seed(0)
    tok = build_char_tokenizer(SYNTHETIC_ALPHABET)
    model = build_tiny_model(tok, "llama", hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                             intermediate_size=64)  # fmt: skip
    train, _ = make_synthetic_task(0, n_train=40, n_test=5)
    edits = make_preference_pairs(model, tok, train, perturb=1.0, max_new_tokens=8)
    assert edits and all(_head(p["chosen"]) == _head(p["rejected"]) for p in edits)  # only the final number differs
    samples = make_preference_pairs(model, tok, train, perturb=0.0, max_new_tokens=8)
    assert len(samples) > len(train) // 2  # two samples of one prompt (different seeds) rarely coincide
    assert sum(_head(p["chosen"]) != _head(p["rejected"]) for p in samples) > len(samples) // 2
