"""The book builds (warnings are errors) and every page renders offline in headless Chromium.

Runs last (the root conftest.py moves it there): the book is built from the chapter notebooks that
nbval executed earlier in the same run (tools/book.py), so the pages show exactly the outputs the
suite produced from the current code. A chapter nbval did not run in this session is executed here
with nbclient; a chapter that failed its nbval run stops the build.

The browser half needs Debian's ``chromium`` and ``chromium-driver`` (``apt-get install -y chromium
chromium-driver``); without them it is skipped with a message, unless ``PPO_REQUIRE_CHROMIUM=1``
(set by .ci/run), which makes their absence a failure. Pages are opened from disk (file://) with
the network blocked, as someone reading the built book offline would.
"""

import ast
import os
import re
import shutil
import time
from pathlib import Path
from urllib.parse import unquote, urlparse

import nbformat
import pytest
import yaml
from bs4 import BeautifulSoup

from tools import book

ROOT = book.ROOT
CHAPTER_SOURCE = ROOT / "chapters"


def toc_pages() -> list[str]:
    """Every page of _toc.yml ("chapters/03_gae", "book/faq", ...), root first."""
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    pages = [toc["root"]]

    def walk(node):
        if isinstance(node, dict):
            if "file" in node:
                pages.append(node["file"])
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk({k: v for k, v in toc.items() if k != "root"})
    return [str(Path(p).with_suffix("")) for p in pages]


PAGES = toc_pages()


# --------------------------------------------------------------------------------------------------
# The build


@pytest.fixture(scope="module")
def built_book(request):
    """Stage and build once; the result (never an exception) is shared by every test here."""
    start = time.perf_counter()
    recorder = request.config.pluginmanager.get_plugin("ppo-notebook-recorder")
    elsewhere = [path.stem for path in recorder.expected] if hasattr(request.config, "workerinput") else []
    try:
        how = book.stage_book(session=os.environ.get(book.SESSION_ENV), wait_for=elsewhere)
    except book.BookError as exc:
        return {"ok": False, "error": str(exc)}
    staged = time.perf_counter()
    rc, output = book.build_book()
    done = time.perf_counter()
    line = (
        f"[book] chapters from {', '.join(f'{k}: {v}' for k, v in how.items())}; staged in "
        f"{staged - start:.0f} s, built in {done - staged:.0f} s: {book.HTML / 'index.html'}"
    )
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")
    capture = request.config.pluginmanager.get_plugin("capturemanager")
    if reporter is not None and capture is not None:
        with capture.global_and_fixture_disabled():
            reporter.write_line(line)
    if rc:
        warnings = book.warnings_of(output) or output.splitlines()[-40:]
        return {"ok": False, "error": f"jupyter-book build -W failed (exit {rc}):\n" + "\n".join(warnings)}
    return {"ok": True, "how": how}


def test_book_builds(built_book):
    """`jupyter-book build --all -W --keep-going` passes on a clean build folder, every chapter executed."""
    assert built_book["ok"], built_book["error"]
    for page in PAGES:
        assert (book.HTML / f"{page}.html").is_file(), f"{page} is in _toc.yml but was not built"
    # every chapter page is built from a notebook executed in this session, never from a stale one
    assert set(built_book["how"]) == {p.stem for p in book.chapter_notebooks()}


# --------------------------------------------------------------------------------------------------
# What a cell printed is what the reader reads

CHAPTER_PAGES = [page for page in PAGES if page.startswith("chapters/")]
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_HIDDEN_OUTPUT_TAGS = {"remove-output", "remove-cell"}


def _normalise(text: str) -> str:
    """Whitespace aside: runs of spaces, tabs and line breaks count as one space."""
    return " ".join(_ANSI.sub("", text).split())


