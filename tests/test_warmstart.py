import json
import random
import re

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from ppo_core.tasks import warmstart
from ppo_core.tasks.rewards import extract_answer
from ppo_core.tasks.synthetic import make_synthetic_task
from ppo_core.tasks.tiny import build_tiny_model, load_tiny
from ppo_core.tasks.warmstart import (
    IGNORE_INDEX,
    evaluate_accuracy,
    generate_completions,
    noisy_answer,
    sft_batch,
    warm_start,
)

# Seconds-long settings: a ~30 k-parameter model, 20 steps.
FAST = dict(
    steps=20,
    batch_size=8,
    lr=1e-2,
    n_train=200,
    n_test=20,
    eval_samples=4,
    progress=False,
    size=dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2),
)


pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def cached(tmp_path_factory):
    """One fast warm start, shared by the tests that only read it."""
    out = tmp_path_factory.mktemp("cache")
    return out, warm_start(out, **FAST)


def test_sft_batch_scores_only_the_completion_and_its_eos(tok):
    batch = sft_batch(tok, ["ab\n", "abcd\n"], ["1+2=3\n#### 3", "7"])
    ids, labels, attn = batch["input_ids"], batch["labels"], batch["attention_mask"]
    assert ids.shape == labels.shape == attn.shape == (2, 1 + 3 + 12 + 1)
    eos, bos, pad = tok.eos_token_id, tok.bos_token_id, tok.pad_token_id
    # row 0: <bos> a b \n | 1 + 2 = 3 \n # # # # space 3 <eos>   (no padding: the longest row)
    assert ids[0, 0] == bos and (labels[0, :4] == IGNORE_INDEX).all()
    assert tok.decode(labels[0, 4:-1]) == "1+2=3\n#### 3" and labels[0, -1] == eos
    # row 1: <bos> a b c d \n | 7 <eos> | padding on the right, never scored
    assert (labels[1, :6] == IGNORE_INDEX).all() and labels[1, 6:8].tolist() == [tok.convert_tokens_to_ids("7"), eos]
    assert (labels[1, 8:] == IGNORE_INDEX).all() and (ids[1, 8:] == pad).all()
    assert attn[1].tolist() == [1] * 8 + [0] * 9 and attn[0].all()


def test_noisy_answer_swaps_the_final_number_for_an_operand():
    rng = random.Random(0)
    answer = "3+4=7\n#### 7"
    assert noisy_answer(answer, rng, 0.0) == answer
    for _ in range(50):
        noisy = noisy_answer(answer, rng, 1.0)
        assert noisy.startswith("3+4=7\n#### ") and extract_answer(noisy) in ("3", "4")
    assert extract_answer(noisy_answer("5-0=5\n#### 5", rng, 1.0)) == "0"  # the operand equal to 5 is skipped
    assert extract_answer(noisy_answer("0+0=0\n#### 0", rng, 1.0)) == "1"
    share = sum(noisy_answer(answer, rng, 0.75) != answer for _ in range(4000)) / 4000
    assert abs(share - 0.75) < 0.03


def test_evaluate_accuracy_scores_the_final_answer(tok, monkeypatch):
    records = make_synthetic_task(0, 4, 1)[0]
    golds = [r["answer"] for r in records]
    monkeypatch.setattr(warmstart, "generate_completions", lambda *a, **k: golds)
    assert evaluate_accuracy(None, tok, records) == 1.0
    wrong = [g.split("####")[0] + "#### 99" for g in golds[:2]] + golds[2:]  # right working, wrong final
    monkeypatch.setattr(warmstart, "generate_completions", lambda *a, **k: wrong)
    assert evaluate_accuracy(None, tok, records) == 0.5


