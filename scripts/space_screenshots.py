"""Screenshots of the Space's views for the docs (docs/figures/space-*.png), taken by headless Chromium from the app
that `metashift-hf space` writes, serving an export folder (and a zoo's results) on 127.0.0.1.

Each view is shot once its marker is in the DOM (so the picture shows the view, not a spinner; headless Chromium
through Playwright, tests/fixtures/browser.py). ``docs/figures/space-screenshots.json`` records each figure: the view's query, its marker,
the PNG's size and sha256; ``--check`` (tests/test_space.py runs it, no browser needed) fails when a figure is
missing or differs from the record, or when no doc shows it.

    metashift-hf demo                                                   # demo-output/hub
    metashift-hf evaluate --model efficientnet-lite0 --tasks demo-output/hub/metashift-imagenet-5 \\
        --out demo-output/zoo                                           # a leaderboard to show
    python scripts/space_screenshots.py --from demo-output/hub --results demo-output/zoo --write
    python scripts/space_screenshots.py --check
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from pathlib import Path


ROOT = Path(__file__).resolve().parents[1]
FIGURES = ROOT / "docs" / "figures"
RECORD = FIGURES / "space-screenshots.json"
DOCS = (ROOT / "README.md", ROOT / "docs" / "hub.md")


def views(source: str, results: list[str]) -> list[tuple]:
    """(figure name, query, marker or markers[, height]) per view, the subjects picked from the data (most edges, largest subset)."""
    from metashift_hf.space import app, graphs, index  # only --write needs the app: --check stays a quick test

    data = app.load(source, results)
    ix = data.index
    # the class whose meta-graph has the most published edges (a drawing, not a grid), in its widest task
    graphs_ = [graphs.class_graph(ix.task(index.class_tasks(ix, c)[0]), c) for c in ix.classes]
    g = max(graphs_, key=lambda x: (len(x.edges), len(x.nodes), x.cls))
    cls, task = g.cls, g.task_id
    node = max(g.nodes, key=lambda n: (n.n_images, n.subset)).subset
    first = ix.tasks[0].task_id
    # the task page with the fewest groups: its gallery and figures fit the picture
    fewest = min(ix.tasks, key=lambda t: (sum(len(g) for g in t.spec.groups().values()), t.task_id)).task_id
    out = [
        ("space-tasks", {}, first),
        ("space-task", {"view": "task", "task": fewest}, "gradio_api/file=", 2000),
        ("space-classes", {"view": "classes", "cls": cls, "task": task, "node": node}, "data:image/"),
        ("space-distances", {"view": "distances", "cls": cls, "task": task}, "Overlap edge"),
    ]
    models = data.results.models()
    if models:
        board_task = sorted(set(data.results.board["task"]))[0]
        drill = {"view": "leaderboard", "model": models[0], "task": board_task}
        ready = ("Wilson 95%", "mean rank")  # the drill-down and the models summary both in
        out.append(("space-leaderboard", drill, ready, 2200))
        out.append(("space-leaderboard-dark", {**drill, "__theme": "dark"}, ready, 2200))
    return out


def png_size(path: Path) -> tuple[int, int]:
    head = path.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n", f"{path} is not a PNG"
    return struct.unpack(">II", head[16:24])


def write(source: str, results: list[str], width: int, height: int) -> None:
    sys.path.insert(0, str(ROOT / "tests"))  # the browser helper is the tests' (tests/fixtures/browser.py)
    from fixtures import browser  # only --write drives the browser: --check stays a quick test

    root = Path(tempfile.mkdtemp(prefix="space-shots-"))
    try:
        space = root / "S"
        subprocess.run(
            [sys.executable, "-m", "metashift_hf", "space", "--from", source, "--out", str(space)]
            + [a for r in results for a in ("--results", r)],
            check=True,
        )
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        proc = subprocess.Popen(
            [sys.executable, str(space / "app.py"), "--port", str(port), "--host", "127.0.0.1"],
            env={**os.environ, "GRADIO_ANALYTICS_ENABLED": "False"},
        )
        url = f"http://127.0.0.1:{port}/"
        try:
            for _ in range(600):
                try:
                    urllib.request.urlopen(url, timeout=5).read()
                    break
                except OSError:
                    time.sleep(0.2)
            record = []
            with browser.browser() as b:
                for name, query, marker, *tall in views(source, results):
                    page = url + ("?" + urllib.parse.urlencode(query) if query else "")
                    png = FIGURES / f"{name}.png"
                    b.view(page, marker, screenshot=str(png), size=(width, tall[0] if tall else height))
                    w, h = png_size(png)
                    digest = hashlib.sha256(png.read_bytes()).hexdigest()
                    record.append(
                        {"figure": png.name, "query": query, "marker": marker, "size": [w, h], "sha256": digest}
                    )
                    print(f"wrote {png} ({w}x{h})")
        finally:
            proc.terminate()
            proc.wait(timeout=30)
        RECORD.write_text(json.dumps(record, indent=2) + "\n")
    finally:
        shutil.rmtree(root, ignore_errors=True)


def check() -> list[str]:
    """Problems with the stored screenshots: missing, changed since recorded, or shown by no doc."""
    if not RECORD.is_file():
        return [f"{RECORD} is missing: run scripts/space_screenshots.py --write"]
    docs = "\n".join(p.read_text(encoding="utf-8") for p in DOCS)
    problems = []
    for item in json.loads(RECORD.read_text()):
        png = FIGURES / item["figure"]
        if not png.is_file():
            problems.append(f"{png} is missing")
            continue
        if list(png_size(png)) != item["size"] or hashlib.sha256(png.read_bytes()).hexdigest() != item["sha256"]:
            problems.append(f"{png} differs from {RECORD.name}: run --write again")
        if f"figures/{item['figure']}" not in docs:
            problems.append(f"{item['figure']} is shown by none of {', '.join(p.name for p in DOCS)}")
    return problems


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--from", dest="source", default="demo-output/hub")
    p.add_argument("--results", action="append", default=[])
    p.add_argument("--width", type=int, default=1280)
    p.add_argument("--height", type=int, default=1000)
    mode = p.add_mutually_exclusive_group(required=True)
    mode.add_argument("--write", action="store_true")
    mode.add_argument("--check", action="store_true")
    args = p.parse_args()
    if args.write:
        write(args.source, args.results, args.width, args.height)
    problems = check()
    for line in problems:
        print(line, file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
