"""A task is a dataset: one resolver for every form a task comes in.

    open_task("paper-dg-cat-dog-1", artifact="ARTIFACT", images="images.zip")   # planned from a build
    open_task("out/metashift-paper-dg-cat-dog-1")                                # an exported repo folder
    open_task("NS/metashift-paper-dg-cat-dog-1", revision="main")                 # a Hub dataset repo
    open_task(load_dataset("NS/metashift-paper-dg-cat-dog-1", "paper-dg-cat-dog-1"))   # a loaded dataset

Whatever the form, the result is a :class:`TaskData`: the task's rows per split (a ``TaskPlan``, rows
in export order, :data:`metashift_hf.shards.SORT_KEYS`, so every form gives the same rows in the same
order and a training run gives the same numbers from each), its shift spec and where the pixels are.
From a folder, a repo or a dataset nothing else is needed: the images are the parquet's own bytes,
and sizes, seed and options are the ones the spec records, so ``--set`` and ``--seed`` only apply to
a task id planned on an artifact.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Mapping, Sequence

import datasets

from .api import PreparedTask, plan
from .builders.artifact import Artifact
from .builders.images import DatasetImages, ImageSource, open_images
from .builders.metashift import spec_of_dataset
from .builders.shifts import Row, TaskPlan
from .builders.spec import ShiftSpec
from .core.errors import InputFormatError, MissingImagesError, UnknownNameError
from .shards import SORT_KEYS, SPEC_FILE
from .specs import folder_configs, hub_configs, looks_like_repo_id, pick_config

TaskForm = Literal["artifact", "folder", "hub", "dataset"]
ROW_COLUMNS = ("image_id", "label", "group", "context", "contexts", "community")
TASK_FORMS_FIX = ("pass a task id with --artifact ARTIFACT (Python: artifact=), a folder written by "
                  "`metashift-hf export`, a Hub dataset repo id NAMESPACE/NAME, or a loaded Dataset/DatasetDict")


@dataclass(frozen=True)
class TaskData:
    """One task, whatever form it came in: rows per split + spec (``plan``) and its images.

    ``dataset`` holds the loaded splits (folder, Hub repo, Dataset); ``artifact``/``images_path`` the
    build and image source a planned task id reads.
    """

    plan: TaskPlan
    form: TaskForm
    where: str  # for messages: "artifact A", "folder F", "Hub dataset repo NS/NAME", "dataset"
    dataset: "datasets.DatasetDict | None" = None
    artifact: Artifact | None = None
    images_path: "str | os.PathLike | ImageSource | None" = None

    @property
    def task_id(self) -> str:
        return self.plan.task_id

    @property
    def spec(self) -> ShiftSpec:
        return self.plan.spec

    @property
    def classes(self) -> list[str]:
        return list(self.plan.classes)

    def images(self) -> ImageSource:
        """The task's pixels: the dataset's own JPEG bytes, or the image source given with the artifact."""
        if self.dataset is not None:
            return dataset_images(self.dataset, self.where)
        if self.images_path is None:
            raise MissingImagesError(f"task {self.task_id}: the images are needed, and none were given",
                                     "pass --images SRC (a folder of <id>.jpg or GQA images.zip), or use the "
                                     "exported folder / Hub repo of the task, which carries its images")
        return open_images(self.images_path)


def dataset_images(dd: "datasets.DatasetDict", where: str) -> ImageSource:
    """The ``image`` column of every split, by image id (original bytes, never decoded)."""
    parts = [dd[s] for s in dd if len(dd[s])]
    if not parts or any("image" not in d.column_names for d in parts):
        raise MissingImagesError(f"{where} has no image column", "load the task with its images (the exported parquet has them)")
    whole = parts[0] if len(parts) == 1 else datasets.concatenate_datasets(parts)
    return DatasetImages(whole, "image", [str(i) for i in whole["image_id"]], where)


def dataset_classes(dd: "datasets.DatasetDict", where: str, required: Sequence[str] = ROW_COLUMNS) -> list[str]:
    """The class names of ``dd``, after checking that every split has the ``required`` columns and one
    ClassLabel ``label`` (the same names in every split)."""
    classes: list[str] | None = None
    for split, ds in dd.items():
        missing = [c for c in (*required, "label") if c not in ds.column_names]
        if missing:
            raise InputFormatError(f"{where}: split {split!r} lacks column(s) {sorted(set(missing))}",
                                   "use a dataset written by `metashift-hf export` / `publish` or metashift_hf.prepare")
        label = ds.features["label"]
        if not isinstance(label, datasets.ClassLabel):
            raise InputFormatError(f"{where}: split {split!r} label is not a ClassLabel", "use the exported dataset as is")
        if classes is None:
            classes = list(label.names)
        elif list(label.names) != classes:
            raise InputFormatError(f"{where}: split {split!r} has classes {label.names}, other splits {classes}",
                                   "use the exported dataset as is (one ClassLabel for every split)")
    if classes is None:
        raise InputFormatError(f"{where} has no splits", "load a task with at least one split")
    return classes


def plan_of_dataset(dd: "datasets.DatasetDict", spec: ShiftSpec, where: str) -> TaskPlan:
    """The task's rows as the planner wrote them, read back from a prepared or exported dataset."""
    classes = dataset_classes(dd, where)
    if tuple(classes) != tuple(spec.classes):
        raise InputFormatError(f"{where}: classes {classes} differ from its shift spec's {list(spec.classes)}",
                               "export the task again")
    splits: dict[str, list[Row]] = {}
    for split, ds in dd.items():
        cols = ds.select_columns(list(ROW_COLUMNS)).to_dict()
        splits[split] = [Row(str(i), classes[y], g, c, tuple(cs or ()), int(m))
                         for i, y, g, c, cs, m in zip(*(cols[k] for k in ROW_COLUMNS))]
    return TaskPlan(spec.task_id, classes, {s: rows for s, rows in splits.items() if rows}, spec)