def test_generate_completions_is_reproducible_and_leaves_the_global_rng(tok):
    torch.manual_seed(0)
    model = build_tiny_model(tok, **FAST["size"])
    records = make_synthetic_task(0, 6, 1)[0]
    state = torch.get_rng_state()
    a = generate_completions(model, tok, records, max_new_tokens=6, seed=3)
    assert torch.equal(torch.get_rng_state(), state)
    assert a == generate_completions(model, tok, records, max_new_tokens=6, seed=3)
    assert all(len(t) <= 6 and "<" not in t for t in a)  # no prompt, no special tokens
    greedy = generate_completions(model, tok, records, greedy=True, max_new_tokens=6)
    assert greedy == generate_completions(model, tok, records, greedy=True, max_new_tokens=6)
    one_by_one = [generate_completions(model, tok, [r], greedy=True, max_new_tokens=6)[0] for r in records]
    assert greedy == one_by_one  # left padding does not change what a prompt generates
    assert 0.0 <= evaluate_accuracy(model, tok, records, max_new_tokens=6, seed=0) <= 1.0


@pytest.mark.slow
def test_warm_start_saves_a_loadable_model_and_a_report(cached):
    _, path = cached
    assert re.fullmatch(r"warmstart-[0-9a-f]{12}", path.name)
    report = json.loads((path / "warmstart.json").read_text())
    assert report["settings"]["steps"] == 20 and len(report["losses"]) == 20
    for key in ("heldout_sampled_accuracy", "heldout_greedy_accuracy", "heldout_sampled_working_line_accuracy"):
        assert 0.0 <= report[key] <= 1.0
    assert report["n_parameters"] > 0 and report["peak_rss_mb"] > 0
    model = AutoModelForCausalLM.from_pretrained(path)
    tok = AutoTokenizer.from_pretrained(path)
    assert not model.training and tok.padding_side == "left" and tok.pad_token_id != tok.eos_token_id


@pytest.mark.slow
def test_loss_decreases_over_a_short_warm_start(cached):
    losses = json.loads((cached[1] / "warmstart.json").read_text())["losses"]
    assert sum(losses[-5:]) / 5 < 0.7 * sum(losses[:3]) / 3


@pytest.mark.slow
def test_second_call_reuses_the_cache(cached, monkeypatch):
    out, path = cached
    mtime = (path / "warmstart.json").stat().st_mtime_ns
    monkeypatch.setattr(warmstart, "_train", lambda *a, **k: pytest.fail("the cached warm start was trained again"))
    again = warm_start(out, **FAST)
    assert again == path and (path / "warmstart.json").stat().st_mtime_ns == mtime
    assert [p.name for p in out.iterdir()] == [path.name]  # no temporary folder left behind


@pytest.mark.slow
def test_cache_key_follows_every_setting(cached):
    out, path = cached
    settings = json.loads((path / "warmstart.json").read_text())["settings"]
    assert path.name == f"warmstart-{warmstart.settings_hash(settings)}"
    bigger = {**settings["size"], "hidden_size": 48}
    for change in (
        dict(lr=2e-2),
        dict(seed=1),
        dict(answer_noise=0.5),
        dict(steps=21),
        dict(batch_size=4),
        dict(arch="gpt2"),
        dict(n_train=201),
        dict(task="other"),
        dict(size=bigger),
    ):
        assert warmstart.settings_hash({**settings, **change}) != warmstart.settings_hash(settings), change
    other = warm_start(out, **{**FAST, "answer_noise": 0.5})  # a real call trains into a new folder
    assert other != path and (other / "warmstart.json").is_file()


@pytest.mark.slow
def test_force_retrains_in_place(tmp_path):
    first = warm_start(tmp_path, **FAST)
    mtime = (first / "warmstart.json").stat().st_mtime_ns
    again = warm_start(tmp_path, force=True, **FAST)
    assert again == first and (again / "warmstart.json").stat().st_mtime_ns != mtime
    assert [p.name for p in tmp_path.iterdir()] == [first.name]


@pytest.mark.slow
def test_a_cache_miss_does_not_move_the_global_rng(tmp_path):
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    warm_start(tmp_path, **{**FAST, "steps": 2})
    assert torch.equal(torch.rand(3), expected)


def test_cosine_schedule_equals_transformers():
    from transformers import get_cosine_schedule_with_warmup

    from ppo_core.tasks.warmstart import cosine_schedule_with_warmup

    for warmup, total in [(1, 10), (4, 40), (0, 7)]:
        lrs = []
        for make in (cosine_schedule_with_warmup, get_cosine_schedule_with_warmup):
            opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=0.3)
            sched = make(opt, warmup, total)
            lrs.append([])
            for _ in range(total + 2):
                lrs[-1].append(opt.param_groups[0]["lr"])
                opt.step()
                sched.step()
        assert lrs[0] == pytest.approx(lrs[1], abs=1e-12)


