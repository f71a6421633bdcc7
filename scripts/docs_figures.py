"""Figures the docs quote, made from the demo world; `--check` fails when a doc no longer matches the code.

A quoted figure lives in a marked block of a doc:

    <!-- docs-figures: NAME -->
    ...generated text...
    <!-- /docs-figures: NAME -->

Task figures (sizes, distances, removed images, measured shift) come from planning tasks on the demo
world's artifact (no images needed, a few seconds). Experiment tables (accuracies need training) come
from an experiment's ``results.json`` stored in ``docs/figures/<experiment>-demo.json``; the check
re-plans their tasks and fails when the stored run's distances or sizes differ from the code's now
(re-run the experiment and ``--write`` again).

    python scripts/docs_figures.py --check                   # exit 1 with the stale blocks
    python scripts/docs_figures.py --write                   # rewrite every block from a fresh demo build
    python scripts/docs_figures.py --write --results paper-dg=RUN/results.json   # store a new experiment run

tests/test_docs_figures.py runs the check in the default suite (on the session's demo artifact).
"""

from __future__ import annotations

import argparse
import difflib
import json
import re
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any, Callable

from metashift_hf.builders import tasks
from metashift_hf.builders.artifact import Artifact
from metashift_hf.builders.build import build_from_inputs
from metashift_hf.builders.build_inputs import SceneGraphs
from metashift_hf.builders.match_artifact import MatchInputs, run_match
from metashift_hf.builders.spec import ShiftSpec
from metashift_hf.core.errors import MetashiftError
from metashift_hf.models.base import CROP_RULE
from metashift_hf.sources.demo_world import generate_demo_world


ROOT = Path(__file__).resolve().parent.parent
FIGURES = ROOT / "docs" / "figures"
BLOCK = re.compile(
    r"(<!-- docs-figures: (?P<name>[\w-]+) -->\n)(?P<body>.*?)(<!-- /docs-figures: (?P=name) -->)", re.S
)

PAPER_TASKS = (
    "paper-dg-cat-dog-1",
    "paper-dg-cat-dog-2",
    "paper-dg-cat-dog-3",
    "paper-dg-cat-dog-4",
    "paper-subpop-cat-dog-p12",
    "paper-subpop-cat-dog-p6",
    "paper-subpop-cat-dog-p1",
)
LEVEL_TASKS = (
    "shift-marginal-cat-dog-d0",
    "shift-marginal-cat-dog-d3",
    "shift-marginal-cat-dog-d3-mix50",
    "shift-conditional-cat-dog-delta00",
    "shift-conditional-cat-dog-delta10",
    "shift-conditional-cat-dog-delta49",
    "shift-conditional-cat-dog-delta49-rev",
    "shift-joint-cat-dog-d0-delta00",
    "shift-joint-cat-dog-d0-delta49",
)
MATCHED_TASKS = ("imagenet-5", "bin-cat-dog")
DEMO_SCALE = 0.5  # what the demo world needs for the tasks that do not fit at the paper's sizes


def demo_artifact(root: Path) -> Artifact:
    """The artifact `metashift-hf demo` builds (demo world, seed 0)."""
    world = generate_demo_world(root / "world", seed=0)
    return build_from_inputs(root / "artifact", given=SceneGraphs(world.scene_graphs), provenance="demo")


def _plan(art: Artifact, task_id: str) -> tuple[ShiftSpec, str]:
    """The task at its default sizes, else at scale DEMO_SCALE; with the options used."""
    try:
        return tasks.plan_task(task_id, art).spec, "default sizes"
    except MetashiftError:
        return tasks.plan_task(task_id, art, scale=DEMO_SCALE).spec, f"scale={DEMO_SCALE}"


def _f(x: float | None, digits: int = 3) -> str:
    return "-" if x is None else f"{x:.{digits}f}"


def _sizes(spec: ShiftSpec) -> str:
    return " / ".join(f"{spec.split_sizes.get(s, 0):,}" for s in ("train", "validation", "test", "id_test"))


