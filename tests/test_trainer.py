"""End-to-end: the CLI's happy path (run/cli.py, run/runner.py, run/loop.py), the ratio check, the optimizers,
the cuda preset.

Failure paths (bad input, NaN, signals, kill -9, resume, determinism, pruning) are in test_reliability.py.
"""

import os

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from ppo_core.run.config import ConfigError, load_config
from ppo_core.run.metrics import read_metrics
from ppo_core.run.runner import RunTrainer
from ppo_core.train import main
from ppo_core.update import RatioCheckError, minibatch_update

STEP_KEYS = [
    "rollout/reward_mean",
    "rollout/correct_rate",
    "rollout/response_length",
    "rollout/eos_rate",
    "policy/loss",
    "value/loss",
    "policy/entropy_loss",
    "loss/total",
    "policy/clipfrac",
    "value/clipfrac",
    "policy/approx_kl",
    "kl/to_ref",
    "train/grad_norm",
    "value/explained_variance",
    "kl/coef",
    "train/skipped",
    "time/rollout",
    "time/score",
    "time/update",
]


def test_cli_two_step_smoke_run(tiny_model_path, tiny_overrides, tmp_path, capsys):
    out = tmp_path / "run"
    assert main(tiny_overrides(tiny_model_path, out, 2, "train.save_every=1")) == 0
    steps = [r for r in read_metrics(out) if "rollout/reward_mean" in r]
    assert [r["step"] for r in steps] == [1, 2]
    for key in STEP_KEYS:
        assert all(key in r for r in steps), key
    for name in (
        "effective_config.yaml",
        "dashboard.png",
        "samples.jsonl",
        "summary.json",
        "final/value_head.pt",
        "final/critic/config.json",  # the cpu preset's separate critic (ppo.separate_critic), saved beside the LM
        "final/critic/model.safetensors",
        "final/optimizer.pt",
    ):
        assert (out / name).exists(), name
    assert list((out / "tb").glob("events.out.tfevents.*"))
    assert sorted(p.name for p in out.glob("step_*")) == ["step_1", "step_2"]
    AutoModelForCausalLM.from_pretrained(out / "final")  # checkpoints load like any hub model
    AutoTokenizer.from_pretrained(out / "final")
    assert "held-out sampled accuracy" in capsys.readouterr().out


def _trainer(tiny_model_path, tmp_path, *extra):
    from ppo_test_support import _tiny_overrides

    return RunTrainer(load_config("cpu", _tiny_overrides(tiny_model_path, tmp_path / "run", 1, *extra)))


def test_the_run_holds_the_algorithm_box_and_refuses_to_shadow_it(tiny_model_path, tmp_path):
    """``RunTrainer`` composes ``PPOTrainer`` (``run.ppo``), it does not extend it; what it forwards is the box's own
    object, and setting on the run a name the box owns (which the box would never read) raises, naming ``ppo``."""
    from ppo_core.trainer import PPOTrainer

    tr = _trainer(tiny_model_path, tmp_path)
    assert not isinstance(tr, PPOTrainer) and isinstance(tr.ppo, PPOTrainer)
    assert tr.actor is tr.ppo.actor and tr.kl_ctl is tr.ppo.kl_ctl and tr.step_count == tr.ppo.step_count == 0
    for name, value in (("minibatch_update", print), ("step_count", 3), ("actor", None), ("train_records", [])):
        with pytest.raises(AttributeError, match=f"set run.ppo.{name} instead|has no setter"):
            setattr(tr, name, value)
    tr.ppo.step_count = 3  # through the box: the run reads it
    assert tr.step_count == 3
    tr.reward_fn = lambda completion, answer: 0.0  # the run's own attributes stay settable
    tr.logger.close()


