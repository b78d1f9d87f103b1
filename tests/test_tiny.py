import json

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedTokenizerFast

from ppo_core.tasks.synthetic import SYNTHETIC_ALPHABET, make_synthetic_task
from ppo_core.tasks.tiny import SPECIAL_TOKENS, build_tiny_model, count_parameters, load_tiny, save_tiny

SMALL = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2)
TEXT = "Ann has 3 apples and gets 4 more.  How many now?\n3+4=7\n#### 7\n"


pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def saved(tmp_path_factory, tok):
    torch.manual_seed(0)
    model = build_tiny_model(tok, **SMALL)
    path = save_tiny(model, tok, tmp_path_factory.mktemp("tiny") / "model")
    return model, path


def test_one_token_per_character_and_bos_first(tok):
    ids = tok(TEXT)["input_ids"]
    assert ids[0] == tok.bos_token_id and len(ids) == len(TEXT) + 1
    assert tok.convert_ids_to_tokens(ids[1:]) == list(TEXT)
    assert tok(TEXT, add_special_tokens=False)["input_ids"] == ids[1:]


def test_decode_round_trips_spaces_and_newlines(tok):
    ids = tok(TEXT)["input_ids"] + [tok.eos_token_id, tok.pad_token_id]
    assert tok.decode(ids, skip_special_tokens=True) == TEXT


def test_special_tokens(tok):
    assert [tok.pad_token, tok.bos_token, tok.eos_token, tok.unk_token] == list(SPECIAL_TOKENS)
    assert tok.pad_token_id != tok.eos_token_id
    assert len(tok) == len(SPECIAL_TOKENS) + len(SYNTHETIC_ALPHABET)
    assert tok("~")["input_ids"] == [tok.bos_token_id, tok.unk_token_id]  # outside the alphabet


def test_left_padding_for_generation_prompts(tok):
    batch = tok(["ab\n", "abcd\n"], padding=True, return_tensors="pt")
    assert tok.padding_side == "left"
    assert batch["input_ids"][0, :2].tolist() == [tok.pad_token_id] * 2
    assert batch["attention_mask"].tolist() == [[0, 0, 1, 1, 1, 1], [1] * 6]
    assert batch["input_ids"][:, -1].tolist() == [tok.convert_tokens_to_ids("\n")] * 2
    assert (batch["input_ids"][:, :][batch["attention_mask"].bool()] == tok.bos_token_id).sum() == 2  # one BOS each


def test_save_and_auto_reload_give_the_same_fast_tokenizer(saved, tok):
    _, path = saved
    assert json.loads((path / "tokenizer_config.json").read_text())["tokenizer_class"] == "PreTrainedTokenizerFast"
    assert json.loads((path / "config.json").read_text())["model_type"] == "llama"
    reloaded = AutoTokenizer.from_pretrained(path)
    assert isinstance(reloaded, PreTrainedTokenizerFast)
    assert reloaded.padding_side == "left"
    assert reloaded(TEXT)["input_ids"] == tok(TEXT)["input_ids"]
    assert reloaded.decode(reloaded(TEXT)["input_ids"], skip_special_tokens=True) == TEXT
    assert (reloaded.pad_token_id, reloaded.bos_token_id, reloaded.eos_token_id) == (0, 1, 2)


def test_default_model_size_eval_mode_and_special_ids(tok):
    model = build_tiny_model(tok)
    assert 1_000_000 <= count_parameters(model) <= 10_000_000
    assert not model.training
    assert model.config.vocab_size == len(tok)
    for name in ("pad_token_id", "bos_token_id", "eos_token_id"):
        assert getattr(model.config, name) == getattr(model.generation_config, name) == getattr(tok, name)


@pytest.mark.parametrize("arch", ["llama", "gpt2"])
def test_no_dropout_anywhere(tok, arch):
    size = SMALL if arch == "llama" else dict(n_embd=32, n_layer=2, n_head=2)
    model = build_tiny_model(tok, arch, **size).train()  # train mode: dropout would act now
    assert all(m.p == 0 for m in model.modules() if isinstance(m, torch.nn.Dropout))
    ids = torch.tensor([tok(TEXT)["input_ids"]])
    torch.testing.assert_close(model(ids).logits, model(ids).logits, rtol=0, atol=0)


def test_unknown_arch_is_refused(tok):
    with pytest.raises(ValueError, match="qwen2"):
        build_tiny_model(tok, "qwen2")


def test_save_and_reload_give_identical_logits(saved, tok):
    model, path = saved
    reloaded = AutoModelForCausalLM.from_pretrained(path)
    batch = tok([r["question"] + "\n" for r in make_synthetic_task(0, 4, 1)[0]], padding=True, return_tensors="pt")
    with torch.no_grad():
        torch.testing.assert_close(reloaded(**batch).logits, model(**batch).logits, rtol=0, atol=0)
    again, again_tok = load_tiny(path)
    assert not again.training and again_tok(TEXT)["input_ids"] == tok(TEXT)["input_ids"]


def test_generation_prompts_get_bos(saved, tok):
    model, _ = saved
    batch = tok(["Ann has 3 cups\n", "Bob\n"], padding=True, return_tensors="pt")
    assert (batch["input_ids"] == tok.bos_token_id).sum(1).tolist() == [1, 1]
    torch.manual_seed(0)
    out = model.generate(**batch, max_new_tokens=5, do_sample=True, top_k=0, top_p=1.0)  # (B, P + T)
    assert torch.equal(out[:, : batch["input_ids"].shape[1]], batch["input_ids"])
