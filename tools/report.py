"""The book's Measurements pages, generated from the results files in ``benchmarks/results/``.

    python -m tools.report           # rewrite the generated blocks of book/measurements/*.md and their figures
    python -m tools.report --check   # exit 1, naming them, if a page or figure is stale or was edited by hand

A page is prose written by hand around generated blocks; the prose states conclusions, the blocks hold every
number, each with the ``meta`` (machine, date, commit, command) of the file it comes from:

    <!-- report: critic_runs critic/settings.json -->
    (generated: replaced on every run)
    <!-- /report -->
"""

import argparse
import io
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
PAGES = ROOT / "book" / "measurements"
FIGURES = PAGES / "images"
BLOCK = re.compile(r"(<!-- report: (?P<spec>[^>]+?) -->\n)(?P<body>.*?)(<!-- /report -->)", re.S)

SEPARATE = "ppo.separate_critic=true,ppo.value_lr=1e-3,ppo.lam_value=1.0"
NAMED = {  # benchmarks/critic.py's named configs when these runs were made: overrides on top of "today"
    "today": "the course's first critic: a value head on the policy's trunk, one learning rate, one lambda",
    "value_lr": "ppo.value_lr=1e-3",
    "lam_value": "ppo.lam_value=1.0",
    "warmup": "ppo.value_warmup_steps=5",
    "value_lr+lam_value": "ppo.value_lr=1e-3, ppo.lam_value=1.0",
    "all": "ppo.value_lr=1e-3, ppo.lam_value=1.0, ppo.value_warmup_steps=5",
    "separate": SEPARATE.replace(",", ", "),
    "vc-ppo": "ppo.value_lr=1e-3, ppo.lam_value=1.0, ppo.value_warmup_steps=10",
    "lam1": "ppo.lam=1.0",
    "today+policy_lr2e-4": "ppo.lr=2e-4",
    "separate+reads_policy": SEPARATE.replace(",", ", ") + ", ppo.critic_reads_policy=true",
    "separate+reads_policy+policy_lr2e-4": SEPARATE.replace(",", ", ") + ", ppo.critic_reads_policy=true, ppo.lr=2e-4",
}
REMOVED = (
    "Rows marked *(removed)* used `ppo.critic_reads_policy`, an experiment of the course the package no longer has."
)
ALGOS = {"ppo": "PPO", "grpo": "GRPO", "drgrpo": "Dr. GRPO", "rloo": "RLOO", "reinforcepp": "REINFORCE++"}


def load(name: str) -> dict:
    """A results file, ``benchmarks/results/<name>``."""
    return json.loads((RESULTS / name).read_text())


UPDATE_SHARE_TARGET = 0.6  # the real-model preset's update against a float32 matmul (real_llm_phases)


