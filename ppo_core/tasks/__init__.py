"""Tasks and data: what the policy is trained on and how an answer is scored.

| module              | what it holds                                                      |
| ------------------- | ------------------------------------------------------------------ |
| tasks.rewards       | the GSM8K answer parser and reward                                 |
| tasks.data          | GSM8K loading (hub or local JSONL) and prompts                     |
| tasks.synthetic     | the offline synthetic task in GSM8K's format                       |
| tasks.long_synthetic| its ~100-token variant whose first token decides the answer        |
| tasks.tiny          | a tiny model and character tokenizer built offline                 |
| tasks.warmstart     | the cached supervised warm start (the SFT stage)                   |
| tasks.hub_model     | a hub-shaped Qwen2 chat checkpoint built offline (BPE, two EOS ids) |
| tasks.preferences   | gold-labelled preference pairs; the prompt/chosen/rejected loader  |
| tasks.bandit        | PPO on a bandit whose expected reward is exact (chapter 05)        |
"""
