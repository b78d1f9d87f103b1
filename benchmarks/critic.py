"""Is the critic learning? Measure the value-model mechanisms on the default CPU run, seed by seed.

    .venv/bin/python benchmarks/critic.py [--seeds 0 1 2] [--steps 40] [--configs today value_lr ...] [-o key=value]
    .venv/bin/python benchmarks/critic.py --long [--steps 30] [--configs today vc-ppo ...]
    .venv/bin/python benchmarks/critic.py --oracle separate [--steps 40] [--oracle-n 64] [--json FILE]
    .venv/bin/python benchmarks/critic.py --probe value_lr+lam_value separate [--steps 40]

Each (config, seed) is the README's training command (``python -m ppo_core.train``, the cpu preset) in a
fresh process, with the config's overrides on top (the warm start is cached beforehand, so the wall time
is the PPO run's alone: its two evaluations and the PPO steps, value warm-up steps included). Per run it
prints the critic's explained variance (mean over the first and the last 10 PPO steps; warm-up steps
excluded), the value loss (mean of the last 10 steps), held-out sampled accuracy before and after, and
the wall time. Every config spells out all seven critic keys, so a change of the preset's defaults does
not change what a row measures.

Target for the cpu preset: last-10-step explained variance >= 0.3 on every seed, accuracy gain >= +60
points, <= 180 s on two cores.
"""

import argparse
import json
import os
import platform

# Busy-waiting OpenMP threads collapse on a shared machine (see ppo_core/run/cli.py); set before torch loads.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

from ppo_core.rollout import monte_carlo_values
from ppo_core.run.metrics import ev_by_success

TODAY = {"ppo.value_lr": "0", "ppo.value_warmup_steps": "0", "ppo.lam_value": "null", "ppo.separate_critic": "false",
         "ppo.value_epochs": "0"}  # fmt: skip
"""The settings before this benchmark: one learning rate, no warm-up, one lambda (0.95) for both, a head on the
policy's trunk, as many critic passes as policy passes."""

CONFIGS = {
    "today": {},
    "value_lr": {"ppo.value_lr": "1e-3"},
    "lam_value": {"ppo.lam_value": "1.0"},
    "warmup": {"ppo.value_warmup_steps": "5"},
    "value_lr+lam_value": {"ppo.value_lr": "1e-3", "ppo.lam_value": "1.0"},
    "all": {"ppo.value_lr": "1e-3", "ppo.lam_value": "1.0", "ppo.value_warmup_steps": "5"},
    "separate": {"ppo.separate_critic": "true", "ppo.value_lr": "1e-3", "ppo.lam_value": "1.0"},
    "today+policy_lr2e-4": {"ppo.lr": "2e-4"},
    "separate+policy_lr2e-4": {
        "ppo.separate_critic": "true",
        "ppo.value_lr": "1e-3",
        "ppo.lam_value": "1.0",
        "ppo.lr": "2e-4",
    },
    "separate+warmup": {
        "ppo.separate_critic": "true",
        "ppo.value_lr": "1e-3",
        "ppo.lam_value": "1.0",
        "ppo.value_warmup_steps": "3",
    },
}
"""Each config: overrides on top of ``TODAY`` (one mechanism on, or a combination). The ``+policy_lr2e-4`` ones
also double the policy's learning rate (the cpu preset's ``ppo.lr`` is 1e-4): a faster policy against its critic."""


def overrides_of(name: str) -> list[str]:
    """The full key=value list of a config name: ``TODAY`` updated with its overrides; or a 'k=v,k=v' spec."""
    extra = CONFIGS[name] if name in CONFIGS else dict(kv.split("=", 1) for kv in name.split(","))
    return [f"{k}={v}" for k, v in {**TODAY, **extra}.items()]


def machine() -> dict:
    """Where the runs ran. The same seed on another CPU is another run: matrix products and reductions can add in
    another order there (other vector kernels, another BLAS path), and a last-bit difference grows over the run."""
    info = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").is_file() else ""  # Linux; else platform's
    cpu = next((line.split(":", 1)[1].strip() for line in info.splitlines() if line.startswith("model name")), "")
    return {"cpu": cpu or platform.processor() or platform.machine(),
            "cpu_capability": torch.backends.cpu.get_cpu_capability(), "torch": torch.__version__,
            "threads": torch.get_num_threads()}  # fmt: skip