def test_ratio_check_fires_when_training_forward_differs(tiny_model_path, tiny_overrides, tmp_path):
    """With a different temperature in the update than at rollout, the first ratio is not 1: caught."""
    tr = _trainer(tiny_model_path, tmp_path, "rollout.temperature=0.7")
    tr.step()  # the normal path passes the check
    records = tr.prompt_batch(2)
    from ppo_core.rollout import sample, score

    ro = sample(tr.actor.lm, tr.tokenizer, tr.prompts(records), 8, 0.7)
    score(tr.actor, tr.ref, ro, 0.7, 4)
    mb = {
        "input_ids": ro.input_ids,
        "attention_mask": ro.attention_mask,
        "response_ids": ro.response_ids,
        "mask": ro.mask,
        "old_logprobs": ro.logprobs,
        "old_values": ro.values,
        "advantages": torch.ones_like(ro.values),
        "returns": torch.zeros_like(ro.values),
        "keep": ro.keep,
    }
    minibatch_update(tr.actor, tr.optimizer, mb, temperature=0.7, ratio_tol=1e-4)  # consistent: passes
    ro2 = sample(tr.actor.lm, tr.tokenizer, tr.prompts(records), 8, 0.7)
    score(tr.actor, tr.ref, ro2, 0.7, 4)
    mb.update(
        input_ids=ro2.input_ids,
        attention_mask=ro2.attention_mask,
        response_ids=ro2.response_ids,
        mask=ro2.mask,
        old_logprobs=ro2.logprobs,
        old_values=ro2.values,
        keep=ro2.keep,
        advantages=torch.ones_like(ro2.values),
        returns=torch.zeros_like(ro2.values),
    )
    with pytest.raises(RatioCheckError, match="temperature"):
        minibatch_update(tr.actor, tr.optimizer, mb, temperature=1.0, ratio_tol=1e-4)


def test_adamw8bit_steps_on_cpu_like_adamw(tiny_model_path, tiny_overrides, tmp_path):
    pytest.importorskip("bitsandbytes")
    import bitsandbytes as bnb

    from ppo_core.run.setup import build_optimizer

    results = []
    for name in ("adamw", "adamw8bit"):
        tr = _trainer(tiny_model_path, tmp_path, f"ppo.optimizer={name}", "train.tensorboard=false",
                      "ppo.weight_decay=0.05", "ppo.value_lr=3e-3")  # fmt: skip
        if name == "adamw8bit":
            assert isinstance(tr.optimizer, bnb.optim.AdamW8bit)
        # both optimizers get the config's weight decay, and the critic's group its own learning rate
        assert [(g["lr"], g["weight_decay"]) for g in tr.optimizer.param_groups] == [
            (tr.cfg.ppo.lr, 0.05),
            (3e-3, 0.05),
        ]
        torch.manual_seed(0)
        x = torch.randint(3, 20, (4, 12))
        for _ in range(5):
            logits, values = tr.actor(x, torch.ones_like(x))
            loss = logits.float().logsumexp(-1).mean() + values.pow(2).mean()
            loss.backward()
            tr.optimizer.step()
            tr.optimizer.zero_grad()
        results.append(torch.cat([p.detach().flatten() for p in tr.actor.parameters()]))
        assert isinstance(build_optimizer(tr.actor, tr.cfg.ppo), type(tr.optimizer))
    moved = (results[0] - results[1]).abs().max().item()
    assert moved < 5e-3  # same direction and size of update, up to 8-bit state quantisation


def test_cuda_preset_without_gpu():
    cfg = load_config("cuda")
    assert cfg.model.device == "cuda"
    if not torch.cuda.is_available():
        from ppo_core.run.setup import resolve_device

        with pytest.raises(ConfigError, match="no CUDA GPU"):
            resolve_device("cuda")


@pytest.mark.cuda
def test_cuda_code_path_random_qwen(tmp_path):
    """The cuda preset's path (bf16, 8-bit AdamW, accumulation) on a random Qwen2-shaped model."""
    from transformers import Qwen2Config

    from ppo_core.tasks.synthetic import SYNTHETIC_ALPHABET
    from ppo_core.tasks.tiny import build_char_tokenizer, save_tiny

    tok = build_char_tokenizer(SYNTHETIC_ALPHABET)
    cfg = Qwen2Config(
        vocab_size=len(tok),
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        pad_token_id=tok.pad_token_id,
        eos_token_id=tok.eos_token_id,
        bos_token_id=tok.bos_token_id,
    )
    path = save_tiny(AutoModelForCausalLM.from_config(cfg), tok, tmp_path / "qwen")
    overrides = [
        f"model.name_or_path={path}",
        "data.task=synthetic",
        "data.prompt_style=plain",
        f"train.output_dir={tmp_path / 'run'}",
        "train.steps=2",
        "rollout.batch_size=16",
        "ppo.minibatch_size=8",
        "ppo.grad_accum_steps=2",
        "rollout.max_new_tokens=16",
        "train.eval_samples=16",
        "data.n_train=64",
        "data.n_test=16",
        "train.progress=false",
        "ppo.value_warmup_steps=1",  # the preset's warm-up path (bf16 trunk, 8-bit AdamW), once
    ]
    assert main(["--config", "cuda", *overrides]) == 0