def _shift(spec: ShiftSpec) -> str:
    m = spec.measured
    t = m.split("test") if m else None
    if t is None:
        return f"{spec.shift_type} | - | - | -"
    return f"{spec.shift_type} | {m.type} | {_f(t.p_s_tv)} | {_f(t.conditional)} (threshold {_f(t.conditional_threshold)})"


def paper_tasks_block(art: Artifact, wordnet_cache: Path | None = None) -> str:
    lines = [
        "| task | planned at | train / validation / test / id_test | d (code rule) | paper d | removed: ambiguous / "
        "leakage | declared | measured | P(S) TV | P(Y\\|S) shift |",
        "|---|---|---|---:|---:|---|---|---|---:|---|",
    ]
    for tid in PAPER_TASKS:
        spec, how = _plan(art, tid)
        d = spec.distance
        lines.append(
            f"| `{tid}` | {how} | {_sizes(spec)} | {_f(d.value if d else None)} | "
            f"{_f(d.paper_value if d else None, 2)} | {spec.removed.ambiguous} / {spec.removed.leakage} | "
            f"{_shift(spec)} |"
        )
    return "\n".join(lines) + "\n"


def level_tasks_block(art: Artifact, wordnet_cache: Path | None = None) -> str:
    lines = [
        "| task | train / validation / test / id_test | d | declared | measured | P(S) TV | P(Y\\|S) shift | "
        "typed by construction: the note |",
        "|---|---|---:|---|---|---:|---|---|",
    ]
    for tid in LEVEL_TASKS:
        spec = tasks.plan_task(tid, art).spec
        d = spec.level.distance if spec.level else None
        note = (spec.measured.note if spec.measured and spec.measured.note else "").replace("|", "\\|")  # a table cell
        lines.append(f"| `{tid}` | {_sizes(spec)} | {_f(d)} | {_shift(spec)} | {note} |")
    return "\n".join(lines) + "\n"


def matched_tasks_block(art: Artifact, wordnet_cache: Path | None = None) -> str:
    """Matched tasks need `metashift-hf match`: run on a copy of the artifact (WordNet 3.0, offline;
    ``wordnet_cache``: a cache folder to reuse, else a temporary one)."""
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "artifact"
        shutil.copytree(art.root, root, ignore=shutil.ignore_patterns("match"))
        run_match(
            MatchInputs(artifact=str(root), hierarchy="wordnet", cache_dir=wordnet_cache or Path(tmp) / "wordnet")
        )
        matched = Artifact.load(root)
        lines = [
            "| task | train / validation / test / id_test | d (paper rule; per class) | declared | measured | "
            "P(S) TV | P(Y\\|S) shift | by construction |",
            "|---|---|---|---|---|---:|---|---|",
        ]
        for tid in MATCHED_TASKS:
            spec = tasks.plan_task(tid, matched).spec
            d = spec.distance
            per = ", ".join(f"{c} {_f(v)}" for c, v in sorted((d.per_class or {}).items())) if d else ""
            lines.append(
                f"| `{tid}` | {_sizes(spec)} | {_f(d.value if d else None)} ({per}) | {_shift(spec)} | "
                f"{spec.measured.by_construction if spec.measured else ''} |"
            )
    return "\n".join(lines) + "\n"


def joint_delta0_block(art: Artifact, wordnet_cache: Path | None = None) -> str:
    """Training images per (context, class) of the joint family's d0 level at delta = 0."""
    plan = tasks.plan_task("shift-joint-cat-dog-d0-delta00", art)
    counts: dict[str, dict[str, int]] = {}
    for r in plan.splits["train"]:
        counts.setdefault(r.context, {}).setdefault(r.label, 0)
        counts[r.context][r.label] += 1
    cells = ", ".join(f"{c} {n.get('cat', 0)} cats / {n.get('dog', 0)} dogs" for c, n in sorted(counts.items()))
    return f'`shift-joint-cat-dog-d0-delta00` trains on {cells}; its note: "{plan.spec.measured.note}".\n'


