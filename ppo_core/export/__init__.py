"""Moving to a cluster: the same run on veRL or OpenRLHF, written from a run folder or a preset.

    python -m ppo_core.export verl outputs/cuda            # a run folder (its effective_config.yaml)
    python -m ppo_core.export openrlhf cuda model.name_or_path=Qwen/Qwen2.5-0.5B-Instruct

writes the engine's settings (veRL: Hydra overrides for ``verl.trainer.main_ppo``; OpenRLHF: the arguments of
``openrlhf.cli.train_ppo_ray``), the data in its format, the reward hook (``reward_fn.py``, ppo_core's own GSM8K
scorer), ``run.sh`` and ``unmapped.txt`` (every key with no counterpart, with its reason). The mapping is one
table, ``table.ROWS``; book/big_trainers.md is generated from it. Every mapped key is written, defaults included.
"""

import inspect
import json
from dataclasses import dataclass, field
from pathlib import Path

from ..tasks import rewards
from ..tasks.data import build_prompt, chat_messages, gold_number
from ..tasks.smollm import is_smollm, smollm_folder
from ..utils import dotted_get
from .cells import Ctx, Gap, Same
from .table import CRITIC_FIXED, OPENRLHF_FIXED, OPENRLHF_VERSION, ROWS, VERL_FIXED, VERL_VERSION

__all__ = ["TARGETS", "Export", "export", "settings_for", "hydra_value", "records_for"]

TARGETS = ("verl", "openrlhf")
ENTRY = {"verl": "python3 -m verl.trainer.main_ppo", "openrlhf": "python3 -m openrlhf.cli.train_ppo_ray"}
VERSION = {"verl": VERL_VERSION, "openrlhf": OPENRLHF_VERSION}
REWARD_HOOKS = '''

# The engines' entry points (written by python -m ppo_core.export).
def compute_score(data_source, solution_str, ground_truth, extra_info=None):
    """veRL's custom reward function (reward.custom_reward_function): the score of one response."""
    return gsm8k_reward(solution_str, ground_truth)


def reward_func(queries, prompts, labels):
    """OpenRLHF's reward function (--reward.remote_url reward_fn.py): queries are prompt + response."""
    import torch

    responses = [q[len(p) :] if q.startswith(p) else q for q, p in zip(queries, prompts)]
    scores = torch.tensor([gsm8k_reward(r, label) for r, label in zip(responses, labels)], dtype=torch.float)
    return {"rewards": scores, "scores": scores, "extra_logs": {}}
'''


@dataclass
class Export:
    """What one export wrote: the engine settings, the keys with no counterpart and those left to the engine."""

    target: str
    settings: dict = field(default_factory=dict)
    gaps: dict = field(default_factory=dict)  # our key -> reason
    same: dict = field(default_factory=dict)  # our key -> why nothing is written
    mapped: dict = field(default_factory=dict)  # our key -> the engine keys it wrote
    files: dict = field(default_factory=dict)


def records_for(cfg) -> tuple[list[dict], list[dict]]:
    """The run's train and test records (the test split cut to what the run evaluates)."""
    from ..run.setup import load_task

    train, test, _, _ = load_task(cfg)
    return train, test[: min(cfg.data.n_test, cfg.train.eval_samples)]


def _messages(cfg, question: str) -> list[dict]:
    return chat_messages(question) if cfg.data.prompt_style == "chat" else [{"role": "user", "content": question}]


def _verl_rows(cfg, records: list[dict], split: str) -> list[dict]:
    """veRL's RL dataset rows, as its examples/data_preprocess/gsm8k.py writes them."""
    source = "openai/gsm8k" if cfg.data.task == "gsm8k" else f"ppo_core/{cfg.data.task}"
    return [
        {
            "data_source": source,
            "prompt": _messages(cfg, r["question"]),
            "ability": "math",
            "reward_model": {"style": "rule", "ground_truth": gold_number(r["answer"])},
            "extra_info": {"split": split, "index": i, "question": r["question"], "answer": r["answer"]},
        }
        for i, r in enumerate(records)
    ]


def _openrlhf_rows(cfg, records: list[dict]) -> list[dict]:
    """OpenRLHF's prompt dataset: --data.input_key input (a prompt or chat messages), --data.label_key label."""
    chat = cfg.data.prompt_style == "chat"
    return [
        {
            "input": _messages(cfg, r["question"]) if chat else build_prompt(r["question"]),
            "label": gold_number(r["answer"]),
        }
        for r in records
    ]


