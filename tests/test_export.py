"""python -m ppo_core.export: every config key is in the table, and every exported setting exists in the
engine's own schema with a value of the right type (veRL 0.9.1's generated trainer config and OpenRLHF 0.11.2's
train_ppo_ray parser, tests/fixtures/, refreshed by tools/engine_schemas.py); the GSM8K data round-trips."""

import argparse
import importlib.util
import json
import os
import re
import subprocess
from dataclasses import fields, is_dataclass
from decimal import Decimal
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from ppo_core.export import __main__ as cli
from ppo_core.export import export, hydra_value, settings_for
from ppo_core.export.table import ROWS
from ppo_core.run.config import PRESETS, Config, load_config
from ppo_core.tasks.rewards import gold_number, gsm8k_reward

FIXTURES = Path(__file__).parent / "fixtures"
VERL_SCHEMA = OmegaConf.load(FIXTURES / "verl" / "_generated_ppo_trainer.yaml")
OPENRLHF_FLAGS = json.loads((FIXTURES / "openrlhf" / "train_ppo_ray_args.json").read_text())["flags"]
GSM8K_DIR = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "gsm8k"
FILES = {"train": "/data/train", "test": "/data/test", "reward": "/data/reward_fn.py"}
MODEL = ["model.name_or_path=Qwen/Qwen2.5-0.5B-Instruct"]


def config_keys(obj=None, prefix=""):
    obj = Config() if obj is None else obj
    for f in fields(obj):
        value = getattr(obj, f.name)
        yield from config_keys(value, f"{prefix}{f.name}.") if is_dataclass(value) else [prefix + f.name]


def table_problems(rows) -> list[str]:
    keys, listed = list(config_keys()), [row.key for row in rows]
    missing = [k for k in keys if k not in listed]
    return [f"not in the table: {missing}"] * bool(missing) + [
        f"not a config key: {k}" for k in listed if k not in keys
    ]


def test_every_config_key_is_in_the_table_once():
    assert not table_problems(ROWS), "add a Row to ppo_core/export/table.py for each"
    assert len({row.key for row in ROWS}) == len(ROWS)


def test_the_table_check_rejects_a_dropped_key():
    assert table_problems([r for r in ROWS if r.key != "ppo.lr"]) == ["not in the table: ['ppo.lr']"]


def _is_type(value, default) -> bool:
    """The value's type fits the schema default's (numbers are numbers; an unset or interpolated default fits all)."""
    if default is None or default == "???" or (isinstance(default, str) and default.startswith("${")):
        return True
    if isinstance(default, bool) or isinstance(value, bool):
        return isinstance(value, bool) and isinstance(default, bool)
    if isinstance(default, (int, float)):
        return isinstance(value, (int, float))
    if isinstance(default, (list, tuple)):
        return isinstance(value, list)
    return isinstance(value, type(default))


def verl_problems(settings: dict) -> list[str]:
    problems = []
    for name, value in settings.items():
        node = VERL_SCHEMA
        try:
            for part in name.split("."):
                node = node._get_node(part) if OmegaConf.is_dict(node) else None
        except Exception:
            node = None
        if node is None or OmegaConf.is_dict(node):
            problems.append(f"{name}: not in veRL's trainer config")
            continue
        default = node._value()
        default = OmegaConf.to_container(node) if OmegaConf.is_list(node) else default
        if not _is_type(value, default):
            problems.append(f"{name}={value!r}: veRL's default is {default!r}")
    return problems


def openrlhf_parser() -> argparse.ArgumentParser:
    """OpenRLHF's argument parser, rebuilt from the fixture: flags, types, choices, nargs and actions."""
    parser = argparse.ArgumentParser(exit_on_error=False)
    types = {"int": int, "float": float, "str": str}
    for flag, spec in OPENRLHF_FLAGS.items():
        if spec["type"] == "bool":
            parser.add_argument(flag, action=spec["action"])
            continue
        extra = {k: spec[k] for k in ("nargs", "choices") if spec.get(k) is not None}
        parser.add_argument(flag, type=types[spec["type"]], **extra)
    return parser


