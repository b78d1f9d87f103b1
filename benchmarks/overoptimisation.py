"""Reward over-optimisation on the CPU (chapter 06, longer than the chapter's run): gold vs proxy vs sqrt(KL).

    python benchmarks/overoptimisation.py [--kl 0 0.02 0.1] [--steps 40] [--rm-steps 120] [--pairs 256] [--seed 0]
    python benchmarks/overoptimisation.py --chapter --seed 1     # chapter 06's settings and its checks, another seed

Trains a small reward model on synthetic preference pairs (labelled by the gold reward), then runs PPO
against it from the same warm start at each kl_coef, printing per step sqrt(KL), proxy, gold, rule, length.
``--seed`` seeds the warm start, the preference pairs, the reward model and PPO. ``--chapter`` uses chapter
06's settings (the rm_cpu preset's 150 reward-model steps on pairs from 512 prompts, 256 held-out prompts, a
linear head, kl_coef 0 and 0.1, 24 PPO steps) and ends with the verdict of each of the chapter's assertions on
this run, to see whether they hold beyond seed 0.
"""

import argparse
import json
import time

import torch


def train_small_rm(out: str, pairs: int, rm_steps: int, hidden: int, seed: int = 0, extra=()) -> dict:
    from ppo_core.run.rm import load_rm_config, train_rm

    cfg = load_rm_config("rm_cpu", [f"data.n_pairs={pairs}", f"train.steps={rm_steps}", f"model.hidden_size={hidden}",
                                    f"train.output_dir={out}", "train.overwrite=true", "train.progress=false",
                                    "train.save_every=0", f"train.seed={seed}", *extra])  # fmt: skip
    return train_rm(cfg)


def smooth(xs, k=5):
    """The chapter's running mean over the last k steps."""
    return [sum(xs[max(0, i - k + 1) : i + 1]) / len(xs[max(0, i - k + 1) : i + 1]) for i in range(len(xs))]


def chapter_verdicts(curves: dict) -> list[tuple[str, bool]]:
    """Chapter 06's assertions (its section 6), evaluated on these curves. (An early rise of the gold reward,
    which it prints but does not assert, held on seeds 0 and 1 and not on seed 2 with the chapter's earlier 60-step
    reward model. With the rm_cpu preset's, on an AMD EPYC: all three assertions held on seeds 1 and 2, and the
    smoothed gold peaked +0.184 and +0.043 above its start.)"""
    low, high = min(curves), max(curves)
    gold, proxy = smooth([c["gold"] for c in curves[low]]), smooth([c["proxy"] for c in curves[low]])
    peak = max(range(len(gold)), key=gold.__getitem__)
    return [
        (f"proxy rises by > 0.5 at kl_coef {low} ({proxy[-1] - proxy[0]:+.2f})", proxy[-1] > proxy[0] + 0.5),
        (f"gold falls > 0.05 after its peak ({gold[peak] - gold[-1]:.3f})", gold[peak] > gold[-1] + 0.05),
        (
            f"kl_coef {high} ends closer to the reference (sqrt KL {curves[high][-1]['sqrt_kl']:.2f} vs "
            f"{curves[low][-1]['sqrt_kl']:.2f})",
            curves[high][-1]["sqrt_kl"] < curves[low][-1]["sqrt_kl"],
        ),
    ]


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
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--chapter", action="store_true", help="chapter 06's settings, and its checks at the end")
    args = ap.parse_args()
    rm_extra = ["train.lr=1e-3"]
    if args.chapter:
        args.kl, args.steps, args.rm_steps, args.pairs, args.hidden = [0.0, 0.1], 24, 150, 512, 0
        args.batch, args.lr, args.epochs, rm_extra = 32, 3e-4, 4, ["data.eval_pairs=256"]
    torch.set_num_threads(2)
    from ppo_core.run.overoptimisation import ppo_against_reward_model

    t0 = time.perf_counter()
    summary = train_small_rm(f"{args.out}/rm", args.pairs, args.rm_steps, args.hidden, args.seed, rm_extra)
    print(f"reward model: {json.dumps(summary)} ({time.perf_counter() - t0:.0f} s)", flush=True)
    curves = {}
    for kl in args.kl:
        t1 = time.perf_counter()
        overrides = [
            f"rollout.batch_size={args.batch}",
            f"ppo.minibatch_size={args.batch}",
            f"ppo.lr={args.lr}",
            f"ppo.ppo_epochs={args.epochs}",
            "ppo.value_lr=0",  # the critic chapter 06 uses: one learning rate and one lambda (the cpu preset's
            "ppo.lam_value=null",  # value_lr and lam_value slowed the proxy's rise in its short run), and a head
            "ppo.separate_critic=false",  # on the policy's trunk, as when the chapter's numbers were measured
            f"train.seed={args.seed}",
        ]
        run = ppo_against_reward_model(f"{args.out}/rm/final", kl, args.steps, f"{args.out}/ppo_{kl}", overrides)
        curves[kl] = run["curve"]
        for c in curves[kl]:
            print(f"kl_coef={kl:<6} step {c['step']:>3}  sqrtKL {c['sqrt_kl']:.2f}  proxy {c['proxy']:+.2f}  "
                  f"gold {c['gold']:+.3f}  rule {c['rule']:.3f}  len {c['length']:.1f}")  # fmt: skip
        for x in run["samples"]:
            print(f"   {x['completion']!r:40} proxy {x['proxy']:+.2f} gold {x['gold']:+.2f}")
        print(f"kl_coef={kl}: {time.perf_counter() - t1:.0f} s", flush=True)
    if args.chapter:
        gold = smooth([c["gold"] for c in curves[min(curves)]])
        print(f"gold rise before its peak (not asserted): {max(gold) - gold[0]:+.3f}")
        print(f"chapter 06's checks, seed {args.seed}:")
        for what, ok in chapter_verdicts(curves):
            print(f"  {'PASS' if ok else 'FAIL'}  {what}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"rm": summary, "curves": {str(k): v for k, v in curves.items()}}, f)


if __name__ == "__main__":
    main()
