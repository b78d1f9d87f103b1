"""The course's interactive figures: live ipywidgets in Jupyter, a kernel-free slider in the static book.

- ``gae_widget()`` (chapter 03): how lambda and gamma shape per-token advantages and returns.
- ``clip_widget()`` (chapter 04): the clipped objective against the ratio, for A > 0 and A < 0.
"""

from .clipping import clip_widget  # noqa: E402,F401
from .gae import gae_widget  # noqa: E402,F401
