"""Reward over-optimisation on the CPU (chapter 06, longer than the chapter's run): gold vs proxy vs sqrt(KL).

    python benchmarks/overoptimisation.py [--kl 0 0.02 0.1] [--steps 40] [--rm-steps 120] [--pairs 256]

Trains a small reward model on synthetic preference pairs (labelled by the gold reward), then runs PPO
against it from the same warm start at each kl_coef, printing per step sqrt(KL), proxy, gold, rule, length.
"""

import argparse
import json
import time

import torch


def train_small_rm(out: str, pairs: int, rm_steps: int, hidden: int, seed: int = 0) -> dict:
    from ppo_core.run.rm import load_rm_config, train_rm

    cfg = load_rm_config("rm_cpu", [f"data.n_pairs={pairs}", f"train.steps={rm_steps}", f"model.hidden_size={hidden}",
                                    f"train.output_dir={out}", "train.overwrite=true", "train.progress=false",
                                    "train.save_every=0", f"train.seed={seed}", "train.lr=1e-3"])  # fmt: skip
    return train_rm(cfg)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kl", type=float, nargs="+", default=[0.0, 0.02, 0.1])
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--rm-steps", type=int, default=120)
    ap.add_argument("--pairs", type=int, default=256)
    ap.add_argument("--hidden", type=int, default=64)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--lr", type=float, default=3e-4)
    ap.add_argument("--epochs", type=int, default=4)
    ap.add_argument("--out", default="outputs/overopt")
    ap.add_argument("--json", default="")
    args = ap.parse_args()
    torch.set_num_threads(2)
    from ppo_core.run.overoptimisation import ppo_against_reward_model

    t0 = time.perf_counter()
    summary = train_small_rm(f"{args.out}/rm", args.pairs, args.rm_steps, args.hidden)
    print(f"reward model: {json.dumps(summary)} ({time.perf_counter() - t0:.0f} s)", flush=True)
    curves = {}
    for kl in args.kl:
        t1 = time.perf_counter()
        overrides = [
            f"rollout.batch_size={args.batch}",
            f"ppo.minibatch_size={args.batch}",
            f"ppo.lr={args.lr}",
            f"ppo.ppo_epochs={args.epochs}",
        ]
        run = ppo_against_reward_model(f"{args.out}/rm/final", kl, args.steps, f"{args.out}/ppo_{kl}", overrides)
        curves[kl] = run["curve"]
        for c in curves[kl]:
            print(f"kl_coef={kl:<6} step {c['step']:>3}  sqrtKL {c['sqrt_kl']:.2f}  proxy {c['proxy']:+.2f}  "
                  f"gold {c['gold']:+.3f}  rule {c['rule']:.3f}  len {c['length']:.1f}")  # fmt: skip
        for x in run["samples"]:
            print(f"   {x['completion']!r:40} proxy {x['proxy']:+.2f} gold {x['gold']:+.2f}")
        print(f"kl_coef={kl}: {time.perf_counter() - t1:.0f} s", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"rm": summary, "curves": {str(k): v for k, v in curves.items()}}, f)


if __name__ == "__main__":
    main()
