"""The order and the roles of a task's splits, beside the plan that holds them.

One place decides which splits are scored and in what order, which split a headline reports, and
which split plays in-distribution (ID) against out-of-distribution (OOD): ``score``, ``evaluate``,
the zoo, ``bugs`` and the cards all ask here.
"""

from __future__ import annotations

from typing import Iterable

from metashift_hf.core import options as opt
from metashift_hf.core.errors import UnknownNameError, did_you_mean

from .plan import SPLITS
from .spec import ShiftSpec


SPLIT_ORDER = SPLITS  # the plan's own order
ID_OOD_RULE = "ID = id_test when the task has it, else validation; OOD = test"


def split_order(splits: Iterable[str]) -> list[str]:
    """The task layer's split order (train, validation, test, id_test), then any others by name."""
    splits = set(splits)
    return [s for s in SPLIT_ORDER if s in splits] + sorted(splits - set(SPLIT_ORDER))


def chosen_splits(asked: Iterable[str] | None, available: Iterable[str], task_id: str) -> list[str]:
    """The splits to score, in split order: ``asked`` (``--splits``; None = every split), each one the task has."""
    order = split_order(available)
    if asked is None:
        return order
    chosen = opt.names(asked, "splits")  # a bare 'test' (read letter by letter) and repeats are refused
    unknown = [s for s in chosen if s not in order]
    if unknown:
        raise UnknownNameError(
            f"task {task_id} has no split(s) {unknown}{did_you_mean(unknown[0], order)}",
            f"use splits among {', '.join(order)}",
        )
    return [s for s in order if s in chosen]


def headline_split(splits: Iterable[str]) -> str | None:
    """The split a headline (and a leaderboard's rank) reports: ``test``, the out-of-distribution split, when
    scored; else the last held-out split in split order. Never ``train`` (None when only train is scored)."""
    order = split_order(splits)
    if "test" in order:
        return "test"
    held = [s for s in order if s != "train"]
    return held[-1] if held else None


def split_roles(splits: Iterable[str], spec: ShiftSpec | None) -> tuple[str, str] | None:
    """(ID split, OOD split) by :data:`ID_OOD_RULE`; None for a collection (every group in one split) or without both
    splits. Every designed level has the pair, the conditional family's delta = 0 control (declared ``none``) too:
    its Drop% is the no-shift reference of its curve."""
    splits = set(splits)
    if spec is not None and spec.collection:
        return None
    ood = "test" if "test" in splits else None
    iid = "id_test" if "id_test" in splits else ("validation" if "validation" in splits else None)
    return (iid, ood) if iid and ood else None


__all__ = ["SPLIT_ORDER", "ID_OOD_RULE", "split_order", "chosen_splits", "headline_split", "split_roles"]
