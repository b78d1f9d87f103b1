"""Show a live widget in Jupyter and a precomputed, kernel-free slider in the static book.

One output carries both MIME types: Jupyter renders the widget view (highest priority), and the book
is configured (``nb_mime_priority_overrides`` in ``_config.yml``) to render the ``text/html`` fallback:
a set of precomputed PNG frames and a plain JavaScript slider per parameter, with no kernel needed.
"""

import base64
import html
import io
import itertools
import json
import uuid

__all__ = ["display_with_fallback", "frames_html", "fig_to_png"]


def fig_to_png(fig, dpi: int = 72) -> bytes:
    """Render a matplotlib figure to PNG bytes and close it."""
    import matplotlib.pyplot as plt

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi, bbox_inches="tight")
    plt.close(fig)
    return buf.getvalue()


def frames_html(render, params: dict[str, list], title: str = "", initial: dict | None = None) -> str:
    """A self-contained HTML block: one range slider per parameter, swapping precomputed PNG frames.

    Args:
        render: ``render(**values) -> PNG bytes`` for one combination of parameter values.
        params: {parameter name: list of values}, in slider order. Every combination is rendered.
        initial: {parameter name: value} to show first (default: each list's first value), so the
            static page can open on the same setting as the live widget.
    Returns:
        HTML (inline base64 images and a few lines of JavaScript; no external files).
    """
    names = list(params)
    frames = {}
    for combo in itertools.product(*(range(len(params[n])) for n in names)):
        png = render(**{n: params[n][i] for n, i in zip(names, combo)})
        frames[",".join(map(str, combo))] = "data:image/png;base64," + base64.b64encode(png).decode()
    uid = "ppo-fallback-" + uuid.uuid4().hex[:10]
    start = {n: list(params[n]).index((initial or {}).get(n, params[n][0])) for n in names}
    first = ",".join(str(start[n]) for n in names)
    sliders = "".join(
        f'<label style="margin-right:1.5em">{html.escape(n)} = <span class="ppo-val">{params[n][start[n]]}</span> '
        f'<input type="range" class="ppo-slider" data-param="{html.escape(n)}" min="0" max="{len(params[n]) - 1}" '
        f'step="1" value="{start[n]}" data-values=\'{json.dumps([str(v) for v in params[n]])}\'></label>'
        for n in names
    )
    return f"""<div id="{uid}" class="ppo-widget-fallback">
<div style="font-weight:bold">{html.escape(title)}</div>
<div>{sliders}</div>
<img class="ppo-frame" src="{frames[first]}" style="max-width:100%">
<script>
(function() {{
  var root = document.getElementById("{uid}");
  var frames = {json.dumps(frames)};
  var sliders = root.querySelectorAll("input.ppo-slider");
  function update() {{
    var key = [];
    sliders.forEach(function(s) {{
      key.push(s.value);
      s.parentNode.querySelector(".ppo-val").textContent = JSON.parse(s.dataset.values)[+s.value];
    }});
    root.querySelector("img.ppo-frame").src = frames[key.join(",")];
  }}
  sliders.forEach(function(s) {{ s.addEventListener("input", update); }});
}})();
</script>
</div>"""


def display_with_fallback(widget, fallback_html: str) -> None:
    """Display ``widget`` live, with ``fallback_html`` as the static alternative in the same output."""
    from IPython.display import display

    bundle = widget._repr_mimebundle_()
    bundle = dict(bundle)
    bundle["text/html"] = fallback_html
    display(bundle, raw=True)
