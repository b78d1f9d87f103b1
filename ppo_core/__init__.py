"""ppo_core: Proximal Policy Optimization for language models, one tested piece per chapter.

| module              | chapter | what it holds                                         |
| ------------------- | ------- | ----------------------------------------------------- |
| ppo_core.logprobs   | 01      | logits -> token logprobs, the response slice, entropy |
| ppo_core.masking    | 02      | the response mask and masked mean / var / whiten      |
| ppo_core.kl         | 03      | per-token KL estimators k1, k2, k3                    |
| ppo_core.gae        | 03      | per-token rewards and generalised advantage estimation|
| ppo_core.losses     | 04      | clipped policy loss, clipped value loss, entropy loss |
| ppo_core.model      | 05      | the actor with a linear value head; the frozen reference |
| ppo_core.rollout    | 05      | sampling responses and scoring them                   |
| ppo_core.update     | 05      | one PPO minibatch update                              |
| ppo_core.trainer    | 05      | the PPO loop, checkpoints and resume                  |
| ppo_core.checkpoint | 05      | atomic checkpoint writes, recovery, pruning, signals  |
| ppo_core.config     | 05      | typed config, presets and key=value overrides         |
| ppo_core.rewards    | 05      | the GSM8K answer parser and reward                    |
| ppo_core.data       | 05      | GSM8K loading (hub or local JSONL) and prompts        |
| ppo_core.synthetic  | 05      | the offline synthetic task in GSM8K's format          |
| ppo_core.tiny       | 05      | a tiny model and character tokenizer built offline    |
| ppo_core.warmstart  | 05      | the cached supervised warm start (the SFT stage)      |
| ppo_core.metrics    | 05      | metrics log, TensorBoard, dashboard                   |
| ppo_core.train      | 05      | the command line: python -m ppo_core.train            |
| ppo_core.evaluate   | 05      | held-out accuracy of a checkpoint                     |
| ppo_core.checks     | 01-05   | checkers for the exercises, progress()                |
| ppo_core.exercises  | 01-05   | learner copies: python -m ppo_core.exercises build    |
| ppo_core.widgets    | 03-04   | the two interactive figures                           |

Shape names used everywhere: B sequences, P prompt tokens, T response tokens, V vocabulary.
"""

__version__ = "0.1.0"