def table(header: list[str], rows: list[list]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return "\n".join(lines + ["| " + " | ".join(str(c) for c in row) + " |" for row in rows])


def mean(xs: list[float]) -> float:
    return sum(xs) / len(xs)


def _machine(machine) -> str:
    if isinstance(machine, dict):
        return ", ".join(f"{k} {v}" for k, v in machine.items())
    return str(machine)


def meta(*names: str) -> str:
    """Where each file's numbers come from: machine, date, commit and command(s)."""
    out = []
    for name in names:
        m = load(name)["meta"]
        commands = m["command"] if isinstance(m["command"], list) else [m["command"]]
        note = m.get("recovered", "")  # a file saved before results_meta.py: what its history tells
        note = f" {note[:1].upper()}{note[1:]}." if note else ""
        versions = "".join(f", {k} {v}" for k, v in m.get("versions", {}).items())
        if "load_average" in m:  # (1, 5, 15 min) when it started and when it ended
            start, end = (", ".join(f"{x:.2f}" for x in m["load_average"][k]) for k in ("start", "end"))
            note += f" Load average (1, 5, 15 min): {start} at the start, {end} at the end."
        if "load_at_start" in m:  # (1, 5, 15 min) when the first run started
            note += f" Load average (1, 5, 15 min) at the start: {', '.join(f'{x:.2f}' for x in m['load_at_start'])}."
        out.append(f"- `benchmarks/results/{name}`: machine: {_machine(m['machine'])}{versions}; date {m['date']}; "
                   f"commit `{m['commit']}`.{note}")  # fmt: skip
        out.append("\n  ```text\n" + "\n".join(f"  {c}" for c in commands) + "\n  ```")  # a long command scrolls
    return "\n".join(out)


def _spans(overrides: str) -> str:
    """``a=1,b=2`` as ```a=1`, `b=2```: one code span per override, so that a table cell can wrap between them."""
    return ", ".join(f"`{o.strip()}`" for o in overrides.split(",") if o.strip())


def config_label(config: str) -> str:
    """A run's config for a table: its name, or its overrides with the separate critic's written as ``separate``."""
    removed = " *(removed)*" if "reads_policy" in config else ""
    if config == SEPARATE or "=" not in config:  # a name; "a+b" as two spans, so that a narrow cell can wrap
        return " + ".join(f"`{part}`" for part in ("separate" if config == SEPARATE else config).split("+")) + removed
    if config.startswith(SEPARATE + ","):
        return f"`separate` + {_spans(config[len(SEPARATE) + 1 :])}{removed}"
    return _spans(config) + removed


def critic_legend() -> str:
    """The named configs of benchmarks/critic.py: their overrides on top of ``today``."""
    rows = [[config_label(name), over if name == "today" else _spans(over)] for name, over in NAMED.items()]
    return table(["config", "what it changes"], rows) + "\n\n" + REMOVED


def critic_runs(name: str) -> str:
    """One row per (config, seed), then a mean per config over its seeds."""
    runs = load(name)["rows"]
    header = ["config", "seed", "EV, first 10 → last 10 steps", "held-out accuracy", "gain"]
    rows, by_config = [], {}
    for r in runs:
        label = config_label(r["config"]) + (f", {r['steps']} steps" if "steps" in r else "")
        by_config.setdefault(label, []).append(r)
        gain = 100 * (r["after"] - r["before"])
        accuracy = f"{r['before']:.3f} → {r['after']:.3f}"
        rows.append([label, r["seed"], f"{r['ev_first10']:+.2f} → {r['ev_last10']:+.2f}", accuracy, f"{gain:+.1f}"])
    for label, rs in by_config.items():
        if len(rs) > 1:
            first, last = mean([r["ev_first10"] for r in rs]), mean([r["ev_last10"] for r in rs])
            gain = 100 * mean([r["after"] - r["before"] for r in rs])
            rows.append([label, f"mean of {len(rs)}", f"{first:+.2f} → {last:+.2f}", "", f"{gain:+.1f}"])
    return table(header, rows)


def critic_bands(name: str) -> str:
    """Mean explained variance of the steps whose sampled success rate falls in each band, seeds pooled."""
    bands = (0.0, 0.5, 0.8, 0.9, 1.01)
    runs = load(name)["rows"]
    rows = []
    for steps in sorted({r.get("steps", 0) for r in runs}):
        pairs = [(c, e) for r in runs if r.get("steps", 0) == steps for c, e in zip(r["correct_curve"], r["ev_curve"])]
        for lo, hi in zip(bands, bands[1:]):
            evs = [e for c, e in pairs if lo <= c < hi]
            band = f"[{lo:.1f}, {min(hi, 1.0):.1f}{']' if hi > 1 else ')'}"
            rows.append([steps, band, len(evs), f"{mean(evs):+.2f}" if evs else ""])
    return table(["run length (steps)", "sampled success rate", "steps", "mean EV"], rows)


def critic_probe(name: str) -> str:
    """Held-out explained variance of critics fitted to a frozen trained policy's rollouts, pass by pass."""
    probes = load(name)["probes"]
    header = [""] + [f"{config_label(p['config'])} run" for p in probes]
    rows = [["held-out accuracy of the trained policy"] + [f"{p['accuracy']:.3f}" for p in probes],
            ["rollouts fitted / scored"] + [f"{p['n_fit']} / {p['n_test']}" for p in probes],
            ["the run's own critic, as trained"] + [f"{p['own']:+.2f}" for p in probes],
            ["linear probe on the policy's hidden states"] + [f"{p['linear_probe']:+.2f}" for p in probes]]  # fmt: skip
    for k in range(max(len(p["separate_by_epoch"]) for p in probes)):
        cells = [f"{p['separate_by_epoch'][k]:+.2f}" if k < len(p["separate_by_epoch"]) else "" for p in probes]
        rows.append([f"a separate critic, pass {k + 1}"] + cells)
    return table(header, rows)


def critic_oracle(*names: str) -> str:
    """The trained critic against the best possible one (Monte-Carlo estimate) on held-out rollouts."""
    rows = []
    for name in names:
        o = load(name)
        ev = o["ev"]
        rows.append([config_label(o["config"]), o["seed"], o["n"], f"{o['accuracy']:.3f}",
                     f"{ev['mc/trained']:+.2f}", f"{ev['mc/best']:+.2f}"])  # fmt: skip
    return table(["config", "seed", "rollouts", "accuracy", "EV, trained", "EV, best"], rows)


def critic_long(name: str) -> str:
    """The long-answer task: how much of the score reaches the first token, at the start and the end."""
    rows = []
    for r in load(name)["rows"]:
        start, end = r["start"], r["end"]
        rows.append([config_label(r["config"]), f"{start['credit']:.3g} → {end['credit']:.3g}",
                     f"{start['length']:.0f}", f"{start['right_start']:.2f} → {end['right_start']:.2f}",
                     f"{r['before']:.3f} → {r['after']:.3f}"])  # fmt: skip
    return table(["config", "credit at token 0", "tokens", "right first token", "accuracy"], rows)


def default_run(name: str) -> str:
    """The default training command on several seeds (benchmarks/cpu_run.py): accuracy, critic, time."""
    rows = [[r["seed"], f"{r['before']:.3f} → {r['after']:.3f}", f"{r['gain_points']:+.1f}",
             f"{r['greedy_before']:.3f} → {r['greedy_after']:.3f}", f"{r['ev_last10']:+.2f}", f"{r['wall_s']:.0f}"]
            for r in load(name)["rows"]]  # fmt: skip
    data = load(name)
    gain, ev = data["targets"]["gain_points"], data["targets"]["ev_last10"]
    n = len(data["rows"])
    met_gain = sum(r["gain_points"] >= gain for r in data["rows"])
    met_ev = sum(r["ev_last10"] >= ev for r in data["rows"])
    summary = (
        f"Targets: a gain of at least {gain:+.0f} points on every seed (met on {met_gain} of {n}) and an explained "
        f"variance over the last 10 steps of at least {ev} on every seed (met on {met_ev} of {n}). "
        f"Load while it ran: {data['load'] or 'not recorded'}."
    )
    header = ["seed", "sampled accuracy", "gain", "greedy accuracy", "EV last 10", "wall s"]
    return table(header, rows) + "\n\n" + summary


def _last(steps: list[dict], key: str, n: int = 5) -> float:
    values = [r[key] for r in steps if key in r][-n:]
    return sum(values) / len(values) if values else float("nan")


def _tables(header: list[str], rows: list[list], groups: list[list[int]]) -> str:
    """One table per group of columns, each led by column 0 (the record's name): a wide table cut to the page."""
    return "\n\n".join(table([header[0]] + [header[i] for i in g], [[r[0]] + [r[i] for i in g] for r in rows])
                         for g in groups)  # fmt: skip


def real_llm(name: str) -> str:
    """The real-model preset on several seeds (benchmarks/real_llm.py): both accuracies, the critic, KL, time."""
    data = load(name)
    t = data["targets"]
    rows, met = [], {"gain": 0, "ev": 0, "time": 0, "wall": 0}
    for r in data["rows"]:
        e, steps = r["eval"], r["steps"]
        gain = 100 * (e["after_sampled"]["marker_acc"] - e["before_sampled"]["marker_acc"])
        ev = _last(steps, "value/explained_variance")
        met["gain"] += gain >= t["gain_points"]
        met["ev"] += ev >= t["ev_last"]
        met["time"] += r["train_s"] <= 60 * t["train_minutes"]
        met["wall"] += r["wall_s"] <= 60 * t["wall_minutes"]
        load_avg = ", ".join(f"{x:.1f}" for x in r["load_avg"]["before"])
        rows.append([r["seed"], f"{e['before_sampled']['marker_acc']:.3f} → {e['after_sampled']['marker_acc']:.3f}",
                     f"{gain:+.1f}",
                     f"{e['before_sampled']['last_number_acc']:.3f} → {e['after_sampled']['last_number_acc']:.3f}",
                     f"{e['before_sampled']['format_rate']:.2f} → {e['after_sampled']['format_rate']:.2f}",
                     f"{e['before_greedy']['marker_acc']:.3f} → {e['after_greedy']['marker_acc']:.3f}",
                     f"{ev:+.2f}", f"{_last(steps, 'kl/to_ref'):.2f}",
                     f"{steps[0]['rollout/eos_rate']:.2f} → {steps[-1]['rollout/eos_rate']:.2f}",
                     f"{r['train_s']:.0f}", f"{r['wall_s']:.0f}",
                     f"{r['peak_rss_gb']:.1f}", load_avg])  # fmt: skip
    n = len(data["rows"])
    header = ["seed", "sampled ####", "gain", "last number", "format", "greedy ####", "EV, last 5", "KL, last 5",
              "EOS rate", "train s", "wall s", "peak RSS GB", "load (1, 5, 15 min)"]  # fmt: skip
    summary = (
        f"Held-out problems per evaluation: {data['rows'][0]['n_eval']}. Targets: a sampled gain of at least "
        f"{t['gain_points']:+.0f} points (met on {met['gain']} of {n} seeds), within {t['train_minutes']:.0f} minutes "
        f"of training (met on {met['time']} of {n}), the whole run within {t['wall_minutes']:.0f} minutes (met on "
        f"{met['wall']} of {n}), and an explained variance of at least {t['ev_last']} over the last steps (met on "
        f"{met['ev']} of {n})."
    )
    legend = (
        "Sampled and greedy `####` accuracy, the gain in points, last-number accuracy and the format rate on the "
        "held-out split; the critic's explained variance and the KL to the reference over the last 5 steps; the "
        "share of the rollout's replies that end with the stop token, at the first step and the last."
    )
    return legend + "\n\n" + _tables(header, rows, [[1, 2, 3, 4], [5, 6, 7, 8], [9, 10, 11, 12]]) + "\n\n" + summary


def real_llm_phases(name: str) -> str:
    """Seconds per step by phase and tokens per second, means over each seed's steps; the update's arithmetic rate
    against a float32 matmul, and the target for it."""
    rows, met, rated = [], 0, 0
    padded = True
    for r in load(name)["rows"]:
        steps = r["steps"]
        m = {k: sum(s[k] for s in steps) / len(steps) for k in ("time/rollout", "time/score", "time/update")}
        tokens = sum(s["rollout/response_length"] for s in steps) / len(steps) * r.get("batch_size", 0)
        rate = f"{tokens / m['time/rollout']:.0f}" if tokens else "n/a"
        flops, matmul = r.get("update_gflops") or [], r.get("matmul_gflops")
        share = ""
        if flops and matmul:
            rated += 1
            met += mean(flops) / matmul >= UPDATE_SHARE_TARGET
            share = f"{100 * mean(flops) / matmul:.0f} %"
            padded &= "rollout_shapes" in r
        rows.append([r["seed"], len(steps), f"{m['time/rollout']:.1f}", f"{m['time/score']:.1f}",
                     f"{m['time/update']:.1f}", rate, f"{mean(flops):.0f}" if flops else "not recorded",
                     f"{matmul:.0f}" if matmul else "not recorded", share or "n/a"])  # fmt: skip
    header = ["seed", "steps", "generate s", "score s", "update s", "gen. tokens/s", "update GFLOP/s",
              "matmul GFLOP/s", "update / matmul"]  # fmt: skip
    counted = ("over each step's rollout as the update runs over it, padded to its longest prompt and reply"
               if padded else "over the mean reply length, not the padded rollout: an undercount")  # fmt: skip
    note = f"The matmul is float32, on the same threads. The update's FLOPs are counted {counted}."
    if rated:
        note += (f" Target: the update at {100 * UPDATE_SHARE_TARGET:.0f} % of the matmul rate or more (met on {met} "
                 f"of {rated} seeds).")  # fmt: skip
    return _tables(header, rows, [[1, 2, 3, 4], [5, 6, 7, 8]]) + "\n\n" + note


def real_llm_gsm8k(name: str) -> str:
    """The real GSM8K test problems, greedy, before and after training (first seed)."""
    g = load(name)["rows"][0].get("gsm8k") or {}
    if not g.get("before"):
        return "Not measured in this file (`--gsm8k 0`, or no `../shared/data/gsm8k`)."
    b, a = g["before"], g["after"]
    rows = [[when, x["n"], f"{x['marker_acc']:.3f}", f"{x['last_number_acc']:.3f}", f"{x['format_rate']:.2f}"]
            for when, x in (("before", b), ("after", a))]  # fmt: skip
    return table(["", "problems", "`####` acc.", "last-number acc.", "format rate"], rows)


def overlong_real(name: str) -> str:
    """benchmarks/overlong_real.py: per arm, the share of replies cut at the limit, the EOS rate, the gain."""
    data = load(name)
    rows = []
    for arm, overrides in data["arms"].items():
        rs = [r for r in data["runs"] if r["arm"] == arm]
        if not rs:
            continue
        gains = [100 * (r["eval"]["after_sampled"]["marker_acc"] - r["eval"]["before_sampled"]["marker_acc"])
                 for r in rs]  # fmt: skip
        first = mean([r["steps"][0]["rollout/response_length"] for r in rs])
        last = mean([r["steps"][-1]["rollout/response_length"] for r in rs])
        rows.append([f"`{' '.join(overrides)}`" if overrides else "none", len(rs),
                     f"{mean([1 - r['steps'][0]['rollout/eos_rate'] for r in rs]):.2f}",
                     f"{mean([r['steps'][-1]['rollout/eos_rate'] for r in rs]):.2f}", f"{first:.1f} → {last:.1f}",
                     _span(gains, "+.1f")])  # fmt: skip
    header = ["switch", "runs", "no EOS, step 1", "EOS rate, last step", "tokens / reply in the loss",
              "gain, points: mean [min, max]"]  # fmt: skip
    failed = "".join(f"\n- failed: {f['arm']}, seed {f['seed']}: `{f['error'].split(': the training')[0]}`"
                     for f in data["failed"])  # fmt: skip
    return _tables(header, rows, [[1, 2, 3], [4, 5]]) + ("\n" + failed if failed else "")


CRITICS_REAL = {
    "mc_values": "each state's value estimated from continuations sampled from it (VinePPO's estimate; the KL part "
    "of the return left out): what a critic that reads the reply could reach",
    "ceiling_prompt": "the most a value that sees only the prompt can explain (per episode, sampling noise removed)",
    "oracle_prompt": "the mean return of the prompt's other replies",
    "constant": "the fit half's mean return",
    "ridge": "a linear head on the policy's final hidden states, frozen, fitted to convergence",
    "ridge_base": "the same on the base model's (adapters off)",
    "ridge_mid": "the same on a middle layer's hidden states",
    "ridge_prompt": "the same on the prompt's last hidden state alone",
    "mlp": "a two-layer head on the final hidden states",
    "lora": "a LoRA critic of its own (the preset's rank), its head started from `ridge`",
    "online:preset": "the preset's head updated as training updates it, on the final hidden states",
}
"""What each row of benchmarks/critic_real.py is; an ``online:KEY=VALUE`` row is ``online:preset`` with ppo.KEY."""


def real_llm_critic(*names: str) -> str:
    """Critics fitted offline on fixed episodes of the real-model preset (benchmarks/critic_real.py), one column
    per file (the starting policy, trained ones): held-out explained variance, the ceiling, the logged EV."""
    files = [load(n) for n in names]
    cols = [f"after {d['train_steps']} steps" if d["train_steps"] else "start" for d in files]
    if len(set(cols)) < len(cols):  # two files of the same policy: tell them apart by their prompts
        cols = [f"{c}, {d['data']['prompts']} prompts" for c, d in zip(cols, files)]
    stats = (("prompts", "prompts", "{}"), ("replies each", "group", "{}"), ("episodes", "episodes", "{}"),
             ("response tokens", "tokens", "{}"), ("correct", "correct_rate", "{:.3f}"),
             ("`####` format", "format_rate", "{:.3f}"), ("mean return", "mean_return", "{:.3f}"),
             ("return variance", "return_var_token", "{:.4f}"))  # fmt: skip
    data_rows = [[label, *(fmt.format(d["data"][key]) for d in files)] for label, key, fmt in stats]
    by = [{r["critic"]: r for r in d["rows"]} for d in files]
    order = [c for c in CRITICS_REAL if any(c in b for b in by)]
    order = list(dict.fromkeys(order + [c for b in by for c in b]))  # then the online variants, in the files' order
    legend = [f"- `{c}`: {CRITICS_REAL[c]}" if c in CRITICS_REAL else
              f"- `{c}`: `online:preset` with `ppo.{c.split(':', 1)[1]}`" for c in order]  # fmt: skip
    rows = [[f"`{c}`", *(f"{b[c]['ev_held']:+.3f}" if c in b else "n/a" for b in by)] for c in order]
    online = [c for c in order if c.startswith("online:")]
    logged = [[f"`{c}`", *(f"{b[c][k]:+.3f}" if c in b and (k := _logged_key(b[c])) else "n/a" for b in by)]
              for c in online]  # fmt: skip
    lora = [", ".join(f"{v:+.3f}" for v in b["lora"]["curve"]) if "lora" in b else "not run" for b in by]
    times = [", ".join(f"{k.removesuffix('_s')} {v:.0f}" for k, v in d["times"].items()) for d in files]
    loads = [", ".join(f"{x:.1f}" for x in d["load_avg"]["before"]) for d in files]
    mc = "".join(f" Monte Carlo values ({c}, {b['mc_values']['k']} continuations per state), with their sampling "
                 f"noise removed: {b['mc_values']['ev_noise_removed']:+.3f}." for c, b in zip(cols, by)
                 if "mc_values" in b)  # fmt: skip
    trained = [(c, d["train_logged_ev"][-5:]) for c, d in zip(cols, files) if d.get("train_logged_ev")]
    during = "".join(f" The run's own logged explained variance before sampling ({c}), mean of its last {len(v)} "
                     f"steps: {mean(v):+.3f}." for c, v in trained)  # fmt: skip
    return "\n\n".join(
        [
            "The episodes (both halves):",
            table(["", *cols], data_rows),
            "The critics:\n\n" + "\n".join(legend),
            "Held-out explained variance (token level; fitted on the other half's prompts):",
            table(["critic", *cols], rows),
            "The online replays' explained variance as training logs it (each round scored before the head learns from "
            "it), mean of the last rounds:",
            table(["replay", *cols], logged),
            f"The LoRA critic's held-out explained variance before its training and after each pass "
            f"({'; '.join(cols)}): {'; '.join(lora)}.{mc}{during} Seconds by phase: {'; '.join(times)}. "
            f"Load average (1, 5, 15 min) at the start: {'; '.join(loads)}.",
        ]
    )


def _logged_key(row: dict) -> str | None:
    return next((k for k in row if k.startswith("logged_ev_last")), None)


def figure_real_llm(name: str, figures: dict) -> str:
    """Per seed: the rollout's success rate, the critic's explained variance and the KL to the reference, by step."""
    plt = _plt()
    fig, axes = plt.subplots(1, 3, figsize=(11, 3.2))
    for r in load(name)["rows"]:
        steps = r["steps"]
        kw = dict(color=f"C{r['seed']}", label=f"seed {r['seed']}")
        axes[0].plot([s["rollout/correct_rate"] for s in steps], **kw)
        axes[1].plot([s.get("value/explained_variance", float("nan")) for s in steps], **kw)
        axes[2].plot([s["kl/to_ref"] for s in steps], **kw)
    for ax, label in zip(axes, ("rollout success rate", "critic explained variance", "KL to reference (nats)")):
        ax.set_xlabel("step")
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
    axes[1].set_ylim(-2, 1)
    axes[0].legend(fontsize=7)
    return _figure(fig, name, figures, "Success rate, explained variance and KL per step")


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plt.rcParams["svg.hashsalt"] = "tools.report"  # the same ids on every run: a figure is stale only when its data is
    return plt


def _svg(fig, name: str, figures: dict) -> str:
    buf = io.StringIO()
    fig.savefig(buf, format="svg", metadata={"Date": None, "Creator": None})
    figures[name] = buf.getvalue()
    return f"images/{name}"


def _figure(fig, name: str, figures: dict, alt: str) -> str:
    """Lay out ``fig``, keep it as ``images/<results file's stem>.svg`` and return its markdown (``alt``, from name)."""
    fig.tight_layout()
    stem = Path(name).with_suffix("").as_posix().replace("/", "_")
    path = _svg(fig, f"{stem}.svg", figures)
    _plt().close(fig)
    return f"![{alt}, from {name}]({path})"


def figure_critic_curves(name: str, figures: dict) -> str:
    """Explained variance and sampled success rate over the steps of each run in a file."""
    plt = _plt()
    runs = load(name)["rows"]
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.4))
    for r in runs:
        kw = dict(color=f"C{r['seed']}", alpha=0.9, linestyle="-" if r.get("steps", 0) != 40 else "--")
        axes[0].plot(r["ev_curve"], label=f"seed {r['seed']}, {len(r['ev_curve'])} steps", **kw)
        axes[1].plot(r["correct_curve"], **kw)
    axes[0].set_ylabel("explained variance")
    axes[1].set_ylabel("sampled success rate")
    for ax in axes:
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=7)
    return _figure(fig, name, figures, "Explained variance and success rate per step")


