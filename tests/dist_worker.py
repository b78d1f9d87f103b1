"""Run by tests/test_distributed.py under torchrun: data-parallel updates, one per case, in one launch (a launch
costs more than a case).

argv: model path and a JSON file of cases, ``[{"run": folder, "rollout": file, "result": file, "extra":
[overrides]}, ...]``. A case's rollout is a saved rollout, or ``collect``: the ranks sample and score step 1's
prompts themselves (``PPOTrainer.collect`` with a ``DataParallel``: each rank its slice, then gathered), and rank 0
also saves the gathered rollout and the step's records to ``{result}.rollout``. Each rank writes its weights and
the update's stats to ``{result}.rank{r}``.
"""

import json
import sys
from pathlib import Path

import torch

from ppo_core.run.config import load_config
from ppo_core.run.distributed import rank
from ppo_core.run.runner import build_trainer


def run_case(model: str, out: str, rollout_file: str, result: str, extra: list[str]) -> None:
    overrides = [
        f"model.name_or_path={model}",
        f"train.output_dir={out}",
        "rollout.batch_size=8",
        "ppo.minibatch_size=4",
        "rollout.max_new_tokens=8",
        "data.n_train=64",
        "data.n_test=16",
        "train.progress=false",
        "train.num_threads=1",
        "ppo.lr=1e-2",
        *extra,
    ]
    trainer = build_trainer(load_config("cpu", overrides))  # under torchrun: a RunTrainer with a DataParallel
    if rollout_file == "collect":
        records = trainer.prompt_batch(1)
        ro = trainer.collect(records)
        if rank() == 0:
            torch.save({"rollout": ro, "records": records}, f"{result}.rollout")
    else:
        ro = torch.load(rollout_file, weights_only=False)
        trainer.ppo.times = {"time/rollout": 0.0, "time/score": 0.0}  # learn() adds its own time to these
    metrics = trainer.learn(ro)
    state = {k: v.detach().clone() for k, v in trainer.actor.state_dict().items()}
    torch.save({"state": state, "metrics": metrics}, f"{result}.rank{rank()}")
    trainer.logger.close()


model, cases = sys.argv[1:]
for case in json.loads(Path(cases).read_text()):
    run_case(model, case["run"], case["rollout"], case["result"], case["extra"])
