"""python -m ppo_core.train_rm: a run on a JSONL file, HF checkpoints, resume, one-line errors (exit 2)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from ppo_core.reward_model import RewardModel
from ppo_core.tasks.synthetic import SYNTHETIC_ALPHABET
from ppo_core.tasks.tiny import build_char_tokenizer, build_tiny_model, save_tiny
from ppo_core.train_rm import main

FIXTURE = Path(__file__).parent / "fixtures" / "pairs.jsonl"


@pytest.fixture(scope="module")
def lm_dir(tmp_path_factory):
    torch.manual_seed(0)
    tok = build_char_tokenizer(SYNTHETIC_ALPHABET)
    model = build_tiny_model(tok, "llama", hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                             intermediate_size=64)  # fmt: skip
    return save_tiny(model, tok, tmp_path_factory.mktemp("lm"))


def args(out, lm, *extra):
    return [f"data.source={FIXTURE}", f"model.init={lm}", f"train.output_dir={out}", "train.batch_size=4",
            "data.eval_pairs=2", "train.progress=false", *extra]  # fmt: skip


def steps(out):
    return [json.loads(line) for line in (Path(out) / "metrics.jsonl").read_text().splitlines()]


@pytest.mark.slow
def test_run_writes_hf_checkpoint(tmp_path, lm_dir, capsys):
    out = tmp_path / "rm"
    assert main(args(out, lm_dir, "train.steps=4", "train.save_every=2")) == 0
    line = capsys.readouterr().out
    assert "held-out pairwise accuracy" in line and "on 2 pairs" in line
    rm = RewardModel.from_pretrained(out / "final")
    assert rm.norm_info["n"] == 8 and (out / "step_2").is_dir() and [m["step"] for m in steps(out)] == [1, 2, 3, 4]
    scores = rm.eval().score_texts(
        [p["prompt"] + p["chosen"] for p in map(json.loads, FIXTURE.read_text().split("\n")[:2])]
    )
    assert scores.shape == (2,) and torch.isfinite(scores).all()


@pytest.mark.slow
def test_checkpoints_do_not_print_transformers_bars_into_the_runs_own(tmp_path, lm_dir, capfd):
    """With the progress bar on, the reward model's checkpoints are written without transformers' "Writing model
    shards" bars (tests/test_model.py checks the same for PPO's), and transformers' bars are on again after."""
    from transformers.utils import logging as hf_logging

    hf_logging.enable_progress_bar()
    try:
        run = args(tmp_path / "rm", lm_dir, "train.steps=2", "train.save_every=1")
        assert main([a for a in run if a != "train.progress=false"]) == 0
        err = capfd.readouterr().err
        assert "reward model:" in err, f"the run's own progress bar should show: {err[-300:]!r}"
        assert "Writing model shards" not in err
        assert hf_logging.is_progress_bar_enabled()
    finally:
        hf_logging.enable_progress_bar()


@pytest.mark.slow
def test_resume_repeats_an_uninterrupted_run(tmp_path, lm_dir):
    assert main(args(tmp_path / "full", lm_dir, "train.steps=6")) == 0
    assert main(args(tmp_path / "cut", lm_dir, "train.steps=3")) == 0
    assert main(args(tmp_path / "cut", lm_dir, "train.steps=6", "train.resume=auto")) == 0
    full, cut = steps(tmp_path / "full"), steps(tmp_path / "cut")
    assert [m["step"] for m in cut] == [1, 2, 3, 4, 5, 6]
    for a, b in zip(full, cut):
        assert a["rm/loss"] == pytest.approx(b["rm/loss"], rel=1e-5)


BAD = {
    "missing file": (["data.source=/no/such/pairs.jsonl"], "preference file not found"),
    "bad JSON row": (["data.source={bad_json}"], "line 2: not valid JSON"),
    "wrong keys": (["data.source={wrong_keys}"], "line 1: missing chosen, rejected"),
    "unknown key": (["train.learning_rate=1e-3"], "did you mean 'train.lr'?"),
    "missing model folder": (["model.init=/no/such/model"], "model.init=/no/such/model: no such model folder"),
    "bad value": (["train.steps=many"], "bad value for 'train.steps'"),
}


@pytest.mark.slow
@pytest.mark.parametrize("case", BAD)
def test_bad_input_one_line_exit_2_nothing_written(tmp_path, lm_dir, capsys, case):
    (tmp_path / "bad.jsonl").write_text(FIXTURE.read_text().splitlines()[0] + "\n{oops\n")
    (tmp_path / "keys.jsonl").write_text('{"prompt": "a", "response": "b"}\n')
    extra, message = BAD[case]
    extra = [e.format(bad_json=tmp_path / "bad.jsonl", wrong_keys=tmp_path / "keys.jsonl") for e in extra]
    out = tmp_path / "rm"
    base = [a for a in args(out, lm_dir) if not any(a.startswith(e.split("=")[0] + "=") for e in extra)]
    assert main(base + extra) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and message in err and "\n" not in err
    assert not out.exists()


@pytest.mark.slow
def test_refuses_to_mix_runs_and_keeps_the_old_one(tmp_path, lm_dir, capsys):
    out = tmp_path / "rm"
    assert main(args(out, lm_dir, "train.steps=2")) == 0
    before = (out / "final" / "model.safetensors").read_bytes()
    assert main(args(out, lm_dir, "train.steps=2")) == 2
    assert "already holds a run" in capsys.readouterr().err
    assert (out / "final" / "model.safetensors").read_bytes() == before


