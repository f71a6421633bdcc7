"""Headless Chromium (Debian's ``chromium``; no browser download) for the Space's checks: the browser tests, the
screenshots of the docs and the first-page benchmark load a view with the same flags, each in its own profile
folder, and read the DOM after the page's scripts ran (``--dump-dom``) or a picture of it (``--screenshot``)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Sequence

from ..core.errors import MetashiftError


FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
)


def chromium() -> str:
    path = shutil.which("chromium")
    if path is None:
        raise MetashiftError(
            "Debian's chromium is not installed (the Space's browser checks drive it headless)",
            "run scripts/install.sh, or apt-get install chromium",
        )
    return path


def run(
    url: str,
    profile: "str | os.PathLike",
    *extra: str,
    budget_ms: int = 15000,
    prefix: Sequence[str] = (),
    timeout: float = 180,
) -> subprocess.CompletedProcess:
    """Chromium on ``url`` with ``extra`` flags (``--dump-dom``, ``--screenshot=FILE``), ``budget_ms`` of virtual time
    for the page's scripts; ``prefix`` runs it under another command (``taskset -c 0,1``)."""
    args = [*prefix, chromium(), *FLAGS, f"--user-data-dir={Path(profile)}", f"--virtual-time-budget={budget_ms}"]
    return subprocess.run([*args, *extra, url], capture_output=True, text=True, timeout=timeout)


def dump_dom(url: str, profile: "str | os.PathLike", **kw) -> str:
    """The page's DOM after its scripts ran."""
    done = run(url, profile, "--dump-dom", **kw)
    if done.returncode != 0:
        raise MetashiftError(f"chromium failed on {url}: {done.stderr[-500:]}", "see chromium's message above")
    return done.stdout


def rendered(url: str, profile: "str | os.PathLike", marker: str, tries: int = 4, **kw) -> str:
    """The DOM once ``marker`` is in it (a view's rows and facts load on its first request)."""
    dom = ""
    for _ in range(tries):
        dom = dump_dom(url, profile, **kw)
        if marker in dom:
            return dom
    raise MetashiftError(f"{url}: {marker!r} never rendered; the page ends:\n{dom[-3000:]}", "see the app's log")
