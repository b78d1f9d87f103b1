"""ppo_core: Proximal Policy Optimization for language models, one tested piece per chapter.

The layers, from the commands a user types down to the maths a learner derives:

    ┌──────────────────────────────────────────────────────────────────────────────────┐
    │ commands     train.py, evaluate.py, train_rm.py: python -m ppo_core.train / ...  │
    ├──────────────────────────────────────────────────────────────────────────────────┤
    │ run/         config (+ configs/*.yaml), setup, runner (build_trainer), loop,     │
    │              resume, checkpoint, guards, metrics, evaluation, cli, distributed,  │
    │              lora, rm, manifest, overoptimisation: a real run; beside it export/ │
    ├──────────────────────────────────────────────────────────────────────────────────┤
    │ tasks/       rewards, data (GSM8K), synthetic, tiny, warmstart, hub_model,       │
    │              smollm (ch 10), long_synthetic, preferences (ch 06), bandit (ch 04) │
    ├──────────────────────────────────────────────────────────────────────────────────┤
    │ ch 05 loop   trainer (the algorithm box), update, rollout, model, precision,     │
    │              fastpaths; reward_model (ch 06); dapo (ch 08); sampler (ch 09)      │
    ├──────────────────────────────────────────────────────────────────────────────────┤
    │ ch 01-04, 07 logprobs, masking, kl, gae, losses, advantages, objectives,         │
    │ -09          correction; registry (the switches by name): pure tensor math       │
    └──────────────────────────────────────────────────────────────────────────────────┘
    Each layer imports only the layers below it (tests/test_layers.py checks it): the loop is handed its
    parts by run/ (``run.runner.build_trainer``) and never reads a config file, a task or a run folder.
    run/ holds the trainer (``RunTrainer.ppo``) instead of subclassing it; data parallelism is an object the
    trainer is handed (``run.distributed.DataParallel``); no module below run/ takes the trainer.
    course tooling beside them: checks/ (exercise checkers, progress), widgets/ (figures)
    shared small helpers: utils (atomic writes, Hub error lines, seeds, show_source, a quiet peft import)
    authoring tools outside the package: tools/exercises.py (learner copies), tools/book.py

| module              | chapter | what it holds                                            |
| ------------------- | ------- | -------------------------------------------------------- |
| ppo_core.logprobs   | 01      | logits -> token logprobs, the response slice, entropy    |
| ppo_core.masking    | 02      | the response mask and masked mean / var / whiten         |
| ppo_core.kl         | 03      | per-token KL estimators k1, k2, k3; the KL controllers   |
| ppo_core.gae        | 03      | per-token rewards and generalised advantage estimation   |
| ppo_core.losses     | 04, 07  | clipped policy loss, value loss, entropy loss; averaging |
| ppo_core.model      | 05      | the actor with a linear value head; the frozen reference |
| ppo_core.rollout    | 05      | sampling responses and scoring them                      |
| ppo_core.update     | 05      | one PPO minibatch update                                 |
| ppo_core.trainer    | 05      | the PPO step as the numbered algorithm box               |
| ppo_core.precision  | 05      | float32 weights, bf16/fp16 compute under autocast        |
| ppo_core.fastpaths  | 05      | speed paths with the same numbers (``train.fast_paths``) |
| ppo_core.reward_model | 06    | reward model: last-token score, Bradley-Terry loss, norm |
| ppo_core.advantages | 07      | GRPO, RLOO, REINFORCE++ advantages; the KL as a loss     |
| ppo_core.registry   | 03-09   | the switches by config name: estimators, objectives, ... |
| ppo_core.objectives | 08      | clip-higher, dual clip, GSPO, CISPO, SAPO objectives     |
| ppo_core.dapo       | 08      | dynamic sampling, overlong and missing-EOS shaping       |
| ppo_core.run        | 05      | config, setup, checkpoints, NaN guards, metrics, the CLI |
| ppo_core.tasks      | 05      | rewards, GSM8K data, the synthetic task, the warm start  |
| ppo_core.checks     | 01-06   | checkers for the exercises, the exercise table, progress |
| ppo_core.widgets    | 03-04   | the two interactive figures                              |

Shape names used everywhere: B sequences, P prompt tokens, T response tokens, V vocabulary.
"""

__version__ = "0.1.0"
