"""Chapter 05 - what a run writes: a JSONL metrics log, TensorBoard events, samples and a dashboard."""

import json
import math
from pathlib import Path

import matplotlib.pyplot as plt

from ..gae import explained_variance
from ..utils import write_text_atomically

__all__ = [
    "MetricsLogger",
    "plot_dashboard",
    "read_metrics",
    "explained_variance",
    "last_mean",
    "ev_by_success",
    "DASHBOARD_KEYS",
]

DASHBOARD_KEYS = (
    "rollout/reward_mean",
    "rollout/correct_rate",
    "kl/to_ref",
    "policy/approx_kl",
    "policy/clipfrac",
    "rollout/response_length",
    "policy/entropy",
    "value/explained_variance",
)


class MetricsLogger:
    """Appends one JSON line per step (flushed at once, so a crash loses at most the step in flight)."""

    def __init__(self, out_dir, tensorboard: bool = True, wandb_config: dict | None = None):
        self.out_dir = Path(out_dir)
        self.out_dir.mkdir(parents=True, exist_ok=True)
        self.path = self.out_dir / "metrics.jsonl"
        self.samples_path = self.out_dir / "samples.jsonl"
        self.tb = self.wandb = None
        if tensorboard:
            from torch.utils.tensorboard import SummaryWriter

            self.tb = SummaryWriter(str(self.out_dir / "tb"))
        if wandb_config is not None:
            import wandb

            self.wandb = wandb.init(**wandb_config)

    def truncate_after(self, step: int) -> None:
        """On resume: drop lines of steps after ``step`` (they were logged after the checkpoint).

        The kept lines go to a temporary file that replaces the log in one rename, so a crash here
        loses nothing. A last line cut short by a kill is dropped too.
        """
        for path in (self.path, self.samples_path):
            if path.exists():
                keep = [
                    line
                    for line in path.read_text().splitlines()
                    if _step_of(line) is not None and _step_of(line) <= step
                ]
                write_text_atomically(path, "".join(line + "\n" for line in keep))

    def log(self, step: int, metrics: dict) -> None:
        """Append one line and close the file: the line reaches the OS now, so even a kill -9 loses at most the
        next step."""
        record = {"step": step, **{k: float(v) for k, v in metrics.items()}}
        with open(self.path, "a") as f:
            f.write(json.dumps(record) + "\n")
        if self.tb is not None:
            for k, v in metrics.items():
                self.tb.add_scalar(k, float(v), step)
            self.tb.flush()
        if self.wandb is not None:
            self.wandb.log(metrics, step=step)

    def log_samples(self, step: int, prompts: list, completions: list, rewards: list, n: int = 3) -> None:
        with open(self.samples_path, "a") as f:
            for p, c, r in list(zip(prompts, completions, rewards))[:n]:
                f.write(json.dumps({"step": step, "prompt": p, "completion": c, "reward": float(r)}) + "\n")

    def close(self) -> None:
        if self.tb is not None:
            self.tb.close()
        if self.wandb is not None:
            self.wandb.finish()


def _step_of(line: str) -> int | None:
    """The step of one JSONL line, or None for a blank or broken line (one cut short by a kill)."""
    try:
        return int(json.loads(line).get("step", 0)) if line.strip() else None
    except (ValueError, AttributeError):
        return None


def last_logged_step(path) -> int | None:
    """The step of the last complete line of a JSONL log (None if there is none)."""
    steps = [s for s in map(_step_of, Path(path).read_text().splitlines()) if s is not None]
    return steps[-1] if steps else None


def read_metrics(path) -> list[dict]:
    """The records of a metrics.jsonl file (a run folder or the file itself)."""
    path = Path(path)
    path = path / "metrics.jsonl" if path.is_dir() else path
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def plot_dashboard(records: list[dict], path=None, keys=DASHBOARD_KEYS, cols: int = 4):
    """The main curves against the step, ``cols`` panels a row; a PNG at ``path`` if given. Returns the figure."""
    keys = [k for k in keys if any(k in r for r in records)]
    rows = max(1, -(-len(keys) // cols))
    fig, axes = plt.subplots(rows, cols, figsize=(3.2 * cols, 2.4 * rows), squeeze=False)
    for ax, key in zip(axes.flat, keys):
        pts = [(r["step"], r[key]) for r in records if key in r]
        ax.plot([s for s, _ in pts], [v for _, v in pts], marker=".", lw=1)
        title = key
        if key.endswith("explained_variance"):  # the critic's health in one number: the mean of the last 10 steps
            last = last_mean(records, key)
            title += f"\nlast 10 steps: {last:.2f}" if math.isfinite(last) else ""
            if any(r.get("value/warmup") for r in records):
                ax.axvspan(0.5, max(r["step"] for r in records if r.get("value/warmup")) + 0.5, color="0.9")
        ax.set_title(title, fontsize=9)
        ax.set_xlabel("step", fontsize=8)
        ax.tick_params(labelsize=7)
        ax.grid(alpha=0.3)
    for ax in list(axes.flat)[len(keys) :]:
        ax.axis("off")
    fig.tight_layout()
    if path is not None:
        fig.savefig(path, dpi=90)
    return fig


def last_mean(records: list[dict], key: str, n: int = 10) -> float:
    """Mean of ``key`` over the last ``n`` PPO steps of a metrics log (value warm-up steps and NaN left out); NaN
    if the log has none."""
    vals = [r[key] for r in records if key in r and not r.get("value/warmup") and math.isfinite(r[key])]
    return sum(vals[-n:]) / len(vals[-n:]) if vals else float("nan")


BANDS = (0.0, 0.5, 0.8, 0.9, 1.01)
"""Bands of a step's sampled success rate (rollout/correct_rate) for ``ev_by_success``."""


def ev_by_success(rows: list[dict]) -> list[tuple[str, int, float]]:
    """Mean explained variance of the steps whose sampled success rate falls in each band, pooled over runs
    (each a dict of ``ev_curve`` and ``correct_curve``): (band, number of steps, mean EV). Near the end of a run
    that almost solves the task the returns' variance is a few failures, and a critic's EV falls with it."""
    pairs = [(c, e) for r in rows for c, e in zip(r.get("correct_curve", []), r["ev_curve"], strict=True)]
    out = []
    for lo, hi in zip(BANDS, BANDS[1:]):
        evs = [e for c, e in pairs if lo <= c < hi]
        out.append(
            (
                f"[{lo:.1f}, {min(hi, 1.0):.1f}{']' if hi > 1 else ')'}",
                len(evs),
                sum(evs) / len(evs) if evs else float("nan"),
            )
        )
    return out
