"""The chapter 04 widget draws the package's objective, and its static fallback really changes with clip_eps."""

import json
import re

import pytest
import torch

from ppo_core.losses import policy_loss
from ppo_core.widgets import clipping
from ppo_core.widgets.clipping import (
    EPS_VALUES,
    clip_fallback_html,
    clip_figure,
    clip_widget,
    clipped_objective,
    zero_gradient_interval,
)

RATIOS = torch.linspace(0.02, 2.0, 100, dtype=torch.float64)


def _one_token_loss(ratio: float, advantage: float, clip_eps: float, requires_grad: bool = False):
    """policy_loss on a single token whose ratio is ``ratio`` (old logprob log 0.5)."""
    old = torch.tensor([[torch.log(torch.tensor(0.5)).item()]], dtype=torch.float64)
    logprobs = (old + torch.log(torch.tensor(ratio, dtype=torch.float64))).requires_grad_(requires_grad)
    A = torch.tensor([[advantage]], dtype=torch.float64)
    mask = torch.ones(1, 1, dtype=torch.bool)
    return policy_loss(logprobs, old, A, mask, clip_eps)[0], logprobs


@pytest.mark.parametrize("advantage", [1.0, -1.0, 0.3, -2.5])
@pytest.mark.parametrize("clip_eps", [0.1, 0.2, 0.45])
def test_plotted_objective_is_minus_the_package_loss(advantage, clip_eps):
    plotted = clipped_objective(RATIOS, advantage, clip_eps)
    from_package = torch.stack([-_one_token_loss(r.item(), advantage, clip_eps)[0] for r in RATIOS])
    torch.testing.assert_close(plotted, from_package.detach())


def test_figure_draws_clipped_objective():
    fig = clip_figure(0.3)
    for ax, advantage in zip(fig.axes, (1.0, -1.0)):
        curves = {line.get_label(): line for line in ax.get_lines()}
        curve = curves["min(r·A, clip(r)·A)"]
        x = torch.as_tensor(curve.get_xdata(), dtype=torch.float64)
        torch.testing.assert_close(
            torch.as_tensor(curve.get_ydata(), dtype=torch.float64), clipped_objective(x, advantage, 0.3)
        )
        dashed = curves["unclipped  r·A"]
        assert dashed.get_linestyle() == "--"


@pytest.mark.parametrize("advantage", [1.0, -1.0])
@pytest.mark.parametrize("clip_eps", [0.1, 0.2, 0.5])
def test_zero_gradient_region_is_where_autograd_says(advantage, clip_eps):
    lo, hi = zero_gradient_interval(advantage, clip_eps)
    assert (lo, hi) == ((1 + clip_eps, 2.0) if advantage > 0 else (0.0, 1 - clip_eps))
    for r in RATIOS.tolist():
        if abs(r - (1 + clip_eps)) < 1e-6 or abs(r - (1 - clip_eps)) < 1e-6:
            continue  # the kink itself
        loss, logprobs = _one_token_loss(r, advantage, clip_eps, requires_grad=True)
        (grad,) = torch.autograd.grad(loss, logprobs)
        assert (grad.abs().item() == 0.0) == (lo <= r <= hi), (r, grad.item())


def test_shaded_span_matches_the_region():
    fig = clip_figure(0.25)
    for ax, advantage in zip(fig.axes, (1.0, -1.0)):
        (span,) = [p for p in ax.patches if p.get_label() == "gradient = 0 (clipped)"]
        lo, hi = zero_gradient_interval(advantage, 0.25)
        assert span.get_x() == pytest.approx(lo) and span.get_x() + span.get_width() == pytest.approx(hi)


@pytest.fixture(scope="module")
def fallback_html():
    return clip_fallback_html()  # the real thing: 10 frames at the real dpi (rendered once for the module)


def test_fallback_has_one_clip_eps_slider(fallback_html):
    sliders = re.findall(r'<input type="range"[^>]*>', fallback_html)
    assert len(sliders) == 1
    assert 'data-param="clip_eps"' in sliders[0] and f'max="{len(EPS_VALUES) - 1}"' in sliders[0]
    assert json.loads(re.search(r"data-values='([^']*)'", sliders[0]).group(1)) == [str(v) for v in EPS_VALUES]


def test_fallback_has_one_distinct_frame_per_eps(fallback_html):
    frames = json.loads(re.search(r"var frames = (\{.*?\});", fallback_html).group(1))
    assert sorted(frames, key=int) == [str(i) for i in range(len(EPS_VALUES))] and len(EPS_VALUES) == 10
    assert len(set(frames.values())) == len(frames)  # every clip_eps gives a different picture
    assert len(fallback_html) < 1_000_000


def test_clip_widget_constructs_outside_jupyter():
    box = clip_widget(show=False, clip_eps=0.3)
    slider = box.children[0]
    assert slider.description == "clip_eps" and slider.value == pytest.approx(0.3)
    assert (slider.min, slider.max) == pytest.approx((0.05, 0.5))


def test_clip_widget_shows_live_widget_with_fallback(monkeypatch):
    shown = []
    monkeypatch.setattr(clipping, "display_with_fallback", lambda widget, html: shown.append((widget, html)))
    monkeypatch.setattr(clipping, "clip_fallback_html", lambda: "<div>frames</div>")
    assert clip_widget() is None
    ((widget, html),) = shown
    assert widget.children[0].description == "clip_eps" and html == "<div>frames</div>"


@pytest.mark.parametrize("clip_eps", [0.15, 0.35])
def test_dotted_edges_and_titles_sit_at_one_plus_minus_eps(clip_eps):
    fig = clip_figure(clip_eps)
    for ax, advantage in zip(fig.axes, (1.0, -1.0)):
        edges = sorted(line.get_xdata()[0] for line in ax.get_lines() if line.get_linestyle() == ":")
        assert edges == pytest.approx([1 - clip_eps, 1 + clip_eps])
        edge = 1 + clip_eps if advantage > 0 else 1 - clip_eps
        assert ax.get_title().endswith(f"= {edge:.2f}")


def test_live_clip_widget_redraws_at_the_slider_value(monkeypatch):
    shown = []
    monkeypatch.setattr("IPython.display.display", lambda obj, *a, **k: shown.append(obj))
    slider = clip_widget(show=False).children[0]
    slider.value = 0.35
    fig = shown[-1]
    assert fig._suptitle.get_text().endswith("clip_eps = 0.35")
    for ax, advantage in zip(fig.axes, (1.0, -1.0)):
        curve = next(line for line in ax.get_lines() if line.get_label() == "min(r·A, clip(r)·A)")
        x = torch.as_tensor(curve.get_xdata(), dtype=torch.float64)
        torch.testing.assert_close(
            torch.as_tensor(curve.get_ydata(), dtype=torch.float64), clipped_objective(x, advantage, 0.35)
        )
