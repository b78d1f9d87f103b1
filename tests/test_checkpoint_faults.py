"""Faults a user meets with checkpoints: a damaged file, a full disk, a killed save. Each is survived with one
line on stderr and nothing lost (``ppo_core/run/manifest.py``, ``run/checkpoint.py``, ``run/resume.py``).

Runs use the session's tiny untrained model (conftest.py): 4 steps, a checkpoint every 2.
"""

import errno
import json
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from ppo_test_support import _tiny_overrides
from safetensors.torch import load_file

from ppo_core.run import checkpoint
from ppo_core.run.checkpoint import CheckpointWriteError, latest_intact_checkpoint, write_atomically
from ppo_core.run.cli import evaluate_main
from ppo_core.run.manifest import MANIFEST, damage, is_write_failure
from ppo_core.run.metrics import read_metrics
from ppo_core.train import main

RUN = ("train.save_every=2", "train.keep_last=5", "train.num_threads=1", "train.tensorboard=false")


def _overrides(model, out, *extra) -> list[str]:
    return _tiny_overrides(model, out, 4, *RUN, *extra)


pytestmark = pytest.mark.usefixtures("restore_threads")  # in-process runs set train.num_threads=1


@pytest.fixture(scope="module")
def reference_run(tiny_model_path, tmp_path_factory) -> Path:
    """An uninterrupted 4-step run: step_2, step_4, final."""
    out = tmp_path_factory.mktemp("reference") / "run"
    assert main(_overrides(tiny_model_path, out)) == 0
    return out


@pytest.fixture
def killed_after_step_4(reference_run, tmp_path) -> Path:
    """The reference run as a run stopped right after saving step_4: no final/, no summary, no after-eval line."""
    out = shutil.copytree(reference_run, tmp_path / "run")
    shutil.rmtree(out / "final")
    (out / "summary.json").unlink()
    lines = (out / "metrics.jsonl").read_text().splitlines()
    (out / "metrics.jsonl").write_text("".join(line + "\n" for line in lines[:-1]))  # the after-eval line
    return out


def _no_time(records: list[dict]) -> list[dict]:
    return [{k: v for k, v in r.items() if not k.startswith("time/")} for r in records]


def _same_weights(a: Path, b: Path) -> bool:
    wa, wb = load_file(a / "model.safetensors"), load_file(b / "model.safetensors")
    return wa.keys() == wb.keys() and all(torch.equal(wa[k], wb[k]) for k in wa)


def _listing(out: Path) -> dict:
    """Every file under ``out`` with its bytes: to show that a refused command wrote nothing."""
    return {p.relative_to(out).as_posix(): p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()}


def _one_error_line(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "\n" not in err and "Traceback" not in err, err
    return err


# ---- the faults, done to a checkpoint folder -----------------------------------------------------------


def _truncate_weights(ckpt: Path) -> str:
    path = ckpt / "model.safetensors"
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])  # a copy cut short
    return "model.safetensors"


def _drop_optimizer(ckpt: Path) -> str:
    (ckpt / "optimizer.pt").unlink()
    return "optimizer.pt"


def _manifest_disagrees(ckpt: Path) -> str:
    path = ckpt / "trainer_state.json"  # same size, other bytes: only the hash can tell
    path.write_text(path.read_text().replace('"step": 4', '"step": 5'))
    return "trainer_state.json"


FAULTS = {"truncated weights": _truncate_weights, "missing optimizer": _drop_optimizer}
MANIFEST_FAULTS = {**FAULTS, "manifest disagrees": _manifest_disagrees}


def test_every_checkpoint_has_a_manifest_of_all_its_files(reference_run):
    for ckpt in (reference_run / "step_2", reference_run / "step_4", reference_run / "final"):
        listed = json.loads((ckpt / MANIFEST).read_text())["files"]
        on_disk = {p.relative_to(ckpt).as_posix() for p in ckpt.rglob("*") if p.is_file() and p.name != MANIFEST}
        assert set(listed) == on_disk and {"model.safetensors", "optimizer.pt", "trainer_state.pt"} <= on_disk
        assert all(entry["size"] == (ckpt / name).stat().st_size for name, entry in listed.items())
        assert damage(ckpt) is None


