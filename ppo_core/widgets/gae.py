"""Chapter 03 widget: how lam and gamma shape per-token advantages and returns.

One response of T = 12 tokens with a sparse reward (the score 1.0 on the last token, a small KL
penalty on every token) and a fixed, imperfect value estimate. ``gae_figure(lam, gamma)`` draws the
advantages (bars) and returns (line) that ``ppo_core.gae.compute_gae`` gives; ``gae_widget()`` puts
two sliders on it: live in Jupyter, precomputed frames in the static book.
"""

import functools
import io

import torch

from ..gae import compute_gae, token_rewards
from ..kl import kl_penalty
from ._fallback import display_with_fallback, frames_html

__all__ = ["gae_example", "gae_figure", "gae_fallback_html", "gae_widget", "FALLBACK_GRID"]

TOKENS = ["The", " sum", " is", " 7", "+", "5", "=", "1", "2", ".", " Done", "<eos>"]
"""The response the example pretends to score (labels only)."""

FALLBACK_GRID = {
    "lam": [round(0.1 * i, 1) for i in range(10)] + [0.95, 1.0],
    "gamma": [0.8, 0.9, 0.95, 0.99, 1.0],
}
"""The parameter values precomputed for the kernel-free slider in the static book."""

KL_COEF = 0.2
"""Weight of the per-token KL penalty in the example's rewards."""


def gae_example() -> dict[str, torch.Tensor]:
    """The example trajectory: ``rewards``, ``values``, ``mask`` (each (1, T)), ``scores`` (1,), ``kl`` (1, T)."""
    logprobs = torch.tensor([[-1.2, -0.9, -0.3, -2.0, -0.6, -1.1, -0.2, -0.8, -0.5, -0.4, -1.5, -0.1]])  # (1, T)
    ref_logprobs = torch.tensor([[-1.3, -1.1, -0.3, -2.4, -0.7, -1.0, -0.2, -1.3, -0.6, -0.4, -1.9, -0.2]])
    kl = kl_penalty(logprobs, ref_logprobs, estimator="k1")  # (1, T), one token has k1 < 0
    mask = torch.ones_like(kl, dtype=torch.bool)
    scores = torch.tensor([1.0])  # the answer was right
    rewards = token_rewards(scores, kl, mask, KL_COEF)  # (1, T)
    # An imperfect critic: it learns about the answer late and wobbles on the way.
    values = torch.tensor([[0.30, 0.35, 0.30, 0.45, 0.50, 0.40, 0.55, 0.70, 0.60, 0.80, 0.75, 0.85]])
    return {"rewards": rewards, "values": values, "mask": mask, "scores": scores, "kl": kl}


@functools.lru_cache(maxsize=1)
def _ylim() -> tuple[float, float]:
    """One y-range for every lam and gamma, so that moving a slider moves bars, never the axis."""
    ex = gae_example()
    lo, hi = 0.0, 1.0
    for lam in torch.linspace(0, 1, 11).tolist():
        for gamma in torch.linspace(0.8, 1, 11).tolist():
            adv, ret = compute_gae(ex["rewards"], ex["values"], ex["mask"], gamma=gamma, lam=lam)
            lo = min(lo, adv.min().item(), ret.min().item())
            hi = max(hi, adv.max().item(), ret.max().item())
    return lo - 0.1, hi + 0.2


