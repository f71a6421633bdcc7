"""The one ``per_group.csv`` schema, written by ``score``, ``evaluate`` (and so the zoo) and ``bugs``.

One row per (split, level, name); docs/evaluate.md ("per_group.csv") says what each column means.
Columns a writer does not compute are present and empty (``score`` runs no context-bug test;
``community`` and the distance need the artifact's meta-graph).
"""

from __future__ import annotations

import os
from typing import Iterable, Mapping

import pandas as pd

from .groups import GroupScore


PER_GROUP_COLUMNS = (
    "split",
    "level",
    "class",
    "name",
    "n",
    "correct",
    "accuracy",
    "ci_low",
    "ci_high",
    "community",
    "rest_n",
    "rest_correct",
    "rest_accuracy",
    "z",
    "p_value",
    "q_value",
    "bug",
    "distance_to_largest_community",
)
_COUNTS = ("n", "correct", "community", "rest_n", "rest_correct")
ALL_SPLITS = "overall"  # the split column of a row over every scored split together
LEVELS = ("all", "group", "class", "context", "community")  # in this order within a split

# group_table's levels (metashift_hf.scoring.groups) -> (level, which split the row covers)
_TABLE_LEVELS = {
    "overall": "all",
    "split": "all",
    "class": "class",
    "split_class": "class",
    "context": "context",
    "community": "community",
}


def per_group_frame(rows: Iterable[Mapping]) -> pd.DataFrame:
    """Rows (dicts with some of :data:`PER_GROUP_COLUMNS`) as the per_group.csv table, columns in schema order."""
    return pd.DataFrame(list(rows), columns=list(PER_GROUP_COLUMNS))


def score_row(level: str, cls: str, g: GroupScore) -> dict:
    """A :class:`GroupScore` of ``level`` (``cls``: its class, "" when it has none) as a per_group.csv row."""
    return {
        "split": g.split,
        "level": level,
        "class": cls,
        "name": g.group,
        "n": g.n,
        "correct": g.correct,
        "accuracy": g.accuracy,
        "ci_low": g.ci_low,
        "ci_high": g.ci_high,
    }


def from_group_table(groups: pd.DataFrame) -> pd.DataFrame:
    """:func:`~metashift_hf.scoring.groups.group_table` rows (with any bug-test columns) as per_group.csv rows.

    overall -> (overall, all); split s -> (s, all); class -> (overall, class); split_class -> (s, class);
    context -> (overall, context, name ``class(context)``); community k -> (overall, community, name ``class/k``).
    """
    out = groups.copy()
    level = out["level"]
    by_split = level.isin(["split", "split_class"])
    out["split"] = out["group"].where(by_split, ALL_SPLITS)
    names = out["class"].copy()
    names[level == "overall"] = ALL_SPLITS
    names[level == "split"] = out["group"]
    names[level == "context"] = out["subset"]
    comm = level == "community"
    names[comm] = out["class"][comm] + "/" + out["group"][comm]
    out["name"] = names
    out.loc[comm, "community"] = pd.to_numeric(out["group"][comm]).astype("Int64")
    out["level"] = level.map(_TABLE_LEVELS)
    return out.reindex(columns=list(PER_GROUP_COLUMNS)).reset_index(drop=True)


def write_per_group(frame: pd.DataFrame, path: "str | os.PathLike") -> None:
    """Write per_group.csv (inside a caller's atomic folder): schema columns only, floats written exactly."""
    out = frame.reindex(columns=list(PER_GROUP_COLUMNS))
    for col in _COUNTS:  # counts stay integers in the file (2, not 2.0) where a column also holds blanks
        out[col] = pd.to_numeric(out[col]).astype("Int64")
    out.to_csv(path, index=False)


__all__ = [
    "PER_GROUP_COLUMNS",
    "ALL_SPLITS",
    "LEVELS",
    "per_group_frame",
    "score_row",
    "from_group_table",
    "write_per_group",
]