def _algo_runs(name: str) -> tuple[list[dict], list[str]]:
    runs = load(name)["runs"]
    return runs, [m for m in ALGOS if any(r["method"] == m for r in runs)]


def algos_curve(name: str) -> str:
    """Held-out sampled accuracy by sampled episodes: mean over seeds, per method."""
    runs, methods = _algo_runs(name)
    rows = []
    for ep in sorted({p["episodes"] for r in runs for p in r["curve"]}):
        cells = []
        for m in methods:
            acc = [p["accuracy"] for r in runs if r["method"] == m for p in r["curve"] if p["episodes"] == ep]
            cells.append(f"{mean(acc):.3f}" if acc else "")
        rows.append([ep] + cells)
    return table(["episodes"] + [ALGOS[m] for m in methods], rows)


def algos_summary(name: str) -> str:
    """Per method, means over seeds: final accuracy with its range, training time, memory, response length."""
    runs, methods = _algo_runs(name)
    rows = []
    for m in methods:
        rs = [r for r in runs if r["method"] == m]
        after = [r["after"] for r in rs]
        train_s = mean([r["train_s"] for r in rs])
        rss, length = mean([r["peak_rss_mb"] for r in rs]), mean([r["response_length"] for r in rs])
        accuracy = f"{mean(after):.3f} [{min(after):.3f}, {max(after):.3f}]"
        rows.append([ALGOS[m], len(rs), accuracy, f"{train_s:.0f}", f"{rss:.0f}", f"{length:.1f}"])
    header = ["method", "seeds", "final accuracy, mean [min, max]", "training s", "peak RSS MB", "response tokens"]
    return table(header, rows)


