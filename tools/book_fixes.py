"""A Sphinx extension for the book (loaded through ``sphinx: local_extensions`` in _config.yml).

Sphinx 7.4 writes an inline script twice when an extension adds it after the builder started
(sphinx-thebe's ``const THEBE_JS_URL = ...`` and sphinx-togglebutton's selector): one copy is
registered with filename ``None``, the other with ``''``, so Sphinx does not see them as equal. The
second ``const`` declaration is a JavaScript SyntaxError on every page. This drops such duplicates.
"""


def _dedupe_scripts(app, pagename, templatename, context, doctree):
    scripts = context.get("script_files")
    if not scripts:
        return
    seen, kept = set(), []
    for script in scripts:
        attributes = getattr(script, "attributes", {})
        key = (getattr(script, "filename", script) or "", tuple(sorted((k, str(v)) for k, v in attributes.items())))
        if key not in seen:
            seen.add(key)
            kept.append(script)
    scripts[:] = kept


def setup(app):
    app.connect("html-page-context", _dedupe_scripts, priority=900)  # after the other extensions add theirs
    return {"parallel_read_safe": True, "parallel_write_safe": True}
