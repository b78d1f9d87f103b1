"""Training that survives: bad input, NaNs, interruption (SIGINT, SIGTERM, kill -9) and resume.

Every run here uses the session's tiny untrained model (conftest.py) and a few seconds of CPU.
Runs in a subprocess (``python -m ppo_core.train``) where the real exit code or a signal matters; the
kill -9 test runs the same command through ``PAUSING_SAVE``, which patches the checkpoint writer to
sleep after a checkpoint is fully written to its temporary folder and before the rename that
publishes it - the worst moment for a kill.
"""

import json
import math
import os
import shutil
import signal
import subprocess
import sys
import time
import types
import warnings
from pathlib import Path

import pytest
import torch
from ppo_test_support import _tiny_overrides
from safetensors.torch import load_file

from ppo_core.run.checkpoint import checkpoint_step, latest_checkpoint, recover_interrupted_saves
from ppo_core.run.config import ConfigError, load_config
from ppo_core.run.guards import NonFiniteError
from ppo_core.run.metrics import read_metrics
from ppo_core.run.runner import RunTrainer
from ppo_core.train import main
from ppo_core.trainer import PPOTrainer

# Three steps, a checkpoint after each (keep two), an adaptive KL coefficient (so the KL controller's
# state matters on resume), one thread (so a subprocess and this process compute the same numbers).
RUN = (
    "train.save_every=1",
    "train.keep_last=2",
    "ppo.adaptive_kl=true",
    "ppo.kl_horizon=100",
    "train.num_threads=1",
    "train.tensorboard=false",
)


def _overrides(model, out, steps=3, *extra) -> list[str]:
    return _tiny_overrides(model, out, steps, *RUN, *extra)


pytestmark = pytest.mark.usefixtures("restore_threads")  # in-process runs set train.num_threads=1


@pytest.fixture(scope="module")
def reference_run(tiny_model_path, tmp_path_factory) -> Path:
    """An uninterrupted 3-step run: the yardstick for determinism and resume."""
    out = tmp_path_factory.mktemp("reference") / "run"
    assert main(_overrides(tiny_model_path, out)) == 0
    return out


def _no_time(records: list[dict]) -> list[dict]:
    """Metrics without the wall-clock ``time/*`` keys, which no two runs share."""
    return [{k: v for k, v in r.items() if not k.startswith("time/")} for r in records]


def _weights(checkpoint: Path) -> dict:
    return {
        **load_file(checkpoint / "model.safetensors"),
        **torch.load(checkpoint / "value_head.pt", weights_only=True),
    }


def _assert_same_weights(a: Path, b: Path) -> None:
    wa, wb = _weights(a), _weights(b)
    assert wa.keys() == wb.keys() and all(torch.equal(wa[k], wb[k]) for k in wa)


def _step_lines(out: Path) -> list[dict]:
    """The per-step lines of a run's metrics log (tolerates a line being written right now)."""
    path = out / "metrics.jsonl"
    lines = path.read_text().splitlines() if path.exists() else []
    records = []
    for line in lines:
        try:
            records.append(json.loads(line))
        except ValueError:
            pass
    return [r for r in records if "rollout/reward_mean" in r]


def _trainer(model, tmp_path, *extra) -> RunTrainer:
    return RunTrainer(load_config("cpu", _overrides(model, tmp_path / "run", 3, *extra)))


_CHILDREN: list[subprocess.Popen] = []


@pytest.fixture(autouse=True)
def _kill_leftover_children():
    """A failed test must not leave a training process behind."""
    yield
    while _CHILDREN:
        proc = _CHILDREN.pop()
        if proc.poll() is None:
            proc.kill()
            proc.wait()


PAUSING_SAVE = """
import sys, time
import ppo_core.run.checkpoint as checkpoint
from ppo_core.train import main

name, seconds = sys.argv[1], float(sys.argv[2])
real_write = checkpoint.write_folder_atomically

def pausing_write(final, write, replace=True):
    def write_then_pause(tmp):
        write(tmp)
        if final.name == name:
            time.sleep(seconds)  # fully written to its temporary folder, not yet published by the rename

    return real_write(final, write_then_pause, replace)

checkpoint.write_folder_atomically = pausing_write
sys.exit(main(sys.argv[3:]))
"""
"""``python -c PAUSING_SAVE NAME SECONDS [train args]``: ``python -m ppo_core.train`` whose save of NAME pauses."""