def mean(xs: list[float]) -> float:
    return sum(xs) / len(xs) if xs else float("nan")


def run(config: str, seed: int, steps: int, extra: list[str], workdir: Path) -> dict:
    out = workdir / f"{config.replace('/', '_')}-seed{seed}"
    cmd = [sys.executable, "-m", "ppo_core.train", f"train.seed={seed}", f"train.steps={steps}",
           f"train.output_dir={out}", "train.progress=false", "train.tensorboard=false", "train.overwrite=true",
           *overrides_of(config), *extra]  # fmt: skip
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"{config} seed {seed} failed:\n{proc.stderr[-3000:]}")
    summary = json.loads((out / "summary.json").read_text())
    recs = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    ppo = [r for r in recs if "value/explained_variance" in r and not r.get("value/warmup")]
    ev = [r["value/explained_variance"] for r in ppo]
    correct = [r["rollout/correct_rate"] for r in ppo]
    return {
        "config": config,
        "seed": seed,
        "ev_first10": mean(ev[:10]),
        "ev_last10": mean(ev[-10:]),
        "value_loss_last10": mean([r["value/loss"] for r in ppo[-10:]]),
        "before": summary["before/sampled_accuracy"],
        "after": summary["after/sampled_accuracy"],
        "wall_s": wall,
        "ev_curve": ev,
        "correct_curve": correct,
    }


def oracle(config: str, seed: int, steps: int, extra: list[str], k: int, n: int) -> dict:
    """Train one run in-process, then compare its critic with the Monte-Carlo best critic on a fresh rollout of
    ``n`` held-out questions; print ``oracle_report`` and return the numbers it prints."""
    from ppo_core.gae import compute_gae, token_rewards
    from ppo_core.kl import kl_penalty
    from ppo_core.run.config import load_config
    from ppo_core.run.metrics import explained_variance
    from ppo_core.run.runner import RunTrainer

    with tempfile.TemporaryDirectory() as tmp:
        run = [f"train.seed={seed}", f"train.steps={steps}", f"train.output_dir={tmp}/run", "train.progress=false"]
        cfg = load_config("cpu", [*run, "train.tensorboard=false", *overrides_of(config), *extra])
        tr = RunTrainer(cfg)
        summary = tr.train()
    records = tr.test_records[:n]  # held-out questions: a rollout the critic was not trained on
    torch.manual_seed(seed + 1)
    ro = tr.collect(records)  # steps 1-2 of the trainer: sample, score (old logprobs, values, task scores)
    p, scores = cfg.ppo, ro.scores
    rewards = token_rewards(scores, kl_penalty(ro.logprobs, ro.ref_logprobs, p.kl_estimator), ro.mask, tr.kl_ctl.value)
    t0 = time.perf_counter()
    v_star = monte_carlo_values(
        tr.actor.lm,
        tr.tokenizer,
        tr.prompts(records),
        ro,
        lambda b, text: tr.reward_fn(text, records[b]["answer"]),
        k,
        cfg.rollout.temperature,
    )
    lam = p.lam if p.lam_value is None else p.lam_value
    out = {"config": config, "seed": seed, "steps": steps, "accuracy": summary["after/sampled_accuracy"], "n": n,
           "k": k, "seconds": time.perf_counter() - t0, "lam": lam, "ev": {}}  # fmt: skip
    for name, lam_t in (("mc", 1.0), ("run", lam)):
        for who, v in (("trained", ro.values.float()), ("best", v_star)):
            _, ret = compute_gae(rewards, v, ro.mask, p.gamma, lam_t)
            out["ev"][f"{name}/{who}"] = explained_variance(v, ret, ro.mask)
    i = int(scores.argmin())
    out["example"] = [
        [tr.tokenizer.decode(ro.response_ids[i, t : t + 1]), float(ro.values[i, t]), float(v_star[i, t])]
        for t in range(int(ro.mask[i].sum()))
    ]
    print(oracle_report(out))
    return out