class _GaePlot:
    """The figure, drawn once; ``update(lam, gamma)`` changes only the data (fast enough for 55 frames)."""

    def __init__(self):
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure

        ex = self.ex = gae_example()
        t = list(range(len(TOKENS)))
        self.fig = Figure(figsize=(7.0, 4.6))
        FigureCanvasAgg(self.fig)  # an Agg canvas of its own: no pyplot, no backend switching
        top, bottom = self.fig.subplots(2, 1, sharex=True, gridspec_kw={"height_ratios": [1, 2.6]})
        self.fig.subplots_adjust(left=0.09, right=0.98, top=0.93, bottom=0.17, hspace=0.08)
        top.bar(t, ex["rewards"][0].tolist(), color="tab:gray")
        top.axhline(0, color="black", lw=0.6)
        top.set_ylabel("rewards $r_t$", fontsize=8)
        top.set_title(
            f"score 1.0 on the last token, KL penalty {KL_COEF}·k1 on every token, a fixed critic", fontsize=9
        )
        self.label = top.text(0.01, 0.9, "", transform=top.transAxes, va="top", fontsize=10, weight="bold")
        self.bars = bottom.bar(t, [0.0] * len(t), color="tab:blue", alpha=0.75, label="advantages $A_t$")
        (values_line,) = bottom.plot(
            t, ex["values"][0].tolist(), "k--", lw=1.2, label="values $V(s_t)$ (fixed)", gid="values"
        )
        (self.returns_line,) = bottom.plot(
            t, [0.0] * len(t), "o-", color="tab:orange", lw=1.8, ms=4, label="returns $A_t + V(s_t)$", gid="returns"
        )
        bottom.axhline(0, color="black", lw=0.6)
        bottom.set_ylim(*_ylim())
        bottom.set_xticks(t, [repr(tok)[1:-1] for tok in TOKENS], rotation=45, fontsize=8)
        bottom.set_xlabel("response token t", fontsize=9)
        bottom.legend(loc="upper left", fontsize=8, ncol=3, frameon=False)
        self.readout = bottom.text(0.99, 0.04, "", transform=bottom.transAxes, ha="right", fontsize=8)
        # Drawn on every frame, in this order, over a background drawn once (which has the legend:
        # nothing reaches the top-left corner of the axes, whatever lam and gamma).
        self._dynamic = [*self.bars, values_line, self.returns_line, self.label, self.readout]
        self._background = None

    def update(self, lam: float, gamma: float):
        ex = self.ex
        advantages, returns = compute_gae(ex["rewards"], ex["values"], ex["mask"], gamma=gamma, lam=lam)  # (1, T)
        for bar, a in zip(self.bars, advantages[0].tolist()):
            bar.set_height(a)
        self.returns_line.set_ydata(returns[0].tolist())
        self.label.set_text(f"λ = {lam:.2f}   γ = {gamma:.2f}")
        self.readout.set_text(f"A₀ = {advantages[0, 0]:+.3f}    returns₀ = {returns[0, 0]:.3f}")
        return self.fig

    def png(self, lam: float, gamma: float, dpi: int) -> bytes:
        """PNG bytes of the figure at (lam, gamma): the static parts are drawn once, then blitted."""
        import numpy as np
        from PIL import Image

        canvas = self.fig.canvas
        if self._background is None or self.fig.dpi != dpi:
            self.fig.set_dpi(dpi)
            for artist in self._dynamic:
                artist.set_visible(False)
            canvas.draw()
            self._background = canvas.copy_from_bbox(self.fig.bbox)
            for artist in self._dynamic:
                artist.set_visible(True)
        self.update(lam, gamma)
        canvas.restore_region(self._background)
        for artist in self._dynamic:
            self.fig.draw_artist(artist)
        image = Image.fromarray(np.asarray(canvas.buffer_rgba())).convert("RGB")
        # A 64-colour palette keeps a frame near 8 kB (3x smaller than RGBA), so 55 frames fit in the page.
        image = image.quantize(colors=64, method=Image.Quantize.FASTOCTREE)
        buf = io.BytesIO()
        image.save(buf, format="png")
        return buf.getvalue()


def gae_figure(lam: float, gamma: float):
    """A matplotlib Figure: the example's rewards (top), and advantages (bars), returns and values (bottom).

    The figure is not registered with pyplot, so nothing shows unless you display it.
    """
    return _GaePlot().update(lam, gamma)


def gae_fallback_html(dpi: int = 80) -> str:
    """The kernel-free version: one PNG frame per (lam, gamma) in ``FALLBACK_GRID`` and two JS sliders."""
    plot = _GaePlot()
    return frames_html(
        lambda lam, gamma: plot.png(lam, gamma, dpi),
        FALLBACK_GRID,
        title="GAE: drag λ (lam) and γ (gamma)",
        initial={"lam": 0.95, "gamma": 1.0},
    )


def _show(plot: _GaePlot, lam: float, gamma: float) -> None:
    from IPython.display import Image, display

    display(Image(plot.png(lam, gamma, dpi=80)))


def gae_widget(show: bool = True):
    """Sliders for lam (0..1) and gamma (0.8..1) over ``gae_figure``.

    With ``show=True`` (the default) the widget is displayed at once, together with the precomputed
    fallback that the static book shows, and nothing is returned (so a notebook cell ending in
    ``gae_widget()`` shows it once). ``show=False`` only builds it and returns the ipywidgets box.
    """
    import ipywidgets as widgets

    lam = widgets.FloatSlider(value=0.95, min=0.0, max=1.0, step=0.05, description="λ (lam)", readout_format=".2f")
    gamma = widgets.FloatSlider(value=1.0, min=0.8, max=1.0, step=0.01, description="γ (gamma)", readout_format=".2f")
    out = widgets.interactive_output(functools.partial(_show, _GaePlot()), {"lam": lam, "gamma": gamma})
    box = widgets.VBox([widgets.HBox([lam, gamma]), out])
    if not show:
        return box
    display_with_fallback(box, gae_fallback_html())