def notebook_streams(nb) -> list[str]:
    """Each printed output (stdout and stderr streams) of the executed notebook that the page shows, in order."""
    return [
        _normalise(out["text"])
        for cell in nb.cells
        if cell.cell_type == "code" and not _HIDDEN_OUTPUT_TAGS & set(cell.metadata.get("tags", []))
        for out in cell.outputs
        if out.get("output_type") == "stream" and _normalise(out["text"])
    ]


STREAM_SELECTOR = ".cell_output .output.stream, .cell_output .output.stderr"


def page_streams(html: str) -> list[str]:
    """Each printed output on a built page (myst-nb renders streams as ``div.output.stream``/``.stderr``)."""
    soup = BeautifulSoup(html, "html.parser")
    return [_normalise(div.get_text()) for div in soup.select(STREAM_SELECTOR)]


def printed_literals(source: str) -> list[str]:
    """The literal start of each ``print("...")`` that surely runs: a cell's top-level statements and loops.

    ``print(f"rewards: {r}")`` gives ``"rewards:"``: text the page must show whatever the numbers are. This is
    read from the chapter's *source*, so it holds even if staging and rendering both lost the text.
    """
    code = "\n".join("" if line.lstrip().startswith(("%", "!")) else line for line in source.splitlines())
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return []
    statements = []
    for node in tree.body:
        statements.append(node)
        if isinstance(node, ast.For | ast.With):
            statements.extend(node.body)
    found = []
    for node in statements:
        call = node.value if isinstance(node, ast.Expr) else None
        if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id == "print"):
            continue
        if not call.args:
            continue
        arg = call.args[0]
        if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
            text = arg.value
        elif isinstance(arg, ast.JoinedStr) and arg.values and isinstance(arg.values[0], ast.Constant):
            text = arg.values[0].value
        else:
            continue
        text = _normalise(text.split("\n")[0] if text.strip() else "")
        if len(text) >= 6 and re.search(r"[A-Za-z]{2}", text):
            found.append(text)
    return found


@pytest.mark.parametrize("page", CHAPTER_PAGES)
def test_printed_outputs_are_on_the_page(built_book, page):
    """Every printed output in the HTML equals the executed notebook's text, and what the source prints is there."""
    if not built_book["ok"]:
        pytest.skip("the book did not build (see test_book_builds)")
    nb = _staged_notebook(page)
    expected = notebook_streams(nb)
    shown = page_streams((book.HTML / f"{page}.html").read_text())
    assert len(shown) == len(expected), (
        f"{page}: {len(expected)} printed outputs in the executed notebook, {len(shown)} on the page"
    )
    for number, (want, got) in enumerate(zip(expected, shown)):
        assert got == want, (
            f"{page}: printed output {number} differs\n  notebook: {want[:300]!r}\n  page:     {got[:300]!r}"
        )
    source = CHAPTER_SOURCE / f"{Path(page).name}.ipynb"
    literals = [
        text
        for cell in nbformat.read(source, as_version=4).cells
        if cell.cell_type == "code" and not _HIDDEN_OUTPUT_TAGS & set(cell.metadata.get("tags", []))
        for text in printed_literals(cell.source)
    ]
    assert literals, f"{page}: no print(...) with a literal start in the chapter? The check would be vacuous"
    text = " ".join(shown)
    missing = [literal for literal in literals if literal not in text]
    assert not missing, f"{page}: text the chapter prints is missing from the page: {missing[:8]}"
    noise = [n for n in LIBRARY_NOISE if n in text]
    assert not noise, f"{page}: library noise in the printed outputs a reader sees: {noise}"


LIBRARY_NOISE = ("Loading weights", "LOAD REPORT", "it/s]", "Failed to load CPU gemm_4bit", "FutureWarning")
"""Progress bars and load reports of libraries, which belong in a terminal, not on a page of the book."""


# --------------------------------------------------------------------------------------------------
# The browser

CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-extensions",
    "--window-size=1200,2000",
    # no network: every host name fails to resolve and anything else goes to a dead proxy
    "--host-resolver-rules=MAP * ~NOTFOUND",
    "--proxy-server=127.0.0.1:9",
]


