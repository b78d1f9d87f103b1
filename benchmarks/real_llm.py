"""PPO on a real pretrained model on the CPU: the cpu-smollm preset (SmolLM2-135M-Instruct, LoRA) on several seeds.

    .venv/bin/python benchmarks/real_llm.py [--seeds 0 1 2] [--gsm8k N] [--save PATH] [key=value ...]

Each seed runs what ``python -m ppo_core.train --config cpu-smollm train.seed=S`` runs (``RunTrainer(cfg).train()``,
in a fresh process per seed), and records its curves: per step the phase times (generate, score, update), the
tokens, the rollout's reward and accuracy, the KL to the reference, the critic's explained variance; before and
after, the held-out accuracy both ways the reward can miss: ``####`` accuracy (what the reward pays: the number
after the last ``####``) and last-number accuracy (the last number anywhere in the reply), so a gain in format
shows apart from a gain in arithmetic. ``--gsm8k N``: also the first N problems of the real GSM8K test split
(``../shared/data/gsm8k``, when present), greedy, before and after, on the first seed.
``train_s`` is the PPO steps alone; ``wall_s`` adds model loading and the held-out evaluations, before and after
(what the command runs; the GSM8K evaluation is not counted). Targets: a held-out sampled gain of at least +25
points within 10 minutes of training, on every seed, the whole run within 10 minutes, and a critic explained
variance of at least 0.2 over the last steps.
"""

import argparse
import json
import os
import re
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

GAIN_TARGET, EV_TARGET, MINUTES_TARGET = 25.0, 0.2, 10.0
GSM8K = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "gsm8k"
NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?")


def last_number_correct(text: str, answer: str) -> bool:
    """The last number anywhere in the reply equals the gold answer (the arithmetic, whatever the format)."""
    from decimal import Decimal, InvalidOperation

    from ppo_core.tasks.rewards import gold_number

    found = NUMBER.findall(text)
    try:
        return bool(found) and Decimal(found[-1].replace(",", "")) == Decimal(gold_number(answer))
    except InvalidOperation:
        return False


def scores(texts: list[str], records: list[dict]) -> dict:
    from ppo_core.tasks.rewards import extract_answer, is_correct

    n = max(len(records), 1)
    return {
        "marker_acc": sum(is_correct(t, r["answer"]) for t, r in zip(texts, records)) / n,
        "last_number_acc": sum(last_number_correct(t, r["answer"]) for t, r in zip(texts, records)) / n,
        "format_rate": sum(extract_answer(t) is not None for t in texts) / n,
    }


def child(seed: int, overrides: list[str], out: Path, gsm8k: int) -> None:
    """One seed in this process: the run, its evaluations' texts scored both ways, GSM8K if asked."""
    import torch

    from ppo_core.run import evaluation
    from ppo_core.run.config import load_config
    from ppo_core.run.runner import RunTrainer

    texts = []  # every evaluation's replies, in order: before sampled, before greedy, after sampled, after greedy
    complete = evaluation.complete

    def keep(*a, **k):  # an evaluation draws sampled and greedy replies in one call (also_greedy)
        out = complete(*a, **k)
        texts.extend(out if k.get("also_greedy") else [out])
        return out

    evaluation.complete = keep
    cfg = load_config("cpu-smollm", [f"train.seed={seed}", f"train.output_dir={out}", "train.progress=false",
                                     "train.overwrite=true", *overrides])  # fmt: skip
    t0 = time.perf_counter()
    tr = RunTrainer(cfg)
    t_built = time.perf_counter()
    shapes = []  # each step's rollout as the update runs over it: (prompt width, response width), padded
    collect = tr.collect

    def record_shape(records):
        ro = collect(records)
        shapes.append((ro.prompt_len, ro.response_ids.shape[1]))
        return ro

    tr.collect = record_shape
    gsm = {}
    if gsm8k:
        gsm["before"] = gsm8k_eval(tr, gsm8k)  # not timed: the command does not run it
    t_train = time.perf_counter()
    summary = tr.train()
    wall = (t_built - t0) + (time.perf_counter() - t_train)  # what the command runs: build, evaluations and steps
    if gsm8k:
        gsm["after"] = gsm8k_eval(tr, gsm8k)
    test = tr.test_records[: cfg.train.eval_samples]
    evals = dict(zip(["before_sampled", "before_greedy", "after_sampled", "after_greedy"], texts))
    steps = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in steps if "policy/approx_kl" in r]
    row = {
        "seed": seed,
        "summary": summary,
        "eval": {k: scores(v, test) for k, v in evals.items()},
        "samples": {
            k: [{"question": r["question"], "reply": t} for r, t in zip(test[:4], v[:4])] for k, v in evals.items()
        },
        "n_eval": len(test),
        "wall_s": round(wall, 1),
        "build_s": round(t_built - t0, 1),
        "train_s": round(sum(r["time/step"] for r in steps), 1),
        "peak_rss_gb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20, 2),
        "threads": torch.get_num_threads(),
        "batch_size": cfg.rollout.batch_size,
        "steps": [
            {k: v for k, v in r.items() if k.startswith(("time/", "rollout/", "kl/", "value/", "policy/"))}
            for r in steps
        ],
        "gsm8k": gsm,
    }
    row.update(update_rate(tr, steps, shapes))
    (out / "row.json").write_text(json.dumps(row))


