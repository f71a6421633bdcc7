"""Python entry points for task datasets: ``prepare``/``load`` (with images), ``plan`` (without).

    import metashift_hf
    from metashift_hf import TaskRef
    ds = metashift_hf.load(TaskRef("paper-dg-cat-dog-1", artifact="ARTIFACT", images="images.zip"))
    task = metashift_hf.prepare(
        TaskRef("paper-subpop-cat-dog-p12", artifact="ARTIFACT", images="img/", options={"scale": 0.1})
    )
    task.spec.minority_fraction      # MinorityFraction(target=..., achieved=...)

Each takes one task request, a :class:`~metashift_hf.hub.task_data.TaskRef` (or anything ``open_task`` takes: an
exported folder, a Hub repo id, a loaded dataset; for the tasks of a run, ``TaskOrigin(...).ref(task_id)``).
``TaskRef.options`` are the task family's options (``scale``, ``train_per_group``, ``minority_fraction``,
``validation_fraction``, the collections' ``selected_classes``, ``attributes``, ``image_subset_size_threshold``,
``min_local_groups``; ``attributes_dataset=True`` is the old HF loader's spelling of task ``attributes``),
parsed once by the family's options dataclass (docs/tasks.md lists them per task). ``on_missing``,
``cache_dir``, ``with_image_metadata`` and ``verify_images`` say how :func:`prepare` writes the rows, not which
rows: they are its own arguments. The task is resolved by ``open_task`` and materialised by
:meth:`TaskData.prepare <metashift_hf.hub.task_data.TaskData.prepare>`, the one materialiser.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from metashift_hf.builders.artifact import Artifact
from metashift_hf.tasks.families import task_ids

from .task_data import PreparedTask, TaskRef
from .task_open import open_task


if TYPE_CHECKING:
    import datasets

    from metashift_hf.tasks.plan import TaskPlan


def plan(request: "TaskRef | Any") -> "TaskPlan":
    """The task's rows per split (image_id, label, group, context(s), community), in export order, and ``.spec``.

    No images are read: this is what ``metashift-hf tasks show``, export and evaluation use.
    """
    return open_task(request).plan


def prepare(
    request: "TaskRef | Any",
    *,
    on_missing: str = "error",
    cache_dir: "str | os.PathLike | None" = None,
    with_image_metadata: bool = False,
    verify_images: bool = True,
) -> PreparedTask:
    """Materialise a task: splits as a ``datasets.DatasetDict`` with original JPEG bytes + its spec.

    ``cache_dir`` is the ``datasets`` cache (default: the Hugging Face datasets cache); a prepared
    task is reused when task, artifact content, images path, seed and options are the same.
    ``with_image_metadata`` adds the scene-graph fields; ``verify_images=False`` skips decoding each image once
    to check it (:meth:`TaskData.prepare <metashift_hf.hub.task_data.TaskData.prepare>`).
    """
    return open_task(request).prepare(
        on_missing=on_missing,
        cache_dir=cache_dir,
        with_image_metadata=with_image_metadata,
        verify_images=verify_images,
    )


def load(
    request: "TaskRef | Any",
    *,
    on_missing: str = "error",
    cache_dir: "str | os.PathLike | None" = None,
    with_image_metadata: bool = False,
    verify_images: bool = True,
) -> "datasets.DatasetDict":
    """Same as :func:`prepare`, returning only the ``DatasetDict``."""
    return prepare(
        request,
        on_missing=on_missing,
        cache_dir=cache_dir,
        with_image_metadata=with_image_metadata,
        verify_images=verify_images,
    ).dataset


def available_tasks(artifact: "str | os.PathLike | Artifact") -> list[str]:
    """Every task id (config name) valid for this artifact, matched tasks included when
    ``ARTIFACT/match/`` exists."""

    return task_ids(Artifact.load(artifact))


__all__ = ["PreparedTask", "prepare", "load", "plan", "available_tasks"]
