"""The package's layers hold: no import runs back up, and no module imports itself in a circle.

From the bottom: the maths (chapters 01-04, 07, 08, 09) imports only torch and itself; the loop (model, rollout,
update, sampler, trainer) imports the maths; tasks/ builds data and the warm start on the loop; run/ and the course
tooling (checks/, widgets/) build on all of them, side by side: neither imports the other; the commands sit on
top. Every import counts, at the top of a module or inside a function, ``from ppo_core import run`` and
``importlib.import_module("ppo_core.run")`` as much as ``from .run import ...``. Benchmarks import nothing from tests/.
"""

import ast
import re
from pathlib import Path

import ppo_core

PACKAGE = Path(ppo_core.__file__).parent

MATHS = {"logprobs", "masking", "kl", "gae", "losses", "advantages", "objectives", "correction", "registry"}
MATHS_MAY_IMPORT = {"torch", "dataclasses"}  # registry.py's option structs are dataclasses
LOOP = {"precision", "model", "rollout", "update", "fastpaths", "trainer", "reward_model", "utils", "dapo", "sampler"}
COMMANDS = {"train", "evaluate", "train_rm"}
SIDE_BY_SIDE = ({"run"}, {"checks", "widgets"})  # layer 3: the run infrastructure and the course tooling
ROOT = PACKAGE.parent


def layer(module: str) -> int:
    """0 maths, 1 loop, 2 tasks, 3 run and the course tooling, 4 commands (``module`` without ``ppo_core.``)."""
    top = module.split(".")[0]
    if top in MATHS:
        return 0
    if top in LOOP:
        return 1
    if top == "tasks":
        return 2
    if top in COMMANDS:
        return 4
    return 3  # run, checks, widgets, the package itself


