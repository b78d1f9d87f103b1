"""Draw the book's one overview diagram: the PPO step as a cycle, rollout -> advantages -> update.

Run from the repository root to regenerate ``book/images/ppo_cycle.svg`` (committed, so the book
needs no drawing tool at build time):

    .venv/bin/python book/images/make_cycle.py            # writes ppo_cycle.svg
    .venv/bin/python book/images/make_cycle.py --png /tmp/ppo_cycle.png   # and a PNG preview

The names in the boxes are the package's: ``logprobs``, ``values``, ``ref_logprobs``, ``mask``,
``scores``, ``advantages``, ``returns`` and the config keys ``kl_coef``, ``gamma``, ``lam``,
``ppo_epochs``, ``vf_coef``, ``ent_coef``.
"""

import argparse
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.patches import FancyArrowPatch, FancyBboxPatch  # noqa: E402

HERE = Path(__file__).resolve().parent

INK = "#1f2328"
MUTED = "#57606a"
PHASES = [  # (title, chapters, colour, lines)
    (
        "1  Rollout",
        "chapters 01, 02, 05",
        "#0969da",
        [
            r"$\pi_\theta$ samples a response to each prompt",
            r"forward passes at the slice $[P{-}1 : P{+}T{-}1]$:",
            r"  policy + value head $\rightarrow$ logprobs, values",
            r"  reference $\pi_{\mathrm{ref}}$ $\rightarrow$ ref_logprobs",
            r"response mask: up to the first EOS",
            r"rule reward $\rightarrow$ one score per response",
        ],
    ),
    (
        "2  Advantages",
        "chapters 02, 03",
        "#8250df",
        [
            r"$r_t = -\beta\,\widehat{\mathrm{KL}}_t$  (+ score on the last token)",
            r"$\delta_t = r_t + \gamma V(s_{t+1}) - V(s_t)$",
            r"$\hat A_t = \delta_t + \gamma\lambda\,\hat A_{t+1}$  (backwards, GAE)",
            r"returns $R_t = \hat A_t + V(s_t)$",
            r"whiten $\hat A$ over the mask of the batch",
            r"($\beta$ = kl_coef, $\gamma$ = gamma, $\lambda$ = lam)",
        ],
    ),
    (
        "3  Update",
        "chapters 04, 05",
        "#1a7f37",
        [
            r"ppo_epochs passes; in each minibatch:",
            r"recompute logprobs and values with $\pi_\theta$",
            r"ratio $= \pi_\theta(a_t \mid s_t)\,/\,\pi_{\mathrm{old}}(a_t \mid s_t)$",
            r"loss = policy_loss",
            r"      + vf_coef $\cdot$ value_loss",
            r"      + ent_coef $\cdot$ entropy_loss",
        ],
    ),
]
FLOWS = [  # text beside the arrows between phases
    "logprobs, ref_logprobs, values, mask  (B, T)\nscores  (B,)",
    "advantages, returns  (B, T)",
]
MODELS = [  # (name, role)
    (r"policy $\pi_\theta$", "the language model\nbeing trained"),
    (r"value head $V$", "a linear layer on its own\ntrunk or the policy's"),
    (r"reference $\pi_{\mathrm{ref}}$", "a frozen copy of\nthe starting policy"),
    ("reward", "a rule: is the final\nanswer right?"),
]


# Layout, in inches: the phase boxes' left edge and width, title band, line height, padding, gap.
LEFT, WIDTH, BAND, LINE_H, PAD, GAP = 0.55, 4.35, 0.4, 0.27, 0.22, 0.55
FIG_W = 6.9


def draw_phases(ax, tops: list[float], heights: list[float]) -> None:
    """The three phase boxes, stacked top to bottom, each with a coloured title band."""
    for top, h, (title, chapters, colour, lines) in zip(tops, heights, PHASES):
        ax.add_patch(
            FancyBboxPatch(
                (LEFT, top - h),
                WIDTH,
                h,
                boxstyle="round,pad=0,rounding_size=0.1",
                facecolor="white",
                edgecolor=colour,
                linewidth=2,
            )
        )
        ax.add_patch(
            FancyBboxPatch(
                (LEFT, top - BAND),
                WIDTH,
                BAND,
                boxstyle="round,pad=0,rounding_size=0.1",
                facecolor=colour,
                edgecolor=colour,
                linewidth=2,
            )
        )
        ax.text(LEFT + 0.14, top - BAND / 2, title, fontsize=12.5, fontweight="bold", color="white", va="center")
        ax.text(LEFT + WIDTH - 0.14, top - BAND / 2, chapters, fontsize=9, color="white", va="center", ha="right")
        for k, line in enumerate(lines):
            ax.text(LEFT + 0.14, top - BAND - 0.2 - k * LINE_H, line, fontsize=10, color=INK, va="center")


