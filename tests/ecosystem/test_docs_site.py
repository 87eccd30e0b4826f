"""The docs site as a reader gets it: ``mkdocs build --strict`` builds it without a warning,
every link inside it resolves (pages and anchors, the API reference included), every link
out of it is listed in ``docs_external_links.txt`` (listed, never fetched: the tests use no
network), and in headless Chromium every page renders, the navigation and the search work.

The browser is Debian's ``chromium`` (.ci/run installs it), driven by Playwright's Python
package (the dev extra; Playwright's own browser downloads are never used). Without either,
the browser tests skip, saying so; under ``CI=true`` they fail. The site is served over HTTP
from 127.0.0.1, as a reader's file server would serve it; a page that asks for anything
beyond the site (a CDN's script or font) fails the test, since it would not render offline.

``AIOKAFKA_NG_DOCS_SCREENSHOTS=DIR`` saves screenshots of the home page and an API page
there (``home.png``, ``api-producer.png``).
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from html.parser import HTMLParser
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urljoin, urlsplit

import pytest

ROOT = Path(__file__).resolve().parents[2]
EXTERNAL_LINKS = Path(__file__).with_name("docs_external_links.txt")
IN_CI = os.environ.get("CI", "").strip().lower() in {"1", "true", "yes"}


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The site, built once for this file's tests; the build itself must be clean."""
    out = tmp_path_factory.mktemp("docs") / "site"
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,  # a hang guard only
    )
    assert done.returncode == 0, done.stderr
    assert "WARNING" not in done.stderr, done.stderr
    return out


def test_mkdocs_build_strict(site: Path) -> None:
    assert (site / "configuration" / "index.html").exists()
    producer = (site / "api" / "producer" / "index.html").read_text()
    # The API reference is the docstrings: Producer.send's own words, its reST made Markdown.
    assert 'id="aiokafka_ng.producer.Producer.send"' in producer
    assert "Queue one record; return its delivery future" in producer
    assert ":class:" not in producer and ":meth:" not in producer
    # An attribute documented by "#:" comments (Sphinx's form) shows them.
    config = (site / "api" / "config" / "index.html").read_text()
    assert 'id="aiokafka_ng.config.ClientConfig.metadata_recovery_strategy"' in config
    assert "KIP-1102" in config
    # The class docstring's literal block (reST "::") is a highlighted Python block.
    assert (
        '<code><span class="k">async</span> <span class="k">with</span> <span class="n">Producer'
        in producer
    )


class _Page(HTMLParser):
    """The ids and the link targets of one HTML page."""

    def __init__(self) -> None:
        super().__init__()
        self.ids: set[str] = set()
        self.links: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = dict(attrs)
        if values.get("id"):
            self.ids.add(values["id"] or "")
        if values.get("name") and tag == "a":
            self.ids.add(values["name"] or "")
        attr = {"a": "href", "link": "href", "img": "src", "script": "src"}.get(tag)
        if attr and values.get(attr):
            self.links.append(values[attr] or "")


def parse_site(site: Path) -> dict[str, _Page]:
    """URL path of each page ("/", "/quickstart/", ...) -> its ids and links."""
    pages = {}
    for html in sorted(site.rglob("*.html")):
        page = _Page()
        page.feed(html.read_text())
        path = "/" + html.relative_to(site).as_posix()
        pages[path.removesuffix("index.html")] = page
    return pages


def broken_links(site: Path) -> list[str]:
    """Every link inside the site whose page, file or anchor does not exist."""
    pages = parse_site(site)
    broken = []
    for path, page in pages.items():
        for link in page.links:
            parts = urlsplit(link)
            if parts.scheme or parts.netloc:
                continue  # external: test_external_links_are_listed
            target = unquote(urljoin(path, parts.path)) if parts.path else path
            if target.endswith("/") or not Path(target).suffix:
                target = target.rstrip("/") + "/"
                exists = target in pages
            else:
                exists = (site / target.lstrip("/")).is_file()
            if not exists:
                broken.append(f"{path}: {link} (no {target})")
            elif parts.fragment and unquote(parts.fragment) not in pages.get(target, _Page()).ids:
                broken.append(f"{path}: {link} (no #{parts.fragment} in {target})")
    return broken


def test_every_link_inside_the_site_resolves(site: Path) -> None:
    assert {"/", "/api/producer/", "/quickstart/"} <= set(parse_site(site))
    broken = broken_links(site)
    assert not broken, "\n".join(broken)


