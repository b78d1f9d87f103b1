"""The benchmark numbers the README and the FAQ quote are the saved results, re-printed by the benchmarks' code.

The README quotes tables printed by ``benchmarks/critic.py`` and ``benchmarks/compare_algos.py``; the
FAQ's answer on policy-critic convergence, the presets' comments and the critic keys' docstrings in
``ppo_core/run/config.py`` quote the critic benchmark. Their runs are saved in
``benchmarks/results/*.json``. These tests re-format the saved rows with the scripts' own functions and
require every quoted table row, summary line and number in the prose to be one of them, so a page edited
by hand, or left behind by a re-run, fails here. Wall times are left out: the README's tables were measured
in several sessions and the saved files keep one of them.
"""

import contextlib
import io
import json
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
README = (ROOT / "README.md").read_text()
PROSE = " ".join(README.split())  # the README's words with its line breaks and indentation undone

sys.path.insert(0, str(ROOT / "benchmarks"))
import compare_algos  # noqa: E402
import critic  # noqa: E402

CRITIC_ROW = re.compile(r"^\| [^|]+ \| \d \| [+-]\d\.\d\d \| [+-]\d\.\d\d \| \d\.\d{4} \| .+ \| \d+ \|$", re.M)
"""A row of ``critic.py``'s table: config, seed, EV first 10, EV last 10, value loss, accuracy, wall s."""
SPEC_ROW = re.compile(
    r"^\| `([^`]+)`[^|]* \| (\d) \| ([+-]\d\.\d\d) \| (\d\.\d{3} -> \d\.\d{3} \([+-]\d+\.\d\)) \| \d+ \|$", re.M
)
"""A row of the README's "Could more fitting close the gap?" table: a spec on top of ``separate``, seed, EV last 10,
accuracy, wall s."""


def _rows(name: str) -> list[dict]:
    """The saved runs of ``benchmarks/results/<name>``."""
    return json.loads((RESULTS / name).read_text())["rows"]


def _critic_rows() -> list[dict]:
    names = ("critic_cpu.json", "critic_saturation.json", "critic_cpu_more_seeds.json", "critic_policy_lr.json",
             "critic_cpu_second_machine.json", "critic_policy_lr_second_machine.json")  # fmt: skip
    return [r for name in names for r in _rows(name)]


def _without_wall(line: str) -> str:
    return line.rsplit("|", 2)[0]


def test_every_critic_row_in_the_readme_is_a_saved_run():
    recorded = {_without_wall(critic.row(r)) for r in _critic_rows()}
    quoted = CRITIC_ROW.findall(README)
    assert len(quoted) >= 20, f"found only {len(quoted)} critic.py rows in the README: has the table format changed?"
    stray = [line for line in quoted if _without_wall(line) not in recorded]
    assert not stray, f"README rows that no saved run in benchmarks/results prints: {stray}"


def test_the_readme_band_lines_are_the_saved_curves():
    rows = _rows("critic_saturation.json")
    for steps in (40, 55):
        line = critic.band_line("separate", [r for r in rows if r["steps"] == steps])
        assert line in README, f"the README's {steps}-step band line is not what the saved runs give:\n{line}"


def test_the_probe_numbers_in_the_readme_are_the_saved_probes():
    probes = json.loads((RESULTS / "critic_probe.json").read_text())
    assert [p["config"] for p in probes] == ["value_lr+lam_value", "separate"]
    printed = "\n".join(critic.probe_report(p) for p in probes)
    assert printed in README, f"the README's probe output is not what critic_probe.json gives:\n{printed}"
    (probe,) = json.loads((RESULTS / "critic_probe_14.json").read_text())
    passes = ", ".join(f"{ev:+.2f}" for ev in probe["separate_by_epoch"][6:])
    assert f"goes on from +{probe['separate_by_epoch'][5]:.2f} to {passes} on the held-out rollouts" in PROSE
    assert f"the run's own critic, as trained: {probe['own']:+.2f}" in PROSE