def _spawn(overrides, tmp_path, name, pause_save: tuple[str, float] | None = None) -> tuple[subprocess.Popen, Path]:
    """``python -m ppo_core.train`` in a subprocess (pausing the save of ``pause_save=(NAME, SECONDS)``);
    its stderr goes to a file (returned)."""
    err = tmp_path / f"{name}.stderr"
    command = ["-c", PAUSING_SAVE, pause_save[0], str(pause_save[1])] if pause_save else ["-m", "ppo_core.train"]
    with err.open("w") as stderr:
        proc = subprocess.Popen([sys.executable, *command, *overrides], stdout=subprocess.DEVNULL, stderr=stderr)
    _CHILDREN.append(proc)
    return proc, err


def _wait_for(condition, procs, timeout=90.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert all(p.poll() is None for p in procs), "the run ended before the awaited moment"
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


# ---- bad input: one line, exit code 2, nothing written -----------------------------------------------


def _gsm8k_file(tmp_path, lines) -> list[str]:
    path = tmp_path / "data.jsonl"
    path.write_text("".join(line + "\n" for line in lines))
    return ["data.task=gsm8k", f"data.source={path}"]


GOOD = json.dumps({"question": "1+1?", "answer": "1+1=2\n#### 2"})
BAD_INPUTS = {
    "unknown key": (lambda tmp: ["ppo.clip_epss=0.1"], ["unknown config key", "did you mean 'ppo.clip_eps'"]),
    "key without its section": (lambda tmp: ["minibatch_size=4"], ["did you mean 'ppo.minibatch_size'"]),
    "wrong type": (lambda tmp: ["train.steps=many"], ["train.steps", "could not be converted"]),
    "negative clip_eps": (lambda tmp: ["ppo.clip_eps=-0.2"], ["ppo.clip_eps must be > 0"]),
    "lam outside [0, 1]": (lambda tmp: ["ppo.lam=1.5"], ["ppo.lam must be in [0, 1]"]),
    "gamma outside (0, 1]": (lambda tmp: ["ppo.gamma=0"], ["ppo.gamma must be in (0, 1]"]),
    "temperature <= 0": (lambda tmp: ["rollout.temperature=0"], ["rollout.temperature must be > 0"]),
    "learning rate <= 0": (lambda tmp: ["ppo.lr=-1e-4"], ["ppo.lr must be > 0"]),
    "batch not divisible": (
        lambda tmp: ["ppo.minibatch_size=3"],
        ["rollout.batch_size (8) must be a multiple of ppo.minibatch_size (3)"],
    ),
    "missing model folder": (
        lambda tmp: [f"model.name_or_path={tmp / 'no_model'}"],
        ["model.name_or_path=", "no such folder"],
    ),
    "hub id while offline": (
        lambda tmp: ["model.name_or_path=someone/not-cached"],
        ["from the Hugging Face Hub", "hf download", "model.name_or_path=DIR"],
    ),
    "missing dataset file": (
        lambda tmp: ["data.task=gsm8k", f"data.source={tmp / 'none.jsonl'}"],
        ["data.source=", "not found"],
    ),
    "empty dataset file": (lambda tmp: _gsm8k_file(tmp, []), ["no records"]),
    "record without answer": (
        lambda tmp: _gsm8k_file(tmp, [GOOD, json.dumps({"question": "2+2?"})]),
        ["line 2", "missing field 'answer'"],
    ),
    "response longer than the context": (
        lambda tmp: ["rollout.max_new_tokens=300"],
        ["max_new_tokens=300", "context of 256"],
    ),
    "resume from a non-checkpoint": (
        lambda tmp: [f"train.resume={tmp}"],
        ["train.resume=", "not a complete checkpoint"],
    ),
    "cuda without a GPU": (lambda tmp: ["model.device=cuda"], ["model.device=cuda", "no CUDA GPU"]),
}


@pytest.mark.slow
@pytest.mark.parametrize("case", list(BAD_INPUTS))
def test_bad_input_is_one_line_exit_2_and_writes_nothing(case, tiny_model_path, tmp_path, capsys):
    if case == "cuda without a GPU" and torch.cuda.is_available():
        pytest.skip("a GPU is visible")
    extra, expected = BAD_INPUTS[case]
    out = tmp_path / "run"
    assert main(_overrides(tiny_model_path, out, 1, *extra(tmp_path))) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "\n" not in err, err
    for text in expected:
        assert text in err, err
    assert not out.exists()  # nothing half-written


@pytest.mark.slow
def test_cli_process_exit_code_and_single_stderr_line(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "ppo_core.train", "ppo.clip_epss=0.1", f"train.output_dir={tmp_path / 'r'}"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2
    assert proc.stderr.strip().count("\n") == 0 and "did you mean 'ppo.clip_eps'" in proc.stderr
    assert not (tmp_path / "r").exists()


@pytest.mark.slow
def test_a_config_error_comes_before_the_models_code_loads():
    """The command checks the config before it imports the trainer and transformers' model code: a typo's error
    line comes in about two seconds, not five. In a fresh process, since this one has imported everything."""
    code = (
        "import sys\n"
        "from ppo_core.run.cli import train_main\n"
        "assert train_main(['ppo.clip_epss=0.1']) == 2\n"
        "print(sorted({m.split('.')[0] for m in sys.modules if m.split('.')[0] in ('transformers', 'peft')}))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip() == "[]", f"loaded before the config was checked: {proc.stdout.strip()}"
    assert "did you mean 'ppo.clip_eps'" in proc.stderr


@pytest.mark.slow
def test_evaluate_process_exit_code_names_a_missing_checkpoint(tmp_path):
    """``python -m ppo_core.evaluate`` on a folder that is no checkpoint: exit code 2 and one stderr line."""
    missing = tmp_path / "no_such_run" / "final"
    proc = subprocess.run(
        [sys.executable, "-m", "ppo_core.evaluate", str(missing)], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert proc.stderr.strip().startswith("error:") and proc.stderr.strip().count("\n") == 0


@pytest.mark.slow
def test_fresh_run_into_an_old_run_is_refused_unless_overwrite(reference_run, tiny_model_path, tmp_path, capsys):
    before = (reference_run / "metrics.jsonl").read_text()
    assert main(_overrides(tiny_model_path, reference_run, 1)) == 2
    err = capsys.readouterr().err
    assert "already holds a run" in err and "train.resume=auto" in err and "train.overwrite=true" in err
    assert (reference_run / "metrics.jsonl").read_text() == before  # untouched
    copy = shutil.copytree(reference_run, tmp_path / "run")
    assert main(_overrides(tiny_model_path, copy, 1, "train.overwrite=true")) == 0
    assert sorted(p.name for p in copy.glob("step_*")) == ["step_1"]
    assert [r["step"] for r in read_metrics(copy)] == [0, 1, 1]  # before-eval, step 1, after-eval: no old lines


def test_prompt_limit_is_fitted_to_the_model_context(tiny_model_path):
    from transformers import AutoModelForCausalLM

    from ppo_core.run.setup import fit_prompt_len

    lm = AutoModelForCausalLM.from_pretrained(tiny_model_path)  # context: 256 positions
    cfg = load_config("cpu", ["data.max_prompt_len=512", "rollout.max_new_tokens=24"])
    with pytest.warns(UserWarning, match="exceed the model's context of 256 tokens"):
        fitted = fit_prompt_len(cfg, lm)
    assert fitted.data.max_prompt_len == 256 - 24 and cfg.data.max_prompt_len == 512  # the checked one stays
    cfg = load_config("cpu", ["data.max_prompt_len=100", "rollout.max_new_tokens=24"])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert fit_prompt_len(cfg, lm) is cfg  # fits: no warning, no change
    with pytest.raises(ConfigError, match="no room for a prompt"):
        fit_prompt_len(load_config("cpu", ["rollout.max_new_tokens=256"]), lm)


@pytest.mark.slow
def test_long_prompts_are_cut_from_the_left_with_a_warning(tiny_model_path, tmp_path):
    tr = _trainer(tiny_model_path, tmp_path, "data.max_prompt_len=12")
    with pytest.warns(
        UserWarning, match=r"prompt\(s\) longer than data.max_prompt_len=12 tokens were truncated from the left"
    ):
        m = tr.step()
    assert math.isfinite(m["loss/total"])


@pytest.mark.parametrize("pad", ["none", "eos"])
def test_tokenizer_without_a_distinct_pad_token_gets_one(pad, tmp_path):
    """Pad unset or equal to EOS: an existing never-generated special token (here ``<pad>``) becomes the pad."""
    from ppo_core.rollout import sample, score
    from ppo_core.run.setup import load_models
    from ppo_core.tasks.synthetic import SYNTHETIC_ALPHABET
    from ppo_core.tasks.tiny import build_char_tokenizer, build_tiny_model, save_tiny

    tok = build_char_tokenizer(SYNTHETIC_ALPHABET)
    model = build_tiny_model(
        tok, "llama", hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2
    )
    n_tokens = len(tok)
    tok.pad_token = None if pad == "none" else tok.eos_token
    path = save_tiny(model, tok, tmp_path / "model")
    cfg = load_config("cpu", [f"model.name_or_path={path}"])
    actor, ref, tokenizer, _ = load_models(cfg, torch.device("cpu"))
    assert tokenizer.pad_token_id is not None and tokenizer.pad_token_id != tokenizer.eos_token_id
    assert tokenizer.pad_token == "<pad>" and len(tokenizer) == n_tokens  # its own special token, no new one
    assert actor.lm.get_input_embeddings().num_embeddings >= len(tokenizer)
    ro = sample(actor.lm, tokenizer, ["Ann has 3 apples.\n", "Hi\n"], 6, 1.0)  # left padding uses the new token
    assert (ro.input_ids[1, 0] == tokenizer.pad_token_id).item()
    score(actor, ref, ro, 1.0, 2)
    assert torch.isfinite(ro.logprobs[ro.mask]).all()


def test_adamw8bit_falls_back_to_adamw_where_bitsandbytes_cannot_run(tiny_model_path, monkeypatch):
    from ppo_core.model import ActorWithValueHead
    from ppo_core.run import setup

    actor = ActorWithValueHead.from_pretrained(tiny_model_path)
    ppo = load_config("cpu", ["ppo.optimizer=adamw8bit"]).ppo

    class BrokenAdamW8bit(torch.optim.AdamW):  # imports, but its kernels cannot run on this device
        def step(self, closure=None):
            raise RuntimeError("no kernel for this device")

    broken = types.SimpleNamespace(optim=types.SimpleNamespace(AdamW8bit=BrokenAdamW8bit))
    for module, why in ((None, "ModuleNotFoundError"), (broken, "RuntimeError: no kernel for this device")):
        monkeypatch.setitem(sys.modules, "bitsandbytes", module)
        setup._bitsandbytes_error.cache_clear()
        with pytest.warns(UserWarning, match=f"bitsandbytes cannot run here \\({why}.*falling back to torch AdamW"):
            opt = setup.build_optimizer(actor, ppo)
        assert type(opt) is torch.optim.AdamW
    setup._bitsandbytes_error.cache_clear()


@pytest.mark.slow
def test_out_of_memory_is_one_line_naming_the_knobs(tiny_model_path, tmp_path, monkeypatch, capsys):
    def oom(self):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")

    monkeypatch.setattr(RunTrainer, "step", oom)
    assert main(_overrides(tiny_model_path, tmp_path / "run", 2, "train.eval_samples=1")) == 3
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: out of memory") and "\n" not in err
    for knob in (
        "rollout.generation_batch_size",
        "ppo.minibatch_size",
        "ppo.grad_accum_steps",
        "model.gradient_checkpointing",
    ):
        assert knob in err


# ---- NaN / inf -----------------------------------------------------------------------------------------


def _params(tr) -> torch.Tensor:
    return torch.cat([p.detach().flatten().clone() for p in tr.actor.parameters()])


@pytest.mark.slow
def test_nan_loss_update_is_skipped_counted_and_logged_at_once(tiny_model_path, tmp_path, monkeypatch):
    """A NaN policy loss: its updates are skipped (parameters untouched), counted, and the line is on disk."""
    import ppo_core.update as update

    tr = _trainer(tiny_model_path, tmp_path, "train.max_skipped_steps=2")
    real = update.policy_objective

    def nan_policy_loss(*args, **kwargs):
        loss, stats = real(*args, **kwargs)
        return loss * float("nan"), stats

    monkeypatch.setattr(update, "policy_objective", nan_policy_loss)
    before = _params(tr)
    with pytest.warns(UserWarning, match=r"step 1, epoch \d, minibatch \d: update skipped \(non-finite policy/loss"):
        m = tr.step()
    assert m["train/skipped"] == 4  # 2 epochs x 2 minibatches
    assert torch.equal(_params(tr), before)
    on_disk = _step_lines(tr.out)  # the logger is still open: the line was flushed when the step ended
    assert [r["step"] for r in on_disk] == [1] and on_disk[0]["train/skipped"] == 4

    monkeypatch.setattr(update, "policy_objective", real)
    assert tr.step()["train/skipped"] == 0 and not torch.equal(_params(tr), before)  # the streak resets
    monkeypatch.setattr(update, "policy_objective", nan_policy_loss)
    with pytest.warns(UserWarning, match="update skipped"):
        tr.step()
        with pytest.raises(NonFiniteError, match=r"steps 3-4: every update was skipped \(non-finite policy/loss\)"):
            tr.step()  # train.max_skipped_steps=2 all-skipped steps in a row: stop with a diagnosis


@pytest.mark.slow
def test_nan_gradient_update_is_skipped(tiny_model_path, tmp_path):
    tr = _trainer(tiny_model_path, tmp_path)
    hook = tr.actor.value_head.weight.register_hook(lambda g: g * float("nan"))  # finite losses, NaN gradient
    before = _params(tr)
    with pytest.warns(UserWarning, match=r"update skipped \(non-finite gradient \(train/grad_norm=nan\)\)"):
        m = tr.step()
    hook.remove()
    assert m["train/skipped"] == 4 and math.isfinite(m["loss/total"])
    assert torch.equal(_params(tr), before)


@pytest.mark.slow
def test_nan_gradients_stop_the_run_when_the_critic_has_extra_value_epochs(tiny_model_path, tmp_path):
    """ppo.value_epochs=3: 2 policy epochs then 1 critic-only epoch, 6 updates in all; a NaN gradient skips all 6,
    so the step counts towards train.max_skipped_steps like any step whose every update was skipped."""
    tr = _trainer(tiny_model_path, tmp_path, "ppo.value_epochs=3", "train.max_skipped_steps=1")
    hook = tr.actor.value_head.weight.register_hook(lambda g: g * float("nan"))
    with pytest.warns(UserWarning, match="update skipped"):
        with pytest.raises(NonFiniteError, match=r"steps 1-1: every update was skipped \(non-finite gradient"):
            tr.step()
    hook.remove()


@pytest.mark.slow
def test_nan_rollout_stops_before_the_update(tiny_model_path, tmp_path, monkeypatch):
    import ppo_core.trainer as trainer

    def nan_values(*args, **kwargs):
        ro = trainer_score(*args, **kwargs)
        with torch.inference_mode():
            ro.values[0, 0] = float("nan")  # e.g. a float16 overflow in the value head
        return ro

    trainer_score = trainer.score
    monkeypatch.setattr(trainer, "score", nan_values)
    tr = _trainer(tiny_model_path, tmp_path)
    before = _params(tr)
    with pytest.raises(NonFiniteError, match=r"step 1: the rollout's values hold NaN/inf before the update"):
        tr.step()
    assert torch.equal(_params(tr), before)


@pytest.mark.slow
def test_nan_parameters_stop_the_run_and_the_last_good_checkpoint_stays(tiny_model_path, tmp_path, monkeypatch, capsys):
    real = PPOTrainer.update

    def poisoned_update(self, *args):
        out = real(self, *args)
        if self.step_count == 1:  # the update of step 2 leaves a NaN weight (an overflowing optimizer step)
            self.actor.value_head.weight.data[0, 0] = float("nan")
        return out

    monkeypatch.setattr(PPOTrainer, "update", poisoned_update)
    out = tmp_path / "run"
    assert main(_overrides(tiny_model_path, out, 3)) == 3
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: step 2: parameter(s) value_head.weight hold NaN/inf") and "\n" not in err
    assert f"last good checkpoint: {out / 'step_1'}" in err
    assert latest_checkpoint(out) == out / "step_1" and not (out / "step_2").exists() and not (out / "final").exists()
    assert all(torch.isfinite(w).all() for w in _weights(out / "step_1").values())
    assert [r["step"] for r in _step_lines(out)] == [1, 2]  # the bad step's line is logged for diagnosis


@pytest.mark.slow
def test_save_refuses_nonfinite_parameters(tiny_model_path, tmp_path):
    tr = _trainer(tiny_model_path, tmp_path)
    tr.actor.lm.get_input_embeddings().weight.data[3, 0] = float("inf")
    with pytest.raises(NonFiniteError, match="refusing to save step_9.*embed_tokens.weight"):
        tr.save_checkpoint("step_9")
    assert sorted(p.name for p in tr.out.iterdir() if p.name != "effective_config.yaml") == []


# ---- interruption and resume -------------------------------------------------------------------------


@pytest.mark.slow
def test_sigint_and_sigterm_save_a_checkpoint_and_exit_cleanly(tiny_model_path, tmp_path):
    runs = {}
    for sig in (signal.SIGINT, signal.SIGTERM):  # both at once: two cores
        out = tmp_path / sig.name
        runs[sig] = (out, *_spawn(_overrides(tiny_model_path, out, 1000, "train.save_every=0"), tmp_path, sig.name))
    procs = [proc for _, proc, _ in runs.values()]
    # Both have logged step 1 (on disk) before either is signalled: waiting for the second while the first
    # has already exited would read as a run that ended too soon.
    for out, _, _ in runs.values():
        _wait_for(lambda out=out: _step_lines(out), procs)
    for sig, (_, proc, _) in runs.items():
        proc.send_signal(sig)
    for sig, (out, proc, err) in runs.items():
        assert proc.wait(timeout=90) == 128 + sig
        stderr = err.read_text()
        assert "Traceback" not in stderr, stderr
        n = _step_lines(out)[-1]["step"]
        assert [r["step"] for r in _step_lines(out)] == list(range(1, n + 1))
        assert checkpoint_step(out / f"step_{n}") == n  # complete, and it holds every logged step
        assert (
            f"{sig.name} at step {n}: saved {out / f'step_{n}'}; continue with train.resume=auto"
            in stderr.strip().splitlines()[-1]
        )
    out, _, _ = runs[signal.SIGTERM]
    n = _step_lines(out)[-1]["step"]
    assert main(_overrides(tiny_model_path, out, n + 1, "train.save_every=0", "train.resume=auto")) == 0
    assert [r["step"] for r in _step_lines(out)] == list(range(1, n + 2))
    assert checkpoint_step(out / "final") == n + 1


@pytest.mark.slow
def test_kill_9_during_a_save_then_resume_matches_the_uninterrupted_run(reference_run, tiny_model_path, tmp_path):
    out = tmp_path / "run"
    proc, err = _spawn(_overrides(tiny_model_path, out), tmp_path, "killed", pause_save=("step_2", 120))
    written = lambda: [*out.glob(".tmp-step_2-*/trainer_state.pt"), *out.glob("step_2/trainer_state.pt")]  # noqa: E731
    _wait_for(written, [proc])  # step_2 fully written (the pause hook holds it before the rename)
    time.sleep(0.2)
    proc.kill()  # SIGKILL: no handler, no cleanup
    assert proc.wait(timeout=30) == -signal.SIGKILL
    assert (
        latest_checkpoint(out) == out / "step_1" and not (out / "step_2").exists()
    )  # nothing looks complete but is not
    assert [r["step"] for r in _step_lines(out)] == [1, 2]  # step 2 was logged before its save
    assert main(_overrides(tiny_model_path, out, 3, "train.resume=auto")) == 0
    assert not list(out.glob(".tmp-*"))  # the unpublished folder is cleaned up
    assert _no_time(read_metrics(out)) == _no_time(read_metrics(reference_run))  # every line, step 0 to the end
    _assert_same_weights(out / "final", reference_run / "final")


@pytest.mark.slow
def test_resume_from_an_earlier_checkpoint_replays_the_same_steps(reference_run, tiny_model_path, tmp_path):
    """Resume from step_2 (the untrained model's value head is still 0 at step_1, so this one checks its restore)."""
    out = shutil.copytree(reference_run, tmp_path / "run")
    with pytest.warns(UserWarning, match="moved later checkpoints final, step_3 to abandoned"):
        assert main(_overrides(tiny_model_path, out, 3, f"train.resume={out / 'step_2'}")) == 0
    (aside,) = (out / "abandoned").iterdir()  # nothing of the abandoned attempt is deleted
    _assert_same_weights(aside / "final", reference_run / "final")
    assert (aside / "metrics.jsonl").read_text() == (reference_run / "metrics.jsonl").read_text()
    assert _no_time(read_metrics(out)) == _no_time(read_metrics(reference_run))
    _assert_same_weights(out / "final", reference_run / "final")
    _assert_same_weights(out / "step_3", reference_run / "step_3")


@pytest.mark.slow
def test_resuming_a_finished_run_does_nothing(reference_run, tiny_model_path, tmp_path):
    out = shutil.copytree(reference_run, tmp_path / "run")
    before = (out / "metrics.jsonl").read_text()
    assert main(_overrides(tiny_model_path, out, 3, "train.resume=auto")) == 0
    assert (out / "metrics.jsonl").read_text() == before


@pytest.mark.slow
def test_a_save_killed_between_its_two_renames_is_recovered(tmp_path):
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    pid = int(dead.stdout)  # a process that has exited
    (tmp_path / f".old-final-{pid}").mkdir()  # final/ was moved aside, the new one not yet renamed in
    (tmp_path / f".old-final-{pid}" / "trainer_state.pt").write_text("x")
    (tmp_path / f".tmp-final-{pid}").mkdir()
    (tmp_path / f".tmp-step_5-{os.getpid()}").mkdir()  # our own leftover: also stale
    recover_interrupted_saves(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["final"]
    assert (tmp_path / "final" / "trainer_state.pt").read_text() == "x"


# ---- determinism and disk ------------------------------------------------------------------------------


@pytest.mark.slow
def test_same_seed_gives_identical_metrics_files(reference_run, tiny_model_path, tmp_path):
    out = tmp_path / "again"
    assert main(_overrides(tiny_model_path, out)) == 0
    a, b = read_metrics(reference_run), read_metrics(out)
    assert len(a) == 5 and _no_time(a) == _no_time(b)  # every key but wall-clock time/*
    assert len({r["loss/total"] for r in a if "loss/total" in r}) == 3  # steps differ: the comparison has teeth
    _assert_same_weights(out / "final", reference_run / "final")


@pytest.mark.slow
def test_keep_last_prunes_older_checkpoints(reference_run):
    assert sorted(p.name for p in reference_run.iterdir() if checkpoint_step(p) is not None) == [
        "final",
        "step_2",
        "step_3",
    ]


def test_prune_keeps_the_newest_steps_by_number_not_by_name(tmp_path):
    """step_10 is newer than step_5 though it sorts before it as text: keep_last=2 keeps step_10 and step_20."""
    from ppo_core.run.checkpoint import prune

    for name in ("step_5", "step_10", "step_20", "final"):
        (tmp_path / name).mkdir()
    prune(tmp_path, keep_last=2)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["final", "step_10", "step_20"]


def test_resume_warns_about_another_seed_but_not_about_more_steps():
    """A resume that changes train.seed leaves the trajectory (prompts, sampling): it is named; train.steps,
    save_every and output_dir may change freely."""
    from ppo_core.run.checkpoint import config_changes
    from ppo_core.run.config import to_dict

    saved = to_dict(load_config("cpu"))
    now = to_dict(load_config("cpu", ["train.seed=1", "train.steps=80", "train.save_every=5", "train.output_dir=x"]))
    assert config_changes(saved, now) == ["train.seed (0 -> 1)"]


@pytest.mark.slow
def test_a_step_with_only_some_updates_skipped_does_not_count_towards_the_stop(tiny_model_path, tmp_path, monkeypatch):
    """train.max_skipped_steps counts steps whose *every* update was skipped: one NaN minibatch out of four is not."""
    import ppo_core.update as update

    tr = _trainer(tiny_model_path, tmp_path, "train.max_skipped_steps=1")
    real, poisoned = update.policy_objective, set()

    def first_minibatch_nan(*args, **kwargs):
        loss, stats = real(*args, **kwargs)
        if tr.step_count in poisoned:
            return loss, stats
        poisoned.add(tr.step_count)  # the first minibatch update of each step
        return loss * float("nan"), stats

    monkeypatch.setattr(update, "policy_objective", first_minibatch_nan)
    with pytest.warns(UserWarning, match="update skipped"):
        assert [tr.step()["train/skipped"] for _ in range(2)] == [1.0, 1.0]  # no NonFiniteError


@pytest.mark.slow
def test_evaluate_scores_a_checkpoint_with_its_runs_own_config(reference_run):
    """``python -m ppo_core.evaluate RUN/final`` reads RUN/effective_config.yaml: the run's 8 held-out problems and
    its settings, so it repeats the run's own final evaluation."""
    from ppo_core.run.evaluation import evaluate_checkpoint

    got = evaluate_checkpoint(str(reference_run / "final"))
    summary = json.loads((reference_run / "summary.json").read_text())
    assert got == {
        "sampled_accuracy": summary["after/sampled_accuracy"],
        "greedy_accuracy": summary["after/greedy_accuracy"],
        "n": 8,
    }