def oracle_report(out: dict) -> str:
    """What ``oracle`` prints: the trained and the best critic's explained variance, and a response token by token."""
    lines = [
        f"oracle ({out['config']}, seed {out['seed']}, {out['steps']} steps, held-out sampled accuracy "
        f"{out['accuracy']:.3f}; {out['n']} held-out rollouts, k={out['k']} continuations per prefix, "
        f"{out['seconds']:.0f} s):"
    ]
    targets = (("mc", "lambda = 1 (Monte-Carlo returns)"), ("run", f"lambda = {out['lam']} (this run's targets)"))
    for name, label in targets:
        for who, who_label in (("trained", "the trained critic"), ("best", "best possible critic (MC estimate)")):
            ev = out["ev"][f"{name}/{who}"]
            lines.append(f"  targets {label:36s} {who_label:36s} explained variance {ev:+.2f}")
    lines.append("  a response, its tokens with V (critic) and V* (best):")
    lines += [f"    {tok!r:8} V={v:+.2f}  V*={v_star:+.2f}" for tok, v, v_star in out["example"]]
    return "\n".join(lines)


def probe(config: str, seed: int, steps: int, extra: list[str], n_batches: int, epochs: int) -> dict:
    """Which critic *could* fit the trained policy's returns? Train CONFIG, freeze the policy, sample ``n_batches``
    fresh batches of its rollouts, fit critics on all but the last four, and print each one's explained variance
    (Monte-Carlo targets) on those four held-out batches: the run's own critic as it is; a least-squares linear
    probe on the policy's final hidden states (the best any linear head on the shared trunk could do with
    these data); and a separate critic (a copy of the starting trunk with a fresh head) trained ``epochs``
    passes as the trainer trains one (AdamW, 3e-4 for the trunk and 1e-3 for the head, gradient norm clipped to
    ppo.max_grad_norm). Returns the numbers printed."""
    import copy

    from ppo_core.gae import compute_gae, token_rewards
    from ppo_core.kl import kl_penalty
    from ppo_core.model import position_ids_from_mask
    from ppo_core.run.config import load_config
    from ppo_core.run.metrics import explained_variance
    from ppo_core.run.runner import RunTrainer

    with tempfile.TemporaryDirectory() as tmp:
        run = [f"train.seed={seed}", f"train.steps={steps}", f"train.output_dir={tmp}/run", "train.progress=false"]
        cfg = load_config("cpu", [*run, "train.tensorboard=false", *overrides_of(config), *extra])
        tr = RunTrainer(cfg)
        start_trunk = copy.deepcopy(tr.actor.lm.base_model)  # the warm-started policy's trunk, before PPO
        summary = tr.train()
    torch.manual_seed(seed + 1)
    batches = []
    for i in range(n_batches):  # fresh training prompts, after the ones the run used
        ro = tr.collect(tr.prompt_batch(10_000 + i))
        kl = kl_penalty(ro.logprobs, ro.ref_logprobs, cfg.ppo.kl_estimator)
        rewards = token_rewards(ro.scores, kl, ro.mask, tr.kl_ctl.value)
        ro.returns = compute_gae(rewards, torch.zeros_like(rewards), ro.mask, cfg.ppo.gamma, 1.0)[1]  # Monte Carlo
        batches.append(ro)
    fit, test = batches[:-4], batches[-4:]
    T = max(ro.mask.shape[1] for ro in batches)
    pad = lambda x: torch.nn.functional.pad(x, (0, T - x.shape[1]))  # noqa: E731

    def ev(values: list) -> float:
        cat = lambda xs: torch.cat([pad(x) for x in xs])  # noqa: E731
        return explained_variance(cat(values), cat([ro.returns for ro in test]), cat([ro.mask for ro in test]))

    n_fit, n_test = (sum(ro.input_ids.shape[0] for ro in part) for part in (fit, test))
    out = {"config": config, "separate_critic": cfg.ppo.separate_critic, "seed": seed, "steps": steps,
           "accuracy": summary["after/sampled_accuracy"],
           "n_fit": n_fit, "n_test": n_test}  # fmt: skip
    print(probe_report(out))
    out["own"] = ev([ro.values for ro in test])
    print(probe_report(out).splitlines()[-1])

    @torch.no_grad()
    def features(ro):  # the policy's final hidden states at the response positions, plus a constant
        pos = position_ids_from_mask(ro.attention_mask)
        h = tr.actor.lm.base_model(input_ids=ro.input_ids, attention_mask=ro.attention_mask, position_ids=pos)
        h = h.last_hidden_state[:, ro.keep].float()
        return torch.cat([h, torch.ones(*h.shape[:2], 1)], -1)

    X = torch.cat([features(ro)[ro.mask] for ro in fit]).double()
    y = torch.cat([ro.returns[ro.mask] for ro in fit]).double()
    w = torch.linalg.solve(X.T @ X + 1e-3 * torch.eye(X.shape[1], dtype=X.dtype), X.T @ y).float()
    out["linear_probe"] = ev([features(ro) @ w for ro in test])
    print(probe_report(out).splitlines()[-1])
    trunk, head = start_trunk.train(), torch.nn.Linear(X.shape[1] - 1, 1)  # a zero head on the starting trunk
    torch.nn.init.zeros_(head.weight)
    torch.nn.init.zeros_(head.bias)
    opt = torch.optim.AdamW([{"params": trunk.parameters(), "lr": 3e-4}, {"params": head.parameters(), "lr": 1e-3}])

    def values(ro, rows=slice(None)):
        ids, attn = ro.input_ids[rows], ro.attention_mask[rows]
        h = trunk(input_ids=ids, attention_mask=attn, position_ids=position_ids_from_mask(attn)).last_hidden_state
        return head(h[:, ro.keep]).squeeze(-1)

    gen = torch.Generator().manual_seed(seed)
    for _ in range(epochs):
        for ro in fit:
            for rows in torch.randperm(ro.input_ids.shape[0], generator=gen).split(cfg.ppo.minibatch_size):
                loss = ((values(ro, rows) - ro.returns[rows]) ** 2)[ro.mask[rows]].mean()
                opt.zero_grad(set_to_none=True)
                loss.backward()
                torch.nn.utils.clip_grad_norm_([*trunk.parameters(), *head.parameters()], cfg.ppo.max_grad_norm)
                opt.step()
        with torch.no_grad():
            out.setdefault("separate_by_epoch", []).append(ev([values(ro) for ro in test]))
        print(probe_report(out).splitlines()[-1], flush=True)
    return out