def test_the_end_of_run_oracle_in_the_readme_is_the_saved_one():
    out = json.loads((RESULTS / "critic_oracle_end.json").read_text())
    printed = critic.oracle_report(out)
    assert printed in README, f"the README's end-of-run oracle output is not critic_oracle_end.json's:\n{printed}"
    best, trained = out["ev"]["mc/best"], out["ev"]["mc/trained"]
    assert f"the best possible critic explains {best:+.2f}" in PROSE
    assert f"the run's own critic {trained:+.2f}" in PROSE


def test_the_end_of_run_oracle_of_the_critic_that_reads_the_policy_is_the_saved_one():
    out = json.loads((RESULTS / "critic_oracle_end_reads.json").read_text())
    printed = critic.oracle_report(out)
    assert out["config"] == "separate+reads_policy" and printed in README, printed
    best, trained = out["ev"]["mc/best"], out["ev"]["mc/trained"]
    assert f"Its critic explains {trained:+.2f} of these held-out returns' variance" in PROSE
    assert f"this (slightly different) final policy explains {best:+.2f}" in PROSE
    drop = [(tok, v) for tok, v, _ in out["example"]]
    i = next(t for t in range(1, len(drop)) if drop[t][1] < drop[t - 1][1] - 0.3)  # the first sharp drop
    assert f"from {drop[i - 1][1]:+.2f} to {drop[i][1]:+.2f} at once" in PROSE and drop[i - 1][0] == "#"


def test_the_policy_features_memory_in_the_readme_is_the_saved_measurement():
    saved = (RESULTS / "policy_features_memory.txt").read_text()
    assert saved in README, f"the README's policy_features memory block is not the saved one:\n{saved}"
    from ppo_core.run.config import load_config

    cuda = load_config("cuda")  # rollout.score takes chunks of ppo.minibatch_size rows
    chunk = f"{cuda.ppo.minibatch_size} x {cuda.rollout.max_new_tokens} x 151936 "
    assert saved.startswith(f"policy_features on bf16 logits of {chunk}"), f"not the cuda preset's chunk: {chunk}"
    all_rows, row_by_row = (float(m) for m in re.findall(r"([\d.]+) GiB$", saved, re.M))
    assert row_by_row < all_rows / 4, saved


def test_the_logprobs_memory_in_the_readme_is_the_saved_measurement():
    saved = (RESULTS / "logprobs_memory.txt").read_text()
    assert saved in README, f"the README's logprobs memory block is not the saved one:\n{saved}"
    from ppo_core.logprobs import CHUNK_BYTES
    from ppo_core.run.config import load_config

    cuda = load_config("cuda")  # rollout.score takes chunks of ppo.minibatch_size rows
    assert saved.startswith(f"on bf16 logits of {cuda.ppo.minibatch_size} x {cuda.rollout.max_new_tokens} x 151936 ")
    assert f"chunks of <= {CHUNK_BYTES / 2**20:.0f} MiB" in saved and f"at most {CHUNK_BYTES // 2**20} MiB" in README
    pairs = re.findall(r"^  (\w+): +([\d.]+) GiB -> +([\d.]+) GiB$", saved, re.M)
    assert [name for name, _, _ in pairs] == ["logprobs_from_logits", "entropy_from_logits"], saved
    for _, one_shot, chunked in pairs:
        assert float(chunked) < float(one_shot) / 4, saved


def test_the_readme_algorithm_comparison_is_the_saved_one():
    results = json.loads((RESULTS / "compare_algos_short.json").read_text())
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        compare_algos.print_tables(results)
    printed = out.getvalue().strip()
    assert printed.count("\n") > 10
    assert printed in README, "the README's compare_algos tables are not those of compare_algos_short.json"


