#!/usr/bin/env bash
# Re-download the book's vendored browser assets from the npm registry into book/_vendor/.
#
# The built book must render offline (opened from disk, file://), so the pages load MathJax from
# book/_vendor/ (copied into _build/html/_static/ by `html_static_path` in _config.yml) instead of
# a CDN. Only what the pages load is kept: MathJax's self-contained TeX-to-SVG bundle (all TeX
# extensions preloaded, fonts as SVG paths, so no font files and no lazy loading, which file://
# pages could not do for fonts). The widget manager and require.js are not needed: the static book
# shows the widgets' kernel-free fallback (see ppo_core/widgets/_fallback.py), and _config.yml sets
# `nb_ipywidgets_js: {}` so pages never ask a CDN for them.
#
# Usage: tools/vendor_assets.sh   (needs npm; writes book/_vendor/mathjax/, keeps README.md)
set -euo pipefail
MATHJAX_VERSION=3.2.2

root="$(cd "$(dirname "$0")/.." && pwd)"
dest="$root/book/_vendor"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

(cd "$tmp" && npm pack --silent "mathjax@$MATHJAX_VERSION" >/dev/null)
tar -xzf "$tmp/mathjax-$MATHJAX_VERSION.tgz" -C "$tmp"

rm -rf "$dest/mathjax"
mkdir -p "$dest/mathjax"
cp "$tmp/package/es5/tex-svg-full.js" "$dest/mathjax/"
cp "$tmp/package/LICENSE" "$dest/mathjax/LICENSE"
echo "mathjax@$MATHJAX_VERSION es5/tex-svg-full.js -> book/_vendor/mathjax/ ($(du -h "$dest/mathjax/tex-svg-full.js" | cut -f1))"
sha256sum "$dest/mathjax/tex-svg-full.js"