def test_broken_links_are_found(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "index.html").write_text('<h1 id="top">A</h1><a href="../#intro">x</a>')
    (tmp_path / "index.html").write_text(
        '<h2 id="intro">I</h2><a href="a/#top">ok</a><a href="a/#gone">no anchor</a>'
        '<a href="b/">no page</a><img src="img/x.png"><a href="https://example.com/">out</a>'
    )
    assert broken_links(tmp_path) == [
        "/: a/#gone (no #gone in /a/)",
        "/: b/ (no /b/)",
        "/: img/x.png (no /img/x.png)",
    ]


def external_links(site: Path) -> set[str]:
    return {
        link
        for page in parse_site(site).values()
        for link in page.links
        if urlsplit(link).scheme in ("http", "https")
    }


def test_external_links_are_listed(site: Path) -> None:
    """Links out of the site are not fetched here (no network): each is listed for review in
    docs_external_links.txt, and a new one fails until it is added there."""
    listed = {
        line.strip()
        for line in EXTERNAL_LINKS.read_text().splitlines()
        if line.strip() and not line.startswith("#")
    }
    found = external_links(site)
    assert found - listed == set(), f"add to {EXTERNAL_LINKS.name}: {sorted(found - listed)}"
    assert listed - found == set(), f"no longer linked: {sorted(listed - found)}"


# -- Chromium ------------------------------------------------------------------------------


def chromium_binary() -> str | None:
    # Debian's /usr/bin/chromium is a shell wrapper; the browser itself is beside its libs.
    for candidate in ("/usr/lib/chromium/chromium", shutil.which("chromium")):
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    return None


def need_browser() -> tuple[Any, str]:
    """Playwright's sync API and the Chromium binary, or skip (fail under CI=true)."""
    missing = []
    try:
        from playwright import sync_api
    except ImportError:
        missing.append("the playwright package (the dev extra)")
    binary = chromium_binary()
    if binary is None:
        missing.append("Chromium (Debian: apt-get install chromium)")
    if missing:
        reason = "the docs' browser tests need " + " and ".join(missing)
        if IN_CI:
            pytest.fail(reason, pytrace=False)
        pytest.skip(reason)
    assert binary is not None
    return sync_api, binary


@pytest.fixture(scope="module")
def served(site: Path) -> Iterator[str]:
    """The site over HTTP on 127.0.0.1, as a static file server serves it."""

    class Quiet(SimpleHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Quiet, directory=site))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


class Browser:
    """One Chromium page that records what goes wrong: script errors, console errors,
    failed requests and requests beyond the site (those are refused)."""

    def __init__(self, page: Any, base: str) -> None:
        self.page = page
        self.problems: list[str] = []
        page.on("pageerror", lambda exc: self.problems.append(f"script error: {exc}"))
        page.on(
            "console",
            lambda msg: msg.type == "error" and self.problems.append(f"console: {msg.text}"),
        )
        page.on("requestfailed", self._failed)
        page.on(
            "response",
            lambda r: r.status >= 400 and self.problems.append(f"HTTP {r.status}: {r.url}"),
        )

        def route(route: Any) -> None:
            if route.request.url.startswith(base):
                route.continue_()
            else:
                self.problems.append(f"asked beyond the site: {route.request.url}")
                route.abort()

        page.route("**/*", route)

    def _failed(self, request: Any) -> None:
        # ERR_ABORTED: the page went on before a request it made ended (the search index
        # still loading when the test clicks a link), or the route above refused it.
        if request.failure != "net::ERR_ABORTED":
            self.problems.append(f"request failed: {request.url} {request.failure}")


@pytest.fixture(scope="module")
def browser(served: str) -> Iterator[Browser]:
    sync_api, binary = need_browser()
    with sync_api.sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=binary, headless=True)
        try:
            page = chromium.new_page(viewport={"width": 1280, "height": 900})
            page.set_default_timeout(30_000)  # a hang guard only; pages load in milliseconds
            yield Browser(page, served)
        finally:
            chromium.close()


def nav_pages(site: Path) -> list[str]:
    """Every page of the site, as URL paths."""
    return [path for path in parse_site(site) if path.endswith("/") and path != "/404.html"]