def imports(module: str, source: str) -> tuple[set, set]:
    """(ppo_core modules, other top-level packages) that ``source`` imports; ``module`` without ``ppo_core.``."""
    parts = module.split(".") if module else []
    is_package = module == "" or module.endswith("__init__")
    pkg = parts[:-1] if not is_package else [p for p in parts if p != "__init__"]
    ours, other = set(), set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call) and _dynamic_import(node):  # importlib.import_module("ppo_core.x"), __import__
            name = node.args[0].value
            if name.startswith("."):  # import_module(".run", "ppo_core")
                name = "ppo_core" + name
            (ours.add(name[len("ppo_core.") :]) if name.startswith("ppo_core.") else other.add(name.split(".")[0]))
        elif (
            isinstance(node, ast.ImportFrom) and node.module == "ppo_core" and not node.level
        ):  # from ppo_core import run
            ours.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level:
            base = pkg[: len(pkg) - (node.level - 1)]
            if node.module:
                ours.add(".".join(base + [node.module]))
            else:
                ours.update(".".join(base + [alias.name]) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            name = node.module or ""
            (ours.add(name[len("ppo_core.") :]) if name.startswith("ppo_core.") else other.add(name.split(".")[0]))
        elif isinstance(node, ast.Import):
            for alias in node.names:
                name = alias.name
                (ours.add(name[len("ppo_core.") :]) if name.startswith("ppo_core.") else other.add(name.split(".")[0]))
    return ours, other


def _dynamic_import(call: ast.Call) -> bool:
    """``importlib.import_module("...")``, ``import_module("...")`` or ``__import__("...")`` with a literal name."""
    fn = call.func
    name = fn.attr if isinstance(fn, ast.Attribute) else fn.id if isinstance(fn, ast.Name) else ""
    literal = bool(call.args) and isinstance(call.args[0], ast.Constant) and isinstance(call.args[0].value, str)
    return name in ("import_module", "__import__") and literal


def package_sources() -> dict[str, str]:
    """Every module of the package: dotted name without ``ppo_core.`` (``run.config``) -> source."""
    out = {}
    for path in PACKAGE.rglob("*.py"):
        rel = path.relative_to(PACKAGE).with_suffix("")
        name = ".".join(rel.parts)
        out[name.removesuffix(".__init__").removesuffix("__init__")] = path.read_text()
    return out


def violations(sources: dict[str, str]) -> list[str]:
    """Every import that runs up a layer, every maths import beyond torch, and every import cycle."""
    found, graph = [], {}
    for module, source in sources.items():
        ours, other = imports(module, source)
        graph[module] = {m for m in ours if m in sources and m != module}
        for target in sorted(graph[module]):
            if layer(target) > layer(module):
                found.append(f"{module} (layer {layer(module)}) imports {target} (layer {layer(target)})")
            mine, theirs = (next((g for g in SIDE_BY_SIDE if m.split(".")[0] in g), None) for m in (module, target))
            if mine is not None and theirs is not None and mine is not theirs:
                found.append(f"{module} imports {target}: run/ and the course tooling stand side by side")
        if layer(module) == 0 and other - MATHS_MAY_IMPORT:
            found.append(f"{module} is maths but imports {', '.join(sorted(other - MATHS_MAY_IMPORT))}")
    found += [f"import cycle: {' -> '.join(cycle)}" for cycle in cycles(graph)]
    return found


def cycles(graph: dict[str, set]) -> list[list[str]]:
    """One cycle through each strongly connected group of modules (depth-first search)."""
    out, done = [], set()
    for start in sorted(graph):
        stack, path, on_path = [(start, iter(sorted(graph[start])))], [start], {start}
        while stack:
            node, children = stack[-1]
            child = next(children, None)
            if child is None:
                stack.pop(), path.pop(), on_path.discard(node), done.add(node)
            elif child in on_path:
                cycle = path[path.index(child) :] + [child]
                if not any(set(cycle) <= set(c) for c in out):
                    out.append(cycle)
            elif child not in done:
                stack.append((child, iter(sorted(graph.get(child, ()))))), path.append(child), on_path.add(child)
    return out


def test_the_package_has_no_import_that_runs_back_up_and_no_cycle():
    assert violations(package_sources()) == []


def test_the_check_rejects_an_import_up_a_layer_a_maths_import_and_a_cycle():
    sources = package_sources()
    for module, line, want in [
        ("trainer", "from .run.config import Config\n", "trainer (layer 1) imports run.config (layer 3)"),
        ("rollout", "def f():\n    from .tasks.data import build_prompt\n", "rollout (layer 1) imports tasks.data"),
        ("gae", "import numpy\n", "gae is maths but imports numpy"),
        ("run.config", "from ppo_core.run.setup import load_models\n", "import cycle: run.config -> run.setup"),
        ("trainer", "def f():\n    from ppo_core import run\n", "trainer (layer 1) imports run (layer 3)"),
        (
            "dapo",
            "import importlib\nM = importlib.import_module('ppo_core.run.loop')\n",
            "dapo (layer 1) imports run.loop",
        ),
        ("update", "R = __import__('ppo_core.run.config')\n", "update (layer 1) imports run.config"),
        (
            "kl",
            "from importlib import import_module\nM = import_module('.tasks', 'ppo_core')\n",
            "kl (layer 0) imports tasks",
        ),
        ("run.loop", "from ..checks import catalog\n", "run.loop imports checks: run/ and the course"),
        ("checks.ch05_loop", "from ..run.config import load_config\n", "checks.ch05_loop imports run.config: run/ and"),
    ]:
        broken = {**sources, module: sources[module] + line}
        assert any(v.startswith(want) for v in violations(broken)), (module, violations(broken))


def test_the_loop_reads_nothing_from_run_or_tasks():
    """The rule in its plainest form: model, rollout, update, sampler and trainer import nothing from run/ or tasks/."""
    sources = package_sources()
    for module in ("model", "rollout", "update", "sampler", "trainer"):
        ours, _ = imports(module, sources[module])
        assert not {m for m in ours if m.split(".")[0] in ("run", "tasks")}, module


def benchmark_imports_of_tests(sources: dict[str, str]) -> list[str]:
    """Each benchmark script (name -> source) that imports from tests/: a study must run from the package and
    tools/, which a checkout without the test suite still has."""
    return [name for name, source in sources.items() if any(m.split(".")[0] in ("tests", "quality") for m in
            imports("", source)[1])]  # fmt: skip


def test_benchmarks_import_nothing_from_tests():
    sources = {p.name: p.read_text() for p in (ROOT / "benchmarks").glob("*.py")}
    assert sources and benchmark_imports_of_tests(sources) == []
    planted = {"memory.py": "from tests.quality.memory_peaks import row_wise_peaks\n"}
    assert benchmark_imports_of_tests(planted) == ["memory.py"]


def docstring_rows() -> list[str]:
    """The rows of the layer box in the package docstring, top (commands) to bottom (maths)."""
    box = ppo_core.__doc__.split("┌", 1)[1].split("└", 1)[0]
    return [row for row in box.split("├")]


def test_the_package_docstring_draws_every_module_in_its_layer():
    """The layers are described once, in the package docstring: each row names the modules of its layer."""
    rows = [set(re.findall(r"[a-z_]+", row)) for row in docstring_rows()]
    modules = [m for m in package_sources() if m and "." not in m or m.startswith(("run.", "tasks."))]
    by_row = {4: "commands", 3: "run", 2: "tasks", 1: "loop", 0: "maths"}
    missing = []
    for module in modules:
        top, leaf = module.split(".")[0], module.split(".")[-1]
        row = {4: 0, 3: 1, 2: 2, 1: 3, 0: 4}[layer(module)]
        if top in ("checks", "widgets", "export", "utils", "") or module == "__init__":
            continue  # beside the box: the course tooling, export/, the shared helpers
        if leaf not in rows[row]:
            missing.append(f"{module} is not in the {by_row[layer(module)]} row")
    assert missing == []


def composition_faults(sources: dict[str, str]) -> list[str]:
    """The trainer is composed, not extended: every class that subclasses a ``...Trainer``, every function below
    run/ with a ``trainer`` parameter (a module handed the trainer calls back up), and every swap of a trainer
    method by assignment (``x.minibatch_update = ...``) outside the trainer's own ``self``."""
    found = []
    for module, source in sources.items():
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.ClassDef):
                bases = [b.id if isinstance(b, ast.Name) else getattr(b, "attr", "") for b in node.bases]
                found += [f"{module}: {node.name} subclasses {b}" for b in bases if b.endswith("Trainer")]
            elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and layer(module) < 2:
                names = [a.arg for a in node.args.args + node.args.kwonlyargs]
                found += [f"{module}: {node.name} takes a trainer" for n in names if n == "trainer"]
            elif isinstance(node, ast.Assign):
                for t in node.targets:
                    swapped = isinstance(t, ast.Attribute) and t.attr == "minibatch_update"
                    if swapped and not (isinstance(t.value, ast.Name) and t.value.id == "self"):
                        found.append(f"{module}: {ast.unparse(t)} swapped by assignment")
    return found


def test_the_run_composes_the_trainer():
    assert composition_faults(package_sources()) == []
    planted = {
        "run.distributed": "class DistributedPPOTrainer(RunTrainer):\n    pass\n",
        "dapo": "def dynamic_sampling(trainer, records):\n    return trainer.collect(records)\n",
        "run.other": "def attach(tr):\n    tr.minibatch_update = swap(tr.minibatch_update)\n",
    }
    assert composition_faults(planted) == [
        "run.distributed: DistributedPPOTrainer subclasses RunTrainer",
        "dapo: dynamic_sampling takes a trainer",
        "run.other: tr.minibatch_update swapped by assignment",
    ]
