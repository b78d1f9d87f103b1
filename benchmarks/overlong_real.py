"""DAPO's overlong shaping, the missing-EOS penalty and the overlong filter on a real model (chapter 08).

    .venv/bin/python benchmarks/overlong_real.py [--seeds 0 1 2] [--arms ...] [--parallel N] [key=value ...]
    .venv/bin/python benchmarks/overlong_real.py --join FOLDER     # join runs made elsewhere (see below)

On the course's toy task the answers end long before the length limit, so these switches never act (chapter 08,
section 8). SmolLM2-135M-Instruct under the ``cpu-smollm`` preset writes longer replies than its budget of
``rollout.max_new_tokens`` tokens: most of its first samples end without EOS, so each switch acts on most of the
responses of the first steps. The arms, each one switch on top of the preset:

* ``none``: the preset as it is;
* ``overlong``: DAPO's soft overlong punishment (``reward.overlong_buffer_len=8``, ``reward.overlong_penalty=1``):
  the score falls linearly over the last 8 tokens before the limit, by 1 at the limit;
* ``eos``: TRL's missing-EOS penalty (``reward.missing_eos_penalty=1``): 1 off the score of a reply without EOS;
* ``filter``: DAPO's overlong filtering (``rollout.overlong_filter=true``): the tokens of a reply without EOS are
  masked out of the loss.

Each (arm, seed) is ``benchmarks/real_llm.py --seeds S --save FOLDER/ARM-S.json`` with the arm's overrides, in a
process of its own, ``--parallel`` at a time, its output in ``FOLDER/log-ARM-S.txt``. The rows are joined into
``benchmarks/results/real_llm/overlong.json``, each with its arm; a run that failed is kept as the last line of
its log. ``--join FOLDER`` joins such a folder without running anything (for runs made on another machine by the
same commands).
"""

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

from results_meta import save_result

ARMS = {
    "none": [],
    "overlong": ["reward.overlong_buffer_len=8", "reward.overlong_penalty=1.0"],
    "eos": ["reward.missing_eos_penalty=1.0"],
    "filter": ["rollout.overlong_filter=true"],
}
HERE = Path(__file__).resolve().parent
OUT = HERE / "results" / "real_llm" / "overlong.json"


def run_all(folder: Path, arms: list[str], seeds: list[int], parallel: int, overrides: list[str]) -> None:
    """Every (arm, seed) through ``real_llm.py``, ``parallel`` processes at a time; files into ``folder``."""
    jobs = [(a, s) for a in arms for s in seeds]
    running = []
    while jobs or running:
        while jobs and len(running) < parallel:
            arm, seed = jobs.pop(0)
            cmd = [sys.executable, str(HERE / "real_llm.py"), "--seeds", str(seed), "--save",
                   str(folder / f"{arm}-{seed}.json"), *overrides, *ARMS[arm]]  # fmt: skip
            log = open(folder / f"log-{arm}-{seed}.txt", "w")  # noqa: SIM115 (closed when the process ends)
            running.append((subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT), log))
        proc, log = running.pop(0)
        proc.wait()
        log.close()


def join(folder: Path) -> dict:
    """The rows of ``folder``'s ``ARM-SEED.json`` files, and the failed runs of its logs, by arm."""
    runs, failed, metas = [], [], []
    for log in sorted(folder.glob("log-*.txt")):
        arm, seed = log.stem[len("log-") :].rsplit("-", 1)
        path = folder / f"{arm}-{seed}.json"
        if path.is_file():
            data = json.loads(path.read_text())
            metas.append(data["meta"])
            runs += [{"arm": arm, **row} for row in data["rows"]]
        else:
            lines = [x for x in log.read_text().splitlines() if x.strip()]
            failed.append({"arm": arm, "seed": int(seed), "error": lines[-1] if lines else "no output"})
    if not metas:
        raise SystemExit(f"{folder} holds no ARM-SEED.json results: run without --join first")
    return {"arms": {a: ARMS[a] for a in ARMS if any(r["arm"] == a for r in runs + failed)}, "runs": runs,
            "failed": failed, "run_meta": metas[0]}  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--arms", nargs="+", default=list(ARMS), choices=list(ARMS))
    ap.add_argument("--parallel", type=int, default=1, help="runs at a time (default 1)")
    ap.add_argument("--join", type=Path, metavar="FOLDER", help="join the runs in FOLDER; run nothing")
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument("overrides", nargs="*", help="key=value overrides for every run (e.g. model.device=cuda)")
    args = ap.parse_args()
    command = " ".join(["python benchmarks/overlong_real.py", *sys.argv[1:]])
    if args.join:
        data = join(args.join)
    else:
        with tempfile.TemporaryDirectory() as tmp:
            run_all(Path(tmp), args.arms, args.seeds, args.parallel, args.overrides)
            data = join(Path(tmp))
    run_meta = data.pop("run_meta")
    # joined runs: the machine, date and commit are the runs', not this join's
    runs_own = {k: run_meta[k] for k in ("machine", "date", "commit")} if args.join else {}
    path = save_result(args.out, data, command, runs_command=run_meta["command"], **runs_own)
    for r in data["runs"]:
        e = r["eval"]
        print(f"{r['arm']:9s} seed {r['seed']}: sampled #### {e['before_sampled']['marker_acc']:.3f} -> "
              f"{e['after_sampled']['marker_acc']:.3f}, EOS rate {r['steps'][0]['rollout/eos_rate']:.2f} -> "
              f"{r['steps'][-1]['rollout/eos_rate']:.2f}")  # fmt: skip
    for f in data["failed"]:
        print(f"{f['arm']:9s} seed {f['seed']}: failed: {f['error']}")
    print(f"saved {path}")


if __name__ == "__main__":
    main()
