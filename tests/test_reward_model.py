"""ppo_core.reward_model: the last-real-token score under either padding, Bradley-Terry, normalisation, save/load."""

import math
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForSequenceClassification

from ppo_core.reward_model import (
    RewardModel,
    bradley_terry_loss,
    evaluate_pairs,
    last_token_index,
    pairwise_accuracy,
    sequence_scores,
)
from ppo_core.tasks.preferences import load_pairs
from ppo_core.tasks.synthetic import SYNTHETIC_ALPHABET
from ppo_core.tasks.tiny import build_char_tokenizer, build_tiny_model, save_tiny

PAIRS = Path(__file__).parent / "fixtures" / "pairs.jsonl"
TEXTS = ["Ann has 3 apples.\n3+4=7\n#### 7", "Bob?\n1", "Cat has 9 pens and gets 0 more.\n9+0=9\n#### 9 extra"]


@pytest.fixture(scope="module", params=["gpt2", "llama"])
def rm(request, tmp_path_factory):
    torch.manual_seed(0)
    tok = build_char_tokenizer(SYNTHETIC_ALPHABET)
    size = (
        dict(n_embd=32, n_layer=1, n_head=2)
        if request.param == "gpt2"
        else dict(hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64)
    )
    path = save_tiny(build_tiny_model(tok, request.param, **size), tok, tmp_path_factory.mktemp(request.param))
    model = RewardModel.from_lm(path).eval()
    torch.nn.init.normal_(model.model.score.weight, std=1.0)
    return model


def naive_scores(rm, texts):
    """One unpadded sequence at a time, the score read at its final position."""
    out = []
    for text in texts:
        ids = rm.tokenizer(text + rm.tokenizer.eos_token, return_tensors="pt")["input_ids"]  # (1, L), no padding
        hidden = rm.model.base_model(input_ids=ids).last_hidden_state  # positions 0..L-1 by default
        out.append(rm.model.score(hidden)[0, ids.shape[1] - 1, 0])
    return torch.stack(out)


def test_last_token_index_left_right_and_none():
    mask = torch.tensor([[0, 0, 1, 1], [1, 1, 1, 0], [1, 1, 1, 1], [0, 1, 0, 0]])
    assert last_token_index(mask).tolist() == [3, 2, 3, 1]
    with pytest.raises(ValueError, match="no real token"):
        last_token_index(torch.tensor([[0, 0], [1, 0]]))


@pytest.mark.parametrize("side", ["left", "right"])
def test_scores_match_unpadded_loop(rm, side):
    rm.tokenizer.padding_side = side
    try:
        batch = rm.encode(TEXTS)
        assert (batch["attention_mask"] == 0).any()  # the texts differ in length: padding is exercised
        with torch.no_grad():
            got = rm(batch["input_ids"], batch["attention_mask"])
            want = naive_scores(rm, TEXTS)
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
        if side == "right":  # reading index -1 would score a pad token
            wrong = rm.model.score(
                rm.model.base_model(
                    input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]
                ).last_hidden_state
            )[:, -1, 0]
            assert not torch.allclose(wrong, want, atol=1e-3)
    finally:
        rm.tokenizer.padding_side = "left"


def test_transformers_pooling_agrees_when_pad_is_not_eos(rm):
    """The library's own pooled output (rightmost non-pad id) reads the same index as our mask when pad != eos."""
    assert rm.tokenizer.pad_token_id != rm.tokenizer.eos_token_id
    batch = rm.encode(TEXTS)
    from ppo_core.model import position_ids_from_mask

    with torch.no_grad():
        pooled = rm.model(**batch, position_ids=position_ids_from_mask(batch["attention_mask"])).logits[:, 0]
        torch.testing.assert_close(pooled, sequence_scores(rm.model, **batch))


def test_bradley_terry_matches_loop_and_masks_padded_pairs():
    torch.manual_seed(1)
    chosen, rejected = torch.randn(3, 4), torch.randn(3, 4)
    mask = torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0], [1, 0, 0, 0]], dtype=torch.bool)
    loss, stats = bradley_terry_loss(chosen, rejected, mask)
    pairs = [(c, r) for c, r, m in zip(chosen.flatten().tolist(), rejected.flatten().tolist(), mask.flatten()) if m]
    want = sum(-math.log(1 / (1 + math.exp(-(c - r)))) for c, r in pairs) / len(pairs)
    assert loss.item() == pytest.approx(want, rel=1e-6)
    assert stats["accuracy"] == pytest.approx(sum(c > r for c, r in pairs) / len(pairs))
    garbage = torch.where(mask, rejected, torch.full_like(rejected, 1e4))  # padded pairs never matter
    assert bradley_terry_loss(chosen, garbage, mask)[0].item() == pytest.approx(want, rel=1e-6)


def test_bradley_terry_gradient_sign_and_stability():
    chosen, rejected = torch.tensor([0.0], requires_grad=True), torch.tensor([0.0])
    bradley_terry_loss(chosen, rejected)[0].backward()
    assert chosen.grad.item() == pytest.approx(-0.5)  # descent raises the chosen score
    loss, _ = bradley_terry_loss(torch.tensor([-200.0]), torch.tensor([200.0]))
    assert torch.isfinite(loss) and loss.item() == pytest.approx(400.0)
    assert bradley_terry_loss(torch.tensor([0.0]), torch.tensor([0.0]))[0].item() == pytest.approx(math.log(2))


def test_pairwise_accuracy_ties_half():
    assert pairwise_accuracy(torch.tensor([1.0, 0.0, 2.0]), torch.tensor([0.0, 0.0, 3.0])) == pytest.approx(0.5)