@pytest.mark.parametrize("fault", list(MANIFEST_FAULTS))
def test_damage_names_the_file(fault, reference_run, tmp_path):
    ckpt = shutil.copytree(reference_run / "step_4", tmp_path / "step_4")
    name = MANIFEST_FAULTS[fault](ckpt)
    why = damage(ckpt)
    assert why is not None and why.startswith(str(ckpt / name)) and "\n" not in why, why


@pytest.mark.parametrize("fault", list(FAULTS))
def test_damage_without_a_manifest_is_found_by_reading(fault, reference_run, tmp_path):
    """A checkpoint saved before manifests existed: intact, it passes; damaged, the file is named."""
    ckpt = shutil.copytree(reference_run / "step_4", tmp_path / "step_4")
    (ckpt / MANIFEST).unlink(missing_ok=True)
    assert damage(ckpt) is None
    name = FAULTS[fault](ckpt)
    why = damage(ckpt)
    assert why is not None and why.startswith(str(ckpt / name)), why


@pytest.mark.parametrize("fault", list(MANIFEST_FAULTS))
def test_explicit_resume_of_a_damaged_checkpoint_is_one_line_exit_2_and_writes_nothing(
    fault, killed_after_step_4, tiny_model_path, capsys
):
    out = killed_after_step_4
    name = MANIFEST_FAULTS[fault](out / "step_4")
    before = _listing(out)
    assert main(_overrides(tiny_model_path, out, f"train.resume={out / 'step_4'}")) == 2
    err = _one_error_line(capsys)
    assert f"train.resume={out / 'step_4'} is damaged: {out / 'step_4' / name}" in err, err
    assert _listing(out) == before


@pytest.mark.parametrize("fault", list(MANIFEST_FAULTS))
def test_evaluate_of_a_damaged_checkpoint_is_one_line_exit_2(fault, reference_run, tmp_path, capsys):
    out = shutil.copytree(reference_run, tmp_path / "run")
    name = MANIFEST_FAULTS[fault](out / "final")
    before = _listing(out)
    assert evaluate_main([str(out / "final")]) == 2
    assert f"{out / 'final'} is damaged: {out / 'final' / name}" in _one_error_line(capsys)
    assert _listing(out) == before


def test_resume_auto_skips_a_damaged_checkpoint_and_the_run_ends_as_if_uninterrupted(
    reference_run, killed_after_step_4, tiny_model_path
):
    out = killed_after_step_4
    _truncate_weights(out / "step_4")
    with pytest.warns(UserWarning, match=r"skipping the damaged checkpoint step_4 \(.*model.safetensors: \d+ bytes"):
        assert main(_overrides(tiny_model_path, out, "train.resume=auto")) == 0
    assert _no_time(read_metrics(out)) == _no_time(read_metrics(reference_run))  # resumed from step_2
    assert _same_weights(out / "final", reference_run / "final") and damage(out / "step_4") is None
    (aside,) = (out / "abandoned").iterdir()  # the damaged one is moved aside, not deleted
    assert (aside / "step_4" / "model.safetensors").is_file()


def test_resume_auto_with_a_damaged_final_of_the_last_step_saves_a_new_one(reference_run, tmp_path, tiny_model_path):
    """final/ and step_4 hold the same step: resuming step_4 must not keep the damaged final/ as done."""
    out = shutil.copytree(reference_run, tmp_path / "run")
    _truncate_weights(out / "final")
    with pytest.warns(UserWarning, match="skipping the damaged checkpoint final"):
        assert main(_overrides(tiny_model_path, out, "train.resume=auto")) == 0
    assert damage(out / "final") is None and _same_weights(out / "final", reference_run / "final")