def probe_report(out: dict) -> str:
    """What ``probe`` prints for its results so far (``out``, as it returns or saves them): a header line, then
    one line per critic (the README quotes these)."""
    lines = [f"probe ({out['config']}, seed {out['seed']}, {out['steps']} steps, held-out sampled accuracy "
             f"{out['accuracy']:.3f}): critics fitted on {out['n_fit']} fresh rollouts of the trained "
             f"policy, explained variance (Monte-Carlo targets) on {out['n_test']} others"]  # fmt: skip
    if "own" in out:
        lines.append(f"  the run's own critic, as trained:                    {out['own']:+.2f}")
    if "linear_probe" in out:
        lines.append(f"  linear probe on the policy's hidden states (fitted):  {out['linear_probe']:+.2f}")
    for epoch, ev in enumerate(out.get("separate_by_epoch", []), 1):
        lines.append(f"  separate critic (starting trunk + head), epoch {epoch}:    {ev:+.2f}")
    return "\n".join(lines)


LONG = ["data.task=long_synthetic", "rollout.max_new_tokens=128", "rollout.batch_size=64", "ppo.minibatch_size=32",
        "train.eval_samples=128"]  # fmt: skip
"""The long-answer task's run: ~108-token solutions, half the default batch (generation dominates the time)."""

LONG_CONFIGS = {
    "today": {},
    "vc-ppo": {"ppo.lam_value": "1.0", "ppo.value_warmup_steps": "10", "ppo.value_lr": "1e-3"},
    "lam1": {"ppo.lam": "1.0"},
}
"""Long task: today's settings; VC-PPO's recipe (value warm-up on Monte-Carlo targets, policy lambda 0.95, with the
head's own learning rate); and Monte-Carlo advantages (policy lambda 1, no critic needed for credit)."""


