"""Helpers shared by test modules. A plain module with a unique name: `from conftest import ...` would
resolve to whichever conftest.py (tests/ or exercises/) was imported last."""

import importlib.util


def skip_module_unless_installed(*names: str) -> None:
    """Skip the calling test module if a package is missing, found without importing it (peft takes seconds to
    import, in every worker, at collection)."""
    import pytest

    for name in names:
        if importlib.util.find_spec(name) is None:
            pytest.skip(f"{name} is not installed", allow_module_level=True)


def _tiny_overrides(model_path: str, out_dir, steps: int = 2, *extra: str) -> list[str]:
    return [
        f"model.name_or_path={model_path}",
        f"train.output_dir={out_dir}",
        f"train.steps={steps}",
        "rollout.batch_size=8",
        "ppo.minibatch_size=4",
        "rollout.max_new_tokens=8",
        "data.n_train=64",
        "data.n_test=16",
        "train.eval_samples=8",
        "train.progress=false",
        *extra,
    ]


def resumed_run_repeats_the_full_one(make, tmp_path, stop_after: int):
    """Train ``make(out)`` (a PPOTrainer in folder ``out``) in full; train another, stop after ``stop_after`` steps,
    save ``step_<stop_after>`` and resume it from a third trainer. Asserts the resumed run logs the full run's
    metrics (wall times aside); returns (the full trainer, its logged PPO steps)."""
    from ppo_core.run.metrics import read_metrics

    full = make(tmp_path / "a")
    full.reward_fn = lambda completion, answer: float(len(completion) % 3)
    full.train()
    want = [r for r in read_metrics(full.out) if "rollout/reward_mean" in r]
    stopped = make(tmp_path / "b")
    stopped.reward_fn = full.reward_fn
    for _ in range(stop_after):
        stopped.step()
    stopped.save_checkpoint(f"step_{stop_after}")
    stopped.logger.close()
    again = make(tmp_path / "b", f"train.resume={stopped.out / f'step_{stop_after}'}")
    again.reward_fn = full.reward_fn
    again.train()
    got = [r for r in read_metrics(again.out) if "rollout/reward_mean" in r]
    strip = lambda rs: [{k: v for k, v in r.items() if not k.startswith("time/")} for r in rs]  # noqa: E731
    assert strip(got) == strip(want)
    return full, want


def resuming_with_the_other_setting_fails(make, tmp_path, key: str, values=("true", "false")) -> list:
    """A checkpoint saved with ``key=`` one of ``values`` refuses a run with the other and the other way round: a
    one-line ConfigError naming the setting to resume with, after the warning that names the config's change.
    ``make(out, *overrides)`` builds a PPOTrainer whose overrides come last. Returns the two errors' texts."""
    import pytest

    from ppo_core.run.config import ConfigError

    differ, errors = pytest.warns(UserWarning, match="differ from its run"), []
    for saved, other in (values, values[::-1]):
        tr = make(tmp_path / f"saved_{saved}", f"{key}={saved}")
        path = tr.save_checkpoint("step_0")
        tr.logger.close()
        with pytest.raises(ConfigError, match=f"{key}={saved}") as err, differ:
            make(tmp_path / f"resumed_{other}", f"{key}={other}", f"train.resume={path}")
        assert "\n" not in str(err.value)
        errors.append(str(err.value))
    return errors


def gsm8k_folder(tmp_path):
    """The committed GSM8K fixture split into a data folder (train.jsonl: 7 records, test.jsonl: the rest)."""
    from pathlib import Path

    lines = (Path(__file__).parent / "fixtures" / "gsm8k_tiny.jsonl").read_text().splitlines()
    data = Path(tmp_path) / "gsm8k"
    data.mkdir()
    (data / "train.jsonl").write_text("\n".join(lines[:7]) + "\n")
    (data / "test.jsonl").write_text("\n".join(lines[7:]) + "\n")
    return data