def openrlhf_problems(settings: dict) -> list[str]:
    problems = []
    for flag, value in settings.items():
        spec = OPENRLHF_FLAGS.get(flag)
        if spec is None:
            problems.append(f"{flag}: not a train_ppo_ray argument")
        elif spec["type"] == "bool":  # a switch: written when on; off is its default, so nothing is written
            if not (value is True or (value is False and spec["default"] is False)):
                problems.append(f"{flag}={value!r}: a switch whose default is {spec['default']!r}")
        elif isinstance(value, list) != ("nargs" in spec):
            problems.append(f"{flag}={value!r}: nargs {spec.get('nargs')}")
        elif not all(_is_type(v, {"int": 0, "float": 0.0, "str": ""}[spec["type"]]) for v in _listed(value)):
            problems.append(f"{flag}={value!r}: expects {spec['type']}")
        elif spec["type"] == "int" and not all(isinstance(v, int) for v in _listed(value)):
            problems.append(f"{flag}={value!r}: expects int")
        elif spec.get("choices") and not all(v in spec["choices"] for v in _listed(value)):
            problems.append(f"{flag}={value!r}: one of {spec['choices']}")
    return problems


def _listed(value):
    return value if isinstance(value, list) else [value]


CASES = [(p, []) for p in PRESETS] + [
    ("cpu", MODEL + ["model.dtype=bfloat16", "model.lora.r=8", "ppo.separate_critic=false"])
]


@pytest.mark.parametrize("target", ["verl", "openrlhf"])
@pytest.mark.parametrize("preset,overrides", CASES, ids=[" ".join([p, *o]) for p, o in CASES])
def test_every_exported_setting_exists_in_the_engine_schema(preset, overrides, target):
    cfg = load_config(preset, overrides)
    result = settings_for(cfg, target, FILES, n_train=cfg.data.n_train)
    problems = (verl_problems if target == "verl" else openrlhf_problems)(result.settings)
    assert not problems, problems
    accounted = set(result.mapped) | set(result.gaps) | set(result.same)
    assert accounted == set(config_keys()), "a key was dropped silently"
    assert not set(result.mapped) & set(result.gaps) and not set(result.mapped) & set(result.same)


def test_the_schema_checks_reject_wrong_names_and_types():
    assert verl_problems({"actor_rollout_ref.actor.clip_ratio": 0.2, "trainer.logger": ["console"]}) == []
    assert verl_problems({"actor_rollout_ref.actor.clip_eps": 0.2}) == [
        "actor_rollout_ref.actor.clip_eps: not in veRL's trainer config"
    ]
    assert verl_problems({"actor_rollout_ref.actor": 1}) == ["actor_rollout_ref.actor: not in veRL's trainer config"]
    assert len(verl_problems({"actor_rollout_ref.actor.ppo_epochs": "2", "algorithm.use_kl_in_reward": 1})) == 2
    assert openrlhf_problems({"--actor.eps_clip": 0.2, "--ds.lora.target_modules": ["q_proj"]}) == []
    assert len(openrlhf_problems({"--actor.eps_clip_x": 0.2})) == 1  # no such flag
    assert len(openrlhf_problems({"--train.max_epochs": 1.5})) == 1  # int expected
    assert len(openrlhf_problems({"--algo.kl.use_loss": 1})) == 1  # a switch
    assert len(openrlhf_problems({"--algo.kl.estimator": "k4"})) == 1  # outside its choices
    assert len(openrlhf_problems({"--actor.adam.betas": 0.9})) == 1  # two numbers


def test_defaults_that_differ_are_written():
    """Every mapped key is written, whatever the engines' defaults: the ones that differ included."""
    cfg = load_config("cpu", MODEL)
    verl = settings_for(cfg, "verl", FILES, n_train=4000).settings
    orl = settings_for(cfg, "openrlhf", FILES, n_train=4000).settings
    assert verl["algorithm.lam"] == 0.95 and VERL_SCHEMA.algorithm.lam == 1.0
    assert verl["actor_rollout_ref.actor.optim.weight_decay"] == 0.0
    assert verl["actor_rollout_ref.actor.clip_ratio_c"] > 1e6  # veRL's dual clip off, as ours
    assert orl["--algo.advantage.lambd"] == 0.95 and OPENRLHF_FLAGS["--algo.advantage.lambd"]["default"] == 1
    assert orl["--actor.adam.betas"] == [0.9, 0.999] and orl["--actor.lr_scheduler"] == "constant"
    assert verl["data.train_batch_size"] == 128 and verl["actor_rollout_ref.actor.ppo_mini_batch_size"] == 64
    grpo = settings_for(load_config("cpu-grpo", MODEL), "verl", FILES, n_train=4000).settings
    assert grpo["data.train_batch_size"] == 16 and grpo["actor_rollout_ref.rollout.n"] == 8  # prompts x samples


