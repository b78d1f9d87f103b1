"""Draw the timeline of the three policies of PPO: pi_ref, pi_old and pi_theta across PPO steps.

Run from the repository root to regenerate ``book/images/policies_timeline.svg`` (committed, so the
book needs no drawing tool at build time):

    .venv/bin/python book/images/make_policies_timeline.py            # writes policies_timeline.svg
    .venv/bin/python book/images/make_policies_timeline.py --png /tmp/timeline.png   # and a PNG preview

The vertical axis is schematic: how far each set of weights has moved from the starting model.
- pi_ref is the starting model, frozen for the whole run (the KL penalty's anchor).
- pi_old is a snapshot of pi_theta taken at each rollout: it samples the responses and gives
  ``old_logprobs``; it is constant during that rollout's update (the ratio's denominator).
- pi_theta moves at every minibatch step: ``ppo_epochs`` passes of ``n_minibatches`` steps per update.
"""

import argparse
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

HERE = Path(__file__).resolve().parent

N_STEPS = 3  # PPO steps drawn
PPO_EPOCHS, N_MINIBATCHES = 2, 2  # minibatch steps per update = PPO_EPOCHS * N_MINIBATCHES
ROLLOUT_W = 1.0  # width of a rollout phase on the time axis
MB_W = 0.5  # width of one minibatch step
MOVES = [0.22, 0.18, 0.15, 0.12]  # how far pi_theta moves in each minibatch step of an update (schematic)
COLORS = {"ref": "#57606a", "old": "#0969da", "theta": "#cf222e"}


def timeline():
    """(times, theta, old, rollout_spans): piecewise-constant positions of pi_theta and pi_old."""
    t, pos = 0.0, 0.0
    times, theta, old, spans = [0.0], [0.0], [0.0], []
    for step in range(N_STEPS):
        snapshot = pos  # pi_old <- pi_theta at the start of the rollout
        spans.append((t, t + ROLLOUT_W, snapshot))
        times.append(t), theta.append(pos), old.append(snapshot)
        t += ROLLOUT_W
        times.append(t), theta.append(pos), old.append(snapshot)
        for k in range(PPO_EPOCHS * N_MINIBATCHES):
            pos += MOVES[k] * (0.85**step)
            t += MB_W
            times.append(t), theta.append(pos), old.append(snapshot)
    return times, theta, old, spans


def draw() -> plt.Figure:
    plt.rcParams.update(
        {
            "font.family": "DejaVu Sans",
            "mathtext.fontset": "dejavusans",
            "svg.fonttype": "path",
            "svg.hashsalt": "ppo-policies-timeline",
        }
    )
    times, theta, old, spans = timeline()
    fig, ax = plt.subplots(figsize=(9.0, 4.2))
    top = max(theta) * 1.18
    for i, (a, b, _) in enumerate(spans):
        ax.axvspan(a, b, color="#ddf4ff", zorder=0)
        ax.text((a + b) / 2, top * 0.985, f"rollout {i + 1}", ha="center", va="top", fontsize=8.5, color=COLORS["old"])
        upd_end = b + PPO_EPOCHS * N_MINIBATCHES * MB_W
        ax.text((b + upd_end) / 2, top * 0.985, f"update {i + 1}", ha="center", va="top", fontsize=8.5, color="#1a7f37")
        for k in range(1, PPO_EPOCHS * N_MINIBATCHES):
            ax.axvline(b + k * MB_W, color="#d0d7de", lw=0.6, zorder=0)
        ax.axvline(b + N_MINIBATCHES * MB_W, color="#8c959f", lw=0.8, ls=":", zorder=0)  # epoch boundary
    end = times[-1]
    ax.hlines(0.0, 0, end, color=COLORS["ref"], lw=3, label=r"$\pi_\mathrm{ref}$: frozen for the whole run")
    ax.step(
        times,
        old,
        where="post",
        color=COLORS["old"],
        lw=2.2,
        ls="--",
        label=r"$\pi_\mathrm{old}$: a snapshot of $\pi_\theta$ at each rollout, constant during its update",
    )
    ax.step(
        times, theta, where="post", color=COLORS["theta"], lw=1.8, label=r"$\pi_\theta$: moves at every minibatch step"
    )
    # the ratio's gap at the end of update 2, and the KL's gap
    a2, b2, snap2 = spans[1]
    x_gap = b2 + PPO_EPOCHS * N_MINIBATCHES * MB_W - 0.08
    theta_at = theta[times.index(b2 + PPO_EPOCHS * N_MINIBATCHES * MB_W) - 1]
    ax.annotate(
        "", xy=(x_gap, theta_at), xytext=(x_gap, snap2), arrowprops=dict(arrowstyle="<->", color=COLORS["old"], lw=1.2)
    )
    ax.text(
        x_gap - 0.08,
        snap2 - 0.03 * top,
        "ratio $\\pi_\\theta/\\pi_\\mathrm{old}$: the gap between the two\n"
        "(exactly 1 at each update's first minibatch)",
        ha="right",
        va="top",
        fontsize=8,
        color=COLORS["old"],
    )
    x_kl = spans[2][0] + 0.5
    ax.annotate(
        "", xy=(x_kl, spans[2][2]), xytext=(x_kl, 0.0), arrowprops=dict(arrowstyle="<->", color=COLORS["ref"], lw=1.2)
    )
    ax.text(
        x_kl + 0.08,
        spans[2][2] / 2,
        "KL penalty\n$\\pi$ vs $\\pi_\\mathrm{ref}$,\nin the reward",
        ha="left",
        va="center",
        fontsize=8,
        color=COLORS["ref"],
    )
    ax.set_xlim(0, end)
    ax.set_ylim(-0.08 * top, top)
    ax.set_yticks([])
    ax.set_xticks([])
    ax.set_xlabel(f"time: {N_STEPS} PPO steps, each a rollout then {PPO_EPOCHS} epochs x {N_MINIBATCHES} minibatches")
    ax.set_ylabel("distance moved from\nthe starting weights")
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)
    ax.legend(loc="upper left", bbox_to_anchor=(0.0, -0.12), fontsize=8.5, frameon=False, ncol=1)
    fig.tight_layout()
    return fig


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--png", metavar="PATH", help="also write a PNG preview there (not committed)")
    args = ap.parse_args()
    fig = draw()
    fig.savefig(HERE / "policies_timeline.svg", metadata={"Date": None})
    if args.png:
        fig.savefig(args.png, dpi=110)
    plt.close(fig)


if __name__ == "__main__":
    main()
