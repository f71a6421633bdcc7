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
from metashift_hf.core.errors import MetashiftError
from metashift_hf.tasks.families import task_ids

from .task_data import PreparedTask, TaskRef
from .task_open import open_task


if TYPE_CHECKING:
    import datasets

    from metashift_hf.tasks.plan import TaskPlan


class OldCallError(MetashiftError, TypeError):
    """A call in the 0.1 form (``plan("id", artifact=..., seed=..., scale=...)``): since 0.2.0 ``plan``, ``prepare``
    and ``load`` take one :class:`TaskRef`. Still a TypeError (what such a call raised before), saying the new call."""


# 0.1's positional arguments after the task id: plan(task, artifact), prepare/load(task, artifact, images)
_OLD_POSITIONAL = {"plan": ("artifact",), "prepare": ("artifact", "images"), "load": ("artifact", "images")}
_REF_FIELDS = ("artifact", "images", "seed", "config", "revision", "options")


def _refuse_old_form(name: str, request: Any, args: tuple, old: dict, keep: str = "") -> None:
    """Refuse the 0.1 call form, showing the same request as the 0.2 call (``keep``: prepare's own arguments)."""
    if not args and not old:
        return
    given = dict(old)
    for field_name, value in zip(_OLD_POSITIONAL[name], args):
        given.setdefault(field_name, value)
    ref = {k: given.pop(k) for k in _REF_FIELDS if k in given}
    options = {**dict(ref.pop("options", None) or {}), **given}  # 0.1's **overrides: the task's options
    if options:
        ref["options"] = options
    shown = ", ".join([repr(request), *(f"{k}={v!r}" for k, v in ref.items())])
    extra = len(args) > len(_OLD_POSITIONAL[name])
    raise OldCallError(
        f"metashift_hf.{name}() takes one task request (a TaskRef) since 0.2.0, not 0.1's form with "
        + (f"{len(args)} more positional argument(s)" if args else "")
        + (" and " if args and old else "")
        + (f"keyword(s) {', '.join(sorted(old))}" if old else "")
        + (f" (0.1's {name} took at most {len(_OLD_POSITIONAL[name])} after the task id)" if extra else ""),
        f"call metashift_hf.{name}(TaskRef({shown}){keep}) (from metashift_hf import TaskRef; "
        "task options such as scale go in options={...}; CHANGELOG.md, 0.2.0)",
    )


def plan(request: "TaskRef | Any", *args: Any, **old: Any) -> "TaskPlan":
    """The task's rows per split (image_id, label, group, context(s), community), in export order, and ``.spec``.

    No images are read: this is what ``metashift-hf tasks show``, export and evaluation use. (``args``/``old``: the
    0.1 form, ``plan("id", artifact=...)``, refused with the new call shown.)
    """
    _refuse_old_form("plan", request, args, old)
    return open_task(request).plan


def prepare(
    request: "TaskRef | Any",
    *args: Any,
    on_missing: str = "error",
    cache_dir: "str | os.PathLike | None" = None,
    with_image_metadata: bool = False,
    verify_images: bool = True,
    **old: Any,
) -> PreparedTask:
    """Materialise a task: splits as a ``datasets.DatasetDict`` with original JPEG bytes + its spec.

    ``cache_dir`` is the ``datasets`` cache (default: the Hugging Face datasets cache); a prepared
    task is reused when task, artifact content, images path, seed and options are the same.
    ``with_image_metadata`` adds the scene-graph fields; ``verify_images=False`` skips decoding each image once
    to check it (:meth:`TaskData.prepare <metashift_hf.hub.task_data.TaskData.prepare>`). (``args``/``old``: the
    0.1 form, ``prepare("id", artifact=..., images=...)``, refused with the new call shown.)
    """
    _refuse_old_form("prepare", request, args, old, _own_args(on_missing, cache_dir))
    return open_task(request).prepare(
        on_missing=on_missing,
        cache_dir=cache_dir,
        with_image_metadata=with_image_metadata,
        verify_images=verify_images,
    )


def load(
    request: "TaskRef | Any",
    *args: Any,
    on_missing: str = "error",
    cache_dir: "str | os.PathLike | None" = None,
    with_image_metadata: bool = False,
    verify_images: bool = True,
    **old: Any,
) -> "datasets.DatasetDict":
    """Same as :func:`prepare`, returning only the ``DatasetDict``."""
    _refuse_old_form("load", request, args, old, _own_args(on_missing, cache_dir))
    return prepare(
        request,
        on_missing=on_missing,
        cache_dir=cache_dir,
        with_image_metadata=with_image_metadata,
        verify_images=verify_images,
    ).dataset


def _own_args(on_missing: str, cache_dir: Any) -> str:
    """prepare/load's own arguments as the new call keeps them (not part of the TaskRef)."""
    kept = {"on_missing": on_missing, "cache_dir": cache_dir}
    return "".join(f", {k}={v!r}" for k, v in kept.items() if v != {"on_missing": "error", "cache_dir": None}[k])


def available_tasks(artifact: "str | os.PathLike | Artifact") -> list[str]:
    """Every task id (config name) valid for this artifact, matched tasks included when
    ``ARTIFACT/match/`` exists."""

    return task_ids(Artifact.load(artifact))


__all__ = ["PreparedTask", "OldCallError", "prepare", "load", "plan", "available_tasks"]