@pytest.mark.parametrize("mutate", ["ev", "accuracy"])
def test_a_changed_number_is_caught(mutate):
    """The check is not vacuous: a README with one number changed has a row no saved run prints."""
    recorded = {_without_wall(critic.row(r)) for r in _critic_rows()}
    line = CRITIC_ROW.findall(README)[0]
    cells = line.split(" | ")
    if mutate == "ev":
        cells[3] = f"{float(cells[3]) + 0.01:+.2f}"
    else:
        cells[5] = re.sub(r"\(([+-])(\d+)", r"(\g<1>9\2", cells[5])  # the gain: +71.4 -> +971.4
    assert _without_wall(" | ".join(cells)) not in recorded


def test_the_more_fitting_table_and_the_lam_value_rows_are_saved_runs():
    saved = _rows("critic_more_fitting.json")
    base = "ppo.separate_critic=true,ppo.value_lr=1e-3,ppo.lam_value=1.0,"
    quoted = SPEC_ROW.findall(README)
    assert len(quoted) == 3, quoted
    for spec, seed, ev, acc in quoted:
        (r,) = [r for r in saved if r["config"] == base + spec and r["seed"] == int(seed)]
        cells = critic.row(r).split(" | ")  # config, seed, EV first 10, EV last 10, loss, accuracy, wall
        assert (ev, acc) == (cells[3], cells[5]), f"README {spec}: {ev} {acc}, saved run: {cells[3]} {cells[5]}"
    lam = sorted((r for r in saved if r["config"].endswith("lam_value=0.95")), key=lambda r: r["seed"])
    assert [r["seed"] for r in lam] == [0, 1, 2]
    evs = " / ".join(f"{r['ev_last10']:+.2f}" for r in lam)
    gains = " / ".join(f"{100 * (r['after'] - r['before']):+.1f}" for r in lam)
    assert f"gave {evs} on seeds 0-2 ({gains} points" in PROSE


LONG_ROW = re.compile(
    r"^\| [^|]+ \| -?[\d.e+-]+ \(T = \d+\) \| -?[\d.e+-]+ \| \d\.\d\d -> \d\.\d\d \| .+ \| \d+ \|$", re.M
)
"""A row of the long-answer task's table (``critic.py --long``)."""


def test_every_long_answer_row_in_the_readme_is_a_saved_run():
    recorded = {_without_wall(critic.long_row(r)) for r in _rows("critic_long.json")}
    quoted = LONG_ROW.findall(README)
    assert len(quoted) == 5, f"found {len(quoted)} long-task rows in the README: has the table format changed?"
    stray = [line for line in quoted if _without_wall(line) not in recorded]
    assert not stray, f"README long-task rows that no saved run in critic_long.json prints: {stray}"


INLINE = {
    "ppo.value_epochs=4": "(`ppo.value_epochs=4`: {ev}, {gain} points",
    "ppo.value_warmup_steps=5": "a 5-step warm-up of the whole critic ({ev}, {gain} points)",
    "ppo.vf_clip_eps=10": "(`ppo.vf_clip_eps=10`: {ev}, {gain} points)",
    "model.value_head_init_std=0.003": "(`model.value_head_init_std=0.003`: {ev}, {gain} points",
}
"""The seed-0 runs the README quotes in its prose, by the spec added to ``separate``, and how it quotes them."""


def test_the_inline_seed0_runs_are_saved_runs():
    saved = _rows("critic_inline.json")
    base = "ppo.separate_critic=true,ppo.value_lr=1e-3,ppo.lam_value=1.0"
    quotes = {base + "," + spec: text for spec, text in INLINE.items()}
    quotes[base.replace("value_lr=1e-3", "value_lr=3e-3")] = "(`ppo.value_lr=3e-3`: {ev}, {gain} points)"
    assert sorted(r["config"] for r in saved) == sorted(quotes)
    for r in saved:
        gain = f"{100 * (r['after'] - r['before']):+.1f}"
        text = quotes[r["config"]].format(ev=f"{r['ev_last10']:+.2f}", gain=gain)
        assert text in PROSE, f"the README does not quote the saved run {r['config']} as {text!r}"


FAQ = " ".join((ROOT / "book" / "faq.md").read_text().split())


def _saved(name: str, config: str) -> list[dict]:
    return sorted(
        (r for r in _rows(name) if r["config"] == config and r.get("steps", 40) == 40), key=lambda r: r["seed"]
    )


