"""Chapter 06 - a reward model: a causal-LM trunk with a scalar head, trained on preference pairs.

RLHF's three stages are SFT -> reward model -> PPO. The reward model (RM) reads ``prompt + response``
and returns one number, the head applied to the hidden state of the **last real token**::

    tokens      <pad> <pad> <bos> A n n ... ? \\n 3 + 4 = 7 \\n # # # #   7 <eos>
    mask          0     0     1   1 1 1 ...                                1    1
    positions     0     0     0   1 2 3 ...                                      L'-1
    read here                                                                    ^  (last 1 of the mask)

The index comes from the attention mask (``last_token_index``), never ``-1``: with right padding
``-1`` is a pad token, with left padding ``-1`` happens to be right, and a helper that only works for
one side is a bug waiting for a tokenizer change. Position ids come from the mask too
(``ppo_core.model.position_ids_from_mask``), as in chapter 01.

Training is pairwise (Bradley-Terry): the probability that a labeller prefers ``y_c`` over ``y_r``
is ``sigma(r(x, y_c) - r(x, y_r))``, so the loss is ``-log sigma(r_c - r_r)`` averaged over the pairs
(``bradley_terry_loss``). Only differences of scores are learnt, so the RM's scale and offset are
arbitrary; ``RewardModel.normalize_on`` stores the mean and std of its scores on the starting
policy's samples, and ``score_texts`` returns ``(r - mean) / std``: reward 0 +- 1 at PPO's step 0.

The trunk and head are transformers' ``AutoModelForSequenceClassification(num_labels=1)``, so the RM
saves and loads with ``save_pretrained`` / ``from_pretrained``; the normalisation lives beside it in
``reward_model.json``. We run the trunk and head ourselves (instead of the class's pooled output) to
pass position ids and to read the score at the mask's last real token.
"""

import json
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from .gae import last_true_index
from .model import disable_dropout, position_ids_from_mask

__all__ = [
    "last_token_index",
    "token_scores",
    "sequence_scores",
    "bradley_terry_loss",
    "pairwise_accuracy",
    "pairwise_loss",
    "RewardModel",
    "NORM_FILE",
    "pair_loss",
    "evaluate_pairs",
]

NORM_FILE = "reward_model.json"
"""The file beside the HF checkpoint that holds the score normalisation (mean, std, on what samples)."""


def last_token_index(attention_mask: torch.Tensor) -> torch.Tensor:
    """Index of each row's last real token: the position of the rightmost 1 in the mask. (B, L) -> (B,).

    Works for left padding, right padding and no padding alike. A row with no real token is an error.
    """
    mask = attention_mask.bool()
    if not mask.any(-1).all():
        raise ValueError("a row of attention_mask has no real token; there is nothing to score")
    return last_true_index(mask)  # (B,): the same rule as the score's token in chapter 03