def test_working_line_accuracy_compares_the_first_line():
    records = [{"question": "q", "answer": "3+4=7\n#### 7"}] * 2
    scores = warmstart._scores(["3+4=7\n#### 3", "3+4=7\n#### 7"], records)  # right working, one wrong final
    assert scores == {"accuracy": 0.5, "working_line_accuracy": 1.0}
    assert warmstart._scores(["3+4=8\n#### 7"], records[:1]) == {"accuracy": 1.0, "working_line_accuracy": 0.0}


@pytest.mark.slow
def test_cache_key_follows_the_held_out_split(tmp_path, monkeypatch):
    """Editing only the held-out problems (they are scored into warmstart.json) makes a new cache folder."""

    class Stop(Exception):
        pass

    keys, real_hash, real_task = [], warmstart.settings_hash, warmstart.make_synthetic_task

    def spy_hash(settings):
        keys.append(real_hash(settings))
        raise Stop  # the folder name is known: no need to train

    def edited_task(*args, **kwargs):
        train, test = real_task(*args, **kwargs)
        return train, test[:-1] + [{**test[-1], "answer": test[-1]["answer"] + "0"}]

    monkeypatch.setattr(warmstart, "settings_hash", spy_hash)
    for task in (real_task, edited_task):
        monkeypatch.setattr(warmstart, "make_synthetic_task", task)
        with pytest.raises(Stop):
            warm_start(tmp_path, **FAST)
    assert keys[0] != keys[1]


def test_sampling_follows_the_temperature(tok):
    torch.manual_seed(0)
    model = build_tiny_model(tok, **FAST["size"])
    records = make_synthetic_task(0, 8, 1)[0]
    greedy = generate_completions(model, tok, records, greedy=True, max_new_tokens=6)
    assert generate_completions(model, tok, records, temperature=1e-4, max_new_tokens=6, seed=0) == greedy
    assert generate_completions(model, tok, records, temperature=1.0, max_new_tokens=6, seed=0) != greedy


@pytest.mark.slow  # seconds, not milliseconds: a proxy-gold curve, many samples or a shipped checkpoint
def test_the_default_run_s_warm_start_ships_and_a_cache_miss_copies_it(tmp_path, monkeypatch):
    """The cpu preset's warm start (seed 0) is in the package, in float16; a cache miss on its settings copies it
    (float32 in the cache) instead of training, and a retrain would round to the same precision."""
    from ppo_core.run.config import load_config
    from ppo_core.run.setup import _warm_started_tiny

    cfg = load_config("cpu", [f"warmstart.cache_dir={tmp_path}", "train.progress=false"])
    monkeypatch.setattr(warmstart, "_train", lambda *a, **k: pytest.fail("trained instead of copying"))
    path = _warm_started_tiny(cfg)
    shipped = warmstart.SHIPPED / path.name
    assert shipped.is_dir() and sum(f.stat().st_size for f in shipped.iterdir()) < 3_000_000
    model, _ = load_tiny(path)
    assert all(p.dtype == torch.float32 for p in model.parameters())
    assert all(torch.equal(p, p.half().float()) for p in model.parameters())  # float16 values, held in float32
    assert json.loads((path / "warmstart.json").read_text()) == json.loads((shipped / "warmstart.json").read_text())
    monkeypatch.setattr(warmstart, "SHIPPED", tmp_path / "none")  # without the shipped copy, it would train
    with pytest.raises(pytest.fail.Exception, match="trained instead of copying"):
        _warm_started_tiny(load_config("cpu", [f"warmstart.cache_dir={tmp_path / 'other'}", "train.progress=false"]))


def test_round_to_float16_rounds_in_place_and_keeps_float32():
    lin = torch.nn.Linear(3, 2)
    with torch.no_grad():
        lin.weight.fill_(1.0 + 2**-12)  # between two float16 neighbours
    warmstart.round_to_float16_(lin)
    assert lin.weight.dtype == torch.float32 and torch.all(lin.weight == 1.0)
