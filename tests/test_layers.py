"""The package's layers hold: no import runs back up, and no module imports itself in a circle.

From the bottom: the maths (chapters 01-04, 07, 08, 09) imports only torch and itself; the loop (model, rollout,
update, sampler, trainer) imports the maths; tasks/ builds data and the warm start on the loop; run/ and the course
tooling (checks/, widgets/) build on all of them; the commands sit on top. Every import counts, at the top
of a module or inside a function.
"""

import ast
from pathlib import Path

import ppo_core

PACKAGE = Path(ppo_core.__file__).parent

MATHS = {"logprobs", "masking", "kl", "gae", "losses", "advantages", "objectives", "correction"}
LOOP = {"precision", "model", "rollout", "update", "fastpaths", "trainer", "reward_model", "utils", "dapo", "sampler"}
COMMANDS = {"train", "evaluate", "train_rm"}


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
        if isinstance(node, ast.ImportFrom) and node.level:
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
        if layer(module) == 0 and other - {"torch"}:
            found.append(f"{module} is maths but imports {', '.join(sorted(other - {'torch'}))}")
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
    ]:
        broken = {**sources, module: sources[module] + line}
        assert any(v.startswith(want) for v in violations(broken)), (module, violations(broken))


def test_the_loop_reads_nothing_from_run_or_tasks():
    """The rule in its plainest form: model, rollout, update, sampler and trainer import nothing from run/ or tasks/."""
    sources = package_sources()
    for module in ("model", "rollout", "update", "sampler", "trainer"):
        ours, _ = imports(module, sources[module])
        assert not {m for m in ours if m.split(".")[0] in ("run", "tasks")}, module