def draw_flows(ax, tops: list[float], heights: list[float]) -> None:
    """Down arrows between the phases, with the tensors they carry beside them."""
    x = LEFT + 0.9
    for i, label in enumerate(FLOWS):
        y0, y1 = tops[i] - heights[i], tops[i + 1]
        ax.add_patch(
            FancyArrowPatch(
                (x, y0 - 0.03), (x, y1 + 0.03), arrowstyle="-|>", mutation_scale=16, color=INK, linewidth=1.6
            )
        )
        ax.text(
            x + 0.18, (y0 + y1) / 2, label, fontsize=9, color=MUTED, ha="left", va="center", family="DejaVu Sans Mono"
        )


def draw_return(ax, tops: list[float], heights: list[float]) -> None:
    """The arrow from the update back to the rollout, up the left side: the next step."""
    y_bottom, y_top, x_back = tops[-1] - heights[-1] / 2, tops[0] - heights[0] / 2, 0.33
    ax.plot(
        [LEFT - 0.02, x_back, x_back],
        [y_bottom, y_bottom, y_top],
        color=INK,
        linewidth=1.6,
        solid_capstyle="butt",
        solid_joinstyle="miter",
    )
    ax.add_patch(
        FancyArrowPatch(
            (x_back - 0.008, y_top), (LEFT - 0.02, y_top), arrowstyle="-|>", mutation_scale=16, color=INK, linewidth=1.6
        )
    )
    ax.text(
        0.15,
        (y_bottom + y_top) / 2,
        r"next step: the updated weights are the new $\pi_{\mathrm{old}}$",
        rotation=90,
        fontsize=9.5,
        color=INK,
        ha="center",
        va="center",
    )


def draw_models(ax, fig_h: float) -> None:
    """The four models, as a column of cards on the right."""
    mx = LEFT + WIDTH + 0.22
    mw = FIG_W - mx - 0.08
    ax.text(
        mx + mw / 2,
        fig_h - 0.33,
        "The four models",
        fontsize=10.5,
        fontweight="bold",
        color=INK,
        ha="center",
        va="center",
    )
    for i, (name, role) in enumerate(MODELS):
        y = fig_h - 0.62 - i * 0.98
        ax.add_patch(
            FancyBboxPatch(
                (mx, y - 0.8),
                mw,
                0.8,
                boxstyle="round,pad=0,rounding_size=0.08",
                facecolor="#f6f8fa",
                edgecolor="#d0d7de",
                linewidth=1,
            )
        )
        ax.text(mx + mw / 2, y - 0.2, name, fontsize=9.5, color=INK, ha="center", va="center", fontweight="bold")
        ax.text(mx + mw / 2, y - 0.52, role, fontsize=8.3, color=MUTED, ha="center", va="center", linespacing=1.25)
    ax.text(
        mx + mw / 2,
        fig_h - 0.62 - 4 * 0.98 + 0.02,
        "trained: policy and value head\nfrozen: the reference",
        fontsize=8.3,
        color=MUTED,
        ha="center",
        va="top",
        linespacing=1.3,
    )


def draw() -> plt.Figure:
    """The whole diagram on one borderless axes measured in inches."""
    plt.rcParams.update(
        {
            "font.family": "DejaVu Sans",
            "mathtext.fontset": "dejavusans",
            "svg.fonttype": "path",
            "svg.hashsalt": "ppo-cycle",
        }
    )
    heights = [BAND + PAD + LINE_H * len(phase[3]) for phase in PHASES]
    fig_h = sum(heights) + GAP * (len(PHASES) - 1) + 0.24
    fig = plt.figure(figsize=(FIG_W, fig_h))
    ax = fig.add_axes([0, 0, 1, 1])
    ax.set_xlim(0, FIG_W)
    ax.set_ylim(0, fig_h)
    ax.axis("off")
    tops = [fig_h - 0.12]
    for h in heights[:-1]:
        tops.append(tops[-1] - h - GAP)
    draw_phases(ax, tops, heights)
    draw_flows(ax, tops, heights)
    draw_return(ax, tops, heights)
    draw_models(ax, fig_h)
    return fig


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--png", metavar="PATH", help="also write a PNG preview there (not committed)")
    args = ap.parse_args()
    fig = draw()
    fig.savefig(HERE / "ppo_cycle.svg", metadata={"Date": None})
    if args.png:
        fig.savefig(args.png, dpi=110)
    plt.close(fig)


if __name__ == "__main__":
    main()
