"""The Measurements pages are generated from benchmarks/results/ (tools/report.py), and nothing else.

``python -m tools.report --check`` passes on the committed tree and fails when a number on a page, a figure
or a results file changes without regenerating; the prose around the generated blocks retypes no number, and
every results file records where it was made and is shown on a page.
"""

import json
import re
import shutil

import pytest

from tools import report

RESULTS = sorted(report.RESULTS.rglob("*.json"))


def _prose(text: str) -> str:
    """A page's hand-written text: the generated blocks and code blocks taken out."""
    text = report.BLOCK.sub("", text)
    return re.sub(r"```.*?```", "", text, flags=re.S)


RETYPED = re.compile(r"[+-]\d+\.\d|\d\.\d{2,}|\d+(\.\d+)? ?%|\d+\.\d+ ?(s|GiB|MiB|MB|min)\b")
"""A number as a result looks: signed, two or more decimals, a percentage, a duration or a size."""


def test_the_committed_pages_are_current():
    assert report.main(["--check"]) == 0, "run `python -m tools.report` and commit the pages it writes"


def test_a_number_edited_by_hand_fails_the_check(tmp_path):
    pages = tmp_path / "measurements"
    shutil.copytree(report.PAGES, pages)
    page = pages / "critic.md"
    text = page.read_text()
    edited = text.replace("→ +0.20 |", "→ +0.30 |", 1)  # a seed's explained variance, nudged
    assert edited != text
    page.write_text(edited)
    assert report.stale(pages) == [str(page)]


def test_an_edited_figure_fails_the_check(tmp_path):
    pages = tmp_path / "measurements"
    shutil.copytree(report.PAGES, pages)
    figure = next((pages / "images").glob("*.svg"))
    figure.write_text(figure.read_text().replace("</svg>", "<!-- touched --></svg>"))
    assert report.stale(pages) == [str(figure)]


def test_a_rerun_benchmark_makes_its_page_stale(tmp_path, monkeypatch):
    results = tmp_path / "results"
    shutil.copytree(report.RESULTS, results)
    path = results / "algorithms" / "compare_short.json"
    data = json.loads(path.read_text())
    data["runs"][0]["after"] += 0.01
    path.write_text(json.dumps(data))
    monkeypatch.setattr(report, "RESULTS", results)
    pages = tmp_path / "measurements"
    shutil.copytree(report.PAGES, pages)
    assert str(pages / "algorithms.md") in report.stale(pages)


@pytest.mark.parametrize("page", sorted(report.PAGES.glob("*.md")), ids=lambda p: p.name)
def test_the_prose_retypes_no_number(page):
    found = [m.group(0) for m in RETYPED.finditer(_prose(page.read_text()))]
    assert not found, f"{page.name}: numbers typed by hand outside the generated blocks: {found}"


def test_the_retyped_number_check_rejects_numbers():
    for text in ("the critic explains +0.33", "gains 0.588", "takes 3.5 min", "saves 15 %", "0.58 GiB"):
        assert RETYPED.search(_prose(text)), text
    assert not RETYPED.search(_prose("Qwen2.5 over 40 steps, seeds 0-2, `ppo.lam_value=1.0`"))


@pytest.mark.parametrize("path", RESULTS, ids=lambda p: p.relative_to(report.RESULTS).as_posix())
def test_every_result_records_where_it_was_made_and_is_shown(path):
    meta = json.loads(path.read_text())["meta"]
    assert {"machine", "date", "commit", "command"} <= set(meta)
    assert re.fullmatch(r"\d{4}-\d\d-\d\d", meta["date"]) and meta["commit"] and meta["command"]
    name = path.relative_to(report.RESULTS).as_posix()
    shown = "\n".join(p.read_text() for p in report.PAGES.glob("*.md"))
    assert f"`benchmarks/results/{name}`: machine:" in shown, f"no Measurements page shows {name} with its meta"


def test_an_unknown_block_is_refused():
    with pytest.raises(SystemExit, match="unknown generated block 'no_such'"):
        report.render("<!-- report: no_such x -->\n<!-- /report -->", {})