@pytest.fixture(scope="module")
def browser(built_book, tmp_path_factory):
    if not built_book["ok"]:
        pytest.skip("the book did not build (see test_book_builds)")
    chromium, chromedriver = shutil.which("chromium"), shutil.which("chromedriver")
    if not (chromium and chromedriver):
        message = (
            "headless Chromium is not installed (Debian: apt-get install -y chromium chromium-driver), "
            "so the built book's pages were not checked in a browser"
        )
        if os.environ.get("PPO_REQUIRE_CHROMIUM"):
            pytest.fail(message)
        pytest.skip(message)
    pytest.importorskip("selenium", reason="selenium is not installed (it is in requirements.txt)")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = chromium  # with the driver's path given below, Selenium Manager never runs
    for flag in CHROMIUM_FLAGS:
        options.add_argument(flag)
    options.add_argument(f"--user-data-dir={tmp_path_factory.mktemp('chromium')}")
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(chromedriver), options=options)
    driver.set_page_load_timeout(60)
    driver.set_script_timeout(60)
    yield driver
    driver.quit()


WAIT_FOR_PAGE = """
const done = arguments[arguments.length - 1];
const deadline = Date.now() + 30000;
// images: none lazy, all settled (loaded or failed)
const images = Array.from(document.images);
images.forEach(img => { if (img.loading === 'lazy') img.loading = 'eager'; });
const settled = Promise.all(images.map(img => img.complete ? null : new Promise(resolve => {
  img.addEventListener('load', resolve); img.addEventListener('error', resolve);
})));
(function wait() {
  if (!document.querySelector('.math')) {
    if (document.readyState === 'complete') return settled.then(() => done('no math'));
  } else if (window.MathJax && MathJax.startup && MathJax.startup.promise) {
    return MathJax.startup.promise.then(() => settled).then(() => done('typeset'), e => done('MathJax failed: ' + e));
  }
  if (Date.now() > deadline) return done('MathJax never started');
  setTimeout(wait, 50);
})();
"""

INSPECT_PAGE = r"""
const STREAM_SELECTOR = arguments[0];
const math = Array.from(document.querySelectorAll('.math'));
const main = document.querySelector('main') || document.body;
const raw = [];
const walker = document.createTreeWalker(main, NodeFilter.SHOW_TEXT, {acceptNode(node) {
  const parent = node.parentElement;
  return (!parent || parent.closest('pre, code, script, style, textarea, mjx-container, .highlight'))
    ? NodeFilter.FILTER_REJECT : NodeFilter.FILTER_ACCEPT;
}});
for (let node; (node = walker.nextNode());) {
  // TeX that MathJax did not typeset: display or inline delimiters, environments, $..$ with TeX inside
  const tex = /\$\$|\\\[|\\\(|\\begin\{|\$[^$\n]*[\\^_{][^$\n]*\$/;
  if (tex.test(node.nodeValue)) raw.push(node.nodeValue.trim().slice(0, 100));
}
return {
  math: math.length,
  untypeset: math.filter(el => !el.querySelector('mjx-container')).map(el => el.textContent.trim().slice(0, 100)),
  tex_errors: Array.from(document.querySelectorAll('mjx-merror, [data-mjx-error]'))
    .map(el => el.getAttribute('data-mjx-error') || el.textContent.slice(0, 100)),
  raw_tex: raw,
  broken_images: Array.from(document.images).filter(img => !(img.complete && img.naturalWidth > 0))
    .map(img => (img.getAttribute('src') || '').slice(0, 100)),
  output_images: document.querySelectorAll('.cell_output img').length,
  streams: Array.from(document.querySelectorAll(STREAM_SELECTOR)).map(el => el.innerText),
  network: performance.getEntriesByType('resource').map(e => e.name).filter(n => /^(https?|wss?):/.test(n)),
  // a table wider than its box is cut off (the theme scrolls it): its first header cell, its width and the box's
  wide_tables: Array.from(main.querySelectorAll('table')).filter(t => t.scrollWidth > t.parentElement.clientWidth + 1)
    .map(t => [(t.querySelector('th, td') || t).innerText.slice(0, 40), t.scrollWidth, t.parentElement.clientWidth]),
  tables: main.querySelectorAll('table').length,
  text: main.innerText,
};
"""