def test_fast_paths_give_the_readable_paths_numbers(tiny_model_path, tmp_path, monkeypatch):
    """train.fast_paths (fastpaths.py) changes how much work a step does, not what it computes."""
    from ppo_core import fastpaths

    monkeypatch.setattr(fastpaths, "SPLIT_MIN_PREFIX_TOKENS", 0)  # the prefix split on every minibatch
    steps = {}
    for fast in (True, False):  # a non-zero value head: advantages of an all-zero batch would whiten rounding noise
        tr = _trainer(tiny_model_path, tmp_path / str(fast), f"train.fast_paths={str(fast).lower()}",
                      "model.value_head_init_std=0.5")  # fmt: skip
        calls = []
        real_keep = fastpaths.PromptCache.keep
        monkeypatch.setattr(
            fastpaths.PromptCache, "keep", lambda c, *a, calls=calls, real=real_keep: calls.append(1) or real(c, *a)
        )
        m = tr.step()
        assert bool(calls) == fast  # the prompt cache is kept only with the fast paths on
        steps[fast] = (tr.last_step, m)
    (fast, m_fast), (plain, m_plain) = steps[True], steps[False]
    for name in ("kl", "rewards", "advantages_raw", "advantages", "returns"):
        torch.testing.assert_close(getattr(fast, name), getattr(plain, name), atol=1e-5, rtol=1e-4, msg=name)
    for key in ("policy/loss", "value/loss", "policy/approx_kl", "train/grad_norm"):
        assert m_fast[key] == pytest.approx(m_plain[key], rel=1e-3, abs=1e-5), key


def test_eval_every_evaluates_between_steps_and_the_last_step_once(tiny_model_path, tiny_overrides, tmp_path):
    """train.eval_every=1 over 2 steps: before (step 0), sampled after step 1, and after (step 2) once, not twice."""
    out = tmp_path / "run"
    overrides = tiny_overrides(tiny_model_path, out, 2, "train.eval_every=1", "train.save_every=0")
    assert main([*overrides, "train.tensorboard=false"]) == 0
    evals = [
        (r["step"], sorted(k for k in r if k != "step")) for r in read_metrics(out) if "rollout/reward_mean" not in r
    ]
    both = ["eval/greedy_accuracy", "eval/sampled_accuracy"]
    assert evals == [(0, both), (1, ["eval/sampled_accuracy"]), (2, both)]


def test_response_length_and_eos_rate_are_per_response_means(tiny_model_path, tiny_overrides, tmp_path, monkeypatch):
    """rollout/response_length: the mean number of counted response tokens per response (EOS included);
    rollout/eos_rate: the share of responses that ended on EOS. Rows 0-2 and 4-6 are made to end on EOS after
    1, 2, 3 tokens, rows 3 and 7 run to the 8-token limit: lengths 1, 2, 3, 8 twice, mean 3.5; EOS rate 6/8."""
    import ppo_core.trainer as trainer

    real_sample = trainer.sample

    def ending_early(*args, **kwargs):
        ro = real_sample(*args, **kwargs)
        with torch.inference_mode():
            for b in range(ro.mask.shape[0]):
                n = b % 4 + 1
                if n < 4:
                    ro.response_ids[b, n - 1] = eos
                    ro.mask[b, n:] = False
                    ro.attention_mask[b, ro.prompt_len + n :] = 0
                else:  # to the limit, whether or not it sampled an EOS
                    ro.response_ids[b] = torch.where(ro.response_ids[b] == eos, letter, ro.response_ids[b])
                    ro.mask[b] = True
                    ro.attention_mask[b, ro.prompt_len :] = 1
        return ro

    monkeypatch.setattr(trainer, "sample", ending_early)
    tr = RunTrainer(load_config("cpu", tiny_overrides(tiny_model_path, tmp_path / "run", 1)))
    eos, letter = tr.tokenizer.eos_token_id, tr.tokenizer.convert_tokens_to_ids("a")
    m = tr.step()
    assert m["rollout/response_length"] == pytest.approx(3.5)
    assert m["rollout/eos_rate"] == pytest.approx(0.75)