def in_export_order(tp: TaskPlan) -> TaskPlan:
    """``tp`` with each split's rows in the order export writes them (image id, then class index)."""
    assert SORT_KEYS == ("image_id", "label"), "keep this order in step with shards.export_order"
    index = {c: i for i, c in enumerate(tp.classes)}
    splits = {s: sorted(rows, key=lambda r: (r.image_id, index[r.label])) for s, rows in tp.splits.items()}
    return TaskPlan(tp.task_id, tp.classes, splits, tp.spec)


def _as_dataset_dict(ds: "datasets.Dataset | datasets.DatasetDict") -> "datasets.DatasetDict":
    if isinstance(ds, datasets.DatasetDict):
        return ds
    return datasets.DatasetDict({str(ds.split) if ds.split else "test": ds})


def _repo_folder(path: Path, config: str | None) -> tuple[Path, str]:
    """(repo folder, config) for a repo folder or one of its config folders."""
    if (path / SPEC_FILE).is_file():  # the config folder itself
        if config not in (None, path.name):
            raise UnknownNameError(f"{path} is config {path.name!r}, not {config!r}", "drop --config, or pass the repo folder")
        return path.parent, path.name
    return path, pick_config(str(path), folder_configs(path), config)


def task_dataset(source: Any, *, config: str | None = None,
                 revision: str | None = None) -> tuple["datasets.DatasetDict", str, TaskForm]:
    """(splits, where, form) of an exported folder, a Hub repo id, a PreparedTask or a loaded dataset."""
    if isinstance(source, (PreparedTask, datasets.Dataset, datasets.DatasetDict)) and (config, revision) != (None, None):
        raise InputFormatError(f"config={config!r}, revision={revision!r}: a loaded {type(source).__name__} is one "
                               "config at one revision already", "drop config=/revision=, or pass the repo id or folder")
    if isinstance(source, PreparedTask):
        return source.dataset, f"prepared task {source.task_id}", "dataset"
    if isinstance(source, (datasets.Dataset, datasets.DatasetDict)):
        return _as_dataset_dict(source), "dataset", "dataset"
    if isinstance(source, datasets.IterableDataset | datasets.IterableDatasetDict):
        raise InputFormatError("a streamed (iterable) dataset has no row order to score against",
                               "load it without streaming=True, or pass the repo id and let metashift-hf load it")
    if not isinstance(source, (str, os.PathLike)):
        raise InputFormatError(f"cannot read a task from a {type(source).__name__}", TASK_FORMS_FIX)
    path = Path(source)
    if path.is_dir():
        repo, name = _repo_folder(path, config)
        where = f"exported folder {repo} (config {name})"
        return datasets.load_dataset(str(repo), name), where, "folder"
    if isinstance(source, str) and looks_like_repo_id(source):
        name = pick_config(f"Hub dataset repo {source}", hub_configs(source, revision), config)
        where = f"Hub dataset repo {source} (config {name}" + (f", revision {revision})" if revision else ")")
        return datasets.load_dataset(source, name, revision=revision), where, "hub"
    if path.exists():
        raise InputFormatError(f"{path} is a file, not a task", TASK_FORMS_FIX)
    raise UnknownNameError(f"task {str(source)!r} is made from an artifact, and none was given (nor is it an "
                           "exported folder or a Hub repo id)", TASK_FORMS_FIX)


