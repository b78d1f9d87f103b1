"""Helpers shared by test modules. A plain module with a unique name: `from conftest import ...` would
resolve to whichever conftest.py (tests/ or exercises/) was imported last."""


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
