"""Small helpers shared by the chapters."""

import inspect

__all__ = ["show_source"]


def show_source(obj):
    """Show the source of a package function in a notebook (syntax-highlighted), e.g. ``show_source(compute_gae)``."""
    from IPython.display import Code

    return Code(inspect.getsource(obj), language="python")