def test_resume_auto_with_no_intact_checkpoint_is_one_line(killed_after_step_4, tiny_model_path, capsys):
    out = killed_after_step_4
    _truncate_weights(out / "step_4")
    _drop_optimizer(out / "step_2")
    before = _listing(out)
    with pytest.warns(UserWarning, match="skipping"):
        assert main(_overrides(tiny_model_path, out, "train.resume=auto")) == 2
    err = _one_error_line(capsys)
    assert "no intact checkpoint" in err and "step_4, step_2" in err, err
    assert _listing(out) == before


def test_a_checkpoint_without_a_manifest_still_resumes(reference_run, killed_after_step_4, tiny_model_path):
    out = killed_after_step_4
    for ckpt in (out / "step_2", out / "step_4"):
        (ckpt / MANIFEST).unlink(missing_ok=True)
    assert main(_overrides(tiny_model_path, out, f"train.resume={out / 'step_4'}")) == 0
    assert _no_time(read_metrics(out)) == _no_time(read_metrics(reference_run))


# ---- a full disk during a save -------------------------------------------------------------------------


def test_a_full_disk_during_a_save_stops_with_one_line_exit_3_and_resume_continues(
    reference_run, tiny_model_path, tmp_path, monkeypatch, capsys
):
    out, real_save = tmp_path / "run", torch.save

    def full_disk(obj, f, *args, **kwargs):
        if Path(f).name == "optimizer.pt" and Path(f).parent.name.startswith(".tmp-step_4"):
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_save(obj, f, *args, **kwargs)

    monkeypatch.setattr(torch, "save", full_disk)
    assert main(_overrides(tiny_model_path, out)) == 3
    err = _one_error_line(capsys)
    assert f"could not write {out / 'step_4'}" in err and "No space left on device" in err, err
    assert f"the last checkpoint {out / 'step_2'} is intact" in err and "train.resume=auto" in err, err
    assert sorted(p.name for p in out.iterdir() if p.is_dir()) == ["step_2"]  # no half-written folder left
    assert damage(out / "step_2") is None
    monkeypatch.undo()
    assert main(_overrides(tiny_model_path, out, "train.resume=auto")) == 0
    assert _no_time(read_metrics(out)) == _no_time(read_metrics(reference_run))
    assert _same_weights(out / "final", reference_run / "final")


def test_a_failed_save_keeps_the_checkpoint_it_would_replace(tmp_path):
    write_atomically(tmp_path, "final", lambda tmp: (tmp / "trainer_state.pt").write_text("old"))

    def full(tmp):
        (tmp / "trainer_state.pt").write_text("new, half")
        raise OSError(errno.ENOSPC, "No space left on device")

    with pytest.raises(CheckpointWriteError, match=f"the last checkpoint {tmp_path / 'final'} is intact"):
        write_atomically(tmp_path, "final", full)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["final"]
    assert (tmp_path / "final" / "trainer_state.pt").read_text() == "old" and damage(tmp_path / "final") is None


def test_a_bug_in_a_save_is_not_reported_as_a_full_disk(tmp_path):
    def bug(tmp):
        (tmp / "a.txt").write_text("x")
        raise TypeError("a bug")

    with pytest.raises(TypeError):
        write_atomically(tmp_path, "step_1", bug)
    assert list(tmp_path.iterdir()) == []  # its temporary folder is removed all the same


