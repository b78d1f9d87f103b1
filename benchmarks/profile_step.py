"""Profile PPO updates of ppo_core or of TRL's PPOTrainer with torch.profiler: where does the time go?

    .venv/bin/python benchmarks/profile_step.py --side ours [--updates 3] [--batch-size 128] [--top 20]
    .venv/bin/python benchmarks/profile_step.py --side trl            # needs benchmarks/requirements-trl.txt
    .venv/bin/python benchmarks/profile_step.py --ab [--updates 8]    # ours with / without its optimisations

Same settings as the like-for-like run of ``benchmarks/vs_trl.py`` (the warm-started tiny model, fp32).
After one warm-up update it profiles ``--updates`` updates and prints the phases (generation, scoring,
update, as ``record_function`` ranges around the functions that do them) and the operators with the
most self CPU time.
"""

import argparse
import contextlib
import functools
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # import the sibling script vs_trl.py
import torch  # noqa: E402
import vs_trl  # noqa: E402  (sets the environment before torch loads)


def labelled(name: str, fn):
    """``fn`` wrapped in a profiler range called ``name``."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        with torch.profiler.record_function(name):
            return fn(*args, **kwargs)

    return wrapper


def profile_ours(s, model_path: str, threads: int, updates: int):
    import ppo_core.trainer as m
    from ppo_core.run.runner import RunTrainer

    m.sample = labelled("phase: generation", m.sample)
    m.score = labelled("phase: scoring", m.score)
    with tempfile.TemporaryDirectory() as tmp:
        trainer = RunTrainer(vs_trl.ours_config(s, model_path, tmp, threads, "cpu", "float32"))
        trainer.ppo.update = labelled("phase: update", trainer.ppo.update)
        trainer.step()  # warm-up
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
            for _ in range(updates):
                t0 = time.perf_counter()
                trainer.step()
                print(f"  ours update: {time.perf_counter() - t0:.2f} s", flush=True)
        trainer.logger.close()
    return prof


def profile_trl(s, model_path: str, threads: int, updates: int):
    import trl.experimental.ppo.ppo_trainer as m
    from transformers import AutoTokenizer, TrainerCallback

    from ppo_core.run.config import load_config
    from ppo_core.run.setup import load_task

    prof = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU])
    m.batch_generation = labelled("phase: generation", m.batch_generation)
    m.get_reward = labelled("trl get_reward (value or reward model)", m.get_reward)
    real_forward = m.forward

    def forward(model, *args, **kwargs):  # the reference forward in scoring; policy + value in the update
        name = "phase: update forward (policy + value)" if torch.is_grad_enabled() else "trl reference forward"
        with torch.profiler.record_function(name):
            return real_forward(model, *args, **kwargs)

    m.forward = forward

    class Start(TrainerCallback):
        t = None

        def on_step_end(self, args, state, control, **kw):
            now = time.perf_counter()
            if self.t is None:
                prof.start()  # after the warm-up update
            else:
                print(f"  TRL update: {now - self.t:.2f} s", flush=True)
            self.t = now

    cfg = load_config("cpu")
    records, _, reward_fn, _ = load_task(cfg)
    s.updates = updates
    tokenizer = AutoTokenizer.from_pretrained(model_path, padding_side="left")
    with tempfile.TemporaryDirectory() as tmp:
        trainer = vs_trl.build_trl(s, model_path, tokenizer, records, reward_fn, tmp, "cpu", torch.float32, Start())
        trainer.train()
    prof.stop()
    return prof


OPTIMISATIONS = {
    "cached prompt": "scoring reuses generate's keys and values of the prompt (fastpaths.PromptCache)",
    "recorded": "scoring takes the policy's log-probs (and a shared head's values) from generate's own forward "
    "(fastpaths.SamplerScores): no forward of the policy",
    "prefix split": "the float32 training forward runs the prompt apart (fastpaths.split_prefix_logits, and "
    "split_prefix_hidden for a separate critic), skipping backward work; only from "
    "fastpaths.SPLIT_MIN_PREFIX_TOKENS prompt tokens per minibatch on",
}


def ab_ours(s, model_path: str, threads: int, updates: int) -> None:
    """Alternate steps of ours with each optimisation off and on, in one process; print per-phase medians."""
    import statistics

    from ppo_core import fastpaths
    from ppo_core.model import trunk_hidden
    from ppo_core.run.runner import RunTrainer

    real_keep, real_split = fastpaths.PromptCache.keep, fastpaths._split_prefix
    real_recording = fastpaths.PromptCache.recording

    def keep_none(cache, lm, start, out):  # as if nothing were kept: scoring runs full forwards
        real_keep(cache, lm, start, out)
        cache.complete = False

    @contextlib.contextmanager
    def no_recording(cache, lm, temperature):  # keep the caches only: scoring runs over the cached prompt
        yield None

    variants = {
        "neither": dict(keep_cache=False, record=False, split=False),
        "+ cached prompt": dict(keep_cache=True, record=False, split=False),
        "+ recorded": dict(keep_cache=True, record=True, split=False),
        "+ recorded + prefix split, policy only": dict(keep_cache=True, record=True, split=True, critic_split=False),
        "+ recorded + prefix split": dict(keep_cache=True, record=True, split=True),
    }
    times = {k: [] for k in variants}
    with tempfile.TemporaryDirectory() as tmp:
        trainer = RunTrainer(vs_trl.ours_config(s, model_path, tmp, threads, "cpu", "float32"))
        trainer.step()  # warm-up
        for i in range(updates * len(variants)):
            name = list(variants)[i % len(variants)]
            v = variants[name]
            fastpaths.PromptCache.keep = real_keep if v["keep_cache"] else keep_none
            fastpaths.PromptCache.recording = real_recording if v["record"] else no_recording
            fastpaths._split_prefix = real_split if v["split"] else (lambda lm, prefix_tokens: False)
            critic_split = v.get("critic_split", True)
            trainer.actor.critic_hidden_fn = fastpaths.split_prefix_hidden if critic_split else trunk_hidden
            c0 = time.process_time()
            m = trainer.step()
            times[name].append(
                (m["time/rollout"], m["time/score"], m["time/update"], m["time/step"], time.process_time() - c0)
            )
        fastpaths.PromptCache.keep, fastpaths._split_prefix = real_keep, real_split
        fastpaths.PromptCache.recording = real_recording
        trainer.logger.close()
    print(
        f"\nours, like-for-like, B={s.batch_size}: median of {updates} steps each, interleaved (load "
        f"{vs_trl.load_average()})"
    )
    print(f"  {'':44} {'generation':>10} {'scoring':>8} {'update':>8} {'step':>8} {'CPU s':>8}")
    for name, rows in times.items():
        med = [statistics.median(r[k] for r in rows) for k in range(5)]
        print(f"  {name:44} " + " ".join(f"{x:8.3f}" if k else f"{x:10.3f}" for k, x in enumerate(med)))
    for k, v in OPTIMISATIONS.items():
        print(f"  {k}: {v}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--side", choices=["ours", "trl"], default="ours")
    ap.add_argument("--updates", type=int, default=3)
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--batch-size", type=int, default=128)
    ap.add_argument("--minibatch-size", type=int, default=64)
    ap.add_argument("--top", type=int, default=20)
    ap.add_argument(
        "--ab", action="store_true", help="time ours with and without its optimisations instead of profiling"
    )
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    from transformers.utils.logging import disable_progress_bar

    disable_progress_bar()
    s = vs_trl.Setting(
        "like-for-like",
        batch_size=args.batch_size,
        minibatch_size=args.minibatch_size,
        ours_overrides=vs_trl.LIKE_FOR_LIKE,
    )
    path = vs_trl.warm_started_tiny()
    if args.ab:
        ab_ours(s, path, args.threads, args.updates)
        return
    print(f"profiling {args.side}, {args.updates} updates after a warm-up, load average {vs_trl.load_average()}")
    prof = (profile_ours if args.side == "ours" else profile_trl)(s, path, args.threads, args.updates)
    events = prof.key_averages()
    phases = [e for e in events if e.key.startswith(("phase:", "trl "))]
    print("\nphases (CPU total, all profiled updates):")
    for e in sorted(phases, key=lambda e: -e.cpu_time_total):
        print(f"  {e.key:45s} {e.cpu_time_total / 1e6:7.2f} s  ({e.count} calls)")
    print(events.table(sort_by="self_cpu_time_total", row_limit=args.top))
    print(f"load average at the end: {vs_trl.load_average()}")


if __name__ == "__main__":
    main()