@pytest.mark.slow
def test_process_exit_code(tmp_path):
    cmd = [
        sys.executable,
        "-m",
        "ppo_core.train_rm",
        "data.source=/no/such.jsonl",
        f"train.output_dir={tmp_path / 'x'}",
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and proc.stderr.strip().count("\n") == 0 and "not found" in proc.stderr
    assert not (tmp_path / "x").exists()


@pytest.mark.slow
def test_synthetic_default_path(tmp_path, capsys):
    """The preset's own path: warm start (a few steps, its own cache), gold-labelled pairs, a small fresh trunk."""
    out = tmp_path / "rm"
    argv = [f"warmstart.cache_dir={tmp_path / 'cache'}", "warmstart.steps=3", "data.n_pairs=24", "data.eval_pairs=8",
            "data.max_new_tokens=8", "train.normalize_samples=16", "train.steps=3", "train.batch_size=4",
            "model.hidden_size=32", f"train.output_dir={out}", "train.progress=false"]  # fmt: skip
    assert main(argv) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["train_pairs"] >= 1 and summary["heldout_pairs"] >= 1
    assert summary["heldout_gold_pairs"] == 0 or 0 <= summary["heldout_gold_agreement"] <= 1
    rm = RewardModel.from_pretrained(out / "final")
    assert rm.norm_info == {"n": 16, "source": "synthetic"} and rm.std > 0


def test_each_step_draws_its_own_batch_and_a_resumed_run_the_same_ones(monkeypatch):
    """Step n's batch depends on (seed, n) only: the steps cover the pairs, and a resumed run repeats them."""
    from ppo_core.run import rm as rm_command
    from ppo_core.run.rm import fit_reward_model

    pairs = [{"prompt": str(i), "chosen": "a", "rejected": "b"} for i in range(8)]
    seen = []

    def spy_loss(rm, batch):  # records the batch; a zero loss with a gradient path
        seen.append(tuple(p["prompt"] for p in batch))
        return rm.weight.sum() * 0.0, {"loss": 0.0}

    monkeypatch.setattr(rm_command, "pair_loss", spy_loss)
    rm = torch.nn.Linear(1, 1)
    history = fit_reward_model(rm, pairs, steps=24, batch_size=2, seed=0)
    full = list(seen)
    seen.clear()
    fit_reward_model(rm, pairs, steps=24, batch_size=2, seed=0, start_step=10)
    assert [h["step"] for h in history] == list(range(1, 25)) and all(len(b) == 2 for b in full)
    assert len(set(full)) > 1 and set().union(*full) == {p["prompt"] for p in pairs}  # not one batch over and over
    assert seen == full[10:]


def test_synthetic_held_out_pairs_come_from_the_held_out_problems(monkeypatch):
    """The synthetic path: training pairs on training problems, held-out pairs on the held-out split only."""
    from ppo_core.run import rm as rm_command
    from ppo_core.run.rm import _pairs, load_rm_config
    from ppo_core.tasks.synthetic import make_synthetic_task

    monkeypatch.setattr(rm_command, "load_tiny", lambda path: (None, None))
    monkeypatch.setattr(rm_command, "generate_completions", lambda model, tok, records, **kw: ["y"] * len(records))
    monkeypatch.setattr(rm_command, "make_preference_pairs",
                        lambda model, tok, records, **kw: [{"prompt": r["question"]} for r in records])  # fmt: skip
    cfg = load_rm_config("rm_cpu", ["data.n_pairs=40", "data.eval_pairs=10", "train.normalize_samples=8"])
    pairs, held, _ = _pairs(cfg, "unused")
    train, test = make_synthetic_task(cfg.train.seed, n_train=1000)
    assert [p["prompt"] for p in pairs] == [r["question"] for r in train[:40]]
    assert [p["prompt"] for p in held] == [r["question"] for r in test[:10]]
    assert not {p["prompt"] for p in held} & {r["question"] for r in train}


def test_gold_order_agreement_counts_only_pairs_whose_gold_differs():
    """Agreement with the gold order: ties in gold are left out, the label's order (chosen first) is not used."""
    from ppo_core.run.rm import gold_order_agreement

    class Scores:  # raw_scores reads the score off the text: "p" + "s=<score>"
        def raw_scores(self, texts):
            return torch.tensor([float(t.split("=")[1]) for t in texts])

    def pair(s_chosen, s_rejected, g_chosen, g_rejected):
        return {"prompt": "p", "chosen": f"s={s_chosen}", "rejected": f"s={s_rejected}",
                "gold_chosen": g_chosen, "gold_rejected": g_rejected}  # fmt: skip

    pairs = [
        pair(2, 1, 1.0, 0.1),  # RM and gold agree
        pair(2, 1, 0.1, 1.0),  # the labeller chose the worse answer; the RM followed the label, not the gold
        pair(1, 2, 0.1, 1.0),  # the RM ranks as the gold does, against the label
        pair(5, 0, 0.1, 0.1),  # a gold tie: not counted
        pair(1, 1, 1.0, 0.0),  # equal scores: not a right ranking
    ]
    assert gold_order_agreement(Scores(), pairs) == {"agreement": 2 / 4, "pairs": 4}
    assert gold_order_agreement(Scores(), [pair(5, 0, 0.1, 0.1)]) == {"agreement": None, "pairs": 0}
    assert gold_order_agreement(Scores(), [{"prompt": "p", "chosen": "s=1", "rejected": "s=0"}])["pairs"] == 0
