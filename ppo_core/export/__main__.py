"""python -m ppo_core.export {verl,openrlhf} RUN_OR_CONFIG [--out DIR] [--gpus N] [key=value ...]"""

import argparse
import sys
from pathlib import Path

from ..run.config import PRESETS, ConfigError, load_config
from . import TARGETS, export

DESCRIPTION = "Write the same run for veRL or OpenRLHF: settings, data, reward hook, run.sh and unmapped.txt."


def _source(run_or_config: str) -> tuple[str, Path]:
    """The config to load and the default output folder, from a run folder, a preset or a YAML file."""
    path = Path(run_or_config).expanduser()
    if path.is_dir():
        effective = path / "effective_config.yaml"
        if not effective.is_file():
            raise ConfigError(
                f"{path} holds no effective_config.yaml: pass a run folder written by python -m ppo_core.train, "
                f"a preset ({', '.join(PRESETS)}) or a YAML file"
            )
        return str(effective), path / "export"
    return run_or_config, Path("outputs") / "export" / path.stem


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m ppo_core.export", description=DESCRIPTION)
    ap.add_argument("target", choices=TARGETS, help="the engine to write for")
    ap.add_argument(
        "run", help=f"a run folder (its effective_config.yaml), a preset ({', '.join(PRESETS)}) or a YAML file"
    )
    ap.add_argument(
        "overrides", nargs="*", help="dotted key=value overrides, e.g. model.name_or_path=Qwen/Qwen2.5-0.5B"
    )
    ap.add_argument("--out", help="output folder (default: RUN/export/TARGET, or outputs/export/PRESET/TARGET)")
    ap.add_argument("--gpus", type=int, default=1, help="GPUs per node to place the run on (default: 1)")
    ap.add_argument("--overwrite", action="store_true", help="write into a non-empty output folder")
    args = ap.parse_args(argv)
    try:
        config_path, default_out = _source(args.run)
        cfg = load_config(config_path, args.overrides)
        out = Path(args.out) if args.out else default_out / args.target
        if out.exists() and any(out.iterdir()) and not args.overwrite:
            raise ConfigError(f"{out} is not empty: pass --out to another folder, or --overwrite to replace its files")
        if args.gpus < 1:
            raise ConfigError(f"--gpus must be >= 1, got {args.gpus}")
        result = export(cfg, args.target, out, gpus=args.gpus, source=args.run)
    except (ConfigError, OSError, ValueError) as err:
        print(f"error: {str(err).splitlines()[0]}", file=sys.stderr)
        return 2
    print(f"wrote {out}/: {Path(result.files['settings']).name}, run.sh, data/, reward_fn.py, unmapped.txt")
    print(f"{len(result.settings)} settings; {len(result.gaps)} keys with no counterpart (unmapped.txt):")
    for key, why in result.gaps.items():
        print(f"  {key}: {why}")
    print(f"next: bash {out}/run.sh   (on a machine with {args.target} and a GPU)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