def _span(xs: list[float], fmt: str) -> str:
    return f"{mean(xs):{fmt}} [{min(xs):{fmt}}, {max(xs):{fmt}}]"


def objectives_summary(name: str) -> str:
    """Chapter 08's arms, means over seeds [min, max]: accuracy, entropy, episodes drawn, time, EOS."""
    data = load(name)
    rows = []
    for m, label in data["labels"].items():
        rs = [r for r in data["runs"] if r["method"] == m]
        if not rs:
            continue
        fell = sum(r["entropy"][-1] < r["entropy"][0] for r in rs)
        no_eos = mean([1 - mean(r["eos_rate"]) for r in rs]) * 100
        rows.append([label, len(rs), _span([r["after"] for r in rs], ".3f"),
                     f"{mean([r['entropy'][0] for r in rs]):.3f} → {mean([r['entropy'][-1] for r in rs]):.3f}",
                     f"{fell} of {len(rs)}", f"{mean([r['trained_episodes'] for r in rs]):.0f}",
                     _span([r["drawn_episodes"] for r in rs], ".0f"), _span([r["s_per_step"] for r in rs], ".2f"),
                     f"{no_eos:.1f}"])  # fmt: skip
    header = ["arm", "seeds", "final accuracy", "entropy first → last", "entropy fell", "episodes trained",
              "episodes drawn", "s / step", "% without EOS"]  # fmt: skip
    return _tables(header, rows, [[1, 2, 3], [4, 5, 6], [7, 8]])