@pytest.mark.parametrize("target", ["verl", "openrlhf"])
def test_export_writes_files_that_parse_back(tmp_path, target):
    cfg = load_config("cpu-grpo", MODEL + ["data.n_train=40", "data.n_test=8"])
    result = export(cfg, target, tmp_path, source="cpu-grpo")
    text = Path(result.files["settings"]).read_text().splitlines()
    lines = [line for line in text if not line.startswith("#")]
    if target == "verl":
        parsed = {k: v for line in lines for k, v in _flat(OmegaConf.from_dotlist([line]))}
        assert parsed == result.settings
        import pyarrow.parquet as pq

        row = pq.read_table(tmp_path / "data" / "train.parquet").to_pylist()[0]
        assert set(row) == {"data_source", "prompt", "ability", "reward_model", "extra_info"}
        assert row["prompt"][-1]["role"] == "user" and row["reward_model"]["style"] == "rule"
    else:
        args = openrlhf_parser().parse_args([tok for line in lines for tok in line.split()])
        for flag, value in result.settings.items():
            got = getattr(args, flag[2:])
            assert (list(got) if isinstance(got, (list, tuple)) else got) == value, flag
        row = json.loads((tmp_path / "data" / "train.jsonl").read_text().splitlines()[0])
        assert set(row) == {"input", "label"} and row["input"].endswith("\n")
    unmapped = (tmp_path / "unmapped.txt").read_text()
    assert all(f"{key} = " in unmapped for key in result.gaps) and "warmstart.steps = 450" in unmapped
    assert os.access(tmp_path / "run.sh", os.X_OK)


def _flat(node, prefix=""):
    for k, v in node.items():
        if OmegaConf.is_dict(v):
            yield from _flat(v, f"{prefix}{k}.")
        else:
            yield prefix + k, OmegaConf.to_container(v) if OmegaConf.is_list(v) else v


def test_hydra_values_quote_what_hydra_would_misread():
    assert hydra_value("a b{c}") == "'a b{c}'" and hydra_value("it's") == "'it\\'s'"
    assert hydra_value(["console", "wandb"]) == "[console,wandb]" and hydra_value(None) == "null"