def _staged_notebook(page: str):
    return nbformat.read(book.STAGE / f"{page}.ipynb", as_version=4)


def _check_fallback_sliders(driver, page: str, nb, problems: list[str]) -> None:
    """Every kernel-free widget is visible, and moving each of its sliders swaps the picture."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    expected = sum(
        "ppo-widget-fallback" in str(out.get("data", {}).get("text/html", ""))
        for cell in nb.cells
        if cell.cell_type == "code"
        for out in cell.outputs
    )
    calls_widget = any(cell.cell_type == "code" and "_widget(" in cell.source for cell in nb.cells)
    roots = driver.find_elements(By.CSS_SELECTOR, ".ppo-widget-fallback")
    if calls_widget and expected == 0:
        problems.append("the notebook shows a widget but its output has no kernel-free fallback")
    if len(roots) != expected:
        problems.append(
            f"{expected} widget fallback(s) in the notebook's outputs, {len(roots)} on the page "
            "(the live widget view was chosen over the fallback?)"
        )
    for number, root in enumerate(roots):
        frame = root.find_element(By.CSS_SELECTOR, "img.ppo-frame")
        if not frame.is_displayed():
            problems.append(f"widget fallback {number} is not visible")
            continue
        sliders = root.find_elements(By.CSS_SELECTOR, "input.ppo-slider")
        if not sliders:
            problems.append(f"widget fallback {number} has no slider")
        for slider in sliders:
            name = slider.get_attribute("data-param")
            before_src, before = frame.get_attribute("src"), slider.get_attribute("value")
            before_label = slider.find_element(By.XPATH, "..").find_element(By.CSS_SELECTOR, ".ppo-val").text
            driver.execute_script("arguments[0].scrollIntoView({block: 'center'})", slider)
            # a real key press on the range input, as a reader would do it (fires its input event)
            slider.send_keys(Keys.HOME if int(before) > int(slider.get_attribute("min")) else Keys.END)
            after_label = slider.find_element(By.XPATH, "..").find_element(By.CSS_SELECTOR, ".ppo-val").text
            if slider.get_attribute("value") == before:
                problems.append(f"widget fallback {number}: the {name} slider did not move")
            elif frame.get_attribute("src") == before_src:
                problems.append(f"widget fallback {number}: moving {name} did not change the picture")
            elif after_label == before_label:
                problems.append(f"widget fallback {number}: moving {name} did not update its value label")


def _check_hidden_solutions(driver, nb, problems: list[str]) -> None:
    """Each exercise's solution sits in a closed toggle that opens on a click."""
    from selenium.common.exceptions import TimeoutException
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.wait import WebDriverWait

    n_solutions = sum(cell.cell_type == "code" and "# SOLUTION START" in cell.source for cell in nb.cells)
    cells = driver.execute_script(  # in one call: a round trip per cell costs more than the check
        "return Array.from(document.querySelectorAll('div.cell'))"
        ".filter(cell => (cell.textContent || '').includes('# SOLUTION START'))"
    )
    if len(cells) != n_solutions:
        problems.append(f"{n_solutions} solution cells in the notebook, {len(cells)} on the page")
    for number, cell in enumerate(cells):
        code = cell.find_element(By.CSS_SELECTOR, ".cell_input")
        if code.is_displayed():
            problems.append(f"exercise solution {number} is visible without a click (tag its cell hide-input)")
            continue
        toggle = cell.find_elements(By.CSS_SELECTOR, "details > summary")
        if not toggle:
            problems.append(f"exercise solution {number} is hidden but has no toggle to show it")
            continue
        driver.execute_script("arguments[0].scrollIntoView({block: 'center'})", toggle[0])
        toggle[0].click()
        try:  # the toggle opens with a short animation
            WebDriverWait(driver, 5, poll_frequency=0.05).until(lambda _, code=code: code.is_displayed())
        except TimeoutException:
            problems.append(f"exercise solution {number}: clicking its toggle did not show it")