def token_scores(model: nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """The scalar head on every position of ``model`` (a ``...ForSequenceClassification``): (B, L) -> (B, L)."""
    hidden = model.base_model(
        input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids_from_mask(attention_mask)
    ).last_hidden_state  # (B, L, H)
    return model.score(hidden).squeeze(-1).float()  # (B, L)


def sequence_scores(model: nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """r(x, y): the head's output at each row's last real token. (B, L) -> (B,)."""
    scores = token_scores(model, input_ids, attention_mask)  # (B, L)
    index = last_token_index(attention_mask)  # (B,)
    return scores.gather(1, index[:, None]).squeeze(1)  # (B,)


def bradley_terry_loss(chosen: torch.Tensor, rejected: torch.Tensor, pair_mask: torch.Tensor | None = None):
    """The pairwise loss ``-log sigma(r_c - r_r)``, averaged over the real pairs. Returns ``(loss, stats)``.

    Args:
        chosen, rejected: scores of the preferred and the other response of each pair, (N,) or (B, K)
            (K pairs per prompt, some of them padding).
        pair_mask: True where a pair is real, same shape; None = every pair is real.

    ``F.logsigmoid`` keeps the loss finite for any margin: ``log(sigmoid(-100))`` is ``-inf`` in
    float32, ``logsigmoid(-100)`` is ``-100``. ``stats``: ``loss``, ``accuracy`` (share of pairs with
    ``r_c > r_r``, ties count half), ``margin`` (mean ``r_c - r_r``), ``chosen`` and ``rejected`` means.
    """
    if pair_mask is None:
        pair_mask = torch.ones_like(chosen, dtype=torch.bool)
    pair_mask = pair_mask.bool()
    n = pair_mask.sum().clamp(min=1)
    margin = (chosen - rejected).float()  # r_c - r_r
    loss = -(F.logsigmoid(margin) * pair_mask).sum() / n
    with torch.no_grad():
        stats = {
            "loss": loss.item(),
            "accuracy": pairwise_accuracy(chosen, rejected, pair_mask),
            "margin": ((margin * pair_mask).sum() / n).item(),
            "chosen": ((chosen.float() * pair_mask).sum() / n).item(),
            "rejected": ((rejected.float() * pair_mask).sum() / n).item(),
        }
    return loss, stats


def pairwise_accuracy(chosen: torch.Tensor, rejected: torch.Tensor, pair_mask: torch.Tensor | None = None) -> float:
    """Share of real pairs the scores rank right: ``r_c > r_r`` counts 1, a tie 1/2."""
    if pair_mask is None:
        pair_mask = torch.ones_like(chosen, dtype=torch.bool)
    right = (chosen > rejected).float() + 0.5 * (chosen == rejected).float()
    return ((right * pair_mask).sum() / pair_mask.sum().clamp(min=1)).item()


def pairwise_loss(chosen_values, chosen_mask, rejected_values, rejected_mask):
    """Exercise 6.1: the Bradley-Terry loss from the head's output at every position. Returns ``(loss, stats)``.

    Args:
        chosen_values, rejected_values: the scalar head on every token of ``prompt + response``, (N, L) each.
        chosen_mask, rejected_mask: attention masks, (N, L), padded on either side.

    ``r = values[i, last_token_index(mask)[i]]`` per row, then ``-log sigma(r_c - r_r)`` averaged over
    the N pairs. ``stats``: ``accuracy`` and ``margin`` (plain floats), as in ``bradley_terry_loss``.
    """
    r_chosen = chosen_values.gather(1, last_token_index(chosen_mask)[:, None]).squeeze(1)  # (N,)
    r_rejected = rejected_values.gather(1, last_token_index(rejected_mask)[:, None]).squeeze(1)  # (N,)
    return bradley_terry_loss(r_chosen, r_rejected)


class RewardModel(nn.Module):
    """A sequence-classification LM (one label) + its tokenizer + the score normalisation.

    ``forward(input_ids, attention_mask)`` gives raw scores (B,); ``score_texts(texts)`` tokenizes
    ``prompt + response`` strings (an EOS appended, so every score is read at the same kind of token)
    and returns normalised scores ``(r - mean) / std`` (B,).
    """

    def __init__(self, model: nn.Module, tokenizer, mean: float = 0.0, std: float = 1.0, norm_info: dict | None = None):
        super().__init__()
        self.model = disable_dropout(model)
        self.tokenizer = tokenizer
        self.mean, self.std = float(mean), float(std)
        self.norm_info = dict(norm_info or {})

    @classmethod
    def from_lm(cls, path: str | Path, tokenizer=None) -> "RewardModel":
        """A new RM whose trunk is the causal LM saved at ``path`` (e.g. the SFT model); the head is fresh."""
        from transformers import AutoModelForSequenceClassification, AutoTokenizer
        from transformers.utils import logging

        level = logging.get_verbosity()
        logging.set_verbosity_error()  # the head is new by design: no "score.weight MISSING" load report
        try:
            model = AutoModelForSequenceClassification.from_pretrained(path, num_labels=1)
        finally:
            logging.set_verbosity(level)
        tokenizer = tokenizer or AutoTokenizer.from_pretrained(path)
        model.config.pad_token_id = tokenizer.pad_token_id
        return cls(model, tokenizer)

    @classmethod
    def from_pretrained(cls, path: str | Path) -> "RewardModel":
        """Load a folder written by ``save_pretrained`` (frozen use: call ``.eval()``, ``requires_grad_(False)``)."""
        from transformers import AutoModelForSequenceClassification, AutoTokenizer

        path = Path(path)
        norm = json.loads((path / NORM_FILE).read_text()) if (path / NORM_FILE).is_file() else {}
        model = AutoModelForSequenceClassification.from_pretrained(path, num_labels=1)
        tokenizer = AutoTokenizer.from_pretrained(path)
        return cls(model, tokenizer, norm.get("mean", 0.0), norm.get("std", 1.0), norm.get("info", {}))

    def save_pretrained(self, path: str | Path) -> None:
        """HF checkpoint (trunk + head + tokenizer) and ``reward_model.json`` (the normalisation)."""
        path = Path(path)
        self.model.save_pretrained(path)
        self.tokenizer.save_pretrained(path)
        config_file = path / "tokenizer_config.json"  # transformers 4 cannot read 5's alias (see tiny.save_tiny)
        if config_file.is_file():
            config = json.loads(config_file.read_text())
            if config.get("tokenizer_class") == "TokenizersBackend":
                config["tokenizer_class"] = "PreTrainedTokenizerFast"
                config_file.write_text(json.dumps(config, indent=2) + "\n")
        norm = {"mean": self.mean, "std": self.std, "info": self.norm_info}
        (path / NORM_FILE).write_text(json.dumps(norm, indent=2) + "\n")

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """Raw scores r(x, y) at each row's last real token. (B, L) -> (B,)."""
        return sequence_scores(self.model, input_ids, attention_mask)

    def encode(self, texts: list[str]) -> dict:
        """``input_ids`` and ``attention_mask`` (B, L) of ``text + <eos>`` per row, padded on the tokenizer's side."""
        eos = self.tokenizer.eos_token or ""
        return self.tokenizer([t + eos for t in texts], return_tensors="pt", padding=True)

    @torch.no_grad()
    def raw_scores(self, texts: list[str], batch_size: int = 256) -> torch.Tensor:
        """Unnormalised scores of ``prompt + response`` strings, (B,), float32 on the CPU."""
        device = next(self.model.parameters()).device
        out = []
        for start in range(0, len(texts), batch_size):
            batch = self.encode(texts[start : start + batch_size]).to(device)
            out.append(self(batch["input_ids"], batch["attention_mask"]).cpu())
        return torch.cat(out) if out else torch.zeros(0)

    def score_texts(self, texts: list[str], batch_size: int = 256) -> torch.Tensor:
        """Normalised scores ``(r - mean) / std`` of ``prompt + response`` strings, (B,)."""
        return (self.raw_scores(texts, batch_size) - self.mean) / self.std

    def normalize_on(self, texts: list[str], eps: float = 1e-6, **info) -> dict:
        """Set ``mean`` and ``std`` to those of the raw scores on ``texts`` (the starting policy's samples).

        ``eps`` keeps the std away from 0 (a constant RM). ``info`` (e.g. where the samples came from)
        is stored with the numbers. Returns ``{"mean", "std", "n"}``.
        """
        raw = self.raw_scores(texts)
        self.mean, self.std = raw.mean().item(), max(raw.std().item(), eps)
        self.norm_info = {"n": len(texts), **info}
        return {"mean": self.mean, "std": self.std, "n": len(texts)}


def pair_loss(rm: RewardModel, pairs: list[dict]):
    """Bradley-Terry loss of a list of ``{"prompt", "chosen", "rejected"}`` pairs: one forward of 2N rows.

    Chosen and rejected texts go through the trunk together (rows ``0..N-1`` and ``N..2N-1``), so
    both sides of a pair see the same weights and padding. Returns ``(loss, stats)``.
    """
    texts = [p["prompt"] + p["chosen"] for p in pairs] + [p["prompt"] + p["rejected"] for p in pairs]
    device = next(rm.parameters()).device
    batch = rm.encode(texts).to(device)  # (2N, L)
    scores = rm(batch["input_ids"], batch["attention_mask"])  # (2N,)
    return bradley_terry_loss(scores[: len(pairs)], scores[len(pairs) :])


@torch.no_grad()
def evaluate_pairs(rm: RewardModel, pairs: list[dict], batch_size: int = 128) -> dict:
    """Mean loss and pairwise accuracy of ``rm`` on ``pairs`` (eval mode, no gradients)."""
    was_training = rm.training
    rm.eval()
    total, n = {"loss": 0.0, "accuracy": 0.0}, 0
    for start in range(0, len(pairs), batch_size):
        chunk = pairs[start : start + batch_size]
        _, stats = pair_loss(rm, chunk)
        for key in total:
            total[key] += stats[key] * len(chunk)
        n += len(chunk)
    rm.train(was_training)
    return {key: value / max(n, 1) for key, value in total.items()}