def marginal_design_block(art: Artifact, wordnet_cache: Path | None = None) -> str:
    specs = [tasks.plan_task(f"shift-marginal-cat-dog-d{k}", art).spec for k in range(4)]
    fam = specs[0].family
    lines = [
        f"C_te = {{{', '.join(fam.test_contexts)}}}; per level (train / test images, images dropped for "
        "holding contexts of two values):",
        "",
    ]
    for k, spec in enumerate(specs):
        lines.append(
            f"- d{k}: C_tr {{{', '.join(fam.train_contexts[k])}}}, d = {fam.distances[k]:.3f}, "
            f"{spec.split_sizes['train']} / {spec.split_sizes['test']} images, "
            f"{spec.factor.dropped_two_values} dropped"
        )
    cond = tasks.plan_task("shift-conditional-cat-dog-delta00", art).spec
    lines += [
        "",
        f"Conditional family: {cond.split_sizes['train']} training and {cond.split_sizes['test']} test images "
        f"per task, {cond.factor.dropped_two_values} images dropped for holding contexts of both values.",
    ]
    return "\n".join(lines) + "\n"


# ---- experiment tables: accuracies from a stored run, planning columns checked against the code ----------
def _pct(m: dict | None) -> str:
    if not m or m.get("mean") is None:
        return "n/a"
    return f"{100 * m['mean']:.1f}" + ("" if m.get("std") is None else f" ± {100 * m['std']:.1f}") + "%"


def _stored(name: str) -> dict[str, Any] | None:
    path = FIGURES / f"{name}-demo.json"
    return json.loads(path.read_text()) if path.is_file() else None


