"""The chapter 08 figure draws the package's objectives and gradients, and its static fallback has one frame each."""

import re

import pytest
import torch

from ppo_core.widgets.clipping import (
    OBJECTIVES,
    objective_curves,
    objectives_fallback_html,
    objectives_figure,
    objectives_widget,
)

RATIO = torch.linspace(0.05, 2.0, 80, dtype=torch.float64)


def _band(r, lo, hi):
    return torch.clamp(r, 1 - lo, 1 + hi)


@pytest.mark.parametrize("a", [1.0, -0.5])
def test_gradient_weights_are_the_closed_forms(a):
    """d objective / d log pi per objective, written out: PPO r A where not clipped, CISPO clip(r) A always,
    SAPO 4 s (1 - s) r A with s = sigmoid(tau (r - 1))."""
    r = RATIO
    ppo_live = (r <= 1.2) if a > 0 else (r >= 0.8)
    torch.testing.assert_close(objective_curves("PPO (clip 0.2)", a, r)[1], torch.where(ppo_live, r * a, 0.0))
    higher_live = (r <= 1.28) if a > 0 else (r >= 0.8)
    torch.testing.assert_close(
        objective_curves("clip-higher (0.2 / 0.28)", a, r)[1], torch.where(higher_live, r * a, 0.0)
    )
    torch.testing.assert_close(objective_curves("CISPO (0.2 / 0.28)", a, r)[1], _band(r, 0.2, 0.28) * a)
    tau = 1.0 if a > 0 else 1.05
    s = torch.sigmoid(tau * (r - 1))
    torch.testing.assert_close(objective_curves("SAPO (tau 1 / 1.05)", a, r)[1], 4 * s * (1 - s) * r * a)


def test_dual_clip_stops_the_negative_side_above_c():
    obj, grad = objective_curves("dual-clip (c = 1.5)", -1.0, RATIO)
    assert (grad[RATIO > 1.5] == 0).all() and (grad[(RATIO > 1.01) & (RATIO < 1.49)] < 0).all()
    torch.testing.assert_close(obj[RATIO > 1.5], torch.full_like(obj[RATIO > 1.5], -1.5))


def test_cispo_objective_is_the_integral_of_its_gradient():
    obj, grad = objective_curves("CISPO (0.2 / 0.28)", 1.0, RATIO)
    slope = torch.diff(obj) / torch.diff(RATIO.log())
    torch.testing.assert_close(slope, grad[1:], rtol=0, atol=1e-9)
    assert obj[torch.argmin((RATIO - 1).abs())].item() == pytest.approx(1.0)


def test_figure_plots_the_curves():
    fig = objectives_figure("SAPO (tau 1 / 1.05)")
    ax = fig.axes[2]  # the gradient panel of A > 0
    line = [ln for ln in ax.get_lines() if ln.get_label() == "SAPO (tau 1 / 1.05)"][0]
    x = torch.as_tensor(line.get_xdata(), dtype=torch.float64)
    torch.testing.assert_close(
        torch.as_tensor(line.get_ydata(), dtype=torch.float64), objective_curves("SAPO (tau 1 / 1.05)", 1.0, x)[1]
    )


def test_fallback_has_a_different_frame_per_objective():
    html = objectives_fallback_html(dpi=30)
    frames = re.search(r"var frames = (\{.*?\});", html, re.S).group(1)
    images = re.findall(r'"data:image/png;base64,([^"]+)"', frames)
    assert len(images) == len(OBJECTIVES) == len(set(images))


def test_live_widget_builds_without_a_kernel():
    box = objectives_widget(show=False)
    assert box.children[0].options == tuple(OBJECTIVES)
