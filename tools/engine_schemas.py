"""Refresh the engines' schemas that tests/test_export.py checks ``ppo_core.export`` against, from their wheels.

    pip download --no-deps verl==0.9.1 openrlhf==0.11.2 -d /tmp/wheels
    python -m tools.engine_schemas /tmp/wheels/verl-*.whl /tmp/wheels/openrlhf-*.whl

veRL: its generated trainer config and GSM8K scorer, copied as they are. OpenRLHF: every ``add_argument`` of
``openrlhf/cli/train_ppo_ray.py``, read with ``ast`` (nothing is imported), as {flag: type, default, choices, nargs}.
Both projects are Apache-2.0; the fixtures keep their notices.
"""

import ast
import json
import sys
import zipfile
from pathlib import Path

FIXTURES = Path(__file__).resolve().parent.parent / "tests" / "fixtures"
VERL_FILES = {
    "verl/trainer/config/_generated_ppo_trainer.yaml": "_generated_ppo_trainer.yaml",
    "verl/utils/reward_score/gsm8k.py": "gsm8k.py",
}
HEADER = "# Copied unchanged from {wheel} ({member}).\n"
HEADER += "# Copyright 2024 Bytedance Ltd. and/or its affiliates, licensed under the Apache License, Version 2.0\n"
HEADER += "# (http://www.apache.org/licenses/LICENSE-2.0).\n"


def _literal(node):
    """A default written in the parser: a literal, or the few expressions train_ppo_ray.py uses."""
    try:
        return ast.literal_eval(node)
    except ValueError:
        if isinstance(node, ast.Call) and getattr(node.func, "id", "") in ("int", "float"):
            return {"int": int, "float": float}[node.func.id](_literal(node.args[0]))
        if isinstance(node, ast.IfExp):  # 1e-6 if prefix == "actor" else 9e-6
            return [_literal(node.body), _literal(node.orelse)]
        return None  # e.g. a date computed at start-up


def _flags(source: str) -> dict:
    """{flag: {...}} for every parser.add_argument call; f-string flags are expanded for actor and critic."""
    flags = {}
    for node in ast.walk(ast.parse(source)):
        if not (isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "add_argument"):
            continue
        kw = {k.arg: k.value for k in node.keywords}
        spec = {"type": "str", "default": None}
        if "type" in kw:
            spec["type"] = kw["type"].id
        action = _literal(kw["action"]) if "action" in kw else None
        if action in ("store_true", "store_false"):
            spec["type"] = "bool"
            spec["action"] = action
        for name in ("default", "choices", "nargs"):
            if name in kw:
                spec[name] = _literal(kw[name])
        first = node.args[0]
        if isinstance(first, ast.JoinedStr):  # f"--{prefix}.adam.lr" inside `for prefix in ("actor", "critic")`
            for i, prefix in enumerate(("actor", "critic")):
                one = dict(spec)
                if isinstance(kw.get("default"), ast.IfExp):
                    one["default"] = spec["default"][i]
                flag = "".join(v.value if isinstance(v, ast.Constant) else prefix for v in first.values)
                flags[flag] = one
        else:
            flags[first.value] = spec
    return flags


def main(verl_wheel: str, openrlhf_wheel: str) -> None:
    out = FIXTURES / "verl"
    with zipfile.ZipFile(verl_wheel) as z:
        for member, name in VERL_FILES.items():
            header = HEADER.format(wheel=Path(verl_wheel).name, member=member)
            (out / name).write_text(header + z.read(member).decode())
    with zipfile.ZipFile(openrlhf_wheel) as z:
        member = next(n for n in z.namelist() if n.endswith("openrlhf/cli/train_ppo_ray.py"))
        flags = _flags(z.read(member).decode())
    note = (
        f"Every argument of {member} in {Path(openrlhf_wheel).name}, read with ast by tools/engine_schemas.py. "
        "OpenRLHF is licensed under the Apache License, Version 2.0."
    )
    doc = {"source": note, "flags": dict(sorted(flags.items()))}
    (FIXTURES / "openrlhf" / "train_ppo_ray_args.json").write_text(json.dumps(doc, indent=1) + "\n")


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: python -m tools.engine_schemas VERL_WHEEL OPENRLHF_WHEEL")
    main(*sys.argv[1:])