def figure_algos(name: str, figures: dict) -> str:
    """Accuracy against sampled episodes and against training time, one line per run."""
    plt = _plt()
    runs, methods = _algo_runs(name)
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.4), sharey=True)
    for i, m in enumerate(methods):
        for k, r in enumerate(x for x in runs if x["method"] == m):
            kw = dict(color=f"C{i}", alpha=0.8, marker=".", label=ALGOS[m] if k == 0 else None)
            axes[0].plot([p["episodes"] for p in r["curve"]], [p["accuracy"] for p in r["curve"]], **kw)
            axes[1].plot([p["train_s"] / 60 for p in r["curve"]], [p["accuracy"] for p in r["curve"]], **kw)
    axes[0].set_xlabel("sampled episodes")
    axes[1].set_xlabel("training wall time (min)")
    axes[0].set_ylabel("held-out sampled accuracy")
    for ax in axes:
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    path = _svg(fig, "algorithms_compare.svg", figures)
    plt.close(fig)
    return f"![Held-out accuracy of each method against episodes and training time, from {name}]({path})"


LOGPROBS_LINE = re.compile(r"^\s*(\w+):\s+([\d.]+ \w+) ->\s+([\d.]+ \w+)$")


def memory_logprobs(name: str) -> str:
    """Extra peak RSS of the one-shot float32 forms against the package's chunks, from the saved printout."""
    printed = load(name)["printed"]
    rows = [list(m.groups()) for line in printed if (m := LOGPROBS_LINE.match(line))]
    return printed[0].rstrip(":") + "\n\n" + table(["function", "all rows at once", "in chunks"], rows)


