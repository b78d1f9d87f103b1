"""Chapter 04 - the clipped surrogate against the ratio, for A > 0 and A < 0 (an interactive figure).

Per token, PPO maximises  min(r A, clip(r, 1 - eps, 1 + eps) A),  i.e. minimises ``policy_loss``.
The figure draws it against the ratio r in [0, 2] next to the unclipped r A (dashed) and shades the
ratios where its gradient with respect to r is zero: r > 1 + eps when A > 0, r < 1 - eps when A < 0.

- ``clip_figure(clip_eps)``: the matplotlib Figure (used by the live widget and the static fallback).
- ``clip_widget()``: displays a live ipywidgets slider for ``clip_eps`` in Jupyter; in the static book the
  same output carries precomputed frames with a JavaScript slider (see ``_fallback.py``), the same
  contract as ``gae_widget()``. ``clip_widget(show=False)`` only builds and returns the live box.
- Chapter 08: ``objectives_figure(label)`` / ``objectives_widget()``: the objectives of ``OBJECTIVES``
  (clip-higher, dual-clip, GSPO, CISPO, SAPO) and their gradients against the ratio, computed by the package.
"""

import io

import torch
from matplotlib.figure import Figure

from ..objectives import POLICY_LOSSES, compute_policy_loss
from ._fallback import display_with_fallback, frames_html

__all__ = [
    "clipped_objective",
    "zero_gradient_interval",
    "clip_figure",
    "clip_fallback_html",
    "clip_widget",
    "EPS_VALUES",
    "OBJECTIVES",
    "objective_choices",
    "objective_curves",
    "objectives_figure",
    "objectives_fallback_html",
    "objectives_widget",
]

EPS_VALUES = tuple(round(0.05 * k, 2) for k in range(1, 11))  # the slider's clip_eps values, 0.05 .. 0.50
RATIO_MAX = 2.0  # the figure shows r in [0, RATIO_MAX]


def clipped_objective(ratio, advantage: float, clip_eps: float) -> torch.Tensor:
    """min(r A, clip(r, 1 - eps, 1 + eps) A) per ratio: the per-token L^CLIP, i.e. -policy_loss of one token."""
    ratio = torch.as_tensor(ratio, dtype=torch.float64)
    return torch.minimum(ratio * advantage, ratio.clamp(1.0 - clip_eps, 1.0 + clip_eps) * advantage)


def zero_gradient_interval(advantage: float, clip_eps: float, ratio_max: float = RATIO_MAX) -> tuple[float, float]:
    """The ratios (lo, hi) where d L^CLIP / d r = 0: (1 + eps, max) if A > 0, (0, 1 - eps) if A < 0."""
    if advantage > 0:
        return (1.0 + clip_eps, ratio_max)
    if advantage < 0:
        return (0.0, 1.0 - clip_eps)
    return (0.0, ratio_max)  # A = 0: the objective is 0 everywhere


class _ClipPlot:
    """The two-panel figure, built once; ``set_eps`` moves only what depends on clip_eps.

    Reusing one figure for all the fallback frames keeps the text layout cached (~30 % faster).
    """

    def __init__(self, advantages: tuple[float, float] = (1.0, -1.0)):
        self.advantages = advantages
        self.ratio = torch.linspace(0.0, RATIO_MAX, 401, dtype=torch.float64)
        self.fig = Figure(figsize=(8.4, 3.3))
        self.axes = self.fig.subplots(1, len(advantages))
        self.artists = [self._panel(ax, a) for ax, a in zip(self.axes, advantages)]
        self.axes[0].set_ylabel("objective (maximised)")
        self.axes[0].legend(loc="lower right", fontsize=8)
        self.fig.subplots_adjust(left=0.08, right=0.98, bottom=0.16, top=0.83, wspace=0.22)  # fixed: no tight_layout

    def _panel(self, ax, advantage: float) -> dict:
        span = ax.axvspan(0.0, 1.0, color="tab:red", alpha=0.12, lw=0, label="gradient = 0 (clipped)")
        ax.plot(self.ratio, self.ratio * advantage, "--", color="0.45", lw=1.2, label="unclipped  r·A")
        (curve,) = ax.plot(self.ratio, self.ratio * advantage, color="tab:blue", lw=2.4, label="min(r·A, clip(r)·A)")
        edges = [ax.axvline(1.0, color="tab:red", ls=":", lw=1) for _ in range(2)]
        ax.axvline(1.0, color="k", lw=0.6)
        ax.set_xlim(0, RATIO_MAX)
        ax.set_ylim(*((-0.15, 2.1) if advantage > 0 else (-2.1, 0.15)))
        ax.set_xlabel("ratio r = π_θ / π_old")
        ax.grid(alpha=0.25)
        # the pessimistic side: min() keeps the unclipped r*A there, so a harmful move is still undone
        note = {
            "transform": ax.transAxes,
            "fontsize": 8,
            "va": "top",
            "color": "0.25",
            "bbox": {"fc": "white", "ec": "none", "alpha": 0.85},
        }
        if advantage > 0:
            ax.text(0.03, 0.97, "r < 1−ε: not clipped,\ngradient pulls r back up", ha="left", **note)
        else:
            ax.text(0.97, 0.97, "r > 1+ε: not clipped,\ngradient pulls r back down", ha="right", **note)
        return {"span": span, "curve": curve, "edges": edges}

    def set_eps(self, clip_eps: float) -> "_ClipPlot":
        for ax, advantage, art in zip(self.axes, self.advantages, self.artists):
            lo, hi = zero_gradient_interval(advantage, clip_eps)
            art["span"].set_x(lo)
            art["span"].set_width(hi - lo)
            art["curve"].set_ydata(clipped_objective(self.ratio, advantage, clip_eps))
            for line, x in zip(art["edges"], (1.0 - clip_eps, 1.0 + clip_eps)):
                line.set_xdata([x, x])
            side = f"r > 1+ε = {1 + clip_eps:.2f}" if advantage > 0 else f"r < 1−ε = {1 - clip_eps:.2f}"
            ax.set_title(f"A = {advantage:+g}: flat for {side}", fontsize=10)
        self.fig.suptitle(f"PPO's clipped surrogate, clip_eps = {clip_eps:.2f}", fontsize=11)
        return self