def first_token_credit(tr, n_batches: int = 1) -> dict:
    """How much of the final score reaches the first response token: the regression slope of the (unwhitened) GAE
    advantage at token 0 on the task score, over fresh rollouts of the trainer's current policy and critic.

    With V = 0, no KL and lambda fixed it is exactly lambda^(T-1); 1 means the score reaches token 0 in full.
    """
    from ppo_core.gae import compute_gae, token_rewards
    from ppo_core.kl import kl_penalty

    p, a0, sc, right = tr.cfg.ppo, [], [], []
    for i in range(n_batches):
        records = tr.prompt_batch(10_000 + i)
        ro = tr.collect(records)  # steps 1-2 of the trainer: sample, score
        s = ro.scores
        rewards = token_rewards(s, kl_penalty(ro.logprobs, ro.ref_logprobs, p.kl_estimator), ro.mask, tr.kl_ctl.value)
        lam = p.lam
        adv, _ = compute_gae(rewards, ro.values, ro.mask, p.gamma, lam)
        a0.append(adv[:, 0])
        sc.append(s)
        right += [c.split(" ")[0] == str(r["start"]) for c, r in zip(ro.completions, records)]
        length = ro.mask.sum(1).float().mean().item()
    a0, sc = torch.cat(a0), torch.cat(sc)
    slope = (((a0 - a0.mean()) * (sc - sc.mean())).mean() / sc.var(unbiased=False)).item()
    return {"credit": slope, "length": length, "right_start": sum(right) / len(right)}


def long_runs(configs: list[str], seed: int, steps: int, extra: list[str]) -> list[dict]:
    """The long task: first-token credit at the start of PPO (after any value warm-up) and after ``steps`` steps,
    and held-out accuracy before/after, per config, in-process. Prints a row per config; returns the rows."""
    from ppo_core.run.config import load_config
    from ppo_core.run.loop import total_steps
    from ppo_core.run.runner import RunTrainer

    print(f"long-answer task, seed {seed}, {steps} PPO steps per config ({' '.join(LONG)})")
    print("| config | credit at token 0 (start) | credit (end) | right first token | sampled accuracy | wall s |")
    print("|---|---|---|---|---|---|")
    rows = []
    for name in configs:
        spec = LONG_CONFIGS[name] if name in LONG_CONFIGS else dict(kv.split("=", 1) for kv in name.split(","))
        over = [f"{k}={v}" for k, v in {**TODAY, **spec}.items()]
        with tempfile.TemporaryDirectory() as tmp:
            run = [f"train.seed={seed}", f"train.steps={steps}", f"train.output_dir={tmp}/run", "train.progress=false"]
            cfg = load_config("cpu", [*run, *LONG, "train.tensorboard=false", "train.save_every=0", *over, *extra])
            t0 = time.perf_counter()
            tr = RunTrainer(cfg)
            before = tr.evaluate()
            for _ in range(cfg.ppo.value_warmup_steps):
                tr.step()
            with torch.random.fork_rng(devices=[]):
                start = first_token_credit(tr)
            while tr.step_count < total_steps(cfg):
                tr.step()
            after = tr.evaluate()
            with torch.random.fork_rng(devices=[]):
                end = first_token_credit(tr)
            tr.logger.close()
        rows.append({"config": name, "seed": seed, "steps": steps, "start": start, "end": end, "before": before,
                     "after": after, "wall_s": time.perf_counter() - t0})  # fmt: skip
        print(long_row(rows[-1]), flush=True)
    return rows


def long_row(r: dict) -> str:
    """A row of the long task's table (``long_runs``)."""
    start, end = r["start"], r["end"]
    return (f"| {r['config']} | {start['credit']:.3g} (T = {start['length']:.0f}) | {end['credit']:.3g} | "
            f"{start['right_start']:.2f} -> {end['right_start']:.2f} | {r['before']:.3f} -> {r['after']:.3f} | "
            f"{r['wall_s']:.0f} |")  # fmt: skip


def band_line(config: str, rows: list[dict]) -> str:
    """The line that prints ``ev_by_success`` of a config's rows (the README quotes it)."""
    bands = ", ".join(f"{band} {ev:+.2f} ({n} steps)" for band, n, ev in ev_by_success(rows) if n)
    return f"{config}: mean EV by the step's sampled success rate, seeds pooled: {bands}"