def test_a_wide_table_of_records_is_split_to_fit_the_page():
    cols = ["method", "seed", "skipped"] + [f"metric/number_{i}" for i in range(8)]
    rows = [["grpo", str(seed), "0"] + [f"{seed + i / 7:.4g}" for i in range(8)] for seed in range(3)]
    assert "\n\n" not in report.records(cols[:5], [r[:5] for r in rows])  # a narrow one stays one table
    text = report.records(cols, rows)
    tables = [t for t in text.split("\n\n") if t.startswith("|")]
    assert len(tables) > 1
    for t in tables:
        header, _, *body = t.splitlines()
        assert header.startswith("| method | seed |") and len(body) == len(rows)  # each names its records
        names = header.replace("<wbr>", "").strip("| ").split(" | ")
        widths = [max(len(n) for n in re.split(r"(?<=[/_])", c)) for c in names]
        assert (
            sum(max(w, *(len(r.split(" | ")[i]) for r in body)) + 3 for i, w in enumerate(widths)) <= report.PAGE_WIDTH
        )
    shown = " ".join(tables).replace("<wbr>", "")
    assert all(f"| {c} |" in shown for c in cols if c != "skipped") and "metric/number_7" in shown
    assert all(value in shown for r in rows for value in r[3:])
    assert "In every record: `skipped` = 0." in text  # one value in every row: a sentence, not a column


def _vs_trl_setting(name: str, trl_s: float, ours_s: float) -> dict:
    """One setting as benchmarks/vs_trl.py --save writes it (the keys the page reads)."""
    phases = {f"{side}_{k}_tok_s": 1000.0 * i for i, side in enumerate(("trl", "ours"), 1) for k in ("gen", "score")}
    return {"setting": name, "batch_size": 128, "minibatch_size": 64, "ppo_epochs": 2, "response_length": 24,
            "trl_reward": "rule", "ours_overrides": ["ppo.ent_coef=0.0"], "trl_s": trl_s, "ours_s": ours_s,
            "ratio": ours_s / trl_s, "trl_gc_s": 0.25, "ratio_without_gc": ours_s / (trl_s - 0.25),
            "trl_update_tok_s": 3210.0, "ours_update_tok_s": 6543.0, **phases, "ratios": [0.5, 0.6, 0.7],
            "ours_update_gflops": 12.34, "trl_update_gflops": 5.67, "matmul_gflops": 98.7}  # fmt: skip


def test_the_trl_comparison_shows_every_saved_number_and_fits_the_page(tmp_path, monkeypatch):
    results = tmp_path / "results"
    (results / "performance").mkdir(parents=True)
    load = {"start": [1.5, 1.25, 1.0], "end": [2.5, 2.0, 1.75]}
    meta = {"machine": {"cpu": "a CPU"}, "date": "2026-01-02", "commit": "abc1234", "command": "python vs_trl.py",
            "versions": {"trl": "1.12.0"}, "load_average": load}  # fmt: skip
    data = {"meta": meta, "settings": [_vs_trl_setting("like-for-like", 8.0, 4.0)], "grid": [
        {"B": 8, "T": 32, "trl_s": 1.5, "ours_s": 0.75, "ratio": 0.5}]}  # fmt: skip
    (results / "performance" / "vs_trl.json").write_text(json.dumps(data))
    (results / "performance" / "grid_only.json").write_text(json.dumps({**data, "settings": []}))
    monkeypatch.setattr(report, "RESULTS", results)
    text = report.render("<!-- report: vs_trl performance -->\n<!-- /report -->", {})
    for shown in ("| like-for-like | 8.00 | 4.00 | 0.50 | 0.25 | 0.52 |", "| TRL | 1000 | 1000 | 3210 |",
                  "| ours | 2000 | 2000 | 6543 |", "| 12.3 | 5.7 | 98.7 | 13% |", "| 8 | 32 | 1.50 | 0.75 | 0.50 |",
                  "median of 3 updates", "`ppo.ent_coef=0.0`", "trl 1.12.0", "1.50, 1.25, 1.00 at the start",
                  "2.50, 2.00, 1.75 at the end", "commit `abc1234`"):  # fmt: skip
        assert shown in text, shown
    assert text.count("| 8 | 32 | 1.50 | 0.75 | 0.50 |") == 2 and text.count("| like-for-like | 8.00 |") == 1
    rows = [line for line in text.splitlines() if line.startswith("|")]
    assert rows and max(map(len, rows)) <= report.PAGE_WIDTH