def open_task(task: Any, *, artifact: "str | os.PathLike | Artifact | None" = None,
              images: "str | os.PathLike | ImageSource | None" = None, config: str | None = None,
              revision: str | None = None, seed: int | None = None,
              options: Mapping[str, Any] | None = None) -> TaskData:
    """Resolve ``task`` (see the module docstring) into a :class:`TaskData`.

    ``artifact``, ``images``, ``seed`` and ``options`` go with a task id planned on an artifact;
    ``config`` and ``revision`` pick the config and the Hub revision of a repo.
    """
    if isinstance(task, TaskData):
        return task
    if isinstance(task, TaskPlan):  # already planned (experiments plan every task before training)
        return TaskData(in_export_order(task), "artifact", "task plan",
                        artifact=None if artifact is None else Artifact.load(artifact),
                        images_path=images)
    if isinstance(task, str) and artifact is not None:
        if config is not None or revision is not None:
            raise InputFormatError("--config/--revision pick a config of an exported folder or Hub repo, not of a task id "
                                   "planned on --artifact", "drop --config/--revision, or drop --artifact and pass the repo")
        art = Artifact.load(artifact)
        tp = plan(task, art, seed=0 if seed is None else seed, **dict(options or {}))
        return TaskData(in_export_order(tp), "artifact", f"artifact {art.root}", artifact=art, images_path=images)
    if artifact is not None:
        raise InputFormatError(f"--artifact plans a task id, but the task is a {type(task).__name__}",
                               "drop --artifact: the dataset carries its rows and shift spec")
    dd, where, form = task_dataset(task, config=config, revision=revision)
    spec = task.spec if isinstance(task, PreparedTask) else spec_of_dataset(dd)
    # a loaded object may come with the images it was prepared from; a folder or repo id never needs them
    refuse_planning_options(spec, where, seed, options, images if form in ("folder", "hub") else None)
    return TaskData(in_export_order(plan_of_dataset(dd, spec, where)), form, where, dataset=dd)


def refuse_planning_options(spec: ShiftSpec, where: str, seed: int | None, options: Mapping[str, Any] | None,
                            images: Any) -> None:
    """A dataset's rows are fixed: a seed, size option or image source that would change them is refused."""
    if options:
        raise InputFormatError(f"{where} is already planned (options {dict(spec.overrides) or 'default'} in its shift "
                               f"spec); --set {', '.join(f'{k}={v}' for k, v in options.items())} cannot change it",
                               "drop --set, or plan the task on an artifact with --artifact")
    if seed is not None and seed != spec.seed:
        raise InputFormatError(f"{where} was sampled with seed {spec.seed}; --seed {seed} cannot change it",
                               "drop --seed, or plan the task on an artifact with --artifact")
    if images is not None:
        raise InputFormatError(f"{where} carries its own images; --images is only for a task id planned on --artifact",
                               "drop --images")


__all__ = ["TaskData", "TaskForm", "open_task", "task_dataset", "plan_of_dataset", "dataset_classes", "dataset_images",
           "in_export_order",
           "refuse_planning_options"]
