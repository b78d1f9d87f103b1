"""Run infrastructure: everything around the PPO step that a real training run needs.

| module              | what it holds                                                          |
| ------------------- | ---------------------------------------------------------------------- |
| run.config          | typed config, presets (``run/configs/*.yaml``), key=value overrides    |
| run.setup           | device, task, models, optimizer and KL controller built from a config  |
| run.runner          | ``build_trainer(cfg)``: a run that holds the trainer (``run.ppo``)     |
| run.loop            | the run: evaluate, steps with checkpoints and signals, final/, summary |
| run.resume          | what a checkpoint holds; fresh start or resume of a run folder         |
| run.checkpoint      | atomic checkpoint folders, recovery, pruning, resume checks, signals   |
| run.manifest        | checkpoints that prove they are whole: each file's size and hash       |
| run.guards          | NaN guards: ``NonFiniteError`` and the checks that raise it            |
| run.metrics         | metrics log (JSONL, TensorBoard, W&B) and the dashboard figure         |
| run.evaluation      | held-out accuracy of a model or a checkpoint                           |
| run.cli             | ``python -m ppo_core.train`` and ``python -m ppo_core.evaluate``       |
| run.rm              | ``python -m ppo_core.train_rm``: the reward model's config and run     |
| run.overoptimisation | PPO against a learned reward: proxy, gold and sqrt(KL) per step      |
| run.lora            | LoRA through peft: adapters, the reference with them off, checkpoints  |
| run.distributed     | ``DataParallel`` under ``torchrun``: sliced sampling, gathered batch   |
"""
