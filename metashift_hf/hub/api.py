"""Python entry points for task datasets: ``prepare``/``load`` (with images), ``plan`` (without).

    import metashift_hf
    ds = metashift_hf.load("paper-dg-cat-dog-1", artifact="ARTIFACT", images="images.zip")
    task = metashift_hf.prepare("paper-subpop-cat-dog-p12", artifact="ARTIFACT", images="img/", scale=0.1)
    task.spec.minority_fraction      # MinorityFraction(target=..., achieved=...)

Keyword options are the task family's options (``scale``, ``train_per_group``, ``minority_fraction``,
``validation_fraction``, the collections' ``selected_classes``, ``attributes``, ``image_subset_size_threshold``,
``min_local_groups``; ``attributes_dataset=True`` is the old HF loader's spelling of task ``attributes``),
parsed once by the family's options dataclass (docs/tasks.md lists them per task). ``with_image_metadata`` and
``verify_images`` say how :func:`prepare` writes the rows, not which rows: they are its own arguments.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Mapping

from metashift_hf.builders.artifact import Artifact
from metashift_hf.builders.metashift import Metashift, spec_of_dataset
from metashift_hf.builders.spec import ShiftSpec
from metashift_hf.builders.tags import MultiLabelDataset
from metashift_hf.builders.tasks import plan_task, task_ids
from metashift_hf.core import options as opt
from metashift_hf.core.errors import EmptyGroupError, EmptyResultError, MetashiftError, MissingImagesError


if TYPE_CHECKING:
    import datasets

    from metashift_hf.builders.images import ImageSource
    from metashift_hf.builders.plan import TaskPlan


@dataclass
class PreparedTask:
    task_id: str
    dataset: "datasets.DatasetDict"
    spec: ShiftSpec


def plan(task: str, artifact: "str | os.PathLike | Artifact", *, seed: int = 0, **overrides: Any) -> "TaskPlan":
    """The task's rows per split (image_id, label, group, context(s), community) and ``.spec``.

    No images are read: this is what ``metashift-hf tasks show``, export and evaluation use.
    """
    return plan_task(task, artifact, seed=seed, **overrides)


_TRY_SCALES = (0.5, 0.25, 0.1, 0.05)


def fitting_scale(
    task: str, artifact: "str | os.PathLike | Artifact", *, seed: int = 0, **overrides: Any
) -> float | None:
    """The largest of 0.5, 0.25, 0.1, 0.05 at which ``task`` plans, or None (also when it takes no ``scale``)."""
    for scale in _TRY_SCALES:
        try:
            plan(task, artifact, seed=seed, **{**overrides, "scale": scale})
        except EmptyResultError:
            continue  # still too big: try a smaller scale
        except MetashiftError:
            return None  # the task takes no scale option (or fails for another reason)
        return scale
    return None


def plan_all(
    tasks: list[str],
    artifact: "str | os.PathLike | Artifact",
    *,
    seed: int = 0,
    options: Mapping[str, Mapping[str, Any]] | None = None,
) -> dict[str, "TaskPlan"]:
    """Plan every task before any is materialised, so ``export A B C`` fails on C before building A.
    ``options[task]``: that task's options (none when it is not named).

    A task whose sizes the artifact cannot supply raises EmptyResultError whose fix is the concrete
    option that makes it plan, e.g. ``--set paper-subpop-cat-dog-p12:scale=0.5``.
    """
    art = Artifact.load(artifact)
    plans = {}
    for task in tasks:
        task_options = dict((options or {}).get(task, {}))
        try:
            plans[task] = plan(task, art, seed=seed, **task_options)
        except EmptyGroupError as exc:
            raise EmptyGroupError(f"task {task} cannot be planned: {exc.what}", exc.fix) from None
        except EmptyResultError as exc:
            scale = fitting_scale(task, art, seed=seed, **task_options)
            fix = (
                f"pass --set {task}:scale={scale} (the largest of {', '.join(map(str, _TRY_SCALES))} at which it "
                f"plans; Python: scale={scale})"
                if scale is not None
                else f"pass smaller sizes for this task with --set {task}:KEY=VALUE ({exc.fix})"
            )
            raise EmptyResultError(
                f"task {task} cannot be planned with {_options_text(task_options)}: {exc.what}", fix
            ) from None
    return plans


def _options_text(options: dict) -> str:
    return (
        "the default sizes" if not options else "options " + ", ".join(f"{k}={v}" for k, v in sorted(options.items()))
    )


def available_tasks(artifact: "str | os.PathLike | Artifact") -> list[str]:
    """Every task id (config name) valid for this artifact, matched tasks included when
    ``ARTIFACT/match/`` exists."""

    return task_ids(Artifact.load(artifact))


def _image_column_record(artifact: "str | os.PathLike | Artifact") -> dict | None:
    for record in Artifact.load(artifact).manifest.inputs:
        if record.get("role") == "hf_dataset" and record.get("image_column"):
            return record
    return None


def reads_dataset_images(artifact: "str | os.PathLike | Artifact") -> bool:
    """Whether the artifact's images come from its dataset's image column (then no ``images`` is needed)."""
    return _image_column_record(artifact) is not None


def dataset_images(artifact: "str | os.PathLike | Artifact") -> "ImageSource | None":
    """An artifact built from a dataset with an image column (``build --hf-dataset ... --image-column``)
    reads its images from that column; None for other artifacts."""
    record = _image_column_record(artifact)
    return MultiLabelDataset.from_record(record).images() if record is not None else None


def prepare(
    task: str,
    artifact: "str | os.PathLike | Artifact",
    images: "str | os.PathLike | ImageSource | None" = None,
    *,
    seed: int = 0,
    on_missing: str = "error",
    cache_dir: "str | os.PathLike | None" = None,
    with_image_metadata: bool = False,
    verify_images: bool = True,
    **overrides: Any,
) -> PreparedTask:
    """Materialise a task: splits as a ``datasets.DatasetDict`` with original JPEG bytes + its spec.

    ``cache_dir`` is the ``datasets`` cache (default: the Hugging Face datasets cache); a prepared
    task is reused when task, artifact content, images path, seed and options are the same.
    ``with_image_metadata`` adds the scene-graph fields; ``verify_images=False`` skips decoding each image once
    to check it. ``overrides``: the task's options.
    """

    # argument types first: a wrong one is named here, not deep inside the datasets builder
    task, seed = opt.text(task, "task"), opt.seed(seed, "seed")
    if on_missing not in ("error", "skip"):
        raise opt.OptionError(
            f"on_missing={on_missing!r} is neither 'error' nor 'skip'", "pass on_missing='error' or 'skip'"
        )
    if cache_dir is not None:
        opt.path(cache_dir, "cache_dir")
    if images is None:
        images = dataset_images(artifact)
    if images is None:
        raise MissingImagesError(
            f"task {task}: prepare/load need images",
            "pass images= a folder of <id>.jpg files or GQA's images.zip "
            "(metashift_hf.hub.api.plan works without images)",
        )
    builder = Metashift(
        config_name=task,
        artifact=artifact,
        images=images,
        seed=seed,
        on_missing=on_missing,
        overrides=dict(overrides) or None,
        cache_dir=None if cache_dir is None else str(cache_dir),
        with_image_metadata=with_image_metadata,
        verify_images=verify_images,
    )
    builder.download_and_prepare()
    ds = builder.as_dataset()
    if not ds or not any(len(split) for split in ds.values()):  # every image dropped by on_missing="skip"
        raise EmptyResultError(
            f"task {task}: no image left to use (all were missing or unusable in {images})",
            "point --images (Python: images=) at the folder or zip that holds the task's images",
        )
    return PreparedTask(task_id=task, dataset=ds, spec=spec_of_dataset(ds))


def load(
    task: str,
    artifact: "str | os.PathLike | Artifact",
    images: "str | os.PathLike | ImageSource | None" = None,
    *,
    seed: int = 0,
    on_missing: str = "error",
    cache_dir: "str | os.PathLike | None" = None,
    with_image_metadata: bool = False,
    verify_images: bool = True,
    **overrides: Any,
) -> "datasets.DatasetDict":
    """Same as :func:`prepare`, returning only the ``DatasetDict``."""
    return prepare(
        task,
        artifact,
        images,
        seed=seed,
        on_missing=on_missing,
        cache_dir=cache_dir,
        with_image_metadata=with_image_metadata,
        verify_images=verify_images,
        **overrides,
    ).dataset


__all__ = [
    "PreparedTask",
    "prepare",
    "load",
    "plan",
    "plan_all",
    "fitting_scale",
    "available_tasks",
    "dataset_images",
    "reads_dataset_images",
]