def test_the_faq_critic_numbers_are_saved_runs():
    """The FAQ's answer on policy-critic convergence quotes the critic benchmark; every number is a saved run's."""
    ev = lambda rows: [f"${r['ev_last10']:+.2f}$" for r in rows]  # noqa: E731
    gain = lambda rows: [f"${100 * (r['after'] - r['before']):+.1f}$" for r in rows]  # noqa: E731
    today, head, separate = (_saved("critic_cpu.json", c) for c in ("today", "value_lr+lam_value", "separate"))
    assert [r["seed"] for r in today + head + separate] == [0, 1, 2] * 3
    t0 = today[0]
    assert f"rose from {t0['before']:.3f} to {t0['after']:.3f} while" in FAQ
    assert f"fell to {ev(today)[0]} over the last 10 steps" in FAQ
    assert "({}, {}, {} on seeds 0-2, against {}, {} and {})".format(*ev(head), *ev(today)) in FAQ
    assert "raised it to {}, {} and {} at a similar accuracy gain".format(*ev(separate)) in FAQ
    assert "({}, {}, {} points against {}, {}, {})".format(*gain(separate), *gain(head)) in FAQ
    reads = _saved("critic_cpu.json", "separate+reads_policy")
    assert "raised it to {}, {} and {}, with gains of {}, {} and {} points".format(*ev(reads), *gain(reads)) in FAQ
    bands = {band: (n, e) for band, n, e in critic.ev_by_success([r for r in _rows("critic_saturation.json")
                                                                   if r["steps"] == 55])}  # fmt: skip
    (n1, ev1), (n2, ev2), (_, high) = bands["[0.5, 0.8)"], bands["[0.8, 0.9)"], bands["[0.9, 1.0]"]
    mid = (n1 * ev1 + n2 * ev2) / (n1 + n2)  # the FAQ merges the two bands between 0.5 and 0.9
    assert f"run for 55 steps, the separate critic explains ${mid:+.2f}$ of the variance" in FAQ
    assert f"and ${high:+.2f}$ once it succeeds nine times in ten" in FAQ
    long = {r["config"]: r for r in _rows("critic_long.json")}
    vc, zero = long["vc-ppo"]["start"]["credit"], long["today"]["start"]["credit"]
    assert f"the first token's credit was ${vc:.2g}$ against ${zero:.1g}$ with no critic" in FAQ
    sep = long["ppo.separate_critic=true,ppo.value_lr=1e-3,ppo.lam_value=1.0"]["end"]["credit"]
    assert f"did not change that in 20 steps (credit ${sep:.1g}$)" in FAQ