def test_normalize_save_load_roundtrip(rm, tmp_path):
    texts = TEXTS * 3
    stats = rm.normalize_on(texts, source="test")
    scores = rm.score_texts(texts)
    assert scores.mean().item() == pytest.approx(0.0, abs=1e-5) and scores.std().item() == pytest.approx(1.0, abs=1e-4)
    rm.save_pretrained(tmp_path)
    back = RewardModel.from_pretrained(tmp_path).eval()
    assert (back.mean, back.std) == (stats["mean"], stats["std"]) and back.norm_info["source"] == "test"
    torch.testing.assert_close(back.score_texts(texts), scores)
    assert isinstance(AutoModelForSequenceClassification.from_pretrained(tmp_path), torch.nn.Module)


def test_bradley_terry_stats_average_only_the_real_pairs():
    chosen, rejected = torch.tensor([[2.0, 1.0], [0.5, 9.0]]), torch.tensor([[1.0, 3.0], [0.0, -9.0]])
    mask = torch.tensor([[True, True], [True, False]])  # the pair (9, -9) is padding
    _, stats = bradley_terry_loss(chosen, rejected, mask)
    assert stats["margin"] == pytest.approx((1.0 - 2.0 + 0.5) / 3)
    assert stats["chosen"] == pytest.approx(3.5 / 3) and stats["rejected"] == pytest.approx(4.0 / 3)
    assert stats["accuracy"] == pytest.approx(2 / 3)


def test_evaluate_pairs_averages_over_every_pair_whatever_the_batch_size(rm):
    pairs = load_pairs(PAIRS)  # 6 pairs
    r_c = rm.raw_scores([p["prompt"] + p["chosen"] for p in pairs])
    r_r = rm.raw_scores([p["prompt"] + p["rejected"] for p in pairs])
    margins = (r_c - r_r).tolist()
    want_loss = sum(math.log(1 + math.exp(-m)) for m in margins) / len(pairs)  # -log sigma(m)
    want_accuracy = sum(m > 0 for m in margins) / len(pairs)
    for batch_size in (4, 6, 100):  # chunks of 4 + 2, one chunk, one short chunk
        got = evaluate_pairs(rm, pairs, batch_size=batch_size)
        assert got["loss"] == pytest.approx(want_loss, rel=1e-4)
        assert got["accuracy"] == pytest.approx(want_accuracy)


PREFIX_PAIRS = [
    {"prompt": "Ann has 3 apples.\n", "chosen": "3+4=7\n#### 7", "rejected": "#### 8"},
    {"prompt": "Bob?\n", "chosen": "1", "rejected": ""},  # an empty response: its score is read at the EOS
    {"prompt": "Cat has 9 pens and gets 0 more.\n", "chosen": "9+0=9", "rejected": "9+0=90 and more"},
]


def test_shared_prompt_pair_loss_matches_the_loop_and_the_plain_loss_with_gradients(rm):
    """fastpaths.shared_prompt_pair_loss: loss, stats and every parameter's gradient as pair_loss gives them, and
    the loss of scores read one unpadded sequence at a time (prompts and responses of different lengths)."""
    from ppo_core.fastpaths import shared_prompt_pair_loss
    from ppo_core.reward_model import pair_loss

    params = list(rm.parameters())
    scores = naive_scores(rm, [p["prompt"] + p[side] for side in ("chosen", "rejected") for p in PREFIX_PAIRS])
    want = -torch.nn.functional.logsigmoid(scores[:3] - scores[3:]).mean()
    plain, plain_stats = pair_loss(rm, PREFIX_PAIRS)
    shared, shared_stats = shared_prompt_pair_loss(rm, PREFIX_PAIRS)
    assert shared.item() == pytest.approx(want.item(), rel=1e-5, abs=1e-6)
    assert shared_stats == pytest.approx(plain_stats, rel=1e-5, abs=1e-6)
    for name, got, expected in zip(
        [n for n, _ in rm.named_parameters()], torch.autograd.grad(shared, params), torch.autograd.grad(plain, params)
    ):
        torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-6, msg=name)


def test_shared_prompt_pair_loss_takes_the_plain_loss_when_tokens_merge_across_the_prompts_end(rm):
    """A tokenizer that merges "a" + "b": the prompt "a" is not a prefix of "a" + "b" in tokens, so the whole batch
    takes pair_loss (one trunk call instead of two, the same numbers bit for bit)."""
    from tokenizers import Tokenizer, models
    from transformers import PreTrainedTokenizerFast

    from ppo_core.fastpaths import shared_prompt_pair_loss
    from ppo_core.reward_model import pair_loss

    vocab = {"<pad>": 0, "<eos>": 1, "a": 2, "b": 3, "ab": 4}
    tok = PreTrainedTokenizerFast(
        tokenizer_object=Tokenizer(models.BPE(vocab=vocab, merges=[("a", "b")])), pad_token="<pad>", eos_token="<eos>"
    )
    bpe = RewardModel(rm.model, tok)
    pairs = [{"prompt": "b", "chosen": "a", "rejected": "b"}, {"prompt": "a", "chosen": "b", "rejected": "a"}]
    calls = []
    hook = rm.model.base_model.register_forward_hook(lambda *_: calls.append(1))
    try:
        got, _ = shared_prompt_pair_loss(bpe, pairs)
        assert len(calls) == 1
        assert got.item() == pair_loss(bpe, pairs)[0].item()
        shared_prompt_pair_loss(bpe, pairs[:1])  # every pair splits: the prompts' call, then the responses'
        assert len(calls) == 1 + 1 + 2
    finally:
        hook.remove()
