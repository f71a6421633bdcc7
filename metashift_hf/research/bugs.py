"""Context bugs of any model: the test `evaluate` runs for pretrained models, for trained models
(``train``'s ``seed-<s>/predictions.csv``) and for any predictions file ``score`` accepts.

Per class, every context subset with at least ``min_n`` images of the scored split is compared
with the class's other images (one-sided two-proportion z-test, Benjamini-Hochberg across all tests;
metashift_hf.scoring.bugs.context_bugs). Harmful contexts (significant and below the rest) are
listed per class ordered by meta-graph distance from the class's largest community (nearest first;
subsets without a spectral distance last).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np
import pandas as pd

from ..core.errors import UnknownNameError, did_you_mean
from ..core.fsutil import atomic_dir
from ..hub.task_data import TaskRef
from ..hub.task_open import open_task
from ..scoring.bugs import BUG_COLUMNS, BUG_TEST, bug_entry, context_bugs, meta_graph_facts
from ..scoring.groups import group_table
from ..scoring.per_group import from_group_table, write_per_group
from ..scoring.predictions import TaskPredictions
from .score import score_plan


BUGS_KIND = "bug report"


@dataclass(frozen=True)
class BugReport:
    task_id: str
    split: str
    min_n: int
    alpha: float
    tested: pd.DataFrame  # one row per tested context subset
    source: str
    groups: pd.DataFrame | None = None  # the split's group table with the test's columns (per_group.csv)
    task_origin: Mapping[str, Any] | None = None  # where the task came from (hub/task_data.TaskProvenance)

    def harmful(self, top: int | None = None) -> dict[str, list[dict]]:
        """class -> significant, below-the-rest subsets, nearest to the largest community first."""
        rows = self.tested[self.tested["bug"] & (self.tested["accuracy"] < self.tested["rest_accuracy"])]
        out: dict[str, list[dict]] = {}
        for cls, part in rows.groupby("class", sort=True):
            d = part["distance_to_largest_community"].astype(float)
            part = part.assign(_d=d.fillna(np.inf)).sort_values(["_d", "q_value", "subset"], kind="stable")
            out[str(cls)] = [bug_entry(r) for _, r in part.head(top if top else len(part)).iterrows()]
        return out

    def to_dict(self, top: int = 5) -> dict[str, Any]:
        return {
            "task_id": self.task_id,
            "split": self.split,
            "predictions": self.source,
            "test": BUG_TEST,
            "min_n": self.min_n,
            "alpha": self.alpha,
            "n_tests": int(self.tested["p_value"].notna().sum()),
            "n_bugs": int(self.tested["bug"].sum()),
            "harmful": self.harmful(top),
            "order": "per class by meta-graph distance ('paper' rule, spectral) from the class's largest "
            "community, nearest first; subsets without a spectral distance last",
            "tested": [bug_entry(r) for _, r in self.tested.iterrows()],
            "task_origin": None if self.task_origin is None else dict(self.task_origin),
        }

    def markdown(self, top: int = 5) -> str:
        d = self.to_dict(top)
        out = [
            f"# Context bugs: {self.task_id}, split {self.split}",
            "",
            f"{BUG_TEST} alpha = {self.alpha}; "
            f"{d['n_tests']} subsets tested (n >= {self.min_n}), {d['n_bugs']} significant.",
            "",
        ]
        for cls, rows in d["harmful"].items():
            out += [
                f"## {cls}",
                "",
                "| subset | n | accuracy | rest | q | distance to largest community |",
                "|---|---:|---:|---:|---:|---:|",
            ]
            for r in rows:
                dist = (
                    "n/a"
                    if r["distance_to_largest_community"] is None
                    else f"{r['distance_to_largest_community']:.3f}"
                )
                out.append(
                    f"| {r['subset']} | {r['n']} | {100 * r['accuracy']:.1f}% | {100 * r['rest_accuracy']:.1f}% | "
                    f"{r['q_value']:.3g} | {dist} |"
                )
            out.append("")
        if not d["harmful"]:
            out.append("No harmful context subset at this level.")
        return "\n".join(out) + "\n"

    def write(self, out: "str | os.PathLike", *, force: bool = False, inputs: Sequence = (), top: int = 5) -> None:
        with atomic_dir(out, kind=BUGS_KIND, force=force, inputs=inputs) as tmp:
            (tmp / "bugs.json").write_text(json.dumps(self.to_dict(top), indent=2) + "\n")
            (tmp / "bugs.md").write_text(self.markdown(top))
            if self.groups is not None:
                write_per_group(from_group_table(self.groups), tmp / "per_group.csv")


def find_bugs(
    predictions: "str | os.PathLike | pd.DataFrame | TaskPredictions",
    task: "TaskRef | Any",
    *,
    split: str = "test",
    min_n: int = 10,
    alpha: float = 0.05,
) -> BugReport:
    """Context bugs of one predictions table on one split of a task (see the module docstring).

    ``task``: anything :func:`metashift_hf.hub.task_open.open_task` takes (a dataset, an exported folder,
    a Hub repo id, or a :class:`~metashift_hf.hub.task_data.TaskRef` of a task id with its ``artifact``).
    Communities and distances to the largest community come from the artifact's meta-graph or from the
    meta-graph facts an exported folder or Hub repo carries; from a loaded dataset alone they are left empty.
    """
    data = open_task(task)
    art, tp = data.artifact, data.plan
    splits = sorted(set(r for r in tp.splits))
    if split not in splits:
        raise UnknownNameError(
            f"task {tp.task_id} has no split {split!r}{did_you_mean(split, splits)}", f"use one of {', '.join(splits)}"
        )
    preds = predictions if isinstance(predictions, TaskPredictions) else TaskPredictions.read(predictions, tp.classes)
    score_plan(preds, tp, splits=[split])  # the same checks as `score` (unknown, missing, duplicate ids)
    table = tp.table()
    scored = table[table["split"] == split].reset_index(drop=True)
    pos = {iid: i for i, iid in enumerate(preds.image_ids)}
    pred = preds.predicted[[pos[i] for i in scored["image_id"]]]
    scored["correct"] = np.array([tp.classes[p] for p in pred]) == scored["label"].to_numpy()
    facts = meta_graph_facts(art, data.meta_graph, scored)  # an exported folder or repo carries them
    groups = group_table(scored, list(tp.classes), facts.community_map() if facts is not None else None)
    tested = context_bugs(scored, groups, min_n, alpha)  # indexed as its rows of groups
    tested["distance_to_largest_community"] = [
        facts.distance_to_largest(s) if ok and facts is not None else None
        for s, ok in zip(tested["subset"], tested["bug"])
    ]
    for col in (*BUG_COLUMNS, "distance_to_largest_community"):
        groups.loc[tested.index, col] = tested[col]
    return BugReport(
        tp.task_id, split, int(min_n), float(alpha), tested.reset_index(drop=True), preds.source, groups, data.origin()
    )


__all__ = ["BugReport", "find_bugs", "BUGS_KIND"]