TRAINERS = (("trl", "TRL"), ("ours", "ours"))
PHASES = (("gen", "generation"), ("score", "scoring"), ("update", "update"))


def vs_trl(folder: str) -> str:
    """benchmarks/vs_trl.py's files: seconds per update, tokens/s per phase, the update's GFLOP/s, the grid."""
    files = sorted((RESULTS / folder).glob("*.json")) if (RESULTS / folder).is_dir() else []
    if not files:
        return f"No results file under `benchmarks/results/{folder}/` yet."
    return "\n\n".join(_vs_trl_file(path.relative_to(RESULTS).as_posix()) for path in files)


def _vs_trl_file(name: str) -> str:
    data = load(name)
    settings = data["settings"]
    out = [f"**`{name}`**", *(_vs_trl_settings(settings) if settings else [])]  # a grid-only run has none
    if data.get("grid"):
        rows = [[g["B"], g["T"], f"{g['trl_s']:.2f}", f"{g['ours_s']:.2f}", f"{g['ratio']:.2f}"] for g in data["grid"]]
        grid = table(["B", "T", "TRL s", "ours s", "ratio"], rows)
        out.append("Scale grid (like-for-like on a fresh tiny model, responses run to the limit):\n\n" + grid)
    return "\n\n".join(out + [meta(name)])


def _vs_trl_settings(settings: list[dict]) -> list[str]:
    """What each setting ran, then its seconds per update, tokens/s per phase and GFLOP/s."""
    out = ["\n".join(f"- {_vs_trl_setting(s)}" for s in settings)]
    rows = [[s["setting"], f"{s['trl_s']:.2f}", f"{s['ours_s']:.2f}", f"{s['ratio']:.2f}", f"{s['trl_gc_s']:.2f}",
             f"{s['ratio_without_gc']:.2f}"] for s in settings]  # fmt: skip
    out.append(
        "Seconds per update:\n\n" + records(["setting", "TRL s", "ours s", "ratio", "TRL gc s", "ratio, no gc"], rows)
    )
    rows = [[s["setting"], label] + [f"{s[f'{side}_{k}_tok_s']:.0f}" for k, _ in PHASES]
            for s in settings for side, label in TRAINERS]  # fmt: skip
    out.append("Tokens per second in each phase:\n\n" + records(["setting", "trainer"] + [n for _, n in PHASES], rows))
    rows = [[s["setting"], f"{s['ours_update_gflops']:.1f}", f"{s['trl_update_gflops']:.1f}",
             f"{s['matmul_gflops']:.1f}", f"{s['ours_update_gflops'] / s['matmul_gflops']:.0%}"]
            for s in settings if "ours_update_gflops" in s]  # fmt: skip
    if rows:
        header = ["setting", "ours", "TRL", "matmul", "ours/matmul"]
        out.append("GFLOP/s of the update, and of a float32 matmul on the same threads:\n\n" + records(header, rows))
    return out


def _vs_trl_setting(s: dict) -> str:
    reward = "the rule reward as a module" if s["trl_reward"] == "rule" else "a reward model"
    ours = _spans(",".join(s["ours_overrides"])) if s["ours_overrides"] else "the cpu preset"
    model = "SmolLM2-135M-Instruct, fully fine-tuned" if s.get("model") == "smollm2" else "the tiny Llama"
    return (f"`{s['setting']}` on {model}: B = {s['batch_size']}, minibatch {s['minibatch_size']}, "
            f"{s['ppo_epochs']} epochs, "
            f"T ≤ {s['response_length']}; median of {len(s['ratios'])} updates after a warm-up; TRL with {reward}; "
            f"ours: {ours}.")  # fmt: skip


def results_in(folder: str, *skip: str) -> str:
    """Every results file of a folder not shown otherwise: its meta and its lists of records as tables."""
    every = sorted((RESULTS / folder).glob("*.json")) if (RESULTS / folder).is_dir() else []
    files = [p for p in every if p.name not in skip]
    if not files:
        return f"No {'other ' if every else ''}results file under `benchmarks/results/{folder}/` yet."
    out = []
    for path in files:
        name = path.relative_to(RESULTS).as_posix()
        out.append(f"**`{name}`**\n\n" + meta(name))
        for key, value in load(name).items():
            if isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
                cols = [k for k in value[0] if not isinstance(value[0][k], (list, dict))]
                rows = [[_cell(v.get(k)) for k in cols] for v in value]
                out.append(f"`{key}`:\n\n" + records(cols, rows))
    return "\n\n".join(out)


PAGE_WIDTH = 70
"""Characters of a table row that fit the book's column (about 610 px in a 1200 px window); a wider table of
records is split (``records``)."""


