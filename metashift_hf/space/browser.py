"""Headless Chromium for the Space's checks (the browser tests, the docs' screenshots, the first-page benchmark):
Debian's ``chromium`` driven by Playwright's Python API (``executable_path``; Playwright downloads no browser).

A view is read once its marker is in the DOM, waited for in real time: Chromium's ``--dump-dom`` with a
virtual-time budget lets virtual time run on while the app's answer is still on its way, so a slow machine
would read a view that has not rendered yet.
"""

from __future__ import annotations

import contextlib
import shutil
import time
from dataclasses import dataclass
from typing import Any, Iterator

from ..core.errors import MetashiftError


FLAGS = (
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
)
TIMEOUT_S = 120.0  # a view's rows and facts load on its first request; a busy 2-core machine is slow


def chromium() -> str:
    path = shutil.which("chromium")
    if path is None:
        raise MetashiftError(
            "Debian's chromium is not installed (the Space's browser checks drive it headless)",
            "run scripts/install.sh, or apt-get install chromium",
        )
    return path


# What the app rendered: Gradio's element, not the page's scripts (its embedded config holds every initial value)
_RENDERED = "(() => { const app = document.querySelector('gradio-app'); return (app || document.body).innerHTML; })()"


@dataclass
class View:
    html: str  # the rendered app's DOM, serialised (text escaped as the browser holds it)
    seconds: float  # from the navigation's start to the marker in the DOM
    title: str
    images_from_x: int  # <img src="x"> elements: a hostile name that became markup


class Browser:
    """One headless Chromium; each view in a fresh page of its own context (no state shared between views)."""

    def __init__(self, browser: Any) -> None:
        self._browser = browser

    def view(
        self,
        url: str,
        marker: str,
        *,
        timeout_s: float = TIMEOUT_S,
        screenshot: str | None = None,
        size: tuple[int, int] = (1280, 1000),
    ) -> View:
        """Open ``url``, wait until ``marker`` is in the DOM, return it (and a ``screenshot`` PNG of the window)."""
        context = self._browser.new_context(viewport={"width": size[0], "height": size[1]})
        try:
            page = context.new_page()
            start = time.perf_counter()
            page.goto(url, timeout=timeout_s * 1000)
            try:
                page.wait_for_function(f"m => {_RENDERED}.includes(m)", arg=marker, timeout=timeout_s * 1000)
            except Exception as exc:  # Playwright's timeout: say which view and what it showed
                raise MetashiftError(
                    f"{url}: {marker!r} never rendered in {timeout_s:g} s ({type(exc).__name__}); the page ends:\n"
                    + page.evaluate(_RENDERED)[-3000:],
                    "see the app's log",
                ) from None
            seconds = time.perf_counter() - start
            if screenshot:
                page.wait_for_timeout(300)  # let the last paint land
                page.screenshot(path=screenshot)
            return View(page.evaluate(_RENDERED), seconds, page.title(), page.locator('img[src="x"]').count())
        finally:
            context.close()


@contextlib.contextmanager
def browser() -> Iterator[Browser]:
    """A headless Chromium (Debian's, through Playwright), closed on exit."""
    from playwright.sync_api import sync_playwright  # heavy optional library (tests, scripts): lazy

    path = chromium()
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=path, headless=True, args=list(FLAGS))
        try:
            yield Browser(b)
        finally:
            b.close()