def test_the_cli_keeps_an_openmp_wait_policy_the_user_chose(monkeypatch):
    from ppo_core.run import cli

    monkeypatch.setenv("OMP_WAIT_POLICY", "ACTIVE")
    cli._passive_openmp()
    assert os.environ["OMP_WAIT_POLICY"] == "ACTIVE"
    monkeypatch.delenv("OMP_WAIT_POLICY")
    cli._passive_openmp()
    assert os.environ["OMP_WAIT_POLICY"] == "PASSIVE"


def test_bf16_compute_keeps_float32_policy_weights_and_stores_the_reference_in_bf16(tiny_model_path):
    """model.dtype=bfloat16 is the compute dtype: the trained weights stay float32 (master copy), the frozen
    reference, never updated, is stored in bf16 (half the memory)."""
    from ppo_core.run.setup import load_models

    cfg = load_config("cpu", [f"model.name_or_path={tiny_model_path}", "model.dtype=bfloat16"])
    actor, ref, _, _ = load_models(cfg, torch.device("cpu"))
    assert actor.compute_dtype == torch.bfloat16
    assert {p.dtype for p in actor.parameters()} == {torch.float32}
    assert {p.dtype for p in ref.parameters()} == {torch.bfloat16}


def test_prompt_batches_take_every_record_once_per_pass_in_a_fresh_order(tiny_model_path, tiny_overrides, tmp_path):
    """data.n_train=64, 8 prompts a step: steps 1-8 are one pass over the records, steps 9-16 the next. Each
    pass holds every record once, shuffled, and the second pass is not the first one's order again."""
    tr = RunTrainer(load_config("cpu", tiny_overrides(tiny_model_path, tmp_path / "run", 1)))
    index = {id(r): i for i, r in enumerate(tr.train_records)}
    passes = [[index[id(r)] for step in range(8 * p + 1, 8 * p + 9) for r in tr.prompt_batch(step)] for p in (0, 1)]
    for order in passes:
        assert sorted(order) == list(range(64))
        assert order != list(range(64))
    assert passes[0] != passes[1]
    tr.logger.close()


def test_step_n_samples_prompt_batch_n_and_evaluation_reads_the_held_out_split(tiny_model_path, tmp_path, monkeypatch):
    """``step()`` number k (1-based) collects ``prompt_batch(k)``; ``evaluate`` scores the first
    ``train.eval_samples`` (or ``n``) records of the test split, never training records."""
    import ppo_core.run.runner as trainer

    tr = _trainer(tiny_model_path, tmp_path, "ppo.ppo_epochs=1")
    collected, real_collect = [], tr.collect
    tr.collect = lambda records: collected.append(records) or real_collect(records)
    tr.step()
    tr.step()
    assert collected == [tr.prompt_batch(1), tr.prompt_batch(2)]
    scored = []
    monkeypatch.setattr(trainer, "accuracy", lambda lm, tok, records, *args: scored.append(records) or 0.0)
    tr.evaluate()
    tr.evaluate(n=3)
    assert scored == [tr.test_records[:8], tr.test_records[:3]]  # train.eval_samples=8
    train_questions = {r["question"] for r in tr.train_records}
    assert not any(r["question"] in train_questions for r in scored[0])


def test_the_minibatch_order_follows_train_seed(tiny_model_path, tmp_path):
    """The shuffle generator (minibatch order) starts from train.seed: the same seed, the same order; another
    seed, another order."""
    orders = [
        torch.randperm(64, generator=_trainer(tiny_model_path, tmp_path / f"{i}", f"train.seed={seed}").ppo.shuffle_gen)
        for i, seed in enumerate((1, 1, 2))
    ]
    assert torch.equal(orders[0], orders[1]) and not torch.equal(orders[0], orders[2])