def records(cols: list[str], rows: list[list[str]]) -> str:
    """A table of records, or, when it is wider than the page, several: each repeats the columns that name a
    record (text, and ``seed``) and holds as many of the others as fit; a column with one value is a sentence."""

    def width(i: int, broken: bool = False) -> int:  # characters, plus a cell's padding
        head = max(map(len, re.split(r"(?<=[/_])", cols[i]))) if broken else len(cols[i])
        return max(head, *(len(r[i]) for r in rows)) + 3

    if sum(map(width, range(len(cols)))) <= PAGE_WIDTH:
        return table(cols, rows)
    names = [i for i, c in enumerate(cols) if c == "seed" or not all(_number(r[i]) for r in rows)]
    same = [i for i in range(len(cols)) if i not in names and len(rows) > 1 and len({r[i] for r in rows}) == 1]
    groups = [[]]
    for i in (i for i in range(len(cols)) if i not in names + same):
        if groups[-1] and sum(width(j, True) for j in names + groups[-1] + [i]) > PAGE_WIDTH:
            groups.append([])
        groups[-1].append(i)
    header = [re.sub(r"([/_])", r"\1<wbr>", c) for c in cols]  # a long name may break after / and _
    out = [table([header[i] for i in names + g], [[r[i] for i in names + g] for r in rows]) for g in groups if g]
    if same:
        out.append("In every record: " + ", ".join(f"`{cols[i]}` = {rows[0][i]}" for i in same) + ".")
    return "\n\n".join(out)


def _number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _cell(v) -> str:
    return f"{v:.4g}" if isinstance(v, float) else str(v)


# ------------------------------------------------------------------------------------------------ the GPU page


def _qwen2_params(trunk: dict, vocab: int) -> int:
    """Parameters of a Qwen2 model of ``trunk``'s shape with tied embeddings (q/k/v biases, two norms a layer)."""
    h, f, n = trunk["hidden_size"], trunk["intermediate_size"], trunk["num_hidden_layers"]
    kv = h // trunk["num_attention_heads"] * trunk["num_key_value_heads"]
    layer = 2 * (h * h) + h + 2 * (h * kv + kv) + 3 * h * f + 2 * h
    return vocab * h + n * layer + h


def gpu_tests(name: str) -> str:
    """The cuda-marked tests' closing line."""
    t = load(name)["tests"]
    return f"`pytest -m cuda` on the GPU (exit {t['rc']}): **{t['summary']}**.\n\n" + meta(name)


def gpu_throughput(name: str) -> str:
    """benchmarks/vs_trl.py --qwen-0.5b: generation against the bandwidth bound, one update's rate and memory."""
    d = load(name)["throughput"]
    g = d["generation"]
    rows = [["generation (decode)", f"B {g['batch']}, P {g['prompt']}, T {g['response']}", f"{g['decode_tok_s']:,.0f}",
             f"{g['fraction_of_bound']:.1%} of the bandwidth bound ({g['bound_tok_s']:,.0f} tok/s)", "-"]]  # fmt: skip
    for opt in ("adamw", "adamw8bit"):
        u = d[f"update_{opt}"]
        peak, matmul = d["nominal_bf16_tflops"], d["bf16_matmul_tflops"]
        rate = f"{u['tflops']:.1f} TFLOP/s: MFU {u['mfu']:.1%} of {peak:.0f}, {u['tflops'] / matmul:.1%} of a matmul's"
        shape = f"{u['minibatch']} x {u['tokens'] // u['minibatch']} tokens"
        rows.append([f"update, {opt}", shape, f"{u['tok_s']:,.0f}", rate, f"{u['peak_gib']:.1f} GiB"])
    head = (
        f"{d['device']}: {d['parameters'] / 1e6:.0f} M parameters (bf16 weights, full vocabulary); copy bandwidth "
        f"measured {d['copy_bandwidth_gbs']:,} GB/s (data sheet {d['nominal_bandwidth_gbs']:,}); an 8192^3 bf16 "
        f"matmul measured {d['bf16_matmul_tflops']:.0f} TFLOP/s (data sheet {d['nominal_bf16_tflops']:.0f})."
    )
    return head + "\n\n" + table(["phase", "shape", "tokens/s", "rate", "peak memory"], rows) + "\n\n" + meta(name)


def gpu_preset(name: str) -> str:
    """The cuda preset end to end: ratio, non-finite updates, resume, phase times, tokens/s, peak memory."""
    d = load(name)["preset"]
    trunk = d["trunk"]
    n = _qwen2_params(trunk, 512)
    fixed = 12 * n  # float32 weights and gradients, 8-bit AdamW's two moments, the bf16 reference: 4 + 4 + 2 + 2 B
    ratios = d["first_minibatch_max_abs_log_ratio"] + d["first_minibatch_max_abs_log_ratio_resumed"]
    ph = d["phase_s_median"]
    rows = [
        ["steps, then resumed", f"{d['steps']}, then steps {', '.join(map(str, d['resumed_steps']))}"],
        ["first minibatch, max abs log ratio", f"{max(ratios):.3g} (every one of {len(ratios)} steps)"],
        ["updates skipped as non-finite", f"{d['nonfinite_updates']:.0f}; every loss finite: {d['all_losses_finite']}"],
        ["time per step (median)", f"{ph['step']:.2f} s: generate {ph['rollout']:.2f}, score {ph['score']:.2f}, "
                                   f"update {ph['update']:.2f}"],
        ["tokens/s", f"generation {d['generation_tok_s']:,.0f}, scoring {d['score_tok_s']:,.0f}, "
                     f"update {d['update_tok_s']:,.0f}"],
        ["peak GPU memory", f"{d['peak_memory_gib']:.2f} GiB, of which weights, gradients, 8-bit AdamW and the "
                            f"bf16 reference take {fixed / 2**30:.2f} GiB ({n / 1e6:.0f} M parameters x 12 bytes)"],
    ]  # fmt: skip
    shape = ", ".join(f"{k} {v}" for k, v in trunk.items())
    sizes = ", ".join(f"`{s}`" for s in d["settings"] if not s.startswith(("model.name_or_path", "train.output_dir")))
    return (f"Trunk: {shape}; 512-token vocabulary. Overrides of the preset: {sizes}.\n\n"
            + table(["what", "measured"], rows) + "\n\n" + meta(name))  # fmt: skip