def _planned_facts(art: Artifact, run: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Per task of a stored run: its distance and sizes as the code plans them now (with the run's options)."""
    out = {}
    for row in run["rows"]:
        spec = tasks.plan_task(row["task"], art, **run["run"]["task_overrides"][row["task"]]).spec
        out[row["task"]] = {
            "distance": spec.distance.value if spec.distance else None,
            "n_train": spec.split_sizes.get("train"),
            "n_test": spec.split_sizes.get("test"),
        }
    return out


def _stale_run(art: Artifact, run: dict[str, Any]) -> list[str]:
    """What in a stored run no longer matches a fresh plan (empty when it still does)."""
    now = _planned_facts(art, run)
    bad = []
    for row in run["rows"]:
        for key in ("distance", "n_train", "n_test"):
            if (
                key in row
                and row[key] is not None
                and now[row["task"]][key] is not None
                and abs(float(row[key]) - float(now[row["task"]][key])) > 1e-6
            ):
                bad.append(f"{row['task']}: {key} {row[key]} in the stored run, {now[row['task']][key]} now")
    return bad


def _run_header(run: dict[str, Any]) -> str:
    r = run["run"]
    seeds = r.get("seeds")
    seeds = len(seeds) if isinstance(seeds, list) else seeds
    return (
        f"{r['method']} / {r['probe']} probe on {r['backbone']['name']} features, {seeds} seeds (mean ± std, ddof 1), "
        f"task options {json.dumps(next(iter(r['task_overrides'].values()), {}) if r['task_overrides'] else {})}; "
        f"{r['model_selection']}; sampling: {r.get('sampling', 'shuffle')}"
        + ("" if r.get("sampling") == "group-balanced" else " (not the paper's group-balanced batches)")
        + "."
    )


def _differences(run: dict[str, Any]) -> str:
    """The stored run's "what differs from the paper" list (runs stored before it was kept have none)."""
    diffs = run.get("differences") or []
    return (
        ("\nWhat differs from the paper's script and data:\n\n" + "\n".join(f"- {d}" for d in diffs) + "\n")
        if diffs
        else ""
    )


def paper_dg_block(art: Artifact, wordnet_cache: Path | None = None) -> str:
    run = _stored("paper-dg")
    if run is None:
        return "No stored run (`python scripts/docs_figures.py --write --results paper-dg=RUN/results.json`).\n"
    lines = [
        _run_header(run),
        "",
        "| task | dog training groups | d | paper: d | dog(shelf) accuracy | n dog(shelf) | paper: n | cat(shelf) | "
        "pooled shelf | ID accuracy |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in run["rows"]:
        lines.append(
            f"| {r['task']} | {r['train_groups']} | {_f(r['distance'])} | {_f(r['paper_distance'], 2)} | "
            f"**{_pct(r['dog_shelf'])}** | {r['n_dog_shelf']} | {r['paper_n_dog_shelf']} | {_pct(r['cat_shelf'])} | "
            f"{_pct(r['pooled'])} | {_pct(r['id_accuracy'])} |"
        )
    return "\n".join(lines) + "\n" + _differences(run)


def paper_subpop_block(art: Artifact, wordnet_cache: Path | None = None) -> str:
    run = _stored("paper-subpop")
    if run is None:
        return "No stored run (`python scripts/docs_figures.py --write --results paper-subpop=RUN/results.json`).\n"
    lines = [
        _run_header(run),
        "",
        "| task | minority p | paper: p | average | paper: ERM average | worst group | paper: ERM worst group | "
        "adjusted | worst group(s) |",
        "|---|---:|---|---:|---:|---:|---:|---:|---|",
    ]
    for r in run["rows"]:
        lines.append(
            f"| {r['task']} | {_f(r['p_achieved'])} | {r['paper_p']} | {_pct(r['average'])} | "
            f"{100 * r['paper_average']:.1f}% | **{_pct(r['worst_group'])}** | {100 * r['paper_worst_group']:.1f}% | "
            f"{_pct(r['adjusted_average'])} | {r['worst_groups']} |"
        )
    return "\n".join(lines) + "\n" + _differences(run)


def compare_block(art: Artifact, wordnet_cache: Path | None = None) -> str:
    """The method x task tables of a stored `experiment compare` run (docs/figures/compare-demo.csv + .json)."""
    import pandas as pd  # only this block reads a CSV

    from metashift_hf.research.compare import header, results_tables

    csv, meta = FIGURES / "compare-demo.csv", FIGURES / "compare-demo.json"
    if not (csv.is_file() and meta.is_file()):
        return "No stored run (`python scripts/docs_figures.py --write --results compare=RUN_FOLDER`).\n"
    m = json.loads(meta.read_text())
    table = pd.read_csv(csv)
    spread = m.get("spread", "se")
    return (
        header(
            m["probe"],
            m["backbone"]["name"],
            m["seeds"],
            m["methods"],
            m["selection"],
            spread,
            m.get("config", {}).get("sampling"),
            m.get("sweep"),
        )
        + "\n\n"
        + results_tables(table, m["methods"], m["tasks"], m["selection"], spread=spread)
    )


def store_compare(folder: Path) -> Path:
    """Keep a comparison's results.csv and what it ran (compare.json without timings and cache paths)."""
    card = json.loads((folder / "compare.json").read_text())
    FIGURES.mkdir(exist_ok=True)
    shutil.copyfile(folder / "results.csv", FIGURES / "compare-demo.csv")
    keep = {
        k: v for k, v in card.items() if k not in ("features", "seconds", "task_sources", "task_origins", "algorithms")
    }
    out = FIGURES / "compare-demo.json"
    out.write_text(json.dumps(keep, indent=1, sort_keys=True) + "\n")
    return out


BLOCKS: dict[str, tuple[str, Callable[[Artifact, Path | None], str]]] = {
    "paper-tasks-demo": ("docs/tasks.md", paper_tasks_block),
    "level-tasks-demo": ("docs/tasks.md", level_tasks_block),
    "matched-tasks-demo": ("docs/tasks.md", matched_tasks_block),
    "joint-delta0-demo": ("docs/tasks.md", joint_delta0_block),
    "marginal-design-demo": ("docs/experiments.md", marginal_design_block),
    "paper-dg-demo": ("docs/evaluate.md", paper_dg_block),
    "paper-subpop-demo": ("docs/evaluate.md", paper_subpop_block),
    "compare-demo": ("docs/evaluate.md", compare_block),
}
RUNS = {"paper-dg-demo": "paper-dg", "paper-subpop-demo": "paper-subpop"}


def stale(
    art: Artifact, root: Path = ROOT, names: tuple[str, ...] | None = None, wordnet_cache: Path | None = None
) -> list[str]:
    """Every block (and stored run) that differs from what the code makes now; empty when the docs are current.
    ``names``: only these blocks."""
    problems = []
    found: dict[str, int] = {}
    for name, (doc, make) in BLOCKS.items():
        if names is not None and name not in names:
            continue
        text = (root / doc).read_text()
        blocks = [m for m in BLOCK.finditer(text) if m.group("name") == name]
        found[name] = len(blocks)
        if len(blocks) != 1:
            problems.append(f"{doc}: block {name!r} appears {len(blocks)} times (expected once)")
            continue
        want = make(art, wordnet_cache)
        if blocks[0].group("body") != want:
            diff = "".join(
                difflib.unified_diff(
                    blocks[0].group("body").splitlines(True),
                    want.splitlines(True),
                    f"{doc} ({name})",
                    "fresh run",
                    n=0,
                )
            )
            problems.append(f"{doc}: block {name!r} is stale:\n{diff}")
        if name in RUNS and _stored(RUNS[name]) is not None:
            problems += [
                f"docs/figures/{RUNS[name]}-demo.json: {b} (re-run the experiment on the demo)"
                for b in _stale_run(art, _stored(RUNS[name]))
            ]
    for name in (*RUNS.values(), "compare"):
        if (stored := _stored(name)) is not None and (bad := _stale_features(stored.get("run", stored))):
            problems.append(f"docs/figures/{name}-demo.json: {bad} (re-run the experiment on the demo)")
    return problems


def _stale_features(run: dict[str, Any]) -> str | None:
    """Why a stored run's features are not what the code computes now (its preprocessing's crop rule), or None."""
    rule = ((run.get("backbone") or {}).get("preprocessing") or {}).get("crop_rule")
    return None if rule == CROP_RULE else f"features computed under crop rule {rule!r}, the code's is {CROP_RULE!r}"


def write(art: Artifact, root: Path = ROOT) -> list[str]:
    """Rewrite every block from a fresh run; returns the docs changed."""
    changed = []
    for doc in sorted({d for d, _ in BLOCKS.values()}):
        path = root / doc
        text = path.read_text()

        def fill(m: re.Match) -> str:
            make = BLOCKS[m.group("name")][1] if m.group("name") in BLOCKS else None
            return m.group(0) if make is None else m.group(1) + make(art, None) + m.group(4)

        new = BLOCK.sub(fill, text)
        if new != text:
            path.write_text(new)
            changed.append(doc)
    return changed


def store_run(name: str, results: Path) -> Path:
    """Keep an experiment's results.json (rows and run card, not the per-task feature stats) under docs/figures/."""
    data = json.loads(Path(results).read_text())
    if data.get("experiment") != name:
        raise SystemExit(f"{results} is experiment {data.get('experiment')!r}, not {name!r}")
    run = {k: v for k, v in data["run"].items() if k not in ("features", "seconds", "task_sources", "task_origins")}
    FIGURES.mkdir(exist_ok=True)
    out = FIGURES / f"{name}-demo.json"
    out.write_text(
        json.dumps(
            {
                "experiment": name,
                "rows": data["rows"],
                "run": run,
                "differences": data.get("paper", {}).get("differences", []),
            },
            indent=1,
            sort_keys=True,
        )
        + "\n"
    )
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    g = ap.add_mutually_exclusive_group(required=True)
    g.add_argument("--check", action="store_true", help="exit 1 when a block or stored run is stale")
    g.add_argument("--write", action="store_true", help="rewrite every block")
    ap.add_argument(
        "--results",
        action="append",
        default=[],
        metavar="EXPERIMENT=RESULTS_JSON",
        help="with --write: store this experiment run (paper-dg, paper-subpop) first",
    )
    ap.add_argument("--artifact", help="an existing demo artifact (default: build the demo world in a temp folder)")
    args = ap.parse_args(argv)
    for item in args.results:
        name, _, path = item.partition("=")
        print(f"stored {store_compare(Path(path)) if name == 'compare' else store_run(name, Path(path))}")
    with tempfile.TemporaryDirectory() as tmp:
        art = Artifact.load(args.artifact) if args.artifact else demo_artifact(Path(tmp))
        if args.check:
            problems = stale(art)
            print("\n".join(problems) if problems else "docs figures are current")
            return 1 if problems else 0
        print("rewrote " + (", ".join(write(art)) or "nothing (already current)"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
