"""What runs on a CUDA GPU, measured: the CUDA tests, the ``cuda`` preset end to end on a Qwen2.5-0.5B-shaped
model, the course's CPU task on the GPU, throughput and memory against the device's limits, and TRL beside ours.

    python benchmarks/cuda_report.py --save benchmarks/results/gpu/report.json   # on a machine with a CUDA GPU
    python benchmarks/cuda_report.py --device cpu --small --save /tmp/smoke.json  # the same parts, a CPU smoke test

Every part runs in a process of its own with a time limit; a part that fails is recorded with its error and
the others go on. The parts:

* ``tests``: the suite's tests marked ``cuda`` (``pytest -m cuda``);
* ``throughput``: ``benchmarks/vs_trl.py --qwen-0.5b`` (generation tokens/s against the memory-bandwidth bound,
  one update's tokens/s and MFU against the bf16 peak, peak memory with AdamW and 8-bit AdamW) and a large bf16
  matmul's rate, measured;
* ``preset``: ``python -m ppo_core.train --config cuda`` on a random-init model of Qwen2.5-0.5B's trunk shape (the
  course's byte-level BPE tokenizer and chat template, ``ppo_core.tasks.hub_model``) and GSM8K from a folder:
  the first minibatch's max |log ratio| of every step (bf16 autocast over float32 weights), non-finite updates,
  the time of each phase (each phase's clock read after ``torch.cuda.synchronize``), tokens/s, peak memory; then
  ``train.resume=auto`` a few more steps from the last checkpoint;
* ``cpu_task``: the README's CPU run (``cpu`` preset, ``benchmarks/cpu_run.py``) with ``model.device=cuda``;
* ``trl``: ``benchmarks/vs_trl.py --device cuda`` like-for-like (needs trl 1.12, see that script).

A random-init model never writes EOS, so every response runs to ``rollout.max_new_tokens``; its accuracy is zero
by construction. What the preset part shows is that the code path runs, resumes, and how fast, not that it learns:
the ``cpu_task`` part is the one that must learn.
"""

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))
from results_meta import save_result  # noqa: E402

QWEN25_05B_TRUNK = dict(hidden_size=896, intermediate_size=4864, num_hidden_layers=24, num_attention_heads=14,
                        num_key_value_heads=2)  # fmt: skip
"""Qwen2.5-0.5B's published shape (config.json), less its 151,936-token vocabulary: the preset part keeps the
course's 512-token BPE tokenizer, so that every sampled id decodes; the throughput part has the full vocabulary."""

SMALL_TRUNK = dict(
    hidden_size=64, intermediate_size=192, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2
)


def _run(cmd: list[str], timeout: float, env: dict | None = None) -> dict:
    """Run ``cmd``; returns its exit code, seconds and the tail of its output (never raises)."""
    t0 = time.perf_counter()
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=ROOT, env=env)
        rc, out = p.returncode, p.stdout + p.stderr
    except subprocess.TimeoutExpired as e:
        rc = "timeout"
        out = (e.stdout or b"").decode(errors="replace") + (e.stderr or b"").decode(errors="replace")
    return {"rc": rc, "seconds": round(time.perf_counter() - t0, 1), "tail": out[-4000:]}


def _sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


# ---------------------------------------------------------------------------------------------------------- parts


def part_tests(args) -> dict:
    files = ["tests/test_cuda.py", "tests/test_model.py", "tests/test_trainer.py"]  # where the cuda-marked tests are
    cmd = [sys.executable, "-m", "pytest", *files, "-m", "cuda", "-q", "-p", "no:cacheprovider", "-o", "addopts=",
           "-n", "4", "--dist", "loadfile", "-W", "ignore::DeprecationWarning"]  # fmt: skip
    res = _run(cmd, args.timeout)
    last = [line for line in res["tail"].splitlines() if line.rstrip().endswith("s") and " in " in line]
    return {**res, "summary": last[-1] if last else ""}