def _check_notebook_links(driver, page: str, problems: list[str]) -> None:
    """The page offers its notebook for download (a file in the built book) and a Colab launch link."""
    from selenium.webdriver.common.by import By

    name = Path(page).name
    downloads = [a.get_attribute("href") for a in driver.find_elements(By.CSS_SELECTOR, "a.btn-download-source-button")]
    downloads = [href for href in downloads if href and href.endswith(f"{name}.ipynb")]
    if not downloads:
        problems.append("no download button for the notebook")
    elif not Path(unquote(urlparse(downloads[0]).path)).is_file():
        problems.append(f"the download button points to a missing file: {downloads[0]}")
    colab = [
        a.get_attribute("href")
        for a in driver.find_elements(By.CSS_SELECTOR, "a[href^='https://colab.research.google.com/github/']")
    ]
    if not any(href.endswith(f"{page}.ipynb") for href in colab):
        problems.append("no 'Launch on Colab' link for the notebook")


def _check_markdown_page(page: str, found: dict, problems: list[str]) -> None:
    """A page written in markdown: every heading and table of its source is on the page, and no table is cut off."""
    source = (ROOT / f"{page}.md").read_text()
    source = re.sub(r"```.*?```", "", source, flags=re.S)  # code blocks hold no headings or tables
    text = found["text"].replace("\u2019", "'").replace("\u201c", '"').replace("\u201d", '"')
    text = " ".join(text.split())  # Sphinx's smart quotes, single and double, undone
    for heading in re.findall(r"^#{1,6} ([^$\n]+)$", source, re.M):  # (a heading with math is typeset apart)
        plain = "".join(  # code spans as they are; elsewhere emphasis marks and link targets go
            part[1:-1] if part.startswith("`") else re.sub(r"\*|\[([^]]*)\]\([^)]*\)", lambda m: m.group(1) or "", part)
            for part in re.split(r"(`[^`]*`)", heading)
        ).strip()
        if plain not in text:
            problems.append(f"the heading {plain!r} is not on the page")
    tables = len(re.findall(r"^\|[ :-]*-{3,}[ :|-]*\|$", source, re.M))  # a table's delimiter row
    if found["tables"] != tables:
        problems.append(f"{found['tables']} tables on the page, {tables} in the source")
    if found["wide_tables"]:
        problems.append(f"tables wider than the page, cut off (first cell, width, room): {found['wide_tables']}")


FIT_WIDTHS = (1280, 1920)
"""Window widths a reader's browser is likely to have (the content column is about 690 px at both)."""

FIND_OVERFLOW = r"""
const main = document.querySelector('main') || document.body;
const found = [];
const label = el => (el.innerText || el.getAttribute('src') || el.tagName).trim().split('\n')
  .reduce((a, b) => (b.length > a.length ? b : a), '').slice(0, 70);
// printed outputs, tables and display equations: a horizontal scrollbar, or a box wider than its container
const boxes = ['.output.stream pre', '.output.stderr pre', '.output.text_plain pre', 'main table',
  'mjx-container[display="true"]'].join(', ');  // package source listings (.highlight) may scroll
for (const el of main.querySelectorAll(boxes)) {
  const parent = el.parentElement.getBoundingClientRect().width;
  const scrolls = el.scrollWidth > el.clientWidth + 1;
  const wider = el.getBoundingClientRect().width > parent + 1;
  const size = `${Math.round(el.scrollWidth)} px in ${Math.round(parent)} px`;
  if (scrolls || wider) found.push(`${el.tagName.toLowerCase()} ${size}: ${label(el)}`);
}
// figures: drawn wider than the column, or shrunk by more than a fifth to fit it (their text then shrinks too)
for (const img of main.querySelectorAll('.cell_output img')) {
  const shown = img.getBoundingClientRect().width;
  const parent = img.parentElement.getBoundingClientRect().width;
  if (shown > parent + 1 || img.naturalWidth > 1.25 * shown) {
    found.push(`figure ${img.naturalWidth} px drawn at ${Math.round(shown)} px in ${Math.round(parent)} px`);
  }
}
return found;
"""


