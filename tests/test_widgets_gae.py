"""Tests for the chapter 03 widget: the picture shows compute_gae's numbers, and the kernel-free
fallback has one distinct frame per (lam, gamma)."""

import base64
import json
import re

import pytest
import torch

from ppo_core.gae import compute_gae
from ppo_core.widgets import gae as gae_module
from ppo_core.widgets.gae import FALLBACK_GRID, gae_example, gae_fallback_html, gae_figure, gae_widget


@pytest.fixture(scope="module")
def fallback_html():
    return gae_fallback_html()


def _frames(html):
    return json.loads(re.search(r"var frames = (\{.*?\});", html, re.S).group(1))


def _drawn(fig):
    bottom = fig.axes[1]
    heights = [p.get_height() for p in bottom.patches]
    lines = {line.get_gid(): list(line.get_ydata()) for line in bottom.get_lines() if line.get_gid()}
    return (
        torch.tensor(heights, dtype=torch.float32),
        torch.tensor(lines["returns"], dtype=torch.float32),
        torch.tensor(lines["values"], dtype=torch.float32),
    )


@pytest.mark.parametrize("lam, gamma", [(0.0, 1.0), (0.95, 1.0), (1.0, 0.9), (0.5, 0.8)])
def test_gae_figure_draws_compute_gae(lam, gamma):
    ex = gae_example()
    advantages, returns = compute_gae(ex["rewards"], ex["values"], ex["mask"], gamma=gamma, lam=lam)
    heights, drawn_returns, drawn_values = _drawn(gae_figure(lam, gamma))
    torch.testing.assert_close(heights, advantages[0])
    torch.testing.assert_close(drawn_returns, returns[0])
    torch.testing.assert_close(drawn_values, ex["values"][0])


def test_example_is_a_sparse_reward_with_kl_penalty():
    ex = gae_example()
    rewards = ex["rewards"][0]
    assert rewards[-1] > 0.9 and rewards[:-1].abs().max() < 0.1  # the score sits on the last token only
    assert (ex["kl"] != 0).any() and ex["mask"].all()
    # lam = 1, gamma = 1: returns are the plain rewards-to-go.
    _, returns = compute_gae(ex["rewards"], ex["values"], ex["mask"], gamma=1.0, lam=1.0)
    torch.testing.assert_close(returns[0], rewards.flip(0).cumsum(0).flip(0))


def test_different_parameters_draw_different_pictures():
    a0, _, _ = _drawn(gae_figure(0.0, 1.0))
    a1, _, _ = _drawn(gae_figure(1.0, 1.0))
    g, _, _ = _drawn(gae_figure(1.0, 0.8))
    assert (a0 - a1).abs().max() > 0.1 and (a1 - g).abs().max() > 0.1


def test_frames_depend_only_on_the_parameters():
    """The fallback blits changing artists over a cached background: no stale pixels from earlier frames."""
    plot = gae_module._GaePlot()
    for lam, gamma in [(0.0, 0.8), (0.7, 0.95)]:
        plot.png(lam, gamma, dpi=40)
    assert plot.png(1.0, 1.0, dpi=40) == gae_module._GaePlot().png(1.0, 1.0, dpi=40)


def test_fallback_has_one_distinct_frame_per_combination(fallback_html):
    frames = _frames(fallback_html)
    n_lam, n_gamma = len(FALLBACK_GRID["lam"]), len(FALLBACK_GRID["gamma"])
    assert set(frames) == {f"{i},{j}" for i in range(n_lam) for j in range(n_gamma)}
    assert len(set(frames.values())) == n_lam * n_gamma  # never a slider step that leaves the picture unchanged
    assert all(src.startswith("data:image/png;base64,") for src in frames.values())
    assert fallback_html.count('type="range"') == 2
    assert 'data-param="lam"' in fallback_html and 'data-param="gamma"' in fallback_html
    assert len(fallback_html) < 1_500_000


def test_widget_builds_and_reacts_outside_jupyter():
    box = gae_widget(show=False)
    lam, gamma = box.children[0].children
    assert (lam.min, lam.max, gamma.min, gamma.max) == (0.0, 1.0, 0.8, 1.0)
    lam.value, gamma.value = 0.3, 0.9  # re-renders; must not raise without a kernel


def test_widget_displays_live_view_and_fallback(monkeypatch, fallback_html):
    shown = []
    monkeypatch.setattr(gae_module, "gae_fallback_html", lambda: fallback_html)
    monkeypatch.setattr("IPython.display.display", lambda obj, raw=False: shown.append(obj))
    assert gae_widget() is None
    (bundle,) = [b for b in shown if isinstance(b, dict)]
    assert "application/vnd.jupyter.widget-view+json" in bundle and bundle["text/html"] == fallback_html


def test_fallback_frame_is_the_picture_of_its_slider_values(fallback_html):
    """Frame "i,j" is the plot at lam = FALLBACK_GRID["lam"][i], gamma = FALLBACK_GRID["gamma"][j] (not swapped)."""
    frames = _frames(fallback_html)
    for i, j in [(3, 1), (10, 0)]:
        lam, gamma = FALLBACK_GRID["lam"][i], FALLBACK_GRID["gamma"][j]
        png = gae_module._GaePlot().png(lam, gamma, dpi=80)
        assert frames[f"{i},{j}"] == "data:image/png;base64," + base64.b64encode(png).decode(), (lam, gamma)


def test_fallback_opens_on_the_live_widgets_values(fallback_html):
    """The static page starts at lam = 0.95, gamma = 1.0 (the live sliders' defaults): image, labels and thumbs."""
    i, j = FALLBACK_GRID["lam"].index(0.95), FALLBACK_GRID["gamma"].index(1.0)
    shown = re.search(r'<img class="ppo-frame" src="([^"]*)"', fallback_html).group(1)
    assert shown == _frames(fallback_html)[f"{i},{j}"]
    assert re.findall(r'<span class="ppo-val">([^<]*)</span>', fallback_html) == ["0.95", "1.0"]
    assert re.findall(r'step="1" value="(\d+)"', fallback_html) == [str(i), str(j)]


def test_figure_labels_say_lam_gamma_and_first_advantage():
    lam, gamma = 0.3, 0.85
    fig = gae_figure(lam, gamma)
    texts = [t.get_text() for ax in fig.axes for t in ax.texts]
    assert "λ = 0.30   γ = 0.85" in texts
    ex = gae_example()
    advantages, returns = compute_gae(ex["rewards"], ex["values"], ex["mask"], gamma=gamma, lam=lam)
    assert f"A₀ = {advantages[0, 0]:+.3f}    returns₀ = {returns[0, 0]:.3f}" in texts


def test_live_widget_draws_the_slider_values(monkeypatch):
    shown = []
    monkeypatch.setattr("IPython.display.display", lambda obj, *a, **k: shown.append(obj))
    box = gae_widget(show=False)
    lam, gamma = box.children[0].children
    lam.value, gamma.value = 0.3, 0.85
    assert shown[-1].data == gae_module._GaePlot().png(0.3, 0.85, dpi=80)