def part_throughput(args) -> dict:
    out = {}
    if args.device == "cuda":  # a large bf16 matmul's measured rate: the attainable peak beside the data sheet's
        n = 8192
        a, b = (
            torch.randn(n, n, device="cuda", dtype=torch.bfloat16),
            torch.randn(n, n, device="cuda", dtype=torch.bfloat16),
        )
        for _ in range(3):
            a @ b
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(10):
            a @ b
        torch.cuda.synchronize()
        out["bf16_matmul_tflops"] = round(2 * n**3 * 10 / (time.perf_counter() - t0) / 1e12, 1)
        del a, b
    js = Path(tempfile.mkdtemp()) / "qwen.json"
    cmd = [sys.executable, "benchmarks/vs_trl.py", "--device", args.device, "--qwen-0.5b", "--qwen-json", str(js),
           "--batch-size", str(args.gen_batch), "--minibatch-size", str(args.update_batch),
           "--response-length", str(args.response)]  # fmt: skip
    if args.small:
        cmd += ["--qwen-layers", "2"]
    res = _run(cmd, args.timeout)
    if js.is_file():
        out.update(json.loads(js.read_text()))
    return {**out, "run": res}


def _records(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.is_file() else []


def part_preset(args) -> dict:
    """In this process: the cuda preset through the CLI's own ``main``, with clocks read after a device sync."""
    from ppo_core import trainer as trainer_mod
    from ppo_core.run.config import load_config
    from ppo_core.tasks.hub_model import build_hub_model
    from ppo_core.train import main

    work = Path(tempfile.mkdtemp(prefix="cuda-preset-"))
    hub = build_hub_model(work / "cache", size=SMALL_TRUNK if args.small else QWEN25_05B_TRUNK)

    class _SyncedClock:  # the trainer's phase times, each read after the GPU has finished the phase's work
        @staticmethod
        def perf_counter():
            _sync(args.device)
            return time.perf_counter()

    trainer_mod.time = _SyncedClock
    first_ratio = []  # per step: max |log pi_theta - log pi_old| on the first minibatch, before any update
    real_policy_step = trainer_mod.PPOTrainer.policy_step

    def policy_step(self, mb, first):
        stats = real_policy_step(self, mb, first)
        if first:
            first_ratio.append(float(stats["policy/max_abs_log_ratio"]))
        return stats

    trainer_mod.PPOTrainer.policy_step = policy_step
    shapes = []  # per step: (B, P + T) of the rollout
    real_collect = trainer_mod.PPOTrainer.collect

    def collect(self, records):
        ro = real_collect(self, records)
        shapes.append(tuple(ro.input_ids.shape))
        return ro

    trainer_mod.PPOTrainer.collect = collect
    out_dir = work / "run"
    base = [
        "--config",
        "cuda",
        f"model.device={args.device}",
        f"model.name_or_path={hub}",
        f"data.source={args.data}",
        f"train.output_dir={out_dir}",
        f"rollout.batch_size={args.batch}",
        f"rollout.max_new_tokens={args.response}",
        f"rollout.generation_batch_size={args.batch}",
        f"ppo.minibatch_size={args.update_batch}",
        f"ppo.grad_accum_steps={args.accum}",
        f"data.n_test={args.eval}",
        f"train.eval_samples={args.eval}",
        f"train.save_every={args.steps}",
        f"train.eval_every={10 * args.steps}",
        "train.progress=false",
        "train.tensorboard=false",
        "train.check_ratio=false",
    ]
    if args.device == "cuda":
        torch.cuda.reset_peak_memory_stats()
    t0 = time.perf_counter()
    rc = main([*base, f"train.steps={args.steps}"])
    wall = time.perf_counter() - t0
    peak = torch.cuda.max_memory_allocated() / 2**30 if args.device == "cuda" else float("nan")
    recs = [r for r in _records(out_dir / "metrics.jsonl") if "loss/total" in r]
    n_first = len(first_ratio)
    t1 = time.perf_counter()
    rc_resume = main([*base, f"train.steps={args.steps + args.resume_steps}", "train.resume=auto"])
    resume_wall = time.perf_counter() - t1
    recs_after = [r for r in _records(out_dir / "metrics.jsonl") if "loss/total" in r]

    def med(key):
        xs = sorted(r[key] for r in recs[1:] or recs if key in r)  # the first step compiles and warms up
        return xs[len(xs) // 2] if xs else float("nan")

    resp = med("rollout/response_length")
    B = args.batch
    phases = {k: med(f"time/{k}") for k in ("rollout", "score", "update", "step")}
    summary = json.loads((out_dir / "summary.json").read_text()) if (out_dir / "summary.json").is_file() else {}
    seq_len = sorted(L for _, L in shapes)[len(shapes) // 2] if shapes else None  # P + T, padded
    epochs = load_config("cuda").ppo.ppo_epochs  # the update's passes over the batch
    return {
        "rc": rc,
        "rc_resume": rc_resume,
        "steps": len(recs),
        "steps_after_resume": len(recs_after),
        "resumed_steps": [r.get("step") for r in recs_after[len(recs) :]],
        "wall_s": round(wall, 1),
        "resume_wall_s": round(resume_wall, 1),
        "first_minibatch_max_abs_log_ratio": first_ratio[:n_first],
        "first_minibatch_max_abs_log_ratio_resumed": first_ratio[n_first:],
        "nonfinite_updates": sum(r.get("train/skipped", 0) for r in recs_after),
        "all_losses_finite": all(math.isfinite(r["loss/total"]) for r in recs_after),
        "phase_s_median": phases,
        "response_tokens_median": resp,
        "sequence_tokens_median": seq_len,
        "generation_tok_s": B * resp / phases["rollout"] if phases["rollout"] else None,
        "score_tok_s": B * seq_len / phases["score"] if seq_len and phases["score"] else None,
        "update_tok_s": epochs * B * seq_len / phases["update"] if seq_len and phases["update"] else None,
        "peak_memory_gib": round(peak, 2),
        "summary": summary,
        "settings": base[2:],
        "trunk": SMALL_TRUNK if args.small else QWEN25_05B_TRUNK,
        "kl_to_ref_last": recs_after[-1].get("kl/to_ref") if recs_after else None,
    }


def part_cpu_task(args) -> dict:
    """Each seed's run in a process of its own, all at once (the GPU and 16 cores have room for them)."""
    tmp = Path(tempfile.mkdtemp())
    extra = (
        ["train.steps=2", "rollout.batch_size=16", "ppo.minibatch_size=8", "train.eval_samples=16"]
        if args.small
        else []
    )
    procs = {}
    for seed in args.seeds:
        cmd = [sys.executable, "benchmarks/cpu_run.py", "--seeds", str(seed), "--save", str(tmp / f"{seed}.json"),
               f"model.device={args.device}", *extra]  # fmt: skip
        env = {**os.environ, "OMP_NUM_THREADS": "4"}
        procs[seed] = subprocess.Popen(
            cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
    rows, logs = [], {}
    for seed, proc in procs.items():
        try:
            logs[seed] = proc.communicate(timeout=args.timeout)[0][-2000:]
        except subprocess.TimeoutExpired:
            proc.kill()
            logs[seed] = "timeout: " + proc.communicate()[0][-2000:]
        js = tmp / f"{seed}.json"
        rows += json.loads(js.read_text())["rows"] if js.is_file() else []
    cpu = json.loads((ROOT / "benchmarks/results/default_run/seeds.json").read_text())
    return {"rows": rows, "cpu_rows": [r for r in cpu["rows"] if r["seed"] in args.seeds],
            "cpu_machine": cpu["meta"]["machine"], "logs": logs}  # fmt: skip


def part_trl(args) -> dict:
    js = Path(tempfile.mkdtemp()) / "vs_trl.json"
    cmd = [sys.executable, "benchmarks/vs_trl.py", "--device", args.device, "--grid", "none", "--updates",
           str(args.trl_updates), "--save", str(js)]  # fmt: skip
    res = _run(cmd, args.timeout)
    return {**(json.loads(js.read_text()) if js.is_file() else {}), "run": res}


PARTS = {"tests": part_tests, "throughput": part_throughput, "preset": part_preset, "cpu_task": part_cpu_task,
         "trl": part_trl}  # fmt: skip


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    ap.add_argument("--small", action="store_true", help="a 2-layer trunk and tiny sizes: a smoke test of every part")
    ap.add_argument("--parts", nargs="+", default=list(PARTS), choices=list(PARTS))
    ap.add_argument("--part", choices=list(PARTS), help=argparse.SUPPRESS)  # run one part in this process
    ap.add_argument("--part-json", help=argparse.SUPPRESS)
    ap.add_argument("--data", default=str(ROOT.parent / "shared/data/gsm8k"), help="a folder with GSM8K's jsonl files")
    ap.add_argument("--steps", type=int, default=20, help="PPO steps of the preset part (then resumed for more)")
    ap.add_argument("--resume-steps", type=int, default=3)
    ap.add_argument("--batch", type=int, default=32, help="episodes per step of the preset part")
    ap.add_argument("--update-batch", type=int, default=16, help="minibatch size (preset and throughput parts)")
    ap.add_argument("--accum", type=int, default=2, help="gradient accumulation steps of the preset part")
    ap.add_argument("--gen-batch", type=int, default=64, help="sequences generated at once in the throughput part")
    ap.add_argument("--response", type=int, default=128, help="new tokens per response (preset and throughput)")
    ap.add_argument("--eval", type=int, default=32, help="held-out problems evaluated before and after")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2], help="seeds of the cpu_task part")
    ap.add_argument("--trl-updates", type=int, default=4)
    ap.add_argument("--timeout", type=float, default=300, help="seconds each part may run")
    ap.add_argument(
        "--parallel",
        nargs="*",
        default=["tests", "cpu_task", "trl"],
        help="parts run at the same time, after the others have run alone (their timings are noisier)",
    )
    ap.add_argument("--save", help="write the report here (JSON with meta)")
    ap.add_argument("--commit", help="the commit measured, when the tree has no .git (e.g. a copy on another machine)")
    return ap.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.part:  # a child: one part, its result as JSON
        result = PARTS[args.part](args)
        Path(args.part_json).write_text(json.dumps(result, indent=1, default=str))
        return 0
    if args.device == "cuda" and not torch.cuda.is_available():
        sys.exit("--device cuda: no CUDA GPU is visible (pass --device cpu for a smoke test)")
    if not (Path(args.data) / "train.jsonl").is_file():
        sys.exit(f"--data {args.data}: no train.jsonl there; pass a folder with GSM8K's train.jsonl and test.jsonl")
    child = [a for a in (argv if argv is not None else sys.argv[1:])]
    tmp = Path(tempfile.mkdtemp(prefix="cuda-report-"))

    def start(name):
        js = tmp / f"{name}.json"
        cmd = [sys.executable, __file__, *child, "--part", name, "--part-json", str(js)]
        print(f"[{time.strftime('%H:%M:%S')}] part {name} ...", flush=True)
        return name, js, subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)

    def finish(name, js, proc, t0):
        try:
            log, _ = proc.communicate(timeout=max(1.0, args.timeout + 60 - (time.perf_counter() - t0)))
        except subprocess.TimeoutExpired:
            proc.kill()
            log, _ = proc.communicate()
        res = json.loads(js.read_text()) if js.is_file() else {"error": f"exit {proc.returncode}", "log": log[-4000:]}
        res["part_seconds"] = round(time.perf_counter() - t0, 1)
        print(f"[{time.strftime('%H:%M:%S')}] part {name}: {res['part_seconds']} s", flush=True)
        print(json.dumps(res, default=str)[:3000], flush=True)
        return res

    report = {}
    alone = [p for p in args.parts if p not in args.parallel]
    together = [p for p in args.parts if p in args.parallel]
    for name in alone:
        t0 = time.perf_counter()
        report[name] = finish(*start(name), t0)
    t0 = time.perf_counter()
    running = [start(name) for name in together]
    for name, js, proc in running:
        report[name] = finish(name, js, proc, t0)
    report["device"] = torch.cuda.get_device_name(0) if args.device == "cuda" else "cpu"
    report["torch"] = torch.__version__
    report["parallel_parts"] = together
    if args.save:
        more = {"commit": args.commit} if args.commit else {}
        save_result(args.save, report, command="python benchmarks/cuda_report.py " + " ".join(child), **more)
        print(f"saved {args.save}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