def write_data(cfg, target: str, out: Path, train: list[dict], test: list[dict]) -> dict:
    """The data files and the reward hook; returns their absolute paths by role."""
    data = out / "data"
    data.mkdir(parents=True, exist_ok=True)
    files = {}
    for split, records in (("train", train), ("test", test)):
        if target == "verl":
            import pyarrow as pa
            import pyarrow.parquet as pq

            path = data / f"{split}.parquet"
            pq.write_table(pa.Table.from_pylist(_verl_rows(cfg, records, split)), path)
        else:
            path = data / f"{split}.jsonl"
            path.write_text("".join(json.dumps(row) + "\n" for row in _openrlhf_rows(cfg, records)))
        files[split] = str(path.resolve())
    reward = out / "reward_fn.py"
    reward.write_text(inspect.getsource(rewards) + REWARD_HOOKS)
    files["reward"] = str(reward.resolve())
    return files


def settings_for(cfg, target: str, files: dict, n_train: int, gpus: int = 1) -> Export:
    """Walk the table for one run: the engine settings, with every key that has none listed with its reason."""
    model = None if cfg.model.name_or_path == "tiny" else cfg.model.name_or_path
    if is_smollm(cfg.model.name_or_path):  # the folder built from the GGUF file: the engines read it as any folder
        model = str(smollm_folder(cfg.warmstart.cache_dir)[0])
    ctx = Ctx(cfg, model, n_train, files)
    result = Export(target, files=dict(files))
    fixed = dict(VERL_FIXED if target == "verl" else OPENRLHF_FIXED)
    if ctx.critic:
        fixed.update(CRITIC_FIXED[target])
    if target == "verl":
        fixed.update({"trainer.n_gpus_per_node": gpus, "actor_rollout_ref.rollout.tensor_model_parallel_size": 1})
    else:
        fixed.update({f"--{role}.num_gpus_per_node": gpus for role in ("actor", "critic", "ref", "reward")})
        fixed.update({"--vllm.num_engines": gpus, "--train.colocate_all": True})
    result.settings.update(fixed)
    for row in ROWS:
        out = getattr(row, target)(ctx, ctx.get(row.key))
        if isinstance(out, Gap):
            result.gaps[row.key] = out.reason
        elif isinstance(out, Same):
            result.same[row.key] = out.reason
        else:
            result.mapped[row.key] = list(out)
            for name, value in out.items():
                if name in result.settings and result.settings[name] != value:
                    raise AssertionError(f"{row.key} writes {name}={value!r}, already {result.settings[name]!r}")
                result.settings[name] = value
    return result


def hydra_value(value) -> str:
    """A value as a Hydra command-line override writes it."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, list):
        return "[" + ",".join(hydra_value(v) for v in value) + "]"
    if isinstance(value, str) and not all(c.isalnum() or c in "/._-~:@+" for c in value):
        return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"
    return str(value)


def _openrlhf_args(settings: dict) -> list[str]:
    lines = []
    for flag, value in settings.items():
        if value is True:
            lines.append(flag)
        elif isinstance(value, list):
            lines.append(" ".join([flag, *map(str, value)]))
        elif value is not False:
            lines.append(f"{flag} {value}")
    return lines


def _run_script(target: str, settings_file: str) -> str:
    collect = 'ARGS+=("$line")' if target == "verl" else 'read -ra parts <<< "$line"; ARGS+=("${parts[@]}")'
    return f"""#!/usr/bin/env bash
# {target} {VERSION[target]}: the exported run. Needs {target} installed (and a GPU); extra arguments are appended.
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
mapfile -t LINES < <(grep -v '^#' "$HERE/{settings_file}")
ARGS=()
for line in "${{LINES[@]}}"; do {collect}; done
exec {ENTRY[target]} "${{ARGS[@]}}" "$@"
"""


def export(cfg, target: str, out: Path, gpus: int = 1, source: str = "") -> Export:
    """Write ``out``: the settings file, run.sh, the data, reward_fn.py and unmapped.txt."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    train, test = records_for(cfg)
    files = write_data(cfg, target, out, train, test)
    result = settings_for(cfg, target, files, len(train), gpus)
    header = (
        f"# {target} {VERSION[target]} settings exported by python -m ppo_core.export from {source or 'a config'}\n"
    )
    if target == "verl":
        name, lines = "overrides.txt", [f"{k}={hydra_value(v)}" for k, v in result.settings.items()]
    else:
        name, lines = "args.txt", _openrlhf_args(result.settings)
    (out / name).write_text(header + "\n".join(lines) + "\n")
    script = out / "run.sh"
    script.write_text(_run_script(target, name))
    script.chmod(0o755)
    notes = [f"# ppo_core keys with no {target} counterpart: key = value: reason"]
    notes += [f"{k} = {cfg_value(cfg, k)!r}: {why}" for k, why in result.gaps.items()]
    notes += ["", f"# keys with nothing to write ({target} already does this): key = value: why"]
    notes += [f"{k} = {cfg_value(cfg, k)!r}: {why}" for k, why in result.same.items()]
    (out / "unmapped.txt").write_text("\n".join(notes) + "\n")
    result.files.update(settings=str(out / name), run=str(script), unmapped=str(out / "unmapped.txt"))
    return result


def cfg_value(cfg, dotted: str):
    return dotted_get(cfg, dotted)