def test_the_presets_and_config_docstrings_quote_saved_runs():
    """The critic settings' comments in the presets and their docstrings in run/config.py quote the benchmark."""
    sep = lambda xs, f: " / ".join(f.format(x) for x in xs)  # noqa: E731
    today, head, separate = (_saved("critic_cpu.json", c) for c in ("today", "value_lr+lam_value", "separate"))
    runs = {"t": today, "h": head, "s": separate}
    evs = {k: [r["ev_last10"] for r in rows] for k, rows in runs.items()}
    gains = {k: [100 * (r["after"] - r["before"]) for r in rows] for k, rows in runs.items()}
    cpu = " ".join((ROOT / "ppo_core/run/configs/cpu.yaml").read_text().replace("#", " ").split())
    assert f"variance: {sep(evs['s'], '{:+.2f}')} with it, {sep(evs['h'], '{:+.2f}')} with a head" in cpu
    assert f"{sep(evs['t'], '{:+.2f}')} with the course's first settings" in cpu
    g = f"{sep(gains['s'], '{:+.1f}')} vs {sep(gains['h'], '{:+.1f}')} vs {sep(gains['t'], '{:+.1f}')} points"
    assert g in cpu
    config = " ".join((ROOT / "ppo_core/run/config.py").read_text().split())
    tight = lambda xs: "/".join(f"{x:+.2f}" for x in xs)  # noqa: E731
    assert f"from {tight(evs['t'])} to {tight(evs['h'])} on seeds 0-2" in config
    assert f"variance {tight(evs['s'])} on seeds 0-2, against {tight(evs['h'])} for the head" in config
    reads = _saved("critic_cpu.json", "separate+reads_policy")
    r_ev, r_gain = [r["ev_last10"] for r in reads], [100 * (r["after"] - r["before"]) for r in reads]
    walls = " / ".join(f"{r['wall_s']:.0f}" for r in reads)
    assert f"explained variance {sep(r_ev, '{:+.2f}')}, gain {sep(r_gain, '{:+.1f}')} points, {walls} s" in cpu
    assert f"where a trunk of its own alone gave {sep(evs['s'], '{:+.2f}')}" in cpu
    more = {
        c: [r["ev_last10"] for r in _saved("critic_cpu_more_seeds.json", c)]
        for c in ("separate+reads_policy", "separate")
    }
    assert f"on seeds 3 and 4 ({sep(more['separate+reads_policy'], '{:+.2f}')}, against" in cpu
    assert f"against {sep(more['separate'], '{:+.2f}')} without it)" in cpu
    assert f"variance {tight(r_ev)} on seeds 0-2, against {tight(evs['s'])} without it" in config
    assert f"gain {'/'.join(f'{g:+.1f}' for g in r_gain)} against {'/'.join(f'{g:+.1f}' for g in gains['s'])}" in config
    cuda = " ".join((ROOT / "ppo_core/run/configs/cuda.yaml").read_text().replace("#", " ").split())
    long = {r["config"]: r for r in _rows("critic_long.json")}
    rights = lambda r: f"{r['start']['right_start']:.2f} -> {r['end']['right_start']:.2f}"  # noqa: E731
    assert f"lam 0.95 gave token 0 a credit of {long['today']['start']['credit']:.3f}" in cuda
    assert f"gave {long['vc-ppo']['start']['credit']:.3f}, its linear head" in cuda
    assert f"({rights(long['lam1'])}; {rights(long['today'])} with lam 0.95)" in cuda
    separate_long = long["ppo.separate_critic=true,ppo.value_lr=1e-3,ppo.lam_value=1.0"]["end"]["credit"]
    assert f"({separate_long:.3f} after 20 steps)" in cuda


def test_the_readme_critic_that_reads_the_policy_quotes_its_saved_runs():
    """The prose around the separate+reads_policy table: its numbers, and the met/not-met verdicts they imply."""
    reads, separate = _saved("critic_cpu.json", "separate+reads_policy"), _saved("critic_cpu.json", "separate")
    ev = lambda rows: " / ".join(f"{r['ev_last10']:+.2f}" for r in rows)  # noqa: E731
    gain = lambda rows: " / ".join(f"{100 * (r['after'] - r['before']):+.1f}" for r in rows)  # noqa: E731
    walls = " / ".join(f"{r['wall_s']:.0f}" for r in reads)
    assert (
        f"the critic explains {ev(reads)} of the return variance over the last 10 steps on seeds 0-2 ({ev(separate)}"
        in PROSE
    )
    assert f"with accuracy gains of {gain(reads)} points ({gain(separate)} without), in {walls} s" in PROSE
    ev_met = all(r["ev_last10"] >= 0.3 and r["wall_s"] <= 180 for r in reads)
    low = [r for r in reads if 100 * (r["after"] - r["before"]) < 60]
    assert ev_met and "within 180 s, **is met on the benchmark's seeds 0-2**" in PROSE
    more = _saved("critic_cpu_more_seeds.json", "separate+reads_policy")
    assert [r["seed"] for r in more] == [3, 4] and all(r["ev_last10"] < 0.3 for r in more)
    assert "not on the two further seeds above ({}, {})".format(*(f"{r['ev_last10']:+.2f}" for r in more)) in PROSE
    assert [r["seed"] for r in low] == [2] and f"seed 2 gains {gain(low)} (the course's first settings" in PROSE
    # the five-seed summary after the seeds 3-4 table
    sep5 = {r["seed"]: r for r in separate + _saved("critic_cpu_more_seeds.json", "separate")}
    reads5 = {r["seed"]: r for r in reads + more}
    assert sorted(sep5) == sorted(reads5) == [0, 1, 2, 3, 4]
    g = {
        s: (100 * (reads5[s]["after"] - reads5[s]["before"]), 100 * (sep5[s]["after"] - sep5[s]["before"]))
        for s in sep5
    }
    up = [s for s, (a, b) in g.items() if a > b]
    assert len(up) == 4 and all(abs(a - b) < 0.5 for s, (a, b) in g.items() if s not in up)
    assert "raised the accuracy gain on four and kept it within half a point on the fifth" in PROSE
    down = [s for s in sep5 if reads5[s]["ev_last10"] <= sep5[s]["ev_last10"]]
    moves = ", ".join(f"seed {s} {sep5[s]['ev_last10']:+.2f} -> {reads5[s]['ev_last10']:+.2f}" for s in down)
    assert len(down) == 2 and f"last-10-step explained variance on three ({moves})" in PROSE


