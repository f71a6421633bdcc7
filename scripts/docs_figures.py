"""Figures the docs quote, made from the demo world; `--check` fails when a doc no longer matches the code.

A quoted figure lives in a marked block of a doc:

    <!-- docs-figures: NAME -->
    ...generated text...
    <!-- /docs-figures: NAME -->

Task figures (sizes, distances, removed images, measured shift) come from planning tasks on the demo
world's artifact (no images needed, a few seconds). Experiment tables (accuracies need training) come
from an experiment's ``results.json`` stored in ``docs/figures/<experiment>-demo.json`` (paper-dg, paper-subpop,
compare; ood-levels as ``ood-levels-<type>``, clustered, conflicts with its matrix, and ``bugs``: a bug report with
the card and scores of the `train` run whose predictions it tested); the check fails when a stored run's features
were computed under another crop rule than the code's, and re-plans the tasks a run planned by id and fails when
their distances or sizes differ from the code's now (re-run the experiment and ``--write`` again).

    python scripts/docs_figures.py --check                   # exit 1 with the stale blocks
    python scripts/docs_figures.py --write                   # rewrite every block from a fresh demo build
    python scripts/docs_figures.py --write --results paper-dg=RUN/results.json   # store a new experiment run
    python scripts/docs_figures.py --write --results ood-levels-joint=RUN/results.json --results bugs=BUGS_FOLDER

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

from metashift_hf.builders.artifact import Artifact
from metashift_hf.builders.build import build_from_inputs
from metashift_hf.builders.build_inputs import SceneGraphs
from metashift_hf.core.errors import MetashiftError
from metashift_hf.models.base import CROP_RULE
from metashift_hf.sources.demo_world import generate_demo_world
from metashift_hf.tasks import families as tasks
from metashift_hf.tasks.design_check import design_check
from metashift_hf.tasks.match_artifact import MatchInputs, run_match
from metashift_hf.tasks.spec import ShiftSpec


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
    "shift-joint-cat-dog-d1-delta00",
    "shift-joint-cat-dog-d3-delta10",
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
        "| task | train / validation / test / id_test | d | declared (the design) | measured | P(S) TV | "
        "P(Y\\|S) shift | verdict | p (P(S), P(Y\\|S)) | rows needed for power 0.8 |",
        "|---|---|---:|---|---|---:|---|---|---|---:|",
    ]
    for tid in LEVEL_TASKS:
        spec = tasks.plan_task(tid, art).spec
        d = spec.level.distance if spec.level else None
        c = design_check(spec)
        verdict = "-" if c is None else f"{c.verdict} | {_f(c.p_value_p_s)}, {_f(c.p_value_conditional)}"
        needed = "-" if c is None or c.rows_needed is None else f"{c.rows_needed:,} (has {c.rows:,})"
        lines.append(f"| `{tid}` | {_sizes(spec)} | {_f(d)} | {_shift(spec)} | {verdict} | {needed} |")
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
            "P(S) TV | P(Y\\|S) shift | label shift: P(Y) TV |",
            "|---|---|---|---|---|---:|---|---|",
        ]
        for tid in MATCHED_TASKS:
            spec = tasks.plan_task(tid, matched).spec
            d = spec.distance
            per = ", ".join(f"{c} {_f(v)}" for c, v in sorted((d.per_class or {}).items())) if d else ""
            t = spec.measured.split("test")
            lines.append(
                f"| `{tid}` | {_sizes(spec)} | {_f(d.value if d else None)} ({per}) | {_shift(spec)} | "
                f"{_f(t.p_y_tv)} (threshold {_f(t.p_y_threshold)}) |"
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


def _drop(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.1f}"


def _stored(name: str) -> dict[str, Any] | None:
    path = FIGURES / f"{name}-demo.json"
    return json.loads(path.read_text()) if path.is_file() else None


def _task_rows(run: dict[str, Any]) -> list[tuple[str, dict[str, Any], dict[str, Any]]]:
    """(task id, the run's task options, the stored row) of every task row a stored run carries: an `Experiment`
    table's rows, ood-levels' levels, the task a bug report's model was trained on; none for clustered or conflicts
    (their tasks are made from the features, not planned from ids)."""
    if run.get("experiment") == "ood-levels":
        return [(r["task_id"], run["options"], r) for r in run["levels"]]
    if run.get("experiment") == "bugs":
        return [(run["run"]["task_id"], run["run"]["task_overrides"], run["sizes"])]
    return [(r["task"], run["run"]["task_overrides"][r["task"]], r) for r in run.get("rows", [])]


def _planned_facts(art: Artifact, run: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Per task of a stored run: its distance and sizes as the code plans them now (with the run's options)."""
    out = {}
    for task, options, _ in _task_rows(run):
        if task not in out:
            spec = tasks.plan_task(task, art, **options).spec
            out[task] = {
                "distance": spec.distance.value if spec.distance else None,
                "n_train": spec.split_sizes.get("train"),
                "n_test": spec.split_sizes.get("test"),
            }
    return out


def _stale_run(art: Artifact, run: dict[str, Any]) -> list[str]:
    """What in a stored run no longer matches a fresh plan (empty when it still does)."""
    now = _planned_facts(art, run)
    bad = []
    for task, _, row in _task_rows(run):
        for key in ("distance", "n_train", "n_test"):
            if (
                key in row
                and row[key] is not None
                and now[task][key] is not None
                and abs(float(row[key]) - float(now[task][key])) > 1e-6
            ):
                bad.append(f"{task}: {key} {row[key]} in the stored run, {now[task][key]} now")
    return list(dict.fromkeys(bad))  # ood-levels trains every model on the same tasks: one line per task


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
    return _keep("compare", {k: v for k, v in _card(card).items() if k != "algorithms"})


def _no_run(name: str, what: str) -> str:
    return f"No stored run (`python scripts/docs_figures.py --write --results {name}={what}`).\n"


def _features_line(run: dict[str, Any]) -> str:
    bb = run["backbone"]
    pre = bb["preprocessing"]
    return f"{bb['name']} features ({pre['crop']} px crop, crop rule `{pre['crop_rule']}`)"


LEVEL_AXES = {"ood": "d", "mix": "mixed"}  # a curve's x; the conditional and joint curves run over delta


def levels_block(shift_type: str) -> Callable[[Artifact, Path | None], str]:
    """Per curve of a stored `experiment ood-levels --type SHIFT_TYPE` run: OOD / ID / worst-group accuracy at each
    level, slope, AUC and knee; curves over the same x share a table."""

    def block(art: Artifact, wordnet_cache: Path | None = None) -> str:
        run = _stored(f"ood-levels-{shift_type}")
        if run is None:
            return _no_run(f"ood-levels-{shift_type}", "RUN/results.json")
        at = {(r["model"], r["level"]): r for r in run["levels"]}
        sizes = sorted({(r["n_train"], r["n_test"]) for r in run["levels"]})
        lines = [
            f"{', '.join(run['models'])}: linear probe on {_features_line(run)}, {run['seeds']} seeds per task "
            f"(mean shown), task seed {run['task_seed']}, task options {json.dumps(run['options'])}; "
            f"train / test images per task: {', '.join(f'{a} / {b}' for a, b in sizes)}. "
            "Each cell: OOD / ID accuracy / Drop% (per seed 100 (ID - OOD) / ID, then the mean) / worst group (test) "
            "accuracy; every designed level has its ID/OOD pair"
            + (", the δ = 0 control too." if shift_type == "conditional" else "."),
        ]
        tables: dict[tuple[float, ...], list[dict]] = {}
        for c in run["curves"]:
            tables.setdefault(tuple(c["x"]), []).append(c)
        for xs, curves in tables.items():
            axis = LEVEL_AXES.get(curves[0]["curve"], "δ")
            lines += [
                "",
                "| model, curve | " + " | ".join(f"{axis} = {x:.3g}" for x in xs) + " | slope | AUC | knee |",
                "|---|" + "---:|" * (len(xs) + 2) + "---|",
            ]
            for c in curves:
                cells = [
                    f"{_pct({'mean': at[(c['model'], lv)]['ood']})} / {_pct({'mean': at[(c['model'], lv)]['id']})} / "
                    f"{_drop(at[(c['model'], lv)].get('drop_pct'))} / {_pct({'mean': at[(c['model'], lv)]['worst_group']})}"
                    for lv in c["levels"]
                ]
                lines.append(
                    f"| {c['model']}, {c['curve']} | {' | '.join(cells)} | {_f(c['slope'])} | {_f(c['auc'])} | "
                    f"{c['knee'] or 'none'} |"
                )
        return "\n".join(lines) + "\n"

    return block


def clustered_block(art: Artifact, wordnet_cache: Path | None = None) -> str:
    run = _stored("clustered")
    if run is None:
        return _no_run("clustered", "RUN/results.json")
    ks = run["per_k"]
    rows = [
        ("images", lambda r: f"{r['size']}"),
        ("training images", lambda r: f"{r['n_train']}"),
        ("ID accuracy", lambda r: _pct({"mean": r["id"]})),
        ("mean OOD over the other clusters", lambda r: _pct({"mean": r["ood_mean_over_clusters"]})),
        ("worst group (test)", lambda r: _pct({"mean": r["worst_group"]})),
        ("MI(membership; contexts), bits", lambda r: _f(r["mi_membership_bits"])),
    ]
    lines = [
        f"k = {run['k']} per class, k-means seed {run['seed']}, n_init {run['n_init']}; {run['model']}, "
        f"linear probe on {_features_line(run)}, {run['seeds']} seeds per D_k (mean shown).",
        "",
        "| D_k | " + " | ".join(str(r["k"]) for r in ks) + " |",
        "|---|" + "---:|" * len(ks),
        *(f"| {name} | " + " | ".join(cell(r) for r in ks) + " |" for name, cell in rows),
        "",
        "| class | MI(cluster; contexts) of H(cluster), bits | cluster: size, top contexts (share of its tags, lift) |",
        "|---|---|---|",
    ]
    for c in run["per_class"]:
        for j, size in enumerate(c["sizes"]):
            tops = ", ".join(
                f"{t['context']} ({100 * t['share']:.0f} %, lift {t['lift']:.1f})" for t in c["top_contexts"][str(j)]
            )
            mi = f"{_f(c['mi_bits'])} of {_f(c['h_cluster_bits'])}" if j == 0 else ""
            lines.append(f"| {c['class'] if j == 0 else ''} | {mi} | {j}: {size}, {tops} |")
    return "\n".join(lines) + "\n"


def _pairs(items: list[dict]) -> str:
    return ", ".join(f"{x['train']} → {x['eval']} {x['value']:+.2f}" for x in items)


def conflicts_block(art: Artifact, wordnet_cache: Path | None = None) -> str:
    """The stored conflicts run: its subsets and windows, strongest cells, and the matrix's mean by kind of cell."""
    run = _stored("conflicts")
    if run is None:
        return _no_run("conflicts", "RUN_FOLDER")
    cfg, m = run["config"], run["matrix"]
    cells = {"same class": [], "other class": [], "diagonal (a subset on itself)": []}
    for t, row in m.items():
        for e, v in row.items():
            kind = "diagonal (a subset on itself)" if t == e else "same class"
            cells["other class" if t.split("(")[0] != e.split("(")[0] else kind].append(v)
    return (
        f"{len(run['train_subsets'])} training × {len(run['eval_subsets'])} evaluation subsets ("
        f"{len(run['skipped_train'])} and {len(run['skipped_eval'])} skipped: too few images left after the "
        f"earlier subsets' draws; listed in the stored run), {_features_line(run)}; {cfg['steps']:,} steps of batch "
        f"{cfg['batch_size']} = {cfg['steps'] // cfg['every']} windows, lr {cfg['lr']}, seed {cfg['seed']}.\n\n"
        f"- strongest helps: {_pairs(run['strongest']['helps'])}\n"
        f"- strongest hurts: {_pairs(run['strongest']['hurts'])}\n"
        + "".join(
            f"- {kind} cells ({len(v)}): mean {sum(v) / len(v):+.3f}, "
            f"{100 * sum(x > 0 for x in v) / len(v):.0f} % positive\n"
            for kind, v in cells.items()
        )
    )


def bugs_block(art: Artifact, wordnet_cache: Path | None = None) -> str:
    run = _stored("bugs")
    if run is None:
        return _no_run("bugs", "BUGS_FOLDER")
    b, r = run["bugs"], run["run"]
    harmful: dict[str, int] = {}
    for x in b["tested"]:  # every significant subset below the class's other images, before bugs.json's top per class
        if x["bug"] and x["accuracy"] < x["rest_accuracy"]:
            harmful[x["class"]] = harmful.get(x["class"], 0) + 1
    listed = {c: len(v) for c, v in b["harmful"].items()}
    top = max(listed.values(), default=0)
    lines = [
        f"{r['method']} / {r['probe']} probe on {_features_line(r)} trained on `{r['task_id']}` "
        f"(seed {', '.join(map(str, r['seeds']))}; ID {_pct(run['scores']['id'])}, test {_pct(run['scores']['ood'])}); "
        f"`metashift-hf bugs --min-n {b['min_n']}` on its {b['split']} predictions: {b['n_tests']} context subsets "
        f"tested, {b['n_bugs']} significant (alpha {b['alpha']}), of them harmful (below the class's other images) "
        + ", ".join(f"{c} {n}" for c, n in sorted(harmful.items()))
        + f". Listed: the top {top} per class that `bugs` keeps (`--top`, default 5), nearest the largest community "
        f"first ({', '.join(f'{c} {listed.get(c, 0)} of {n}' for c, n in sorted(harmful.items()))}):",
        "",
        "| class | subset | n | accuracy | the class's other images | q | d to the largest community |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for cls, items in b["harmful"].items():
        lines += [
            f"| {cls} | {x['subset']} | {x['n']} | {_pct({'mean': x['accuracy']})} | "
            f"{_pct({'mean': x['rest_accuracy']})} | {x['q_value']:.3g} | {_f(x['distance_to_largest_community'])} |"
            for x in items
        ]
    return "\n".join(lines) + "\n"


def _card(run: dict[str, Any]) -> dict[str, Any]:
    """A run card without what is bulky or tied to this machine (per-task feature stats, timings, task sources)."""
    return {k: v for k, v in run.items() if k not in ("features", "seconds", "task_sources", "task_origins")}


def _keep(name: str, data: dict[str, Any]) -> Path:
    FIGURES.mkdir(exist_ok=True)
    out = FIGURES / f"{name}-demo.json"
    out.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    return out


def store_conflicts(folder: Path) -> Path:
    """Keep a conflicts run's results.json and its matrix (conflicts.csv), which the block summarises."""
    import pandas as pd  # only the conflicts matrix is a CSV

    data = json.loads((Path(folder) / "results.json").read_text())
    matrix = pd.read_csv(Path(folder) / "conflicts.csv", index_col=0)
    return _keep("conflicts", {**data, "matrix": {t: row.to_dict() for t, row in matrix.iterrows()}})


def store_bugs(folder: Path) -> Path:
    """Keep a bug report (bugs.json) with the run card, ID / test scores and split sizes of the `train` run whose
    predictions it tested (the predictions' folder's parent)."""
    import pandas as pd  # the predictions table gives the run's split sizes

    bugs = json.loads((Path(folder) / "bugs.json").read_text())
    predictions = Path(bugs["predictions"])
    train = predictions.parent.parent
    card, scores = (json.loads((train / f).read_text()) for f in ("run_card.json", "scores.json"))
    n = pd.read_csv(predictions)["split"].value_counts()
    return _keep(
        "bugs",
        {
            "experiment": "bugs",
            "bugs": {k: v for k, v in bugs.items() if k != "predictions"},
            "run": _card(card),
            "scores": {k: scores[k] for k in ("id", "ood")},
            "sizes": {"n_train": int(n.get("train", 0)), "n_test": int(n.get(bugs["split"], 0))},
        },
    )


BLOCKS: dict[str, tuple[str, Callable[[Artifact, Path | None], str]]] = {
    "paper-tasks-demo": ("docs/tasks.md", paper_tasks_block),
    "level-tasks-demo": ("docs/tasks.md", level_tasks_block),
    "matched-tasks-demo": ("docs/tasks.md", matched_tasks_block),
    "joint-delta0-demo": ("docs/tasks.md", joint_delta0_block),
    "marginal-design-demo": ("docs/experiments.md", marginal_design_block),
    "paper-dg-demo": ("docs/evaluate.md", paper_dg_block),
    "paper-subpop-demo": ("docs/evaluate.md", paper_subpop_block),
    "compare-demo": ("docs/evaluate.md", compare_block),
    **{f"ood-levels-{t}-demo": ("docs/experiments.md", levels_block(t)) for t in ("marginal", "conditional", "joint")},
    "clustered-demo": ("docs/experiments.md", clustered_block),
    "conflicts-demo": ("docs/experiments.md", conflicts_block),
    "bugs-demo": ("docs/experiments.md", bugs_block),
}
# block -> its stored run (checked for the crop rule and, where it planned task ids, the tasks' facts)
RUNS = {
    name: name.removesuffix("-demo")
    for name in BLOCKS
    if name.startswith(("paper-dg", "paper-subpop", "ood-levels", "clustered", "conflicts", "bugs"))
}


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
    """Keep an experiment's results.json under docs/figures/<name>-demo.json: an `Experiment` table's rows and run
    card (not the per-task feature stats); a shift experiment's whole result (`ood-levels` as ood-levels-<type>)."""
    data = json.loads(Path(results).read_text())
    made = data.get("experiment")
    made = f"{made}-{data['type']}" if made == "ood-levels" else made
    if made != name:
        raise SystemExit(f"{results} is experiment {made!r}, not {name!r}")
    if "run" not in data:
        return _keep(name, data)
    return _keep(
        name,
        {
            "experiment": name,
            "rows": data["rows"],
            "run": _card(data["run"]),
            "differences": data.get("paper", {}).get("differences", []),
        },
    )


STORE = {"compare": store_compare, "conflicts": store_conflicts, "bugs": store_bugs}  # a run folder, not a file


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
        help="with --write: store this experiment run first (paper-dg, paper-subpop, ood-levels-marginal|conditional|"
        "joint, clustered: RESULTS_JSON; compare, conflicts, bugs: the run's folder)",
    )
    ap.add_argument("--artifact", help="an existing demo artifact (default: build the demo world in a temp folder)")
    args = ap.parse_args(argv)
    for item in args.results:
        name, _, path = item.partition("=")
        print(f"stored {STORE[name](Path(path)) if name in STORE else store_run(name, Path(path))}")
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
