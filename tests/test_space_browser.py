"""The Space end to end in a real browser: `metashift-hf space` writes the folder, its app.py serves a small export
and a results folder on 127.0.0.1, and Debian's Chromium (scripts/install.sh installs it) renders each view
headless, driven by Playwright's Python API (executable_path; no browser download, no network beyond loopback).

Chromium is required, not optional: a missing browser fails with the command that installs it (CI runs this)."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest

from fixtures import browser
from fixtures.space import EVIL_TASK, HOSTILE, TASKS


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def served(space_world, tmp_path_factory):
    """The Space folder written by the CLI, its app.py serving the small export on a loopback port, and a
    headless Chromium."""
    assert shutil.which("chromium"), "the Space's browser tests need Debian's chromium: run scripts/install.sh"
    root = tmp_path_factory.mktemp("space-app")
    space = root / "S"
    subprocess.run(
        [sys.executable, "-m", "metashift_hf", "space", "--from", str(space_world.export), "--results"]
        + [str(space_world.results), "--out", str(space)],
        check=True,
        capture_output=True,
    )
    port = free_port()
    log = open(root / "app.log", "w")
    proc = subprocess.Popen(
        [sys.executable, str(space / "app.py"), "--port", str(port), "--host", "127.0.0.1"],
        stdout=log,
        stderr=subprocess.STDOUT,
        env={**os.environ, "GRADIO_ANALYTICS_ENABLED": "False", "HF_HUB_OFFLINE": "1"},
    )
    url = f"http://127.0.0.1:{port}/"
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                with urllib.request.urlopen(url, timeout=5) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            assert proc.poll() is None, (root / "app.log").read_text()[-3000:]
            assert time.monotonic() < deadline, "the Space did not start in 120 s"
            time.sleep(0.5)
        with browser.browser() as b:
            yield url, b
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        log.close()


def test_every_view_renders_in_chromium_and_hostile_names_stay_text(served):
    """~40 s (export fixture, app start, four page loads): the browser test CI runs (not slow). Gradio renders
    the selected tab only, so each view is its own page load (the links the views make)."""
    url, b = served
    first = b.view(url, TASKS[0]).html
    for task in (*TASKS, EVIL_TASK):  # the tasks table (a gr.Dataframe) names every exported task
        assert task in first
    assert 'href="https://arxiv.org/abs/2202.06523"' in first and "<svg" in first  # About: citation, picture
    phone = b.view(url, TASKS[0], size=(390, 844), evaluate=FITS).found  # the first page on a phone
    assert phone["page"] <= phone["window"], phone
    dom = b.view(f"{url}?view=classes&cls=dog&task={TASKS[0]}&node=dog(sofa0)", "data:image/jpeg").html
    assert "Meta-graph of dog" in dom and dom.count('class="ms-node"') >= 2 and "<svg" in dom  # the meta-graph
    assert "<h4>dog(sofa0)</h4>" in dom and dom.count('src="data:image/jpeg;base64,') >= 1  # a node's images
    board = b.view(f"{url}?view=leaderboard", "tiny-net")  # the board is read when its view opens
    assert results_in(board.html, TASKS) and "baseline:majority" in board.html
    assert "&lt;script&gt;document.title=" in board.html and "<script>document" not in board.html  # hostile model
    assert "pwned" not in board.title
    assert "mean rank" in board.html and "≤ baseline" in board.html  # the models' summary
    assert 'id="ms-board-csv"' in board.html  # the CSV download (its file: tests/test_space.py)
    task = b.view(f"{url}?view=task&task={TASKS[0]}", "gradio_api/file=", evaluate=GALLERIES).found
    assert task["ms-gallery"] >= 4 and task["ms-figures"] >= 2, task  # a few images per group, the card's figures
    page = b.view(f"{url}?view=task&task={EVIL_TASK}", f"Task {EVIL_TASK}")
    assert "&lt;img src=x onerror=" in page.html and HOSTILE not in page.html  # the hostile context is text
    assert page.images_from_x == 0 and "pwned" not in page.title  # no element was made of it, nothing ran


# Images each gallery of the Task tab shows (served by Gradio from the app's temporary folder)
GALLERIES = "() => Object.fromEntries(['ms-gallery', 'ms-figures'].map(id => [id, document.querySelectorAll(`#${id} img`).length]))"


# The page's own width against the window's (a table scrolls inside its own frame, the page does not)
FITS = "() => ({page: document.documentElement.scrollWidth, window: window.innerWidth})"


def results_in(html: str, tasks) -> bool:
    return all(t in html for t in tasks)


def test_every_table_header_is_readable_in_dark_mode(served):
    """Issue 44 part 3: the review measured contrast 1.0 for every table header with ?__theme=dark. Each header
    cell (the tasks and leaderboard gr.Dataframe, the task page's HTML tables) is checked in Chromium against the
    WCAG AA threshold for text, 4.5."""
    url, b = served
    seen = []
    for query, marker in (
        ("?__theme=dark", TASKS[0]),
        (f"?__theme=dark&view=task&task={TASKS[1]}", f"Task {TASKS[1]}"),
        ("?__theme=dark&view=leaderboard", "tiny-net"),
    ):
        found = b.view(url + query, marker, evaluate=browser.HEADER_CONTRAST).found
        assert found, f"{query}: no table header found"
        seen += [(query, h["text"], round(h["ratio"], 2)) for h in found]
    low = [h for h in seen if h[2] < 4.5]
    assert not low, low
    assert any(h[1] == "task" for h in seen) and any(h[1] == "contexts" for h in seen)


def test_the_upload_route_refuses_a_file(served):
    """Cases S-46 / S-47 (D1): anyone could upload any file of any size through Gradio's upload route (60 MB in
    0.4 s), also from a foreign web origin. The app takes no file: 5 kB is refused, with or without an Origin."""
    url, _ = served
    body_file = b"x" * 5000
    boundary = "ms-boundary"
    body = (
        (
            f'--{boundary}\r\nContent-Disposition: form-data; name="files"; filename="big.txt"\r\n'
            "Content-Type: text/plain\r\n\r\n"
        ).encode()
        + body_file
        + f"\r\n--{boundary}--\r\n".encode()
    )
    for origin in (None, "http://evil.example"):
        headers = {"Content-Type": f"multipart/form-data; boundary={boundary}"}
        if origin:
            headers["Origin"] = origin
        req = urllib.request.Request(f"{url}gradio_api/upload", data=body, headers=headers, method="POST")
        try:
            with urllib.request.urlopen(req, timeout=30) as r:
                status, text = r.status, r.read().decode(errors="replace")
        except urllib.error.HTTPError as exc:
            status, text = exc.code, exc.read().decode(errors="replace")
        assert status == 413 and "big.txt" not in text, (origin, status, text[:300])


@pytest.mark.slow
def test_leaderboard_drilldown_distances_and_refusals_in_chromium(served):
    """~30 s: the leaderboard's per-group drill-down, the Distances view and a tampered task's refusal."""
    url, b = served
    drill = b.view(f"{url}?view=leaderboard&model=tiny-net&task={TASKS[0]}", "tiny-net on").html
    assert "Wilson 95% intervals" in drill and "context bugs" in drill and "dog(grass0)" in drill
    assert 'class="ms-chart"' in drill and 'class="ms-ci"' in drill  # the per-context chart with its intervals
    assert 'class="ms-relation"' in drill  # accuracy against distance to training
    dist = b.view(f"{url}?view=distances&cls=cat&task={TASKS[0]}", "Overlap edge").html
    assert "disconnected" in dist and 'class="ms-d"' in dist  # the published pair's d, then the facts
    bad = b.view(f"{url}?view=classes&cls=cat&task={EVIL_TASK}", "error: ").html
    assert "the card declares" in bad and "fix: " in bad