def row(r: dict) -> str:
    gain = 100 * (r["after"] - r["before"])
    acc = f"{r['before']:.3f} -> {r['after']:.3f} ({gain:+.1f})"
    return (f"| {r['config']} | {r['seed']} | {r['ev_first10']:+.2f} | {r['ev_last10']:+.2f} | "
            f"{r['value_loss_last10']:.4f} | {acc} | {r['wall_s']:.0f} |")  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--configs", nargs="+",
                    help=f"names ({', '.join(CONFIGS)}) or 'key=value,key=value' specs")  # fmt: skip
    ap.add_argument("--json", help="also write every run's numbers (and explained-variance curve) to this file")
    ap.add_argument("--oracle", metavar="CONFIG", help="instead: train CONFIG on the first seed, then compare its "
                    "critic's explained variance with the best possible critic's (Monte-Carlo estimate)")  # fmt: skip
    ap.add_argument("--oracle-k", type=int, default=16, help="continuations per prefix for --oracle")
    ap.add_argument("--oracle-n", type=int, default=64, help="held-out rollouts for --oracle")
    ap.add_argument("--probe", metavar="CONFIG", nargs="+",
                    help="instead: train each CONFIG on the first seed, freeze it, fit a linear probe and a "
                    "separate critic to its returns (could a critic follow them?)")  # fmt: skip
    ap.add_argument("--probe-batches", type=int, default=18, help="fresh rollout batches for --probe (4 held out)")
    ap.add_argument("--probe-epochs", type=int, default=6, help="passes of the separate critic for --probe")
    ap.add_argument("--long", action="store_true", help="instead: the long-answer task on the first seed, configs "
                    f"from --configs (default {' '.join(LONG_CONFIGS)}): first-token credit and accuracy")  # fmt: skip
    ap.add_argument("-o", "--override", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                    help="an override for every run (repeat it for several)")  # fmt: skip
    args = ap.parse_args()
    command = "python benchmarks/critic.py " + " ".join(sys.argv[1:])

    def save(result) -> None:  # --json: tools/report.py and chapter 05 read these files
        if args.json:
            Path(args.json).write_text(json.dumps(result, indent=1))

    def save_rows(rows: list[dict]) -> None:
        save({"commands": [command], "machine": machine(), "rows": rows})

    if args.long:
        return save_rows(long_runs(args.configs or list(LONG_CONFIGS), args.seeds[0], args.steps, args.overrides))
    args.configs = args.configs or list(CONFIGS)
    if args.probe:
        return save([{**probe(c, args.seeds[0], args.steps, args.overrides, args.probe_batches, args.probe_epochs),
                      "command": command} for c in args.probe])  # fmt: skip
    if args.oracle:
        out = oracle(args.oracle, args.seeds[0], args.steps, args.overrides, args.oracle_k, args.oracle_n)
        return save({**out, "command": command})
    for c in args.configs:
        overrides_of(c)  # a bad name fails now, not after an hour of runs
    from ppo_core.run.config import load_config
    from ppo_core.run.setup import _warm_started_tiny

    for seed in args.seeds:  # cache the warm starts first: the timed runs are the PPO runs alone
        _warm_started_tiny(load_config("cpu", [f"train.seed={seed}", "train.progress=false", *args.overrides]))
    print(f"torch threads: {os.environ.get('OMP_NUM_THREADS', 'default')}; load before: {os.getloadavg()[0]:.2f}")
    print(f"machine: {machine()}")
    print("| config | seed | EV first 10 | EV last 10 | value loss (last 10) | sampled accuracy | wall s |")
    print("|---|---|---|---|---|---|---|")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for config in args.configs:
            for seed in args.seeds:
                rows.append(run(config, seed, args.steps, args.overrides, Path(tmp)))
                print(row(rows[-1]), flush=True)
    print(f"load after: {os.getloadavg()[0]:.2f}")
    for config in args.configs:
        rs = [r for r in rows if r["config"] == config]
        ok = all(r["ev_last10"] >= 0.3 and r["after"] - r["before"] >= 0.6 and r["wall_s"] <= 180 for r in rs)
        print(
            f"{config}: EV last 10 >= 0.3, gain >= +60 points and <= 180 s on every seed: {'met' if ok else 'NOT met'}"
        )
        print(band_line(config, rs))
    save_rows(rows)


if __name__ == "__main__":
    main()
