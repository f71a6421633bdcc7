"""The one context-bug test: is a context subset's accuracy below the rest of its class?

Run by ``evaluate`` (pretrained models), ``bugs`` (any predictions) and the zoo, on the group table of
:func:`metashift_hf.scoring.groups.group_table`; the meta-graph helpers say where a harmful subset lies.
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np
import pandas as pd

from metashift_hf.builders.artifact import Artifact
from metashift_hf.builders.meta_graph_facts import MetaGraphFacts

from .stats import benjamini_hochberg, two_proportion_test


BUG_TEST = (
    "Each context subset with at least --min-subset-size images is compared with the class's images outside it "
    "(one-sided pooled two-proportion z-test, H1: lower accuracy); p-values are adjusted by Benjamini-Hochberg "
    "across all tested subsets of all classes in the report."
)
BUG_COLUMNS = ("rest_n", "rest_correct", "rest_accuracy", "z", "p_value", "q_value", "bug")


def context_bugs(
    scored: pd.DataFrame,
    groups: pd.DataFrame,
    min_n: int,
    alpha: float = 0.05,
) -> pd.DataFrame:
    """Test every context subset (n >= ``min_n``) against the rest of its class; BH across all tests.

    The comparison group is the class's images *not* in the subset, so the two samples are disjoint
    (the test assumes it). One-sided: is the subset's accuracy below the rest's?
    Returns the context rows with ``rest_n, rest_correct, rest_accuracy, z, p_value, q_value, bug``.
    """
    ctx = groups[(groups["level"] == "context") & (groups["n"] >= min_n)].copy()
    tests = []
    members: dict[str, tuple[np.ndarray, dict[str, list[int]]]] = {}  # class -> (correct, context -> rows): built once
    for cls in set(ctx["class"]):
        part = scored[scored["label"] == cls]
        rows: dict[str, list[int]] = {}
        for i, contexts in enumerate(part["contexts"]):
            for c in set(contexts if contexts is not None else ()):
                rows.setdefault(c, []).append(i)
        members[cls] = (part["correct"].to_numpy(), rows)
    for _, row in ctx.iterrows():
        correct, rows = members[row["class"]]
        inside = np.zeros(correct.size, dtype=bool)
        inside[rows.get(row["group"], [])] = True
        rest = correct[~inside]
        if rest.size == 0:  # the subset is the whole class: nothing to compare with
            tests.append((0, 0, np.nan, np.nan, np.nan))
            continue
        z, p = two_proportion_test(int(row["correct"]), int(row["n"]), int(rest.sum()), int(rest.size))
        tests.append((int(rest.size), int(rest.sum()), rest.mean(), z, p))
    cols = ["rest_n", "rest_correct", "rest_accuracy", "z", "p_value"]
    ctx[cols] = pd.DataFrame(tests, columns=cols, index=ctx.index) if tests else pd.DataFrame(columns=cols)
    tested = ctx["p_value"].notna()
    ctx["q_value"] = np.nan
    if tested.any():
        ctx.loc[tested, "q_value"] = benjamini_hochberg(ctx.loc[tested, "p_value"].to_numpy())
    ctx["bug"] = (ctx["q_value"] < alpha).fillna(False).astype(bool)
    return ctx


def meta_graph_facts(
    art: "Artifact | None", facts: MetaGraphFacts | None, scored: pd.DataFrame
) -> MetaGraphFacts | None:
    """The meta-graph facts of the scored rows' context subsets: ``facts`` when the task carries them (an exported
    folder or Hub repo), else computed from the artifact; None with neither (the columns stay empty)."""
    if facts is not None:
        return facts
    if art is None:
        return None
    return MetaGraphFacts.of_artifact(art, zip(scored["label"], scored["contexts"]))


def bug_entry(r: "pd.Series | Mapping[str, Any]") -> dict[str, Any]:
    """One tested context subset as JSON (bugs.json, report.json): NaN -> None."""

    def opt(v, cast):
        return None if v is None or pd.isna(v) else cast(v)

    return {
        "class": r["class"],
        "subset": r["subset"],
        "n": int(r["n"]),
        "accuracy": float(r["accuracy"]),
        "rest_n": int(r["rest_n"]),
        "rest_accuracy": opt(r["rest_accuracy"], float),
        "z": opt(r["z"], float),
        "p_value": opt(r["p_value"], float),
        "q_value": opt(r["q_value"], float),
        "bug": bool(r["bug"]),
        "community": opt(r.get("community"), int),
        "distance_to_largest_community": opt(r.get("distance_to_largest_community"), float),
    }


__all__ = ["BUG_TEST", "BUG_COLUMNS", "context_bugs", "meta_graph_facts", "bug_entry"]