def test_every_page_renders(browser: Browser, served: str, site: Path) -> None:
    page = browser.page
    paths = nav_pages(site)
    assert len(paths) >= 20, paths
    for path in paths:
        page.goto(served + path.lstrip("/"))
        page.wait_for_load_state("load")
        heading = page.locator("h1").first
        assert heading.is_visible(), path
        assert heading.inner_text().strip(), path
        # The navigation bar is laid out (its CSS loaded) and lists the pages.
        assert page.locator(".navbar .nav-link", has_text="Quickstart").is_visible(), path
        # Code blocks are highlighted by Pygments' stylesheet (a keyword is coloured).
        if page.locator(".highlight .kn").count():
            colour = page.locator(".highlight .kn").first.evaluate("e => getComputedStyle(e).color")
            assert colour != "rgb(0, 0, 0)", path
    assert not browser.problems, "\n".join(browser.problems)


def test_navigation_and_screenshots(browser: Browser, served: str) -> None:
    page = browser.page
    page.goto(served)
    assert page.locator("h1").first.inner_text().strip() == "aiokafka_ng"
    shots = os.environ.get("AIOKAFKA_NG_DOCS_SCREENSHOTS")
    if shots:
        Path(shots).mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(Path(shots) / "home.png"), full_page=False)

    page.locator(".navbar .nav-link", has_text="Quickstart").click()
    page.wait_for_url(re.compile(r"/quickstart/$"))
    assert page.locator("h1").first.inner_text().strip() == "Quickstart"
    # The page's table of contents leads to a section on the page.
    page.locator(".bs-sidebar a", has_text="Consume").first.click()
    page.wait_for_url(re.compile(r"/quickstart/#consume$"))
    assert page.locator("#consume").is_visible()

    # The API reference's menu (a drop-down), then a page of it.
    page.locator(".navbar .dropdown-toggle", has_text="API reference").click()
    page.locator(".navbar .dropdown-menu a", has_text="Producer").click()
    page.wait_for_url(re.compile(r"/api/producer/$"))
    send = page.locator('[id="aiokafka_ng.producer.Producer.send"]')
    assert send.is_visible()
    if shots:
        page.screenshot(path=str(Path(shots) / "api-producer.png"), full_page=False)
    # "Next" goes on through the nav order.
    page.locator(".navbar a[rel=next]").first.click()
    page.wait_for_url(re.compile(r"/api/consumer/$"))
    assert page.locator("h1").first.inner_text().strip() == "Consumer"
    assert not browser.problems, "\n".join(browser.problems)


def test_search_finds_pages(browser: Browser, served: str) -> None:
    page = browser.page
    # The theme's search listens to the box only once its worker has built the index, which
    # it logs (and then tells the page): a reader who types sooner gets results from the
    # next key on.
    with page.expect_console_message(lambda msg: "search ready" in msg.text):
        page.goto(served)
    page.locator(".navbar .nav-link", has_text="Search").click()
    query = page.locator("#mkdocs-search-query")
    query.wait_for(state="visible")
    query.press_sequentially("send_many")  # the theme searches on each key
    results = page.locator("#mkdocs-search-results a")
    results.first.wait_for(state="visible")
    hrefs = [results.nth(i).get_attribute("href") or "" for i in range(results.count())]
    assert any("quickstart/" in href for href in hrefs), hrefs
    assert any("api/producer/" in href for href in hrefs), hrefs
    # Result titles are text (the API pages' headings carry no markup into the index).
    assert "<code" not in results.all_inner_texts().__str__()
    # A result leads to its page.
    page.locator('#mkdocs-search-results a[href$="api/producer/"]').click()
    page.wait_for_url(re.compile(r"/api/producer/"))
    assert page.locator("h1").first.inner_text().strip() == "Producer"

    # "search ready" is the worker's log line, and the box listens only once the page has
    # handled the worker's next message: keys typed in between are lost (ci36 and ci41:
    # all six of "zzzqqq", no answer at all). The query in the address is searched when
    # that message is handled, so nothing is lost.
    with page.expect_console_message(lambda msg: "search ready" in msg.text):
        page.goto(f"{served}?q=zzzqqq")  # the theme opens its search dialog for it
    assert page.locator("#mkdocs-search-query").input_value() == "zzzqqq"
    page.locator("#mkdocs-search-results", has_text="No results found").wait_for()
    assert not browser.problems, "\n".join(browser.problems)