def test_the_faster_policy_paragraph_quotes_its_saved_runs():
    """*Why not a faster policy?*: the rows at ppo.lr=2e-4 against the preset's, the band lines, and the prose."""
    fast, reads = (
        _saved("critic_policy_lr.json", "separate+reads_policy+policy_lr2e-4"),
        _saved("critic_cpu.json", "separate+reads_policy"),
    )
    fast_today, today = _saved("critic_policy_lr.json", "today+policy_lr2e-4"), _saved("critic_cpu.json", "today")
    assert [r["seed"] for r in fast] == [r["seed"] for r in reads] == [r["seed"] for r in fast_today] == [0, 1, 2]
    assert [r["seed"] for r in today] == [0, 1, 2]
    ev = lambda rows: " / ".join(f"{r['ev_last10']:+.2f}" for r in rows)  # noqa: E731
    gain = lambda rows: " / ".join(f"{100 * (r['after'] - r['before']):+.1f}" for r in rows)  # noqa: E731
    assert f"the faster policy gains {gain(fast)} points ({gain(reads)} at 1e-4; seed 2 still short of +60)" in PROSE
    assert 100 * (fast[2]["after"] - fast[2]["before"]) < 60
    assert f"explained variance is {ev(fast)} ({ev(reads)} at 1e-4): under 0.3 on seeds 0 and 1." in PROSE
    assert [r["seed"] for r in fast if r["ev_last10"] < 0.3] == [0, 1]
    assert f"critic gains {gain(fast_today)} at that rate ({gain(today)} at 1e-4)" in PROSE
    for config, rows in (("separate+reads_policy", reads), ("separate+reads_policy+policy_lr2e-4", fast)):
        assert critic.band_line(config, rows) in README, config
    top = {band: (n, e) for band, n, e in critic.ev_by_success(fast)}["[0.9, 1.0]"]
    assert critic.ev_by_success(reads)[-1][1] == 0, "the preset's runs never reached 0.9"
    assert f"spends {top[0]} steps at a sampled success rate of 0.9 or more (none" in PROSE
    assert f"there the critic explains {top[1]:+.2f} of it" in PROSE
    from ppo_core.run.config import load_config

    preset = " ".join((ROOT / "ppo_core/run/configs/cpu.yaml").read_text().replace("#", " ").split())
    assert f"(lr: 2.0e-4) gains {gain(fast)} but leaves the explained variance at {ev(fast)}" in preset
    cfg = load_config("cpu")
    assert cfg.ppo.lr == 1e-4 and "At twice the cpu preset's (`ppo.lr=2e-4`; 1e-4 in the preset)" in PROSE


