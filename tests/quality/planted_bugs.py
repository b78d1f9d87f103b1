"""Plant one-line bugs in the PPO step, one at a time, and see which tests catch each.

Each bug is applied to a scratch copy of the repository (``ppo_core/`` and ``tests/``), never to the
checkout itself; the selected tests then run there in a subprocess.

    python tests/quality/planted_bugs.py                                   # tests/test_algorithm_box.py
    python tests/quality/planted_bugs.py tests/test_gae.py tests/test_kl.py  # any other selection
    python tests/quality/planted_bugs.py --wide                            # the wide catalog, below

``--wide`` runs the catalog in ``tests/quality/planted_bugs_wide.json`` instead: bugs outside the PPO step (the
tasks, the reward model, checkpoints and resume, metrics, LoRA, precision, the CLI, the exercise checkers, the
widgets, distributed training), each of which passed every test once, each against the tests written to catch it
(its "tests" entry). ``--only TEXT`` keeps the bugs whose label contains TEXT.

Prints one line per bug: caught (with the number of failing tests) or SURVIVED. Exit status 1 if any
bug survives. About 10 s per bug on two CPU cores.
"""

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# (label, file, [(exact text, replacement), ...]): the first text found exactly once is replaced (the trainer's
# step has two versions: before and after it was split into collect + learn)
BUGS = [
    ("a: advantage whitening skipped", "ppo_core/trainer.py", [
        ("advantages = masked_whiten(advantages, ro.mask)", "pass"),
        ("masked_whiten(advantages_raw, ro.mask) if p.whiten_advantages else advantages_raw", "advantages_raw"),
        ("masked_whiten(advantages_raw, ro.mask) if whiten else advantages_raw", "advantages_raw")]),
    ("b: adaptive KL controller lowers kl_coef above target", "ppo_core/kl.py", [
        ("error = min(max(kl / self.target - 1.0, -0.2), 0.2)",
         "error = min(max(1.0 - kl / self.target, -0.2), 0.2)")]),
    ("c: returns from whitened advantages", "ppo_core/trainer.py", [
        ("advantages = masked_whiten(advantages, ro.mask)",
         "advantages = masked_whiten(advantages, ro.mask)\n"
         "            returns = torch.where(ro.mask, advantages + ro.values, torch.zeros_like(returns))"),
        ("masked_whiten(advantages_raw, ro.mask) if p.whiten_advantages else advantages_raw",
         "masked_whiten(advantages_raw, ro.mask) if p.whiten_advantages else advantages_raw\n"
         "            returns = torch.where(ro.mask, advantages + ro.values, torch.zeros_like(returns))"),
        ("masked_whiten(advantages_raw, ro.mask) if whiten else advantages_raw",
         "masked_whiten(advantages_raw, ro.mask) if whiten else advantages_raw\n"
         "        if self.critic:\n"
         "            returns = torch.where(ro.mask, advantages + ro.values, torch.zeros_like(returns))")]),
    ("d: the same permutation every epoch", "ppo_core/trainer.py", [
        ("generator=self.shuffle_gen)", "generator=self.shuffle_gen.clone_state())"),
        ("generator=self.shuffle_gen).split(p.minibatch_size)\n            schedule.append(list(order))  # a fresh",
         "generator=self.shuffle_gen.clone_state()).split(p.minibatch_size)\n"
         "            schedule.append(list(order))  # a fresh")]),
    ("e: KL sign flipped in the reward", "ppo_core/gae.py", [
        ("rewards = torch.where(mask, -kl_coef * kl, zeros)", "rewards = torch.where(mask, kl_coef * kl, zeros)")]),
    ("f: score on the first response token", "ppo_core/gae.py", [
        ("rewards[rows, last[rows]] += scores[rows]", "rewards[rows, mask.int().argmax(1)[rows]] += scores[rows]")]),
    ("g: gradient accumulation: each micro-batch divided by its own token count", "ppo_core/update.py", [
        ('part["units"] = units', 'part.pop("units", None)')]),
    ("h: critic targets computed with the policy's lambda (ppo.lam_value ignored)", "ppo_core/gae.py", [
        ("_, returns = compute_gae(rewards, values, mask, opts.gamma, opts.lam_value)",
         "_, returns = compute_gae(rewards, values, mask, opts.gamma, opts.lam)")]),
    ("i: the value head's group at ppo.lr (ppo.value_lr ignored)", "ppo_core/run/setup.py", [
        ('"lr": ppo.value_lr}', '"lr": ppo.lr}')]),
    ("j: a value warm-up step updates the KL controller", "ppo_core/trainer.py", [
        ("if not warmup:  # the policy did not move", "if True:  # the policy did not move")]),
    ("k: a value warm-up step also updates the policy", "ppo_core/trainer.py", [
        ("self.value_step if warmup else self.policy_step", "self.policy_step if warmup else self.policy_step")]),
]  # fmt: skip


def plant(root: Path, file: str, edits: list) -> None:
    path = root / file
    text = path.read_text()
    for old, new in edits:
        if text.count(old) == 1:
            path.write_text(text.replace(old, new))
            return
    raise SystemExit(f"{file}: none of the texts to replace occurs exactly once: {[old for old, _ in edits]}")


WIDE = Path(__file__).with_name("planted_bugs_wide.json")


def catch(file: str, edits: list, selection: list[str]) -> str:
    """Plant one bug in a scratch copy of ``ppo_core/`` and ``tests/``, run ``selection`` there: pytest's last line."""
    with tempfile.TemporaryDirectory() as tmp:
        scratch = Path(tmp)
        for name in ("ppo_core", "tests"):
            shutil.copytree(ROOT / name, scratch / name, ignore=shutil.ignore_patterns("__pycache__"))
        shutil.copy(ROOT / "pyproject.toml", scratch / "pyproject.toml")
        plant(scratch, file, edits)
        out = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-o", "addopts=-p no:cacheprovider", *selection],
            cwd=scratch, env={**os.environ, "PYTHONPATH": str(scratch)}, capture_output=True, text=True,
        )  # fmt: skip
        return out.stdout.strip().splitlines()[-1] if out.stdout.strip() else out.stderr[-300:]


def run(bugs: list[tuple[str, str, list, list[str]]]) -> int:
    """bugs: (label, file, edits, tests to run). Prints one line per bug; 1 if any survives."""
    survived = 0
    for label, file, edits, selection in bugs:
        summary = catch(file, edits, selection)
        if re.search(r"(\d+) failed", summary):
            print(f"caught    {label}: {summary}", flush=True)
        else:
            survived += 1
            print(f"SURVIVED  {label}: {summary}", flush=True)
    print(f"{len(bugs) - survived} of {len(bugs)} caught")
    return 1 if survived else 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("tests", nargs="*", help="tests for the PPO-step bugs (default tests/test_algorithm_box.py)")
    parser.add_argument("--wide", action="store_true", help="run the wide catalog, each bug against its own tests")
    parser.add_argument("--only", default="", help="keep the bugs whose label contains this text")
    args = parser.parse_args(argv)
    if args.wide:
        if args.tests:
            parser.error("--wide runs each bug against the tests in its catalog entry; give no tests")
        bugs = [(b["bug"], b["file"], b["edits"], b["tests"]) for b in json.loads(WIDE.read_text())]
    else:
        bugs = [(label, file, edits, args.tests or ["tests/test_algorithm_box.py"]) for label, file, edits in BUGS]
    bugs = [b for b in bugs if args.only in b[0]]
    if not bugs:
        parser.error(f"no bug's label contains {args.only!r}")
    return run(bugs)


if __name__ == "__main__":
    sys.exit(main())