def test_two_critic_files_of_one_policy_are_told_apart_and_the_mc_row_shows(tmp_path, monkeypatch):
    results = tmp_path / "results"
    (results / "real_llm").mkdir(parents=True)
    more = _critic_real_file(8, 0.0123)
    more["data"]["prompts"] = 32
    more["rows"].append({"critic": "mc_values", "ev_held": 0.4567, "k": 8, "ev_noise_removed": 0.5678})
    for name, d in (("trained.json", _critic_real_file(8, -0.0432)), ("mc.json", more)):
        (results / "real_llm" / name).write_text(json.dumps(d))
    monkeypatch.setattr(report, "RESULTS", results)
    text = report.render("<!-- report: real_llm_critic real_llm/trained.json real_llm/mc.json -->\n"
                         "<!-- /report -->", {})  # fmt: skip
    for shown in ("| critic | after 8 steps, 8 prompts | after 8 steps, 32 prompts |",
                  "| `mc_values` | n/a | +0.457 |", "VinePPO's estimate",
                  "Monte Carlo values (after 8 steps, 32 prompts, 8 continuations per state), with their sampling "
                  "noise removed: +0.568."):  # fmt: skip
        assert shown in " ".join(text.split()), shown
    rows = [line for line in text.splitlines() if line.startswith("|")]
    assert rows and max(map(len, rows)) <= report.PAGE_WIDTH
    assert "yet" in report.vs_trl("no_such_folder")


def _critic_real_file(train_steps: int, ridge: float) -> dict:
    """A file as benchmarks/critic_real.py --save writes it (the keys the page reads)."""
    data = {"prompts": 8, "group": 4, "episodes": 32, "tokens": 640, "held_tokens": 320, "correct_rate": 0.125,
            "format_rate": 0.25, "mean_return": 0.1375, "return_var_token": 0.0987, "kl_coef": 0.02}  # fmt: skip
    online = {"critic": "online:preset", "ev_held": 0.0123, "rounds": 2, "logged_ev": [0.0, 0.0456],
              "logged_ev_last5": 0.0228}  # fmt: skip
    rows = [{"critic": "ceiling_prompt", "ev_held": 0.321}, {"critic": "ridge", "ev_held": ridge}, online,
            {**online, "critic": "online:value_epochs=4", "ev_held": 0.0789}]  # fmt: skip
    if train_steps:
        rows.append({"critic": "lora", "ev_held": 0.2345, "curve": [0.1111, 0.2345]})
    meta = {"machine": {"cpu": "a CPU"}, "date": "2026-01-02", "commit": "abc1234", "command": "python critic_real.py"}
    return {"meta": meta, "train_steps": train_steps, "data": data, "rows": rows,
            "times": {"collect_s": 12.3, "total_s": 45.6}, "load_avg": {"before": [1.5, 1.25, 1.0]}}  # fmt: skip


def test_the_real_model_critics_show_every_row_and_fit_the_page(tmp_path, monkeypatch):
    results = tmp_path / "results"
    (results / "real_llm").mkdir(parents=True)
    for name, steps, ridge in (("start.json", 0, 0.0567), ("trained.json", 8, -0.0432)):
        (results / "real_llm" / name).write_text(json.dumps(_critic_real_file(steps, ridge)))
    monkeypatch.setattr(report, "RESULTS", results)
    text = report.render("<!-- report: real_llm_critic real_llm/start.json real_llm/trained.json -->\n"
                         "<!-- /report -->", {})  # fmt: skip
    for shown in ("| critic | start | after 8 steps |", "| `ceiling_prompt` | +0.321 | +0.321 |",
                  "| `ridge` | +0.057 | -0.043 |", "| `lora` | n/a | +0.234 |", "| `online:preset` | +0.023 | +0.023 |",
                  "| `online:value_epochs=4` | +0.079 | +0.079 |", "`online:preset` with `ppo.value_epochs=4`",
                  "| correct | 0.125 | 0.125 |", "not run; +0.111, +0.234", "collect 12, total 46"):  # fmt: skip
        assert shown in text, shown
    assert text.count("| `online:value_epochs=4` |") == 2  # once per table, though both files have it
    rows = [line for line in text.splitlines() if line.startswith("|")]
    assert rows and max(map(len, rows)) <= report.PAGE_WIDTH
