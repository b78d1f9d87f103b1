"""Mutation score of the PPO algorithm: chapters 01-05's and 07's modules and the trainer's step.

    pip install -r tests/quality/requirements-mutation.txt     # mutmut 3.8.1, not part of the course's install
    python tests/quality/mutation.py                            # every target below, 2 workers
    python tests/quality/mutation.py --only kl,gae --max-children 1

mutmut 3 reads ``[tool.mutmut]`` in pyproject.toml (which files it mutates, which tests it runs: the unit
tests of these modules and tests/test_algorithm_box.py; each mutant runs only the tests that call its
function). This script starts from a clean ``mutants/`` folder, asks mutmut for the mutants of TARGETS (the
trainer's step, not its checkpoint or logging code), prints mutmut's own output, then its verdict for every
mutant grouped by status, the diff of every survivor, and the score killed / checked. Exit status 1 if any
mutant survived. Not part of the test command: it takes minutes.
"""

import argparse
import fnmatch
import os
import re
import shutil
import signal
import subprocess
import sys
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

TARGETS = {
    "logprobs": ["ppo_core.logprobs.*"],
    "masking": ["ppo_core.masking.*"],
    "kl": ["ppo_core.kl.*"],
    "gae": ["ppo_core.gae.*"],
    "losses": ["ppo_core.losses.*"],
    "update": ["ppo_core.update.*"],
    "advantages": ["ppo_core.advantages.*"],
    "trainer": ["ppo_core.trainer.xǁPPOTrainerǁlearn__mutmut_*", "ppo_core.trainer.xǁPPOTrainerǁupdate__mutmut_*"],
}
"""mutmut's names of the mutants to run, by target: whole modules, and the trainer's steps 3-6 (``learn`` and
its ``update``; steps 1-2, ``collect``, sample and score, which tests/test_rollout.py covers)."""

RESULT = re.compile(r"^(\S+) (ppo_core\.\S+__mutmut_\d+)$")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="", help=f"comma-separated targets among {', '.join(TARGETS)}")
    parser.add_argument("--max-children", type=int, default=2, help="parallel mutant workers")
    parser.add_argument("--time-limit", type=float, default=None, help="stop mutmut after this many seconds")
    parser.add_argument("--until", default=None, help="HH:MM (UTC): stop mutmut then at the latest (a shared queue)")
    parser.add_argument("--report-only", action="store_true", help="only report the verdicts already in mutants/")
    args = parser.parse_args(argv)
    if args.until:
        now = datetime.now(UTC)
        hour, minute = map(int, args.until.split(":"))
        left = (now.replace(hour=hour, minute=minute, second=0, microsecond=0) - now).total_seconds()
        args.time_limit = max(0.0, min(left, args.time_limit or left))
    targets = [t for t in args.only.split(",") if t] or list(TARGETS)
    unknown = [t for t in targets if t not in TARGETS]
    if unknown:
        parser.error(f"unknown target(s) {', '.join(unknown)}; choose among {', '.join(TARGETS)}")
    names = [n for t in targets for n in TARGETS[t]]
    mutmut = shutil.which("mutmut", path=str(Path(sys.executable).parent)) or shutil.which("mutmut")
    if mutmut is None:
        sys.exit("mutmut is not installed; pip install -r tests/quality/requirements-mutation.txt")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # the tests must import the mutants
    partial = ""
    if not args.report_only:
        shutil.rmtree(ROOT / "mutants", ignore_errors=True)  # a fresh run: no verdict cached from other code
        cmd = [mutmut, "run", "--max-children", str(args.max_children), *names]
        print("$", " ".join(cmd[1:]), flush=True)
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                start_new_session=True)  # fmt: skip
        try:
            out, err = proc.communicate(timeout=args.time_limit)
        except subprocess.TimeoutExpired:  # stop mutmut and its workers; it keeps every verdict it reached in mutants/
            os.killpg(proc.pid, signal.SIGKILL)
            out, err = proc.communicate()
            partial = f" (PARTIAL: stopped after --time-limit {args.time_limit:g} s)"
        out = out.replace("\r", "\n")
        if proc.returncode and not partial:
            print(out[-3000:], err[-3000:])
            return proc.returncode
        lines = [line for line in out.splitlines() if line.strip() and not RESULT.match(line)]
        print("\n".join(dict.fromkeys(lines)))  # the progress line repeats; each distinct one once
    listing = subprocess.run([mutmut, "results", "--all", "true"], cwd=ROOT, env=env, capture_output=True, text=True)
    verdicts = {}
    for line in listing.stdout.splitlines():  # "    ppo_core.kl.x_kl_penalty__mutmut_1: killed"
        name, _, status = line.strip().rpartition(": ")
        if any(fnmatch.fnmatchcase(name, pattern) for pattern in names):
            verdicts[name] = status
    by_module = Counter((name.split(".")[1], status) for name, status in verdicts.items())
    print("\nper module:")
    for module in dict.fromkeys(name.split(".")[1] for name in verdicts):
        counts = {s: n for (m, s), n in by_module.items() if m == module}
        print(f"  {module:9s} " + ", ".join(f"{s} {n}" for s, n in sorted(counts.items())))
    survivors = [n for n, s in verdicts.items() if s not in ("killed", "not checked")]
    for name in survivors:
        diff = subprocess.run([mutmut, "show", name], cwd=ROOT, env=env, capture_output=True, text=True).stdout
        print(f"\n{verdicts[name]}: {diff.strip()}")
    killed = sum(s == "killed" for s in verdicts.values())
    checked = sum(s != "not checked" for s in verdicts.values())
    score = f"{killed}/{checked} checked mutants killed ({100 * killed / max(checked, 1):.1f} %)"
    print(f"\nmutation score{partial}: {score}; {len(verdicts) - checked} of {len(verdicts)} not checked")
    return 1 if survivors else 0


if __name__ == "__main__":
    sys.exit(main())