def test_the_second_machine_paragraphs_quote_its_saved_runs():
    """*On another machine* and the Training section's note: the second machine's five seeds, both critics."""
    saved = json.loads((RESULTS / "critic_cpu_second_machine.json").read_text())
    m = saved["machine"]
    assert m["cpu"] == "AMD EPYC" and m["cpu_capability"] == "AVX512" and m["threads"] == 2
    assert "On this turn's machine (an AMD EPYC, torch's AVX512 kernels, two threads;" in PROSE
    reads, today = (
        _saved("critic_cpu_second_machine.json", "separate+reads_policy"),
        _saved("critic_cpu_second_machine.json", "today"),
    )
    assert [r["seed"] for r in reads] == [r["seed"] for r in today] == [0, 1, 2, 3, 4]
    for r in reads + today:
        assert critic.row(r) in README, critic.row(r)
    ev = lambda rows: " / ".join(f"{r['ev_last10']:+.2f}" for r in rows)  # noqa: E731
    gain = lambda r: 100 * (r["after"] - r["before"])  # noqa: E731
    gains = lambda rows: " / ".join(f"{gain(r):+.1f}" for r in rows)  # noqa: E731
    assert f"the preset's explains {ev(reads)} of the returns' variance" in PROSE
    assert f"course's first critic explains {ev(today)}. Three seeds of five reach 0.3: seed 2 falls short" in PROSE
    assert [r["seed"] for r in reads if r["ev_last10"] < 0.3] == [2, 3] and all(r["ev_last10"] < 0 for r in today)
    assert f"seed 3 by a hair ({reads[3]['ev_last10']:.3f}, printed as {reads[3]['ev_last10']:+.2f})" in PROSE
    assert f"{gains(reads)} points with the preset's critic, {gains(today)} with the first" in PROSE
    assert sum(gain(r) >= 60 for r in reads) == sum(gain(r) >= 60 for r in today) == 2
    assert "+60 or more on two seeds of five with either" in PROSE
    here = [gain(a) - gain(b) for a, b in zip(reads, today, strict=True)]
    first = [
        gain(a) - gain(b)
        for a, b in zip(_saved("critic_cpu.json", "separate+reads_policy"), _saved("critic_cpu.json", "today"))
    ]
    assert f"moves by {min(here):+.1f} to {max(here):+.1f} points seed by seed here" in PROSE
    assert f"({min(first):+.1f} to {max(first):+.1f} on the first machine)" in PROSE
    seed0 = reads[0]
    block = (
        f"held-out sampled accuracy: {seed0['before']:.3f} -> {seed0['after']:.3f} ({gain(seed0):+.1f} points)\n"
        f"critic explained variance, mean of the last 10 steps: {seed0['ev_last10']:.2f}\n"
    )
    assert block in README  # the README's training command is this row's run (the cpu preset, seed 0)
    assert f"starts at {seed0['before']:.3f} held-out sampled accuracy here" in PROSE
    assert (
        f"the default command printed {seed0['before']:.3f} -> {seed0['after']:.3f} held-out sampled accuracy and an "
        f"explained variance of {seed0['ev_last10']:.2f}" in PROSE
    )
    assert "on three seeds of five (*On another machine*, below)" in PROSE
    preset = " ".join((ROOT / "ppo_core/run/configs/cpu.yaml").read_text().replace("#", " ").split())
    assert f"it explains {ev(reads)} on seeds 0-4 against {ev(today)} for the course's first critic" in preset