def gpu_cpu_task(name: str) -> str:
    """The cpu preset with model.device=cuda beside the saved CPU runs of the same seeds."""
    d = load(name)["cpu_task"]
    cpu = {r["seed"]: r for r in d["cpu_rows"]}
    rows = []
    for r in d["rows"]:
        c = cpu.get(r["seed"], {})
        nan = float("nan")
        rows.append([str(r["seed"]), f"{r['before']:.3f} -> {r['after']:.3f}", f"{r['gain_points']:+.1f}",
                     f"{c.get('gain_points', nan):+.1f}", f"{r['ev_last10']:.2f}", f"{c.get('ev_last10', nan):.2f}",
                     f"{r['step_s']:.2f}", f"{c.get('step_s', nan):.2f}"])  # fmt: skip
    gains = [r["gain_points"] for r in d["rows"]]
    head = ["seed", "GPU sampled", "GPU gain", "CPU gain", "GPU EV", "CPU EV", "GPU s/step", "CPU s/step"]
    now = {r["seed"]: r["gain_points"] for r in load("default_run/seeds.json")["rows"]}
    if all(now.get(seed) == c["gain_points"] for seed, c in cpu.items()):
        source = f"CPU rows from `default_run/seeds.json` ({_machine(d['cpu_machine'])})"
    else:  # the default run was measured again since: say which CPU runs these are
        source = (
            f"CPU rows as `default_run/seeds.json` held them when the GPU ran ({_machine(d['cpu_machine'])}); "
            "the [default run's table](critic.md#the-default-run) holds a later run of the same command"
        )
    return (records(head, rows) + f"\n\nMean gain on the GPU {mean(gains):+.1f} points over {len(gains)} seeds; "
            f"{source}.\n\n" + meta(name))  # fmt: skip


def gpu_trl(name: str) -> str:
    """benchmarks/vs_trl.py --device cuda, as saved inside the GPU report."""
    settings = load(name)["trl"]["settings"]
    rows = [[s["setting"], f"{s['trl_s']:.3f}", f"{s['ours_s']:.3f}", f"{s['ratio']:.2f}", f"{s['trl_gc_s']:.3f}",
             f"{s['ratio_without_gc']:.2f}"] for s in settings]  # fmt: skip
    return (
        "\n".join(f"- {_vs_trl_setting(s)}" for s in settings)
        + "\n\nSeconds per update:\n\n"
        + records(["setting", "TRL s", "ours s", "ratio", "TRL gc s", "ratio, no gc"], rows)
        + "\n\n"
        + meta(name)
    )


GENERATORS = {
    "meta": meta,
    "critic_legend": critic_legend,
    "critic_runs": critic_runs,
    "critic_bands": critic_bands,
    "critic_probe": critic_probe,
    "critic_oracle": critic_oracle,
    "critic_long": critic_long,
    "default_run": default_run,
    "algos_curve": algos_curve,
    "algos_summary": algos_summary,
    "objectives_summary": objectives_summary,
    "memory_logprobs": memory_logprobs,
    "results_in": results_in,
    "vs_trl": vs_trl,
    "gpu_tests": gpu_tests,
    "gpu_throughput": gpu_throughput,
    "gpu_preset": gpu_preset,
    "gpu_cpu_task": gpu_cpu_task,
    "gpu_trl": gpu_trl,
    "real_llm": real_llm,
    "real_llm_phases": real_llm_phases,
    "real_llm_gsm8k": real_llm_gsm8k,
    "overlong_real": overlong_real,
    "real_llm_critic": real_llm_critic,
}
FIGURE_GENERATORS = {"figure_critic_curves": figure_critic_curves, "figure_algos": figure_algos,
                     "figure_real_llm": figure_real_llm}  # fmt: skip


def render(text: str, figures: dict) -> str:
    """A page with every generated block filled in from the results; figures made on the way go to ``figures``."""

    def fill(match: re.Match) -> str:
        name, *args = match["spec"].split()
        if name in FIGURE_GENERATORS:
            body = FIGURE_GENERATORS[name](*args, figures)
        elif name in GENERATORS:
            body = GENERATORS[name](*args)
        else:
            raise SystemExit(
                f"unknown generated block '{name}' (known: {', '.join([*GENERATORS, *FIGURE_GENERATORS])})"
            )
        return f"{match.group(1)}\n{body}\n\n{match.group(4)}"  # blank lines: the block is markdown of its own

    return BLOCK.sub(fill, text)


def build(pages: Path = PAGES) -> dict[Path, str]:
    """What every generated page and figure should hold: {path: text}."""
    out, figures = {}, {}
    for page in sorted(pages.glob("*.md")):
        out[page] = render(page.read_text(), figures)
    out.update({pages / "images" / name: svg for name, svg in figures.items()})
    return out


def stale(pages: Path = PAGES) -> list[str]:
    """The generated files that differ from what the results give (edited by hand, or left behind by a re-run)."""
    wanted = build(pages)
    bad = [_shown(p) for p, text in wanted.items() if not p.is_file() or p.read_text() != text]
    extra = [p for p in (pages / "images").glob("*.svg") if p not in wanted] if (pages / "images").is_dir() else []
    return bad + [f"{_shown(p)} (no page makes it)" for p in extra]


def _shown(path: Path) -> str:
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="exit 1 if a generated page or figure is not current")
    args = ap.parse_args(argv)
    if args.check:
        bad = stale()
        if bad:
            print("stale or edited by hand (run `python -m tools.report`):\n  " + "\n  ".join(bad), file=sys.stderr)
            return 1
        print(f"generated pages up to date in {PAGES.relative_to(ROOT)}")
        return 0
    for path, text in build().items():
        if not path.is_file() or path.read_text() != text:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
            print(f"wrote {path.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
