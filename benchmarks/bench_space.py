"""The Space's first page and leaderboard at full scale: thousands of published tasks and a zoo's results.

A synthetic export root of ``--tasks`` task repos is made from one exported repo (``--template``, else the tests'
small export: tests/fixtures/space.py), its README and ``<config>/shift_spec.json`` with the task id, the shift
type and the sizes varied, seeded; the first page reads nothing else (no row, no image). A synthetic results
folder gives every task a row per model (``--models`` models and ``baseline:majority``). Then, pinned to 2 cores
(cores 0 and 1, with every child process):

- ``index``: ``metashift_hf.space.index.load_index`` (every spec read through ``metashift_hf.shift_spec``), the
  app's start-up work, best of ``--repeat``;
- ``first page bytes``: what a browser fetches before the app answers: the root HTML and ``/config`` (Gradio's
  app description: every component's initial value and choices), as served by the app that ``metashift-hf space``
  writes (issue 44: under 2 MB at 5,000 tasks x 21 models);
- ``first page (chromium)``: headless Chromium (tests/fixtures/browser.py: Playwright, Debian's chromium):
  seconds from the navigation's start to the tasks table in the DOM, a fresh browser context each time, median
  of ``--repeat``; the leaderboard view (``?view=leaderboard``, its first page) and a task's page once each.

    python benchmarks/bench_space.py --tasks 5000 --models 21 --json bench-space.json
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

import pandas as pd  # noqa: E402

from fixtures import browser  # noqa: E402
from fixtures.space import TASKS, make_space_world  # noqa: E402
from metashift_hf.space import app, index, repo  # noqa: E402


REPO = f"metashift-{TASKS[0]}"  # the tests' export repo the default template is


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


def synthetic_results(out: Path, tasks: list[str], models: int, seed: int = 0) -> Path:
    """A zoo-shaped results folder: ``models`` models and the majority baseline on every task (leaderboard only)."""
    rng = random.Random(seed)
    names = [f"model-{m:02d}" for m in range(models)] + ["baseline:majority"]
    rows = [
        {
            "task": t,
            "model": m,
            "split": "test",
            "balanced_accuracy": round(rng.random(), 4),
            "worst_group": "cat(sofa)",
            "worst_group_accuracy": round(rng.random(), 4),
            "report": "",
        }
        for t in tasks
        for m in names
    ]
    out.mkdir(parents=True)
    pd.DataFrame(rows).to_csv(out / "leaderboard.csv", index=False)
    return out


def fetch_bytes(url: str, json_with: str | None = None) -> int:
    """Bytes served at ``url`` (``json_with``: the body must be JSON holding that key, e.g. Gradio's config)."""
    with urllib.request.urlopen(url, timeout=120) as r:
        body = r.read()
    if json_with is not None:
        assert json_with in json.loads(body), f"{url} is not the app's config"
    return len(body)


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


def serve(space: Path, port: int) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, str(space / "app.py"), "--port", str(port), "--host", "127.0.0.1"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={**os.environ, "GRADIO_ANALYTICS_ENABLED": "False"},
    )


def wait_up(url: str, proc: subprocess.Popen) -> float:
    t0 = time.perf_counter()
    while True:
        try:
            urllib.request.urlopen(url, timeout=5).read()
            return time.perf_counter() - t0
        except OSError:
            assert proc.poll() is None, "the app died"
            time.sleep(0.2)


def in_browser(url: str, tasks: int, repeat: int) -> dict:
    with browser.browser() as b:
        b.view(url, ">synthetic-00000<")  # warm: the app's first request, the browser's caches
        page = [b.view(url, ">synthetic-00000<").seconds for _ in range(repeat)]
        board = b.view(f"{url}?view=leaderboard", "model-00")
        middle = f"synthetic-{tasks // 2:05d}"
        task = b.view(f"{url}?view=task&task={middle}", f"Task {middle}")
    return {
        "first_page_chromium_median_s": round(statistics.median(page), 2),
        "first_page_chromium_all_s": [round(x, 2) for x in page],
        "leaderboard_chromium_s": round(board.seconds, 2),
        "task_page_chromium_s": round(task.seconds, 2),
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--template", default=None, help="an exported task repo folder (default: the tests' small one)")
    p.add_argument("--tasks", type=int, default=5000)
    p.add_argument("--models", type=int, default=21)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--json", default=None, help="write the figures here too")
    args = p.parse_args()
    pinned = pin_two_cores()
    root = Path(tempfile.mkdtemp(prefix="bench-space-"))
    try:
        template = Path(args.template) if args.template else make_space_world(root / "world").clean / REPO
        export = synthetic_export(template, root / "export", args.tasks)
        t_index = best(lambda: index.load_index(export), args.repeat)
        ids = [t.task_id for t in index.load_index(export).tasks]
        res = synthetic_results(root / "results", ids, args.models)
        views = app.Views(app.load(str(export), [str(res)]))
        t_board = best(views.board, args.repeat)
        space = repo.write_space(root / "S", str(export), [str(res)])
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        number = sock.getsockname()[1]
        sock.close()
        proc = serve(space, number)
        url = f"http://127.0.0.1:{number}/"
        try:
            t_start = wait_up(url, proc)
            root_bytes, config_bytes = fetch_bytes(url), fetch_bytes(f"{url}config", json_with="components")
            shown = in_browser(url, args.tasks, args.repeat)
        finally:
            proc.terminate()
            proc.wait(timeout=30)
        figures = {
            "tasks": args.tasks,
            "models": args.models,
            "cores": "0,1" if pinned else "all",
            "index_s": round(t_index, 3),
            "app_start_s": round(t_start, 2),
            "root_html_bytes": root_bytes,
            "config_bytes": config_bytes,
            "first_page_bytes": root_bytes + config_bytes,
            "leaderboard_page_python_s": round(t_board, 4),
            **shown,
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