def update_rate(tr, steps: list[dict], shapes: list[tuple[int, int]]) -> dict:
    """The update's arithmetic rate against a large float32 matmul on the same threads (``tools/flops.py``).

    The update runs over the rollout as it is padded: B rows of the longest prompt and the longest reply, so
    each step counts its own ``shapes`` (prompt width, response width), pad tokens included. A LoRA update's
    backward computes the activations' gradients through every layer but no gradient of a frozen weight: about
    one forward's work, so an update counts 2 forwards per epoch (full fine-tuning: 3).
    """
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from tools.flops import forward_flops, matmul_rate

    cfg = tr.cfg
    if len(shapes) != len(steps):  # dynamic sampling draws several rollouts a step and updates on a rebuilt one
        print(f"update rate not recorded: {len(shapes)} rollouts for {len(steps)} steps", file=sys.stderr)
        return {"rollout_shapes": shapes, "update_gflops": None, "matmul_gflops": matmul_rate() / 1e9}
    per_step = []
    for r, (P, T) in zip(steps, shapes):
        flops = 2 * cfg.ppo.ppo_epochs * forward_flops(tr.actor.lm.config, cfg.rollout.batch_size, P + T, T)
        per_step.append(flops / r["time/update"] / 1e9)
    return {"rollout_shapes": shapes, "update_gflops": per_step, "matmul_gflops": matmul_rate() / 1e9}


def gsm8k_eval(tr, n: int) -> dict | None:
    """Greedy replies of the live policy to the first ``n`` GSM8K test problems, scored both ways."""
    from ppo_core.rollout import complete
    from ppo_core.tasks.data import build_prompt, load_gsm8k

    if not (GSM8K / "test.jsonl").is_file():
        return None
    records = load_gsm8k(GSM8K, split="test", limit=n)
    prompts = [build_prompt(r["question"], tr.tokenizer, tr.cfg.data.prompt_style) for r in records]
    t0 = time.perf_counter()
    texts = complete(tr.actor.lm, tr.tokenizer, prompts, 256, None, 512, 32, seed=0)
    samples = [{"question": r["question"][:200], "reply": t} for r, t in zip(records[:2], texts[:2])]
    return {"n": n, "max_new_tokens": 256, "s": round(time.perf_counter() - t0, 1), **scores(texts, records),
            "samples": samples}  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--gsm8k", type=int, default=0, help="GSM8K test problems to evaluate on the first seed (0: none)")
    ap.add_argument("--save", help="write the rows here (save_result), e.g. benchmarks/results/real_llm/seeds.json")
    ap.add_argument("--child", nargs=3, metavar=("SEED", "OUT", "GSM8K"), help=argparse.SUPPRESS)
    ap.add_argument("overrides", nargs="*")
    args = ap.parse_args()
    if args.child:
        return child(int(args.child[0]), args.overrides, Path(args.child[1]), int(args.child[2]))
    from results_meta import save_result

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for i, seed in enumerate(args.seeds):
            out, load_before = Path(tmp) / f"seed{seed}", os.getloadavg()
            cmd = [sys.executable, __file__, "--child", str(seed), str(out), str(args.gsm8k if i == 0 else 0),
                   "--", *args.overrides]  # fmt: skip
            proc = subprocess.run(cmd, capture_output=True, text=True)
            if proc.returncode != 0:
                raise SystemExit(f"seed {seed} failed:\n{proc.stderr[-3000:]}")
            row = json.loads((out / "row.json").read_text())
            row["load_avg"] = {"before": [round(x, 2) for x in load_before], "after": [round(x, 2) for x in
                                                                                       os.getloadavg()]}  # fmt: skip
            rows.append(row)
            e, s = row["eval"], row["summary"]
            gain = 100 * (e["after_sampled"]["marker_acc"] - e["before_sampled"]["marker_acc"])
            ev = s.get("last10/value/explained_variance", float("nan"))
            print(f"seed {seed}: sampled #### {e['before_sampled']['marker_acc']:.3f} -> "
                  f"{e['after_sampled']['marker_acc']:.3f} ({gain:+.1f} points), last number "
                  f"{e['before_sampled']['last_number_acc']:.3f} -> {e['after_sampled']['last_number_acc']:.3f}, "
                  f"EV last 10 {ev:+.2f}, train {row['train_s']:.0f} s, wall {row['wall_s']:.0f} s, "
                  f"load {row['load_avg']}", flush=True)  # fmt: skip
            if args.save:  # after every seed: a run cut short keeps the seeds it finished
                data = {"targets": {"gain_points": GAIN_TARGET, "ev_last": EV_TARGET, "train_minutes": MINUTES_TARGET,
                                    "wall_minutes": MINUTES_TARGET},
                        "overrides": args.overrides, "seeds_asked": args.seeds, "rows": rows}  # fmt: skip
                save_result(args.save, data, command=" ".join(["python", *sys.argv]))


if __name__ == "__main__":
    main()