WAIT_FOR_WIDTH = """
const width = arguments[0], done = arguments[arguments.length - 1];
const deadline = Date.now() + 10000;
(function wait() {  // the window takes the new size a moment after the driver's call returns
  if (window.innerWidth === width) return setTimeout(() => done(width), 50);  // its resize handlers run first
  if (Date.now() > deadline) return done(window.innerWidth);
  setTimeout(wait, 20);
})();
"""


def _check_column_fit(driver, problems: list[str]) -> None:
    """No printed output, table, display equation or figure is wider than the content column, at each of
    ``FIT_WIDTHS``. The loaded page is measured after each resize of the window, once the page has the new width:
    the browser lays it out again before the script reads the layout."""
    try:
        for width in FIT_WIDTHS:
            driver.set_window_size(width, 2000)
            got = driver.execute_async_script(WAIT_FOR_WIDTH, width)
            assert got == width, f"the window is {got} px wide 10 s after a resize to {width} px"
            problems += [f"wider than the column at {width} px: {p}" for p in driver.execute_script(FIND_OVERFLOW)]
    finally:
        driver.set_window_size(1200, 2000)  # the size the other browser tests load at (CHROMIUM_FLAGS)


@pytest.mark.parametrize("page", PAGES)
def test_page_renders_offline(browser, page):
    """Offline from disk: math typeset, images loaded, widgets' fallbacks work, solutions hidden, no JS errors;
    on a chapter page, no output wider than the content column."""
    path = book.HTML / f"{page}.html"
    assert path.is_file(), f"{path} was not built"
    browser.get_log("browser")  # drop what earlier pages logged
    browser.get(path.as_uri())
    state = browser.execute_async_script(WAIT_FOR_PAGE)
    found = browser.execute_script(INSPECT_PAGE, STREAM_SELECTOR)
    problems = []
    if state not in ("typeset", "no math"):
        problems.append(state)
    if found["untypeset"]:
        problems.append(
            f"{len(found['untypeset'])} of {found['math']} math elements not typeset, e.g. {found['untypeset'][:3]}"
        )
    if found["tex_errors"]:
        problems.append(f"TeX errors: {found['tex_errors'][:5]}")
    if found["raw_tex"]:
        problems.append(f"raw TeX left in the text: {found['raw_tex'][:5]}")
    if found["broken_images"]:
        problems.append(f"images that did not load: {found['broken_images'][:5]}")
    if found["network"]:
        problems.append(f"the page asked the network for: {found['network'][:5]}")

    if page.startswith("book/"):
        _check_markdown_page(page, found, problems)

    if page.startswith("chapters/"):
        nb = _staged_notebook(page)
        if found["math"] == 0:
            problems.append("a chapter page without math: MathJax output expected")
        if found["output_images"] == 0:
            problems.append("no figure in the chapter's outputs")
        _check_fallback_sliders(browser, page, nb, problems)
        _check_hidden_solutions(browser, nb, problems)
        _check_notebook_links(browser, page, problems)
        _check_column_fit(browser, problems)
        shown = [_normalise(text) for text in found["streams"]]
        if shown != notebook_streams(nb):
            problems.append(
                f"the printed outputs a reader sees differ from the executed notebook's: {shown[:3]} on the page"
            )

    errors = [entry["message"] for entry in browser.get_log("browser") if entry["level"] == "SEVERE"]
    if errors:
        problems.append("JavaScript console errors:\n    " + "\n    ".join(errors[:10]))
    assert not problems, f"{page}.html:\n  " + "\n  ".join(problems)