def test_the_disks_errors_as_the_writers_raise_them():
    """A full disk as torch.save and safetensors report it (measured on a 1 MiB tmpfs), and what is a bug."""
    from safetensors import SafetensorError

    assert is_write_failure(OSError(errno.ENOSPC, "No space left on device"))
    assert is_write_failure(RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 576 vs 534"))
    full = "Error while serializing: I/O error: No space left on device (os error 28)"
    assert is_write_failure(SafetensorError(full))
    assert not is_write_failure(RuntimeError("mat1 and mat2 shapes cannot be multiplied"))
    assert not is_write_failure(TypeError("a bug"))


# ---- kill -9 in the middle of a save -------------------------------------------------------------------

KILLED_MID_SAVE = """
import sys, time, torch
from pathlib import Path
from ppo_core.train import main

real_save = torch.save

def slow_save(obj, f, *args, **kwargs):
    if Path(f).name == "optimizer.pt" and Path(f).parent.name.startswith(".tmp-step_4"):
        Path(f).write_bytes(b"half an optimizer")
        time.sleep(120)  # weights written, optimizer half: the moment of the kill
    return real_save(obj, f, *args, **kwargs)

torch.save = slow_save
sys.exit(main(sys.argv[1:]))
"""


@pytest.mark.slow
def test_kill_9_mid_save_leaves_a_folder_resume_auto_never_chooses(reference_run, tiny_model_path, tmp_path):
    out = tmp_path / "run"
    proc = subprocess.Popen(
        [sys.executable, "-c", KILLED_MID_SAVE, *_overrides(tiny_model_path, out)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 120
        while not list(out.glob(".tmp-step_4-*/optimizer.pt")):
            assert proc.poll() is None and time.monotonic() < deadline, "the run ended before the save"
            time.sleep(0.05)
        proc.kill()  # SIGKILL: no handler, no cleanup
        assert proc.wait(timeout=30) == -signal.SIGKILL
    finally:
        if proc.poll() is None:
            proc.kill()
    (half,) = out.glob(".tmp-step_4-*")
    assert (half / "model.safetensors").is_file() and not (out / "step_4").exists()
    assert latest_intact_checkpoint(out) == (out / "step_2", [])  # not even considered
    assert main(_overrides(tiny_model_path, out, "train.resume=auto")) == 0
    assert not half.exists()
    assert _no_time(read_metrics(out)) == _no_time(read_metrics(reference_run))
    assert _same_weights(out / "final", reference_run / "final")


# ---- the commands a user types -------------------------------------------------------------------------


@pytest.mark.slow
def test_the_commands_print_one_line_for_a_truncated_checkpoint(killed_after_step_4, tiny_model_path):
    """``python -m ppo_core.train train.resume=...`` and ``python -m ppo_core.evaluate ...`` as processes."""
    out = killed_after_step_4
    _truncate_weights(out / "step_4")
    commands = {
        "train": ["-m", "ppo_core.train", *_overrides(tiny_model_path, out, f"train.resume={out / 'step_4'}")],
        "evaluate": ["-m", "ppo_core.evaluate", str(out / "step_4")],
    }
    for argv in commands.values():
        proc = subprocess.run([sys.executable, *argv], capture_output=True, text=True, timeout=120)
        assert proc.returncode == 2, proc.stderr[-2000:]
        err = proc.stderr.strip()
        assert err.count("\n") == 0 and "Traceback" not in err and str(out / "step_4" / "model.safetensors") in err


def test_checkpoint_module_writes_the_manifest_last(tmp_path, monkeypatch):
    """The manifest hashes the files as they are when the folder is published: nothing is written after it."""
    order = []
    real = checkpoint.write_manifest
    monkeypatch.setattr(checkpoint, "write_manifest", lambda tmp: (order.append("manifest"), real(tmp)))
    write_atomically(tmp_path, "step_1", lambda tmp: (order.append("files"), (tmp / "a.txt").write_text("a")))
    assert order == ["files", "manifest"] and damage(tmp_path / "step_1") is None


# ---- LoRA and reward-model checkpoints -------------------------------------------------------------------


def test_a_lora_checkpoint_has_a_manifest_and_a_damaged_one_is_refused(tiny_model_path, tmp_path, capsys):
    from ppo_core.run.config import load_config
    from ppo_core.run.runner import RunTrainer

    lora = ("model.lora.r=4", "model.lora.alpha=8", "ppo.separate_critic=false")
    tr = RunTrainer(load_config("cpu", _tiny_overrides(tiny_model_path, tmp_path / "run", 2, *RUN, *lora)))
    path = tr.save_checkpoint("step_1")
    tr.logger.close()
    assert "adapter_model.safetensors" in json.loads((path / MANIFEST).read_text())["files"] and damage(path) is None
    _truncate(path / "adapter_model.safetensors")
    assert damage(path).startswith(f"{path / 'adapter_model.safetensors'}: ")
    (path / MANIFEST).unlink()  # and as a checkpoint saved before manifests existed
    assert damage(path).startswith(f"{path / 'adapter_model.safetensors'}: unreadable")
    capsys.readouterr()  # the trainer's loading bars
    assert evaluate_main([str(path)]) == 2
    assert f"{path} is damaged: {path / 'adapter_model.safetensors'}" in _one_error_line(capsys)


def _truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def _rm_args(out, model, *extra) -> list[str]:
    pairs = Path(__file__).parent / "fixtures" / "pairs.jsonl"
    return [f"data.source={pairs}", f"model.init={model}", f"train.output_dir={out}", "train.batch_size=4",
            "data.eval_pairs=2", "train.progress=false", "train.steps=2", "train.save_every=1", *extra]  # fmt: skip


def test_reward_model_checkpoints_have_manifests_and_survive_the_same_faults(
    tiny_model_path, tmp_path, monkeypatch, capsys
):
    from ppo_core.run.config import ConfigError, load_config
    from ppo_core.run.setup import load_reward_model
    from ppo_core.train_rm import main as train_rm

    out, real_save = tmp_path / "rm", torch.save

    def full_disk(obj, f, *args, **kwargs):
        if Path(f).parent.name.startswith(".tmp-final"):
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_save(obj, f, *args, **kwargs)

    monkeypatch.setattr(torch, "save", full_disk)
    assert train_rm(_rm_args(out, tiny_model_path)) == 3  # a full disk at final/: step_1 stays
    err = _one_error_line(capsys)
    assert f"could not write {out / 'final'}" in err and f"the last checkpoint {out / 'step_1'} is intact" in err
    monkeypatch.undo()
    assert damage(out / "step_1") is None and (out / "step_1" / MANIFEST).is_file()
    assert train_rm(_rm_args(out, tiny_model_path, "train.resume=auto")) == 0
    assert damage(out / "final") is None and (out / "final" / MANIFEST).is_file()
    _truncate(out / "final" / "model.safetensors")
    assert train_rm(_rm_args(out, tiny_model_path, f"train.resume={out / 'final'}")) == 2
    assert f"is damaged: {out / 'final' / 'model.safetensors'}" in _one_error_line(capsys)
    ppo = load_config("cpu", ["reward.type=model", f"reward.path={out / 'final'}"])  # a PPO run scored by it
    with pytest.raises(ConfigError, match=f"reward.path={out / 'final'} is damaged: {out / 'final'}/model.safetensors"):
        load_reward_model(ppo, torch.device("cpu"))
    with pytest.warns(UserWarning, match="skipping the damaged checkpoint final"):
        assert train_rm(_rm_args(out, tiny_model_path, "train.resume=auto")) == 0  # from step_1
    assert damage(out / "final") is None


def test_without_xxhash_the_manifest_uses_sha256_and_says_what_it_needs(tmp_path, monkeypatch):
    from ppo_core.run import manifest

    (tmp_path / "a.bin").write_bytes(b"abcd")
    monkeypatch.setattr(manifest, "HASHERS", {"sha256": manifest.hashlib.sha256})
    manifest.write_manifest(tmp_path)
    assert json.loads((tmp_path / MANIFEST).read_text())["algorithm"] == "sha256" and damage(tmp_path) is None
    (tmp_path / "a.bin").write_bytes(b"abce")  # same size, one byte changed
    assert (
        damage(tmp_path)
        == f"{tmp_path / 'a.bin'}: contents differ from the manifest's hash (damaged or changed after the save)"
    )
    written = json.loads((tmp_path / MANIFEST).read_text())
    (tmp_path / MANIFEST).write_text(json.dumps({**written, "algorithm": "xxh3_128"}))
    assert "hashed with xxh3_128, which is not installed here (pip install xxhash)" in damage(tmp_path)
