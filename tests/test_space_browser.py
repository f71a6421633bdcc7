"""The Space end to end in a real browser: `metashift-hf space` writes the folder, its app.py serves a small export
and a results folder on 127.0.0.1, and Debian's Chromium (scripts/install.sh installs it) renders each view
headless (`--dump-dom`, the DOM after the page's scripts ran). No browser download, no network beyond loopback.

Chromium is required, not optional: a missing browser fails with the command that installs it (CI runs this)."""

from __future__ import annotations

import re
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from fixtures.space import EVIL_TASK, HOSTILE, TASKS
from metashift_hf.space import browser


def chromium() -> str:
    path = shutil.which("chromium")
    assert path, (
        "Debian's chromium is needed for the Space's browser tests: run scripts/install.sh (apt-get install chromium)"
    )
    return path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rendered(url: str, profile: Path, marker: str) -> str:
    chromium()  # a missing browser fails here with the command that installs it (never a skip)
    return browser.rendered(url, profile, marker)


@pytest.fixture(scope="module")
def served(space_world, tmp_path_factory):
    """The Space folder written by the CLI, its app.py serving the small export on a loopback port."""
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
        env={**__import__("os").environ, "GRADIO_ANALYTICS_ENABLED": "False", "HF_HUB_OFFLINE": "1"},
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
        yield url, root / "profile"
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        log.close()


def test_every_view_renders_in_chromium_and_hostile_names_stay_text(served):
    """~40 s (export fixture, app start, four page loads): the browser test CI runs (not slow). Gradio renders
    the selected tab only, so each view is its own page load (the links the views make)."""
    url, profile = served
    first = rendered(url, profile, 'id="ms-tasks"')
    for task in (*TASKS, EVIL_TASK):  # the tasks table names every exported task
        assert f">{task}</a>" in first
    dom = rendered(f"{url}?view=classes&cls=dog&task={TASKS[0]}&node=dog(sofa0)", profile, "data:image/jpeg")
    assert "Meta-graph of dog" in dom and dom.count('class="ms-node"') >= 2 and "<svg" in dom  # the meta-graph
    assert "<h4>dog(sofa0)</h4>" in dom and dom.count('src="data:image/jpeg;base64,') >= 1  # a node's images
    board = rendered(f"{url}?view=leaderboard", profile, 'id="ms-board"')
    assert "baseline:majority" in board and ">tiny-net<" in board and all(f">{t}</a>" in board for t in TASKS)
    assert "&lt;script&gt;document.title=" in board and "<script>document" not in board  # a hostile model name
    page = rendered(f"{url}?view=task&task={EVIL_TASK}", profile, f"Task {EVIL_TASK}")
    assert "onerror=" in page and '<img src="x"' not in page and "<img src=x" not in page  # shown as text
    assert "&lt;img src=x onerror=" in page
    title = re.search(r"<title>(.*?)</title>", page, re.S)
    assert title and "pwned" not in title.group(1)
    assert HOSTILE not in page


@pytest.mark.slow
def test_leaderboard_drilldown_distances_and_refusals_in_chromium(served):
    """~30 s: the leaderboard's per-group drill-down, the Distances view and a tampered task's refusal."""
    url, profile = served
    drill = rendered(f"{url}?view=leaderboard&model=tiny-net&task={TASKS[0]}", profile, "tiny-net on")
    assert "Wilson 95% intervals" in drill and "context bugs" in drill and "dog(grass0)" in drill
    dist = rendered(f"{url}?view=distances&cls=cat&task={TASKS[0]}", profile, "Overlap edge")
    assert "disconnected" in dist
    bad = rendered(f"{url}?view=classes&cls=cat&task={EVIL_TASK}", profile, "error: ")
    assert "the card declares" in bad and "fix: " in bad