def test_fit_check_rejects_wide_outputs(browser, tmp_path):
    """The column check flags a long printed line, a wide table and an oversized figure, and passes narrow ones."""
    import base64
    import io

    import matplotlib.pyplot as plt

    def figure(inches):
        fig = plt.figure(figsize=(inches, 1), dpi=100)
        buffer = io.BytesIO()
        fig.savefig(buffer, format="png", dpi=100)
        plt.close(fig)
        return base64.b64encode(buffer.getvalue()).decode()

    def page(line, cells, inches):
        row = "".join(f"<td>{'x' * 12}</td>" for _ in range(cells))
        return (
            "<html><body><main style='width: 690px'><div class='cell_output'>"
            f"<div class='output stream'><pre style='overflow: auto'>{line}</pre></div>"
            f"<img src='data:image/png;base64,{figure(inches)}'></div>"
            f"<table><tr>{row}</tr></table></main></body></html>"
        )

    path = tmp_path / "fit.html"
    path.write_text(page("x" * 200, 12, 12.0))
    browser.get(path.as_uri())
    found = browser.execute_script(FIND_OVERFLOW)
    assert any(p.startswith("pre") for p in found) and any(p.startswith("table") for p in found), found
    assert any(p.startswith("figure 1200 px") for p in found), found
    path.write_text(page("x" * 60, 3, 6.5))
    browser.get(path.as_uri())
    assert browser.execute_script(FIND_OVERFLOW) == []


def test_solution_check_flags_a_visible_solution_and_a_missing_one(browser, tmp_path):
    """``_check_hidden_solutions`` passes a solution behind a toggle that opens, and names a solution shown
    without a click and a solution cell the page lost."""
    import types

    nb = types.SimpleNamespace(cells=[types.SimpleNamespace(cell_type="code", source="# SOLUTION START\nx = 1")])
    code = "<div class='cell_input'># SOLUTION START x = 1</div>"
    pages = {
        "toggle": f"<div class='cell'><details><summary>show</summary>{code}</details></div>",
        "visible": f"<div class='cell'>{code}</div>",
        "lost": "<div class='cell'><div class='cell_input'>y = 2</div></div>",
    }
    found = {}
    for name, body in pages.items():
        path = tmp_path / f"{name}.html"
        path.write_text(f"<html><body>{body}</body></html>")
        browser.get(path.as_uri())
        found[name] = []
        _check_hidden_solutions(browser, nb, found[name])
    assert found["toggle"] == []
    assert found["visible"] == ["exercise solution 0 is visible without a click (tag its cell hide-input)"]
    assert found["lost"] == ["1 solution cells in the notebook, 0 on the page"]


def test_column_check_measures_each_width_after_a_resize(browser, tmp_path):
    """``_check_column_fit`` re-measures the loaded page at each width: a column that narrows as the window widens
    (planted) overflows at 1920 px only, one that widens overflows at 1280 px only."""
    line = "<div class='output stream'><pre style='overflow: auto'>" + "x" * 100 + "</pre></div>"
    for main_width, only in (("calc(2400px - 100vw)", 1920), ("calc(100vw - 600px)", 1280)):
        path = tmp_path / f"resize{only}.html"
        path.write_text(f"<html><body><main style='width: {main_width}'>{line}</main></body></html>")
        browser.get(path.as_uri())
        problems = []
        _check_column_fit(browser, problems)
        assert [p.split(":")[0] for p in problems] == [f"wider than the column at {only} px"], problems