def test_the_faster_policy_on_the_second_machine_is_quoted_from_its_saved_runs():
    """*Why not a faster policy?*, second machine: lr 2e-4 against the preset's 1e-4, five seeds each."""
    saved = json.loads((RESULTS / "critic_policy_lr_second_machine.json").read_text())
    assert saved["machine"] == json.loads((RESULTS / "critic_cpu_second_machine.json").read_text())["machine"]
    fast = _saved("critic_policy_lr_second_machine.json", "separate+reads_policy+policy_lr2e-4")
    preset = _saved("critic_cpu_second_machine.json", "separate+reads_policy")
    assert [r["seed"] for r in fast] == [r["seed"] for r in preset] == [0, 1, 2, 3, 4]
    for r in fast:
        assert critic.row(r) in README, critic.row(r)
    assert critic.band_line("separate+reads_policy+policy_lr2e-4", fast) in README
    ev = lambda rows: " / ".join(f"{r['ev_last10']:+.2f}" for r in rows)  # noqa: E731
    gain = lambda r: 100 * (r["after"] - r["before"])  # noqa: E731
    gains = lambda rows: " / ".join(f"{gain(r):+.1f}" for r in rows)  # noqa: E731
    assert f"There its critic explains {ev(fast)} over the last 10 steps (the preset's, at 1e-4: {ev(preset)})" in PROSE
    assert f"the policy gains {gains(fast)} points ({gains(preset)})" in PROSE
    count = lambda rows, ok: sum(map(ok, rows))  # noqa: E731
    ev_ok, gain_ok = (lambda r: r["ev_last10"] >= 0.3), (lambda r: gain(r) >= 60)  # noqa: E731
    assert (count(fast, ev_ok), count(fast, gain_ok), count(preset, ev_ok), count(preset, gain_ok)) == (4, 4, 3, 2)
    assert "each target on four seeds of five where 1e-4 meets them on three and two" in PROSE
    assert [r["seed"] for r in fast if not ev_ok(r)] == [2] and [r["seed"] for r in fast if not gain_ok(r)] == [3]
    assert "Seed 2 falls short of 0.3, seed 3 of +60." in PROSE
    assert all(max(r["correct_curve"]) < 0.9 for r in fast) and "no run spends a step at 0.9 success or more" in PROSE
    first_fast = _saved("critic_policy_lr.json", "separate+reads_policy+policy_lr2e-4")
    first_preset = _saved("critic_cpu.json", "separate+reads_policy")
    assert (count(first_preset, ev_ok), count(first_fast, ev_ok), len(first_fast)) == (3, 1, 3)
    assert "2e-4 would take the explained-variance target from three seeds of three to one" in PROSE
    mid = json.loads((RESULTS / "critic_policy_lr1.5e-4_second_machine.json").read_text())
    assert mid["machine"] == saved["machine"]
    mid = sorted(mid["rows"], key=lambda r: r["seed"])
    assert [r["seed"] for r in mid] == [0, 1, 2, 3, 4] and all("ppo.lr=1.5e-4" in r["config"] for r in mid)
    assert (count(mid, ev_ok), count(mid, gain_ok)) == (3, 4)
    assert f"did no better: {ev(mid)}, {gains(mid)} points, three seeds and four." in PROSE
    preset_yaml = " ".join((ROOT / "ppo_core/run/configs/cpu.yaml").read_text().replace("#", " ").split())
    assert "there lr 2.0e-4 meets each target on four seeds of five (1e-4: three and two)" in preset_yaml


def test_the_seed_2_oracle_on_the_second_machine_is_the_saved_one():
    """*On another machine*: seed 2's critic at the end of its run against the best possible one."""
    out = json.loads((RESULTS / "critic_oracle_seed2_second_machine.json").read_text())
    assert out["config"] == "separate+reads_policy" and out["seed"] == 2 and out["steps"] == 40 and out["n"] == 128
    run = _saved("critic_cpu_second_machine.json", "separate+reads_policy")[2]
    assert out["accuracy"] == run["after"], "the oracle's run should be the saved seed-2 run (same machine, same run)"
    best, trained = out["ev"]["mc/best"], out["ev"]["mc/trained"]
    assert trained >= 0.3 > run["ev_last10"]
    assert f"the trained critic explains {trained:+.2f} and the best possible one {best:+.2f}" in PROSE
    last = run["ev_curve"][-10:]
    assert f"runs from {min(last):+.2f} to {max(last):+.2f} and ends at {last[-2]:+.2f} and {last[-1]:+.2f}" in PROSE
    assert f"their mean, {run['ev_last10']:+.2f}, is lower because it counts the earlier, weaker batches" in PROSE
    assert max(last[-2:]) == max(last) and min(last[-2:]) > run["ev_last10"]
