"""The dashboard lays its panels out ``cols`` to a row, at 3.2 inches a panel, one panel per logged metric."""

import matplotlib

matplotlib.use("Agg")

from ppo_core.run.metrics import DASHBOARD_KEYS, plot_dashboard  # noqa: E402


def test_dashboard_columns():
    records = [{"step": s, **{k: float(s) for k in DASHBOARD_KEYS[:5]}} for s in range(1, 4)]
    for cols, rows in ((4, 2), (2, 3)):
        fig = plot_dashboard(records, cols=cols)
        drawn = [ax for ax in fig.axes if ax.axison]
        assert len(drawn) == 5 and len(fig.axes) == cols * rows
        assert tuple(fig.get_size_inches()) == (3.2 * cols, 2.4 * rows)
