"""The record a card is rendered from (``CardTask``), gathered once per task by ``render.task_info``."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from metashift_hf.cards.pictures import TaskPictures
from metashift_hf.tasks.group_distances import TrainTestDistance
from metashift_hf.tasks.spec import ShiftSpec


@dataclass
class CardTask:
    """Everything a card says about one task, gathered once by :func:`task_info`."""

    task_id: str
    repo_id: str  # what users pass to load_dataset (ns/repo, or the local folder)
    spec: ShiftSpec
    label_names: list[str]
    fields: list[tuple[str, str]]  # (name, type)
    split_rows: dict[str, int]
    group_rows: dict[str, dict[str, int]]
    build: dict[str, Any]
    plots: list[str] = field(default_factory=list)  # classes whose meta-graph picture is copied
    distances: list[TrainTestDistance] = field(default_factory=list)  # read from the artifact (tasks.group_distances)
    differences: list[str] = field(default_factory=list)
    example: dict = field(default_factory=dict)  # the first row without its image bytes (data-instance section)
    pictures: TaskPictures | None = None  # the task's own pictures (cards.pictures), None when not drawn
    split_images: dict[str, int] = field(default_factory=dict)  # distinct image_id per split (< rows: multi-label)