def _load(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _variants(answer: str) -> list[str]:
    """A right solution, one with the wrong final number, one with no final answer line."""
    head, _, _ = answer.rpartition("#### ")
    return [answer, f"{head}#### {Decimal(gold_number(answer)) + 1}", head.rstrip()]


def roundtrip_mismatches(rows: list[dict], records: list[dict], scorer) -> list[str]:
    bad = []
    for row, record in zip(rows, records):
        truth = row["reward_model"]["ground_truth"]
        for completion in _variants(record["answer"]):
            ours, theirs = gsm8k_reward(completion, record["answer"]), scorer(completion, truth)
            if ours != theirs:
                bad.append(f"{row['extra_info']['index']}: ours {ours}, veRL {theirs} on ...{completion[-30:]!r}")
    return bad


@pytest.mark.skipif(not (GSM8K_DIR / "test.jsonl").is_file(), reason="needs ../shared/data/gsm8k")
def test_gsm8k_test_split_round_trips_through_verl_format_and_scorers(tmp_path):
    """On every test record, veRL's GSM8K scorer on the exported ground truth gives our reward (its format score
    set to ours), and so does the exported reward hook; the ground truth is what veRL's own preprocessing writes."""
    import pyarrow.parquet as pq

    from ppo_core.tasks.data import load_gsm8k

    records = load_gsm8k(GSM8K_DIR, split="test")
    over = MODEL + [f"data.source={GSM8K_DIR}", f"data.n_test={len(records)}", f"train.eval_samples={len(records)}"]
    result = export(load_config("cuda", over), "verl", tmp_path)
    rows = pq.read_table(tmp_path / "data" / "test.parquet").to_pylist()
    assert len(rows) == len(records) == 1319
    verl = _load(FIXTURES / "verl" / "gsm8k.py", "verl_gsm8k")
    hook = _load(Path(result.files["reward"]), "exported_reward_fn")
    for row, record in zip(rows, records):  # as examples/data_preprocess/gsm8k.py's extract_solution writes it
        verl_truth = re.search("#### (\\-?[0-9\\.\\,]+)", record["answer"]).group(1).replace(",", "")
        assert row["reward_model"]["ground_truth"] == verl_truth
    assert roundtrip_mismatches(rows, records, lambda c, t: verl.compute_score(c, t, format_score=0.1)) == []
    assert roundtrip_mismatches(rows, records, lambda c, t: hook.compute_score("openai/gsm8k", c, t)) == []
    # the check fails on a wrong export: the raw answer as ground truth, or veRL's default format score of 0
    raw = [dict(r, reward_model={"ground_truth": rec["answer"]}) for r, rec in zip(rows[:20], records)]
    assert roundtrip_mismatches(raw, records[:20], lambda c, t: verl.compute_score(c, t, format_score=0.1))
    assert roundtrip_mismatches(rows[:20], records[:20], verl.compute_score)


def test_verl_builtin_scorer_reads_answers_ours_accepts_differently():
    """Why the export ships ppo_core's scorer as the reward hook: veRL's strict extraction is narrower."""
    verl = _load(FIXTURES / "verl" / "gsm8k.py", "verl_gsm8k")
    for completion in ("so #### 72.", "####72", "#### $72", "#### 72.0"):
        assert gsm8k_reward(completion, "72") == 1.0
        assert verl.compute_score(completion, "72", format_score=0.1) != 1.0, completion
    assert gsm8k_reward("#### 7,2", "72") == 0.0 and verl.compute_score("#### 7,2", "72") == 1.0  # commas not grouping


def test_openrlhf_reward_hook_scores_responses(tmp_path):
    pytest.importorskip("torch")
    result = export(load_config("cpu", MODEL + ["data.n_train=4", "data.n_test=2"]), "openrlhf", tmp_path)
    hook = _load(Path(result.files["reward"]), "exported_reward_fn_orl")
    out = hook.reward_func(["Q\n1+1=2\n#### 2", "Q\n#### 3", "Q\nno answer"], ["Q\n"] * 3, ["2", "2", "2"])
    assert out["rewards"].tolist() == pytest.approx([1.0, 0.1, 0.0])


def test_cli_errors_are_one_line(tmp_path, capsys):
    assert cli.main(["verl", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "holds no effective_config.yaml" in err
    assert cli.main(["verl", "no-such-preset"]) == 2
    assert "no preset or file 'no-such-preset'" in capsys.readouterr().err
    (tmp_path / "keep.txt").write_text("finished work")
    assert cli.main(["verl", "cpu", "--out", str(tmp_path)]) == 2
    assert "--overwrite" in capsys.readouterr().err and (tmp_path / "keep.txt").read_text() == "finished work"


def test_cli_exports_a_run_folder(tmp_path, capsys):
    run = tmp_path / "run"
    run.mkdir()
    cfg = load_config("cpu", MODEL + ["data.n_train=8", "data.n_test=4"])
    OmegaConf.save(OmegaConf.structured(cfg), run / "effective_config.yaml")
    assert cli.main(["openrlhf", str(run)]) == 0
    out = capsys.readouterr().out
    assert f"wrote {run / 'export' / 'openrlhf'}/" in out and "warmstart.steps:" in out
    assert (
        "--actor.model_name_or_path Qwen/Qwen2.5-0.5B-Instruct"
        in (run / "export" / "openrlhf" / "args.txt").read_text()
    )


VERL_PYTHON = os.environ.get("PPO_VERL_PYTHON", "")
VERL_CHECK = (  # main_ppo's own config (config_path="config", config_name="ppo_trainer") and its own validation
    "import sys, json, importlib.util, os\nfrom hydra import compose, initialize_config_dir\n"
    "from omegaconf import OmegaConf\n"
    "root = importlib.util.find_spec('verl').submodule_search_locations[0]\n"
    "with initialize_config_dir(os.path.join(root, 'trainer', 'config'), version_base=None):\n"
    "    cfg = compose('ppo_trainer', overrides=json.loads(sys.argv[1]))\n"
    "OmegaConf.to_container(cfg, resolve=True)\n"
    "from verl.trainer.ppo.utils import need_critic, need_reference_policy\n"
    "from verl.utils.config import validate_config\n"
    "validate_config(cfg, need_reference_policy(cfg), need_critic(cfg))\n"
    "print(cfg.actor_rollout_ref.actor.clip_ratio)\n"
)


def verl_check(lines: list[str]) -> subprocess.CompletedProcess:
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    return subprocess.run([VERL_PYTHON, "-c", VERL_CHECK, json.dumps(lines)], capture_output=True, text=True, env=env)


def _verl_lines(preset: str, model: str) -> list[str]:
    cfg = load_config(preset, [f"model.name_or_path={model}"])  # veRL reads the model's config files
    return [f"{k}={hydra_value(v)}" for k, v in settings_for(cfg, "verl", FILES, n_train=4000).settings.items()]


needs_verl = pytest.mark.skipif(not VERL_PYTHON, reason="set PPO_VERL_PYTHON to the python of a venv with verl 0.9.1")


@needs_verl
@pytest.mark.parametrize("preset", PRESETS)
def test_verl_composes_and_validates_the_exported_overrides(preset, tiny_model_path):
    """veRL's own Hydra config, composed with the exported overrides and validated as main_ppo does first."""
    done = verl_check(_verl_lines(preset, tiny_model_path))
    assert done.returncode == 0, done.stderr[-2000:]
    assert float(done.stdout.split()[-1]) == load_config(preset).ppo.clip_eps


@needs_verl
def test_verl_check_rejects_a_wrong_export(tiny_model_path):
    lines = _verl_lines("cpu", tiny_model_path)
    assert "Could not override" in verl_check(lines + ["actor_rollout_ref.actor.clip_eps=0.2"]).stderr
    no_micro = [line for line in lines if "micro_batch_size" not in line]
    assert "Please set at least one of 'actor.ppo_micro_batch_size'" in verl_check(no_micro).stderr


# ---- value by value: what each engine does with the exported settings is what the preset means -----------------

VERL_KL = {"kl": "k1", "mse": "k2", "low_var_kl": "k3"}  # veRL's kl_penalty / kl_loss_type names, typed here
ORL_AGG = {"token-mean", "seq-mean-token-mean", "seq-mean-token-sum-norm"}
VALUE_CASES = [(p, MODEL) for p in PRESETS] + [
    ("cpu", MODEL + ["ppo.clip_eps=0.15", "ppo.clip_eps_low=0.1", "ppo.clip_eps_high=0.3", "ppo.dual_clip_c=3.0"]),
    ("cpu", MODEL + ["ppo.kl_estimator=k3", "ppo.kl_coef=0.05"]),
    ("cpu", MODEL + ["algo.use_kl_in_reward=false"]),
    ("cpu-grpo", MODEL + ["algo.kl_loss_type=k2", "algo.kl_loss_coef=0.01",
                          "algo.loss_agg_mode=seq-mean-token-sum-norm"]),
    ("cpu", MODEL + ["sampler.dtype=bfloat16", "correction.is_level=sequence", "correction.is_threshold=3.0",
                     "correction.rs_level=geometric", "correction.rs_threshold=1.5"]),
    ("cpu", MODEL + ["sampler.dtype=bfloat16", "correction.mode=bypass"]),
]  # fmt: skip


def meant(cfg) -> dict:
    """What the run does, in one vocabulary: the clip range, the dual clip, the averaging, where the KL sits (estimator,
    coefficient), the objective, the correction."""
    p, a, k = cfg.ppo, cfg.algo, cfg.correction
    low = p.clip_eps if p.clip_eps_low is None else p.clip_eps_low
    high = p.clip_eps if p.clip_eps_high is None else p.clip_eps_high
    return {
        "clip": (low, high),
        "dual_clip": p.dual_clip_c,
        "agg": a.loss_agg_mode,
        "kl_in_reward": (p.kl_estimator, p.kl_coef) if a.use_kl_in_reward else None,
        "kl_in_loss": (a.kl_loss_type, a.kl_loss_coef) if a.use_kl_loss else None,
        "objective": a.policy_loss,
        "correction": (k.mode, k.is_level, k.is_threshold if k.is_level else None, k.rs_level,
                       k.rs_threshold if k.rs_level else None),
    }  # fmt: skip


def verl_reads(s: dict) -> dict:
    """The same, as veRL 0.9 reads its settings (its defaults where a key is not written)."""
    A, RC = "actor_rollout_ref.actor.", "algorithm.rollout_correction."
    c, is_level, rs_level = s[A + "clip_ratio_c"], s.get(RC + "rollout_is"), s.get(RC + "rollout_rs")
    return {
        "clip": (s.get(A + "clip_ratio_low", s[A + "clip_ratio"]), s.get(A + "clip_ratio_high", s[A + "clip_ratio"])),
        "dual_clip": None if c >= 1e6 else c,
        "agg": s[A + "loss_agg_mode"],
        "kl_in_reward": (VERL_KL[s["algorithm.kl_penalty"]], s["algorithm.kl_ctrl.kl_coef"])
        if s["algorithm.use_kl_in_reward"] else None,
        "kl_in_loss": (VERL_KL[s[A + "kl_loss_type"]], s[A + "kl_loss_coef"]) if s[A + "use_kl_loss"] else None,
        "objective": s[A + "policy_loss.loss_mode"],
        "correction": ("bypass" if s[RC + "bypass_mode"] else "decoupled", is_level,
                       s[RC + "rollout_is_threshold"] if is_level else None, rs_level,
                       s[RC + "rollout_rs_threshold"] if rs_level else None),
    }  # fmt: skip


def openrlhf_reads(s: dict) -> dict:
    """The same, as OpenRLHF 0.11 reads its flags: one KL coefficient, in the loss with --algo.kl.use_loss, else in
    the reward; --actor.eps_clip_low_high over --actor.eps_clip; no dual clip without --actor.dual_clip."""
    clip = s.get("--actor.eps_clip_low_high", [s["--actor.eps_clip"]] * 2)
    coef, loss = s.get("--algo.kl.init_coef", 0.0), s.get("--algo.kl.use_loss", False)
    kl = (s.get("--algo.kl.estimator", "k1"), coef) if coef > 0 else None
    agg = s.get("--actor.loss_agg_mode", "token-mean")
    return {
        "clip": tuple(clip),
        "dual_clip": s.get("--actor.dual_clip"),
        "agg": agg if agg in ORL_AGG else None,
        "kl_in_reward": None if loss else kl,
        "kl_in_loss": kl if loss else None,
        "objective": {"ppo": "vanilla", "gspo": "gspo"}[s.get("--actor.policy_loss_type", "ppo")],
    }


@pytest.mark.parametrize("preset,overrides", VALUE_CASES, ids=[" ".join([p, *o[1:]]) for p, o in VALUE_CASES])
def test_each_exported_value_means_what_the_run_means(preset, overrides):
    cfg = load_config(preset, overrides)
    want = meant(cfg)
    verl = settings_for(cfg, "verl", FILES, n_train=cfg.data.n_train)
    assert verl_reads(verl.settings) == want
    orl = settings_for(cfg, "openrlhf", FILES, n_train=cfg.data.n_train)
    got = openrlhf_reads(orl.settings)
    for key, value in got.items():  # what OpenRLHF cannot express is a gap the export names, never a wrong value
        dotted = {
            "clip": "ppo.clip_eps_low",
            "dual_clip": "ppo.dual_clip_c",
            "agg": "algo.loss_agg_mode",
            "kl_in_reward": "ppo.kl_coef",
            "kl_in_loss": "algo.kl_loss_coef",
            "objective": "algo.policy_loss",
        }
        assert value == want[key] or dotted[key] in orl.gaps, (key, value, want[key])  # fmt: skip


def test_the_value_check_rejects_a_value_mapped_from_the_wrong_key():
    """clip_ratio_high written from ppo.clip_eps (not clip_eps_high), the reward's KL estimator written as the
    loss's: every key still exists, and the read-back differs."""
    cfg = load_config("cpu-dapo", MODEL)
    s = dict(settings_for(cfg, "verl", FILES, n_train=cfg.data.n_train).settings)
    s["actor_rollout_ref.actor.clip_ratio_high"] = cfg.ppo.clip_eps
    assert verl_reads(s) != meant(cfg)
    cfg = load_config("cpu", MODEL + ["ppo.kl_estimator=k1", "algo.kl_loss_type=k3"])
    s = dict(settings_for(cfg, "verl", FILES, n_train=cfg.data.n_train).settings)
    s["algorithm.kl_penalty"] = s["actor_rollout_ref.actor.kl_loss_type"]
    assert verl_reads(s) != meant(cfg)