def clip_figure(clip_eps: float = 0.2, advantages: tuple[float, float] = (1.0, -1.0)) -> Figure:
    """Two panels (A > 0, A < 0): the clipped objective, the unclipped r·A (dashed), the flat region shaded."""
    return _ClipPlot(advantages).set_eps(clip_eps).fig


def _png(fig: Figure, dpi: int) -> bytes:
    """PNG bytes of ``fig`` at a fixed size (no bbox_inches="tight", which draws the figure twice)."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi)
    return buf.getvalue()


def clip_fallback_html(eps_values=EPS_VALUES, dpi: int = 66) -> str:
    """The kernel-free version: one precomputed PNG per clip_eps value and a JavaScript slider."""
    plot = _ClipPlot()
    return frames_html(
        lambda clip_eps: _png(plot.set_eps(clip_eps).fig, dpi=dpi),
        {"clip_eps": list(eps_values)},
        title="The clipped objective against the ratio (drag clip_eps)",
    )


def _live_widget(clip_eps: float = 0.2):
    """FloatSlider + interactive_output: redraws ``clip_figure`` whenever the slider moves."""
    import ipywidgets as widgets
    from IPython.display import display

    slider = widgets.FloatSlider(
        value=clip_eps,
        min=EPS_VALUES[0],
        max=EPS_VALUES[-1],
        step=0.05,
        description="clip_eps",
        readout_format=".2f",
        continuous_update=False,
    )
    out = widgets.interactive_output(lambda clip_eps: display(clip_figure(clip_eps)), {"clip_eps": slider})
    return widgets.VBox([slider, out])


def clip_widget(show: bool = True, clip_eps: float = 0.2):
    """The chapter 04 widget: the clipped objective for A > 0 and A < 0 with a clip_eps slider.

    With ``show=True`` (the default) the live widget is displayed at once, together with the precomputed
    fallback that the static book shows, and nothing is returned (so a cell ending in ``clip_widget()``
    shows it once). ``show=False`` only builds it and returns the ipywidgets box (no kernel needed).
    """
    box = _live_widget(clip_eps)
    if not show:
        return box
    display_with_fallback(box, clip_fallback_html())


# --- chapter 08: the objectives of reasoning-model trainers, against the ratio ----------------------------

OBJECTIVES = {  # label -> (objectives.compute_policy_loss name, its switches)
    "PPO (clip 0.2)": ("vanilla", {"clip_eps": 0.2}),
    "clip-higher (0.2 / 0.28)": ("vanilla", {"clip_eps": 0.2, "clip_eps_high": 0.28}),
    "dual-clip (c = 1.5)": ("vanilla", {"clip_eps": 0.2, "dual_clip_c": 1.5}),
    "GSPO (one token; 0.1)": ("gspo", {"clip_eps": 0.1}),
    "CISPO (0.2 / 0.28)": ("cispo", {"clip_eps_low": 0.2, "clip_eps_high": 0.28}),
    "SAPO (tau 1 / 1.05)": ("sapo", {"tau_pos": 1.0, "tau_neg": 1.05}),
}
"""The switches the chapter 08 figure compares (veRL's semantics, ``objectives.POLICY_LOSSES``)."""


def objective_choices() -> dict:
    """``OBJECTIVES``, and every other objective registered in ``POLICY_LOSSES`` under its name, with its defaults."""
    shown = {name for name, _ in OBJECTIVES.values()}
    return {**OBJECTIVES, **{name: (name, {}) for name in POLICY_LOSSES if name not in shown}}


def objective_curves(label: str, advantage: float, ratio) -> tuple[torch.Tensor, torch.Tensor]:
    """(objective, gradient) of one token against the ratio, from ``objectives.compute_policy_loss`` itself:
    the objective is -loss (for CISPO, whose loss is no function of r, A plus the integral of its gradient from r = 1),
    the gradient is -d loss / d log pi_theta, the weight on grad log pi_theta."""
    name, switches = objective_choices()[label]
    ratio = torch.as_tensor(ratio, dtype=torch.float64)
    old = torch.full((ratio.numel(), 1), -1.0, dtype=torch.float64)
    logprobs = (old + ratio.log().reshape(-1, 1)).requires_grad_(True)
    adv, mask = torch.full_like(old, advantage), torch.ones_like(old, dtype=torch.bool)
    loss, _ = compute_policy_loss(name, logprobs, old, adv, mask, loss_agg_mode="seq-mean-token-sum-norm", **switches)
    (grad,) = torch.autograd.grad(loss * ratio.numel(), logprobs)  # each row its own token: undo the mean
    weight = -grad.flatten()
    if name != "cispo":  # -loss, one row at a time (the aggregation sums rows / B)
        rows = [-compute_policy_loss(name, logprobs[i : i + 1], old[i : i + 1], adv[:1], mask[:1], **switches)[0]
                for i in range(ratio.numel())]  # fmt: skip
        return torch.stack(rows).detach(), weight
    dlogr = torch.diff(ratio.log(), prepend=ratio.log()[:1])  # J(r) = integral of weight d log r, J(1) = 0
    objective = torch.cumsum(weight * dlogr, 0)
    return objective - objective[torch.argmin((ratio - 1).abs())] + advantage, weight  # J(1) = A, as PPO's


def objectives_figure(label: str = "PPO (clip 0.2)", advantages: tuple[float, float] = (1.0, -1.0)) -> Figure:
    """2 x 2 panels: objective (top) and its gradient weight on grad log pi (bottom) against the ratio, for
    A > 0 and A < 0; PPO's symmetric clip dashed for comparison."""
    ratio = torch.linspace(0.05, RATIO_MAX, 300, dtype=torch.float64)
    fig = Figure(figsize=(8.4, 5.0))
    axes = fig.subplots(2, len(advantages), sharex=True)
    for col, a in enumerate(advantages):
        base = objective_curves("PPO (clip 0.2)", a, ratio)
        mine = objective_curves(label, a, ratio)
        for row, what in enumerate(("objective (maximised)", "gradient weight on ∇log π")):
            ax = axes[row, col]
            ax.plot(ratio, base[row], "--", color="0.5", lw=1.2, label="PPO (clip 0.2)")
            ax.plot(ratio, mine[row], color="tab:blue", lw=2.2, label=label)
            ax.axvline(1.0, color="k", lw=0.6)
            ax.axhline(0.0, color="k", lw=0.4)
            ax.grid(alpha=0.25)
            if col == 0:
                ax.set_ylabel(what, fontsize=9)
        axes[0, col].set_title(f"A = {a:+g}", fontsize=10)
        axes[1, col].set_xlabel("ratio r = π_θ / π_old")
    axes[0, 0].legend(loc="upper left", fontsize=8)
    fig.suptitle(f"{label}: where the gradient stops, and how", fontsize=11)
    fig.subplots_adjust(left=0.09, right=0.98, bottom=0.1, top=0.88, wspace=0.2, hspace=0.12)
    return fig


def objectives_fallback_html(dpi: int = 66) -> str:
    """The kernel-free version: one precomputed PNG per objective and a JavaScript slider."""
    return frames_html(
        lambda objective: _png(objectives_figure(objective), dpi=dpi),
        {"objective": list(objective_choices())},
        title="Objective and gradient against the ratio (drag to change the objective)",
    )


def objectives_widget(show: bool = True, label: str = "PPO (clip 0.2)"):
    """The chapter 08 widget: a dropdown over ``OBJECTIVES``, live in Jupyter, precomputed in the static book
    (the contract of ``clip_widget``)."""
    import ipywidgets as widgets
    from IPython.display import display

    choice = widgets.Dropdown(options=list(objective_choices()), value=label, description="objective")
    out = widgets.interactive_output(lambda objective: display(objectives_figure(objective)), {"objective": choice})
    box = widgets.VBox([choice, out])
    if not show:
        return box
    display_with_fallback(box, objectives_fallback_html())
