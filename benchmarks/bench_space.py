"""The Space's first page on a full-scale index: thousands of published tasks (issue 35: under 2 s on 2 cores).

A synthetic export root of ``--tasks`` task repos is made from one real exported repo (its README and its
``<config>/shift_spec.json`` with the task id, the shift type and the sizes varied, seeded); the first page reads
nothing else (no row, no image). Then, pinned to 2 cores (cores 0 and 1, with every child process):

- ``index``: ``metashift_hf.space.index.load_index`` (every spec read through ``metashift_hf.shift_spec``), the
  app's start-up work, best of ``--repeat``;
- ``first page (python)``: the tasks table's first page as HTML (what the page carries), best of ``--repeat``;
- ``first page (chromium)``: the app serving the root (``python S/app.py`` written by ``metashift-hf space``, pinned
  to 2 cores), headless Chromium (tests/fixtures/browser.py: Playwright, Debian's chromium): seconds from the
  navigation's start to the tasks table in the DOM, in a fresh browser context each time (no page state kept;
  the HTTP cache of the one browser process is warm after a first load), median of ``--repeat``; and a task's
  page (``?view=task&task=...``) once.

    python benchmarks/bench_space.py --template demo-output/hub/metashift-paper-dg-cat-dog-1 --tasks 5000
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path


sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))  # the browser helper is the tests'

from fixtures import browser  # noqa: E402
from metashift_hf.space import app, index, repo  # noqa: E402


SHIFTS = ("marginal", "conditional", "joint", "none")


def synthetic_export(template: Path, out: Path, n: int, seed: int = 0) -> Path:
    """``n`` task repos made from ``template`` (README + one spec each), task ids ``synthetic-<i>``."""
    (config,) = [p for p in template.iterdir() if (p / "shift_spec.json").is_file()]
    base = json.loads((config / "shift_spec.json").read_text())
    readme = (template / "README.md").read_text()
    rng = random.Random(seed)
    for i in range(n):
        task = f"synthetic-{i:05d}"
        spec = dict(base, task_id=task, shift_type=rng.choice(SHIFTS))
        spec["split_sizes"] = {k: rng.randint(50, 5000) for k in base["split_sizes"]}
        spec["members"] = None  # the varied sizes have no rows behind them: the first page reads no row
        folder = out / f"metashift-{task}" / task
        folder.mkdir(parents=True)
        (folder / "shift_spec.json").write_text(json.dumps(spec, sort_keys=True, indent=2))
        (folder.parent / "README.md").write_text(readme.replace(config.name, task))
    return out


def best(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def pin_two_cores() -> bool:
    """This process and every child (the app, Playwright, Chromium) on cores 0 and 1."""
    if hasattr(os, "sched_setaffinity") and (os.cpu_count() or 1) >= 2:
        os.sched_setaffinity(0, {0, 1})
        return True
    return False


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--template", required=True, help="an exported task repo folder (metashift-<task>)")
    p.add_argument("--tasks", type=int, default=5000)
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--json", default=None, help="write the figures here too")
    args = p.parse_args()
    pinned = pin_two_cores()
    root = Path(tempfile.mkdtemp(prefix="bench-space-"))
    try:
        export = synthetic_export(Path(args.template), root / "export", args.tasks)
        t_index = best(lambda: index.load_index(export), args.repeat)
        views = app.Views(app.load(str(export)))
        t_page = best(views.tasks, args.repeat)
        page_bytes = len(views.tasks().encode())
        space = repo.write_space(root / "S", str(export), [])
        port = socket.socket()
        port.bind(("127.0.0.1", 0))
        number = port.getsockname()[1]
        port.close()
        proc = subprocess.Popen(
            [sys.executable, str(space / "app.py"), "--port", str(number), "--host", "127.0.0.1"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env={**os.environ, "GRADIO_ANALYTICS_ENABLED": "False"},
        )
        url = f"http://127.0.0.1:{number}/"
        t0 = time.perf_counter()
        while True:
            try:
                urllib.request.urlopen(url, timeout=5).read()
                break
            except OSError:
                assert proc.poll() is None, "the app died"
                time.sleep(0.2)
        t_start = time.perf_counter() - t0
        try:
            with browser.browser() as b:
                b.view(url, ">synthetic-00000<")  # warm: the app's first request, the browser's caches
                page = [b.view(url, ">synthetic-00000<").seconds for _ in range(args.repeat)]
                middle = f"synthetic-{args.tasks // 2:05d}"
                filtered = [b.view(f"{url}?view=task&task={middle}", f"Task {middle}").seconds]
        finally:
            proc.terminate()
            proc.wait(timeout=30)
        figures = {
            "tasks": args.tasks,
            "cores": "0,1" if pinned else "all",
            "index_s": round(t_index, 3),
            "app_start_s": round(t_start, 2),
            "first_page_python_s": round(t_page, 4),
            "first_page_html_bytes": page_bytes,
            "first_page_chromium_median_s": round(statistics.median(page), 2),
            "first_page_chromium_all_s": [round(x, 2) for x in page],
            "task_page_chromium_s": round(filtered[0], 2),
            "load_average_1min": round(os.getloadavg()[0], 1),
        }
        print(json.dumps(figures, indent=2))
        if args.json:
            Path(args.json).write_text(json.dumps(figures, indent=2) + "\n")
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
