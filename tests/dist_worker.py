"""Run by tests/test_distributed.py under torchrun: one data-parallel update on a saved rollout.

argv: model path, run folder, rollout file, output file (rank 0 writes the weights and the stats).
"""

import sys

import torch

from ppo_core.run.config import load_config
from ppo_core.run.distributed import DistributedPPOTrainer, rank

model, out, rollout_file, result = sys.argv[1:5]
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
]
trainer = DistributedPPOTrainer(load_config("cpu", overrides))
ro = torch.load(rollout_file, weights_only=False)
trainer.times = {"time/rollout": 0.0, "time/score": 0.0}  # learn() adds its own time to these
metrics = trainer.learn(ro)
state = {k: v.detach().clone() for k, v in trainer.actor.state_dict().items()}
torch.save({"state": state, "metrics": metrics}, f"{result}.rank{rank()}")
trainer.logger.close()
