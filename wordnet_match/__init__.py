"""MetaShift names -> WordNet 3.0 -> ImageNet-1k, offline; binary/multiclass tasks and their registry.

Quick use::

    from metashift_hf import wordnet_match
    # ARTIFACT/match/ is written by metashift_hf.tasks.match_artifact.run_match (`metashift-hf match`)
    tasks = wordnet_match.registry("ARTIFACT")                                    # list[TaskEntry]
    task = wordnet_match.get_task("ARTIFACT", "bin-cat-dog")
"""

from __future__ import annotations

import os

from metashift_hf.core.errors import EmptyResultError

from .match import MatchResult, MatchRow, SubsetRecord
from .store import load_match, read_tasks
from .tasks import PRESETS, TaskEntry, find_task


def registry(path: str | os.PathLike) -> list[TaskEntry]:
    """The persisted task registry of a match folder (or of ``ARTIFACT/match``), sorted by id."""
    return read_tasks(path)


def get_task(path: str | os.PathLike, task_id: str, require_available: bool = False) -> TaskEntry:
    """One registry entry; UnknownNameError with did-you-mean, or EmptyResultError for an unavailable preset."""
    task = find_task(read_tasks(path), task_id)
    if require_available and not task.available:
        raise EmptyResultError(
            f"task {task_id} is not available here: {task.reason}",
            "build an artifact that contains those classes, or pick another task",
        )
    return task


__all__ = [
    "MatchResult",
    "MatchRow",
    "SubsetRecord",
    "TaskEntry",
    "PRESETS",
    "load_match",
    "registry",
    "get_task",
]
