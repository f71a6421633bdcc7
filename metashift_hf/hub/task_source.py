"""A task is a dataset: one resolver for every form a task comes in.

    open_task(TaskRef("paper-dg-cat-dog-1", artifact="ARTIFACT", images="images.zip"))   # planned from a build
    open_task("out/metashift-paper-dg-cat-dog-1")                                # an exported repo folder
    open_task("NS/metashift-paper-dg-cat-dog-1")                                  # a Hub dataset repo
    open_task(load_dataset("NS/metashift-paper-dg-cat-dog-1", "paper-dg-cat-dog-1"))   # a loaded dataset
    open_task(TaskRef("NS/metashift", config="paper-dg-cat-dog-1", revision="v1"))     # any of them, with options

A :class:`TaskRef` is the one spelling of a task request (what every command's task flags and every library
function's ``task`` argument become); :attr:`TaskRef.form` is the one place that decides which form it is.

Whatever the form, the result is a :class:`TaskData`: the task's rows per split (a ``TaskPlan``, rows
in export order, :data:`metashift_hf.hub.shards.SORT_KEYS`, so every form gives the same rows in the same
order and a training run gives the same numbers from each), its shift spec and where the pixels are.
From a folder, a repo or a dataset nothing else is needed: the images are the parquet's own bytes,
and sizes, seed and options are the ones the spec records, so ``--set`` and ``--seed`` only apply to
a task id planned on an artifact.

:class:`TaskData` reads lazily: a folder's or repo's spec comes from its ``shift_spec.json`` (no parquet read),
its rows (checked against the spec) when ``.plan`` or ``.dataset`` is first asked for, and pixels only through
``.images()``.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import os
import types
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Literal, Mapping, Sequence

import datasets
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..builders.artifact import Artifact
from ..builders.images import DatasetImages, ImageSource, open_images
from ..builders.meta_graph_facts import FACTS_FILE, FACTS_MAX_BYTES, MetaGraphFacts
from ..builders.metashift import carries_spec, spec_of_features
from ..builders.plan import Row, TaskPlan
from ..builders.spec import ShiftSpec
from ..core.errors import InputFormatError, MetashiftError, MissingImagesError, UnknownNameError
from ..core.names import terminal_safe
from .api import PreparedTask, plan
from .shards import REPO_PREFIX, SORT_KEYS, SPEC_FILE
from .specs import (
    card_configs,
    check_spec_size,
    configs_of,
    folder_configs,
    hub_call,
    hub_files,
    hub_text,
    looks_like_repo_id,
    pick_config,
    read_spec_file,
    read_text_file,
)


TaskForm = Literal["artifact", "folder", "hub", "dataset"]
logger = logging.getLogger(__name__)
ROW_COLUMNS = ("image_id", "label", "group", "context", "contexts", "community")
TASK_FORMS_FIX = (
    "pass a task id with --artifact ARTIFACT (Python: artifact=), a folder written by "
    "`metashift-hf export`, a Hub dataset repo id NAMESPACE/NAME, or a loaded Dataset/DatasetDict"
)
# The one default of a task's sampling seed: a task id planned on an artifact takes it when no seed is
# given; a folder or repo keeps the seed its spec records.
DEFAULT_SEED = 0
_LOADED = (PreparedTask, datasets.Dataset, datasets.DatasetDict)


@dataclass(frozen=True)
class TaskRef:
    """One task request: what every command's task flags and every library function's ``task`` mean.

    task: a task id (planned on ``artifact``), an exported repo folder or one of its config folders, a Hub
        dataset repo id ``NAMESPACE/NAME``, a loaded ``Dataset``/``DatasetDict``, a ``PreparedTask`` or a ``TaskPlan``.
    artifact: the build a task id is planned on (``metashift-hf build``'s folder or a loaded ``Artifact``); with
        a loaded dataset or plan, the build it was prepared from (for its meta-graph: communities, distances).
    images: the image source of a task id planned on ``artifact`` (folder of ``<id>.jpg`` or GQA's images.zip).
    seed: the sampling seed of a task id (None: :data:`DEFAULT_SEED`); a folder or repo keeps its spec's.
    config: which config of a folder or Hub repo that holds several tasks.
    revision: a Hub branch, tag or commit (default: main).
    options: the task family's options (``{"scale": 0.5}``), parsed once by the family's options dataclass
        when the task is planned; a folder or repo is planned already and refuses them.
    """

    task: Any
    artifact: "str | os.PathLike | Artifact | None" = None
    images: "str | os.PathLike | ImageSource | None" = None
    seed: int | None = None
    config: str | None = None
    revision: str | None = None
    options: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if isinstance(self.task, TaskRef):
            raise InputFormatError("a TaskRef's task is itself a TaskRef", "pass the inner TaskRef as it is")
        # read-only, so a request cannot change after it was resolved
        object.__setattr__(self, "options", types.MappingProxyType(dict(self.options or {})))

    @property
    def form(self) -> TaskForm:
        """The form of the task (the one place that decides it): a task id with an artifact (or one that is
        neither a folder nor a repo id) is ``artifact``, an existing folder ``folder``, ``NAMESPACE/NAME``
        ``hub``, a loaded object ``dataset``."""
        task = self.task
        if isinstance(task, TaskData):
            return task.form
        if isinstance(task, TaskPlan):
            return "artifact"
        if isinstance(task, _LOADED):
            return "dataset"
        if self.artifact is not None:
            return "artifact"
        if isinstance(task, (str, os.PathLike)) and Path(task).is_dir():
            return "folder"
        if isinstance(task, str) and looks_like_repo_id(task):
            return "hub"
        return "artifact"

    @property
    def planning_seed(self) -> int:
        """The seed a task id is planned with."""
        return DEFAULT_SEED if self.seed is None else self.seed


def task_ref(task: "TaskRef | Any") -> TaskRef:
    """``task`` as a :class:`TaskRef` (a bare task, folder, repo id or dataset becomes ``TaskRef(task)``)."""
    return task if isinstance(task, TaskRef) else TaskRef(task)


@dataclass(frozen=True, eq=False)
class TaskData:
    """One task, whatever form it came in: its spec, rows per split (``plan``) and images, read lazily.

    ``spec`` is known when :func:`open_task` returns (a folder's or repo's ``shift_spec.json``, a dataset's
    features, the plan of a task id); ``dataset`` (the loaded splits of a folder, repo or dataset, checked
    against the spec by :func:`check_rows`) and ``plan`` are read the first time they are asked for;
    pixels only by :meth:`images`.
    """

    ref: TaskRef
    form: TaskForm
    where: str  # for messages: "artifact A", "folder F", "Hub dataset repo NS/NAME", "dataset"
    spec: ShiftSpec
    artifact: Artifact | None = None
    planned: TaskPlan | None = None  # form "artifact": the plan (no images read)
    load_rows: "Callable[[], datasets.DatasetDict] | None" = field(default=None, repr=False)
    # a folder's or repo's <config>/meta_graph.parquet, read and checked against (classes, rows) when asked for
    load_facts: "Callable[[Sequence[str], list], MetaGraphFacts | None] | None" = field(default=None, repr=False)

    @functools.cached_property
    def dataset(self) -> "datasets.DatasetDict | None":
        """The loaded splits (folder, Hub repo, dataset), rows checked against the spec; None for a planned task."""
        return None if self.load_rows is None else self.load_rows()

    @functools.cached_property
    def plan(self) -> TaskPlan:
        """The task's rows per split, in export order."""
        if self.planned is not None:
            return self.planned
        return in_export_order(plan_of_dataset(self.dataset, self.spec, self.where))

    @functools.cached_property
    def meta_graph(self) -> MetaGraphFacts | None:
        """The meta-graph facts of a folder or Hub repo (builders.meta_graph_facts: each context subset's community
        and distance to the largest community), checked against the task's classes and rows; None for other
        forms (an artifact has the meta-graph itself) or an export made before the file existed."""
        if self.load_facts is None:
            return None
        rows = [(r.label, r.contexts) for split_rows in self.plan.splits.values() for r in split_rows]
        return self.load_facts(self.classes, rows)

    @property
    def images_path(self) -> "str | os.PathLike | ImageSource | None":
        return self.ref.images

    @property
    def repo_id(self) -> str | None:
        return str(self.ref.task) if self.form == "hub" else None

    @property
    def revision(self) -> str | None:
        return self.ref.revision if self.form == "hub" else None

    def origin(self) -> dict[str, Any]:
        """Where the task came from, for reports and run cards: form, place and the task options used; for a
        Hub repo also its id, the revision asked and the commit sha that revision resolves to (None when the
        Hub cannot be asked, e.g. offline)."""
        out: dict[str, Any] = {
            "form": self.form,
            "where": self.where,
            "seed": self.spec.seed,
            "options": dict(self.spec.overrides),
        }
        if self.repo_id is not None:
            out.update(repo_id=self.repo_id, revision=self.revision, sha=hub_commit(self.repo_id, self.revision))
        return out

    @property
    def task_id(self) -> str:
        return self.spec.task_id

    @property
    def classes(self) -> list[str]:
        return list(self.spec.classes)

    def verify(self) -> None:
        """Read the rows now and check them against the spec (otherwise read when first needed)."""
        _ = self.plan

    def images(self) -> ImageSource:
        """The task's pixels: the dataset's own JPEG bytes, or the image source given with the artifact."""
        if self.load_rows is not None:
            return dataset_images(self.dataset, self.where)
        if self.images_path is None:
            raise MissingImagesError(
                f"task {self.task_id}: the images are needed, and none were given",
                "pass --images SRC (a folder of <id>.jpg or GQA images.zip), or use the "
                "exported folder / Hub repo of the task, which carries its images",
            )
        return open_images(self.images_path)


def dataset_images(dd: "datasets.DatasetDict", where: str) -> ImageSource:
    """The ``image`` column of every split, by image id (original bytes, never decoded)."""
    parts = [dd[s] for s in dd if len(dd[s])]
    if not parts or any("image" not in d.column_names for d in parts):
        raise MissingImagesError(
            f"{where} has no image column", "load the task with its images (the exported parquet has them)"
        )
    whole = parts[0] if len(parts) == 1 else datasets.concatenate_datasets(parts)
    return DatasetImages(whole, "image", [str(i) for i in whole["image_id"]], where)


def dataset_classes(dd: "datasets.DatasetDict", where: str, required: Sequence[str] = ROW_COLUMNS) -> list[str]:
    """The class names of ``dd``, after checking that every split has the ``required`` columns and one
    ClassLabel ``label`` (the same names in every split)."""
    classes: list[str] | None = None
    for split, ds in dd.items():
        missing = [c for c in (*required, "label") if c not in ds.column_names]
        if missing:
            raise InputFormatError(
                f"{where}: split {split!r} lacks column(s) {sorted(set(missing))}",
                "use a dataset written by `metashift-hf export` / `publish` or metashift_hf.prepare",
            )
        label = ds.features["label"]
        if not isinstance(label, datasets.ClassLabel):
            raise InputFormatError(
                f"{where}: split {split!r} label is not a ClassLabel", "use the exported dataset as is"
            )
        if classes is None:
            classes = list(label.names)
        elif list(label.names) != classes:
            raise InputFormatError(
                f"{where}: split {split!r} has classes {label.names}, other splits {classes}",
                "use the exported dataset as is (one ClassLabel for every split)",
            )
    if classes is None:
        raise InputFormatError(f"{where} has no splits", "load a task with at least one split")
    return classes


ROWS_FIX = (
    "the rows no longer match the shift spec they were exported with (edited, mixed with another task's "
    "splits, or truncated): download the repo again (another --revision) or export the task again with "
    "`metashift-hf export`"
)
_SHOWN = 3  # bad rows named in a message


def _is_text(t: pa.DataType) -> bool:
    return pa.types.is_string(t) or pa.types.is_large_string(t)


def _column_types(schema: pa.Schema) -> dict[str, str]:
    """Column -> what it should be, for the row columns whose arrow type is wrong."""
    types = {c: schema.field(c).type for c in ROW_COLUMNS}
    want = {
        "image_id": _is_text,
        "group": _is_text,
        "context": _is_text,
        "label": pa.types.is_integer,
        "community": pa.types.is_integer,
        "contexts": lambda t: (pa.types.is_list(t) or pa.types.is_large_list(t)) and _is_text(t.value_type),
    }
    names = {
        "image_id": "string",
        "group": "string",
        "context": "string",
        "label": "ClassLabel (integer)",
        "community": "integer",
        "contexts": "list of strings",
    }
    return {c: f"{names[c]}, not {types[c]}" for c, ok in want.items() if not ok(types[c])}


def check_rows(
    dd: "datasets.DatasetDict", spec: ShiftSpec, where: str, config: str | None = None, *, whole: bool = True
) -> None:
    """Refuse a dataset whose rows do not match ``spec``: columns and types, labels in 0..k-1, every row's
    ``group == f"{class}({context})"`` and a group the spec lists for that split (with that class), its
    ``group_id`` (where the split has that ClassLabel) naming the same group, split
    sizes as the spec records, no image twice in a split or in two splits (collections: once per class),
    and (``config`` given: a folder or repo) the spec's task id equal to the config name.

    ``whole=False`` (an object the user loaded, which may be one split or a ``select()``-ed part of one):
    every split must be one the spec records and hold at most its recorded rows; fewer rows and absent
    splits are the user's choice (the Evaluator warns about a partial split), more are refused.

    One place for every dataset-backed form (:func:`open_task`, evaluate's reader); vectorised over the
    arrow columns, no image decoded. Raises one :class:`InputFormatError` naming the split and first bad rows.
    """
    if config is not None and spec.task_id != config:
        raise InputFormatError(
            f"{where}: its shift spec is for task {terminal_safe(spec.task_id)!r}, not for config "
            f"{terminal_safe(config)!r}",
            ROWS_FIX,
        )
    classes = dataset_classes(dd, where)
    if tuple(classes) != tuple(spec.classes):
        raise InputFormatError(
            f"{where}: classes {classes} differ from its shift spec's {list(spec.classes)}", ROWS_FIX
        )
    sizes = {s: n for s, n in spec.split_sizes.items() if n}
    have = {s for s in dd if len(dd[s])}
    if have != set(sizes) and (whole or not have <= set(sizes)):
        missing, extra = sorted(set(sizes) - have), sorted(have - set(sizes))
        raise InputFormatError(
            f"{where}: its shift spec records split(s) {sorted(sizes)}, the data has {sorted(have)}"
            + (f" (missing or empty: {missing})" if missing else "")
            + (f" (not in the spec: {extra})" if extra else ""),
            ROWS_FIX,
        )
    spec_groups = spec.groups()
    per_class = spec.shift_type == "none"  # collections list an image once per class it shows
    seen: dict[tuple[str, str], str] = {}
    names = pa.array(classes, pa.string())
    for split in sorted(have, key=list(sizes).index):
        ds = dd[split]
        if len(ds) != sizes[split] and (whole or len(ds) > sizes[split]):
            raise InputFormatError(
                f"{where}: split {split!r} has {len(ds)} rows, its shift spec records {sizes[split]}", ROWS_FIX
            )
        # group_id is optional (the library groups by `group`), but a user's own loop reads it: it must agree
        group_ids = ds.features.get("group_id")
        group_ids = group_ids if isinstance(group_ids, datasets.ClassLabel) else None
        table = ds.select_columns(list(ROW_COLUMNS) + ["group_id"] * bool(group_ids)).with_format("arrow")[:]
        wrong = _column_types(table.schema)
        if wrong:
            raise InputFormatError(
                f"{where}: split {split!r} column(s) of the wrong type: "
                + "; ".join(f"{c} should be {t}" for c, t in wrong.items()),
                ROWS_FIX,
            )
        col = {c: table.column(c).combine_chunks() for c in table.column_names}
        ids = np.asarray(col["image_id"].to_pylist(), dtype=object)
        label = np.asarray(col["label"].fill_null(-1).to_numpy(zero_copy_only=False), dtype=np.int64)
        null = {
            c: np.asarray(col[c].is_null().to_numpy(zero_copy_only=False))
            for c in ("image_id", "label", "group", "context", "community")
        }
        in_range = (label >= 0) & (label < len(classes))
        cls = names.take(pa.array(np.where(in_range, label, 0)))
        expected = np.asarray(pc.binary_join_element_wise(cls, "(", col["context"], ")", "").to_pylist(), dtype=object)
        group = np.asarray(col["group"].to_pylist(), dtype=object)
        if group_ids is not None:
            gid = np.asarray(col["group_id"].fill_null(-1).to_numpy(zero_copy_only=False), dtype=np.int64)
            gid_names = np.asarray([*group_ids.names, None], dtype=object)  # None: out of range or empty
            gid_group = gid_names[np.where((gid >= 0) & (gid < group_ids.num_classes), gid, group_ids.num_classes)]
        else:
            gid, gid_group = np.zeros(len(ds), np.int64), group
        group_cls = {g.group: g.cls for g in spec_groups.get(split, ())}
        known = np.asarray([group_cls.get(g) for g in group], dtype=object)
        cls_text = np.asarray(cls.to_pylist(), dtype=object)
        keys = [(str(i), str(c) if per_class else "") for i, c in zip(ids, cls_text)]
        first_at: dict[tuple[str, str], int] = {}
        dup_here, dup_other = np.zeros(len(ds), bool), np.zeros(len(ds), bool)
        for n, k in enumerate(keys):
            if k in first_at:
                dup_here[n] = True
            elif k in seen:
                dup_other[n] = True
            first_at.setdefault(k, n)
        checks = [
            (
                null["image_id"] | null["label"] | null["group"] | null["context"] | null["community"],
                lambda n: "empty " + "/".join(c for c in null if null[c][n]),
            ),
            (~null["label"] & ~in_range, lambda n: f"label {label[n]} outside 0..{len(classes) - 1}"),
            (
                in_range & ~null["group"] & ~null["context"] & (group != expected),
                lambda n: f"group {group[n]!r} is not class(context) {expected[n]!r}",
            ),
            (
                ~null["group"] & (known == None) & in_range,  # noqa: E711 (elementwise)
                lambda n: f"group {group[n]!r} is not one of the spec's {split} groups",
            ),
            (
                in_range & (known != None) & (known != cls_text),  # noqa: E711 (elementwise)
                lambda n: f"group {group[n]!r} is of class {known[n]!r} in the spec, the label says {cls_text[n]!r}",
            ),
            (
                ~null["group"] & (gid_group != group),
                lambda n: f"group_id {gid[n]} names {gid_group[n]!r}, not its group {group[n]!r}",
            ),
            (dup_here, lambda n: f"image listed twice in {split!r}"),
            (dup_other, lambda n: f"image also in split {seen.get(keys[n])!r}"),
        ]
        bad = np.zeros(len(ds), bool)
        for mask, _ in checks:
            bad |= mask
        if bad.any():
            rows = np.flatnonzero(bad)
            shown = "; ".join(
                f"row {n} image {terminal_safe(ids[n])}: " + ", ".join(why(n) for mask, why in checks if mask[n])
                for n in rows[:_SHOWN]
            )
            raise InputFormatError(
                f"{terminal_safe(where)}: split {split!r} does not match its shift spec, "
                f"{len(rows)} bad row(s): {terminal_safe(shown)}",
                ROWS_FIX,
            )
        for k in keys:
            seen[k] = split


def plan_of_dataset(dd: "datasets.DatasetDict", spec: ShiftSpec, where: str) -> TaskPlan:
    """The task's rows as the planner wrote them, read back from a prepared or exported dataset."""
    classes = dataset_classes(dd, where)
    if tuple(classes) != tuple(spec.classes):
        raise InputFormatError(
            f"{where}: classes {classes} differ from its shift spec's {list(spec.classes)}", "export the task again"
        )
    splits: dict[str, list[Row]] = {}
    for split, ds in dd.items():
        cols = ds.select_columns(list(ROW_COLUMNS)).to_dict()
        splits[split] = [
            Row(str(i), classes[y], g, c, tuple(cs or ()), int(m))
            for i, y, g, c, cs, m in zip(*(cols[k] for k in ROW_COLUMNS))
        ]
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


def spec_less_dataset(task: "TaskRef | Any") -> "datasets.DatasetDict | None":
    """A loaded Dataset/DatasetDict that carries no shift spec (someone's own data, which evaluate scores as
    task ``custom``), as a DatasetDict; None for anything else, which :func:`open_task` resolves."""
    task = task.task if isinstance(task, TaskRef) else task
    if isinstance(task, (datasets.Dataset, datasets.DatasetDict)) and not carries_spec(task):
        return _as_dataset_dict(task)
    return None


def _repo_folder(path: Path, config: str | None) -> tuple[Path, str]:
    """(repo folder, config) for a repo folder or one of its config folders."""
    if (path / SPEC_FILE).is_file():  # the config folder itself
        if config not in (None, path.name):
            raise UnknownNameError(
                f"{path} is config {path.name!r}, not {config!r}", "drop --config, or pass the repo folder"
            )
        return path.parent, path.name
    configs = folder_configs(path)
    if not configs:
        tasks = sorted(p.parent.parent.name for p in path.glob(f"*/*/{SPEC_FILE}"))
        if tasks:  # the export's root: one repo folder per task
            raise UnknownNameError(
                f"{path} is the root of an export holding {len(tasks)} task folder(s): "
                + ", ".join(terminal_safe(t) for t in sorted(set(tasks))[:10]),
                f"pass one of them as the task, e.g. --task {path / tasks[0]}",
            )
        if (path / "README.md").is_file():  # export wrote it: say what it lacks, not "pass an exported folder"
            declared = card_configs(read_text_file(path / "README.md", f"README.md of {path}"), str(path))
            if declared:
                raise InputFormatError(
                    f"{path}: its card declares config(s) {', '.join(map(terminal_safe, declared[:5]))}"
                    f" but no <config>/{SPEC_FILE} is there",
                    "the folder is incomplete: download "
                    "the repo again or export the task again with `metashift-hf export`",
                )
            siblings = sorted(p.parent.parent.name for p in path.parent.glob(f"*/*/{SPEC_FILE}"))
            if siblings:
                raise UnknownNameError(
                    f"{path} is the collection card of an export (a card, no task); the task "
                    f"folders beside it: {', '.join(map(terminal_safe, siblings[:10]))}",
                    f"pass one of them as the task, e.g. --task {path.parent / siblings[0]}",
                )
    return path, pick_config(str(path), configs, config)


def _check_repo(where: str, files: Mapping[str, "int | None"], config: str, read) -> ShiftSpec:
    """Before ``datasets`` reads a folder or repo: no loading script (never run), a card of bounded size
    that declares ``config``, and the config's shift spec file (bounded, strictly parsed)."""
    scripts = sorted(f for f in files if f.endswith(".py"))
    if scripts:
        raise InputFormatError(
            f"{where} holds a loading script ({', '.join(map(terminal_safe, scripts[:3]))}); "
            "metashift-hf never runs code from a dataset",
            "use a repo written by `metashift-hf export`/`publish` (parquet files and a card, no code)",
        )
    if "README.md" not in files:
        raise InputFormatError(f"{where} has no dataset card README.md", "export or publish the task again")
    check_spec_size(files["README.md"], f"README.md of {where}")
    declared = card_configs(read("README.md"), where)
    if config not in declared:
        raise InputFormatError(
            f"{where}: config {terminal_safe(config)!r} has a {SPEC_FILE} but the card declares "
            f"{', '.join(map(terminal_safe, declared)) or 'no config'}",
            "export or publish the task again (its card lists every config)",
        )
    path = f"{config}/{SPEC_FILE}"
    check_spec_size(files.get(path), f"{path} of {where}")
    return ShiftSpec.from_json(read(path), where=f"{path} of {where}")


def dataset_spec(dd: "datasets.DatasetDict", where: str, file_spec: ShiftSpec | None = None) -> ShiftSpec:
    """The one shift spec of ``dd``: every split's ``group`` feature carries the same, and (a folder or repo)
    the config's ``shift_spec.json`` equals it; a disagreement is refused, neither copy is preferred."""
    specs = {split: spec_of_features(ds.features, where=f"{where} split {split!r}") for split, ds in dd.items()}
    if not specs:
        raise InputFormatError(f"{where} has no splits", "load a task with at least one split")
    first, spec = next(iter(specs.items()))
    for split, other in specs.items():
        if other != spec:
            raise InputFormatError(f"{where}: splits {first!r} and {split!r} carry different shift specs", ROWS_FIX)
    if file_spec is not None and file_spec != spec:
        diff = sorted(k for k, v in file_spec.to_dict().items() if spec.to_dict().get(k) != v)
        raise InputFormatError(
            f"{where}: its {SPEC_FILE} and the card's copy of the spec (the 'group' feature) "
            f"differ in {', '.join(diff)}",
            ROWS_FIX,
        )
    return spec


def _load(where: str, call) -> "datasets.DatasetDict":
    """``datasets.load_dataset`` of a checked folder or repo; shards it cannot read (empty, missing, sizes
    unlike the card's) are one error naming the source."""
    try:
        return call()
    except (datasets.exceptions.DatasetsError, ValueError, FileNotFoundError) as exc:
        causes = [exc]  # datasets wraps the reader's error ("An error occurred while generating the dataset")
        while (nxt := causes[-1].__cause__ or causes[-1].__context__) is not None and len(causes) < 5:
            causes.append(nxt)
        said = "; ".join(
            f"{type(e).__name__}: {terminal_safe(_first_line(e))}" for e in dict.fromkeys(causes[:1] + causes[-1:])
        )
        raise InputFormatError(
            f"{where}: its parquet shards cannot be read as the card describes them ({said})", ROWS_FIX
        ) from None


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0][:300] if text else type(exc).__name__


def _exported_folder(path: Any) -> bool:
    """Whether ``path`` is a folder written by export (a repo folder or one of its config folders)."""
    p = Path(path) if isinstance(path, (str, os.PathLike)) else None
    return p is not None and p.is_dir() and ((p / SPEC_FILE).is_file() or bool(folder_configs(p)))


def _checked_rows(
    load: "Callable[[], datasets.DatasetDict]",
    where: str,
    spec: ShiftSpec,
    *,
    file_spec: bool,
    whole: bool,
    config: str | None,
) -> "Callable[[], datasets.DatasetDict]":
    """``load`` followed by the row checks: (``file_spec``, a folder or repo) the parquet's copy of the spec equals
    ``spec``, the config's shift_spec.json, and every row matches it (:func:`check_rows`)."""

    def rows() -> "datasets.DatasetDict":
        dd = load()
        if file_spec:  # the parquet's copy of the spec (its features) must equal the file's
            dataset_spec(dd, where, spec)
        check_rows(dd, spec, where, config, whole=whole)
        return dd

    return rows


def _open_artifact(ref: TaskRef) -> TaskData:
    task = ref.task
    if isinstance(task, TaskPlan):  # already planned (experiments plan every task before training)
        art = None if ref.artifact is None else Artifact.load(ref.artifact)
        return TaskData(ref, "artifact", "task plan", task.spec, artifact=art, planned=in_export_order(task))
    if ref.artifact is not None and (_exported_folder(ref.artifact) or _exported_folder(task)):
        folder = ref.artifact if _exported_folder(ref.artifact) else task
        raise InputFormatError(
            f"{folder} is an exported task folder, not a build artifact: it carries its rows, spec and images",
            f"pass it as the task (--task {folder}) and drop --artifact",
        )
    if isinstance(task, str) and task != task.strip() and task.strip() and not Path(task).exists():
        raise UnknownNameError(
            f"task {terminal_safe(task)!r} begins or ends with white space",
            f"pass {terminal_safe(task.strip())!r} (without the spaces)",
        )
    if ref.artifact is None:
        if isinstance(task, (str, os.PathLike)) and Path(task).exists():
            raise InputFormatError(f"{task} is a file, not a task", TASK_FORMS_FIX)
        if isinstance(task, os.PathLike) or (isinstance(task, str) and task.startswith(("/", "./", "../", "~"))):
            raise UnknownNameError(f"there is no folder {terminal_safe(str(task))}", TASK_FORMS_FIX)
        if not isinstance(task, (str, os.PathLike)):
            raise InputFormatError(f"cannot read a task from a {type(task).__name__}", TASK_FORMS_FIX)
        raise UnknownNameError(
            f"task {terminal_safe(str(task))!r} is made from an artifact, and none was given (nor is "
            "it an exported folder or a Hub repo id)",
            TASK_FORMS_FIX,
        )
    if ref.config is not None or ref.revision is not None:
        raise InputFormatError(
            "--config/--revision pick a config of an exported folder or Hub repo, not of a task id "
            "planned on --artifact",
            "drop --config/--revision, or drop --artifact and pass the repo",
        )
    art = Artifact.load(ref.artifact)
    tp = in_export_order(plan(task, art, seed=ref.planning_seed, **ref.options))
    return TaskData(ref, "artifact", f"artifact {art.root}", tp.spec, artifact=art, planned=tp)


def _open_folder(ref: TaskRef) -> TaskData:
    repo, name = _repo_folder(Path(ref.task), ref.config)
    where = f"exported folder {repo} (config {name})"
    stats = {
        str(p.relative_to(repo)): p.stat()
        for p in (*repo.glob("*"), *repo.glob("*/*"))
        if p.is_file() and not p.is_symlink()
    }
    files = {f: st.st_size for f, st in stats.items()}
    spec = _check_repo(where, files, name, lambda f: read_text_file(repo / f, f"{f} of {where}"))
    cache = _folder_cache_dir(repo, stats)
    load = _checked_rows(
        lambda: _load(where, lambda: datasets.load_dataset(str(repo), name, cache_dir=cache)),
        where,
        spec,
        file_spec=True,
        whole=True,
        config=name,
    )
    return TaskData(ref, "folder", where, spec, load_rows=load, load_facts=_folder_facts(repo, name))


def _folder_cache_dir(repo: Path, stats: Mapping[str, os.stat_result]) -> str:
    """The ``datasets`` cache of exported folder ``repo``, keyed by the state of its files (``stats``: relative
    path -> stat, the listing the folder was opened with).

    ``datasets`` (5.2) keys a local folder's cache by paths, not contents: a folder whose shards were rewritten
    (``export --force``, an edit) would be read as the rows of its first load. The key here is each file's size,
    mtime and ctime (a rewrite changes ctime even when the mtime is put back), so a changed folder is read again.
    """
    state = sorted((f, st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino) for f, st in stats.items())
    key = hashlib.sha256(json.dumps([str(repo.resolve()), state]).encode()).hexdigest()[:16]
    return str(Path(datasets.config.HF_DATASETS_CACHE) / "metashift-folders" / key)


def _open_hub(ref: TaskRef) -> TaskData:
    repo_id, revision = str(ref.task), ref.revision
    files = hub_files(repo_id, revision)
    name = pick_config(f"Hub dataset repo {repo_id}", configs_of(files), ref.config)
    where = f"Hub dataset repo {repo_id} (config {name}" + (f", revision {revision})" if revision else ")")
    spec = _check_repo(where, files, name, lambda f: hub_text(repo_id, f, revision, files.get(f)))
    load = _checked_rows(
        lambda: hub_call(
            repo_id,
            name,
            lambda: _load(where, lambda: datasets.load_dataset(repo_id, name, revision=revision)),
            revision,
        ),
        where,
        spec,
        file_spec=True,
        whole=True,
        config=name,
    )
    return TaskData(ref, "hub", where, spec, load_rows=load, load_facts=_hub_facts(repo_id, files, name, revision))


def _open_loaded(ref: TaskRef) -> TaskData:
    task = ref.task
    if (ref.config, ref.revision) != (None, None):
        raise InputFormatError(
            f"config={ref.config!r}, revision={ref.revision!r}: a loaded {type(task).__name__} is "
            "one config at one revision already",
            "drop config=/revision=, or pass the repo id or folder",
        )
    if isinstance(task, PreparedTask):
        where = f"prepared task {task.task_id}"
        dd, spec, whole = task.dataset, task.spec, True
    else:
        where, dd, whole = "dataset", _as_dataset_dict(task), False
        spec = dataset_spec(dd, where)
    art = None if ref.artifact is None else _build_of(spec, where, ref.artifact)
    return TaskData(
        ref,
        "dataset",
        where,
        spec,
        artifact=art,
        load_rows=_checked_rows(lambda: dd, where, spec, file_spec=False, whole=whole, config=None),
    )


def _build_of(spec: ShiftSpec, where: str, artifact: "str | os.PathLike | Artifact") -> Artifact:
    """The artifact a loaded dataset says it was prepared from; another build is refused (its meta-graph
    would describe other subsets)."""
    art = Artifact.load(artifact)
    if spec.artifact_hash and spec.artifact_hash != art.content_hash:
        raise InputFormatError(
            f"{where} was prepared from artifact {spec.artifact_hash[:12]}, not from {art.root} "
            f"({art.content_hash[:12]})",
            "pass the artifact the task was prepared from, or drop it",
        )
    return art


def open_task(task: "TaskRef | Any") -> TaskData:
    """Resolve a task request (a :class:`TaskRef`, or a bare task: see the module docstring) into a
    :class:`TaskData`; the one resolver every command and library function calls."""
    if isinstance(task, TaskData):
        return task
    ref = task_ref(task)
    if isinstance(ref.task, (datasets.IterableDataset, datasets.IterableDatasetDict)):
        raise InputFormatError(
            "a streamed (iterable) dataset has no row order to score against",
            "load it without streaming=True, or pass the repo id and let metashift-hf load it",
        )
    opener = {"artifact": _open_artifact, "folder": _open_folder, "hub": _open_hub, "dataset": _open_loaded}[ref.form]
    data = opener(ref)
    if data.form != "artifact":
        # a loaded object may come with the images it was prepared from; a folder or repo id never needs them
        refuse_planning_options(
            data.spec, data.where, ref.seed, ref.options, ref.images if data.form in ("folder", "hub") else None
        )
    return data


@dataclass(frozen=True)
class TaskOrigin:
    """Where the tasks of one run come from (``export``, ``publish``, ``experiment``, ``experiment compare``): what
    a :class:`TaskRef` says for one task, said once for several task ids.

    artifact: the build every task id is planned on (with ``images``, ``seed``, ``options``), loaded once; or
    source: an export folder or a Hub namespace, where task T is ``SOURCE/metashift-T`` (planned already, its own
        images: ``images``, ``seed`` and ``options`` are refused for it as for any folder or repo).
    images, seed: as :class:`TaskRef`'s.
    options: every task's options (``{"scale": 0.5}``); ``task_options[T]`` replaces them for task T
        (``--set T:KEY=VALUE``: tasks take different options, paper tasks a ``scale``, collections none).
    """

    artifact: "str | os.PathLike | Artifact | None" = None
    source: "str | os.PathLike | None" = None
    images: "str | os.PathLike | ImageSource | None" = None
    seed: int | None = None
    options: Mapping[str, Any] = field(default_factory=dict)
    task_options: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if (self.artifact is None) == (self.source is None):
            raise InputFormatError(
                "a run's tasks come from either a build (--artifact; Python: artifact=) or exported "
                "tasks (--from EXPORT_FOLDER or a Hub NAMESPACE; Python: source=), and here "
                + ("neither is given" if self.artifact is None else "both are given"),
                "pass exactly one of --artifact and --from",
            )
        # read-only, so an origin cannot change after its tasks were resolved
        object.__setattr__(self, "options", types.MappingProxyType(dict(self.options or {})))
        object.__setattr__(
            self,
            "task_options",
            types.MappingProxyType({t: types.MappingProxyType(dict(o)) for t, o in (self.task_options or {}).items()}),
        )

    @property
    def planning_seed(self) -> int:
        """The seed task ids are planned with."""
        return DEFAULT_SEED if self.seed is None else self.seed

    @property
    def inputs(self) -> tuple:
        """The user's inputs, which a run's output folder may never be or hold (``core.fsutil.claimed_dir``)."""
        return self.artifact, self.images, self.source

    def options_of(self, task: str) -> Mapping[str, Any]:
        """Task ``task``'s options: its own ``task_options`` entry, else the common ``options``."""
        return self.task_options.get(task, self.options)

    def ref(self, task: str, artifact: "Artifact | None" = None) -> TaskRef:
        """Task id ``task`` as a :class:`TaskRef` (``artifact``: the build, loaded already)."""
        if self.source is not None:
            return TaskRef(
                f"{str(self.source).rstrip('/')}/{REPO_PREFIX}{task}",
                images=self.images,
                seed=self.seed,
                options=self.options_of(task),
            )
        return TaskRef(
            task, artifact=artifact or self.artifact, images=self.images, seed=self.seed, options=self.options_of(task)
        )

    def build(self, command: str) -> Artifact:
        """The build, loaded, for a ``command`` that plans and materialises tasks (export, publish); tasks from an
        export folder or Hub namespace are refused: they are exported already."""
        if self.artifact is None:
            raise InputFormatError(
                f"{command} plans tasks on a build; the tasks in {self.source} are exported already",
                "pass TaskOrigin(artifact=ARTIFACT, ...) (CLI: --artifact), or push an export folder as it is with "
                "`metashift-hf publish --from-export FOLDER`",
            )
        return Artifact.load(self.artifact)

    def open(self, tasks: Sequence[str]) -> dict[str, TaskData]:
        """Every task of the run, each resolved by :func:`open_task` before any work (the build loaded once)."""
        art = None if self.artifact is None else Artifact.load(self.artifact)
        return {t: open_task(self.ref(t, art)) for t in tasks}


def shift_spec(source: "TaskRef | Any") -> ShiftSpec:
    """The shift spec of ``source``: anything :func:`open_task` takes (the spec only: no parquet row or image is
    read), a ``ShiftSpec``, or a ``shift_spec.json`` file.

        metashift_hf.shift_spec(TaskRef("paper-dg-cat-dog-1", artifact="ARTIFACT", options={"scale": 0.5}))  # planned
        metashift_hf.shift_spec(prepared)                    # a PreparedTask (or a TaskPlan)
        metashift_hf.shift_spec(load_dataset(...))           # a Dataset / DatasetDict, prepared or loaded
        metashift_hf.shift_spec("out/metashift-paper-dg-cat-dog-1")             # an exported repo folder
        metashift_hf.shift_spec(TaskRef("out/metashift", config="paper-dg-cat-dog-1"))   # ... naming the config
        metashift_hf.shift_spec("out/metashift-class-cat/class-cat/shift_spec.json")  # the file itself
        metashift_hf.shift_spec("user/metashift-paper-dg-cat-dog-1")            # a Hub dataset repo
    """
    if isinstance(source, ShiftSpec):
        return source
    if isinstance(source, (str, os.PathLike)) and Path(source).is_file():
        return read_spec_file(source)
    return open_task(source).spec  # a dataset without a spec: open_task names what is missing


def _folder_facts(repo: Path, name: str) -> "Callable[[Sequence[str], list], MetaGraphFacts | None]":
    path, where = repo / name / FACTS_FILE, f"{name}/{FACTS_FILE} of exported folder {repo}"
    return lambda classes, rows: MetaGraphFacts.read(path, where, classes, rows) if os.path.lexists(path) else None


def _hub_facts(
    repo_id: str, files: Mapping[str, "int | None"], name: str, revision: str | None
) -> "Callable[[Sequence[str], list], MetaGraphFacts | None]":
    from huggingface_hub import hf_hub_download  # heavy optional import, as specs.hub_files

    path, where = f"{name}/{FACTS_FILE}", f"{name}/{FACTS_FILE} of Hub dataset repo {repo_id}"

    def read(classes: Sequence[str], rows: list) -> MetaGraphFacts | None:
        if path not in files:
            return None  # exported before the file existed
        if (files[path] or 0) > FACTS_MAX_BYTES:
            raise InputFormatError(
                f"{where} is {files[path]} bytes; a task's meta-graph facts are at most {FACTS_MAX_BYTES}",
                "download the repo again (another --revision) or export the task again",
            )
        local = hub_call(
            repo_id, None, lambda: hf_hub_download(repo_id, path, repo_type="dataset", revision=revision), revision
        )
        # the Hub cache links snapshots to blobs: read the blob (the facts reader follows no link)
        return MetaGraphFacts.read(os.path.realpath(local), where, classes, rows)

    return read


@functools.lru_cache(maxsize=64)
def hub_commit(repo_id: str, revision: str | None) -> str | None:
    """The commit sha ``revision`` (default main) of a Hub dataset repo resolves to; None when it cannot be asked."""
    from huggingface_hub import HfApi  # heavy optional import, as specs.hub_files

    try:
        return hub_call(repo_id, None, lambda: HfApi().dataset_info(repo_id, revision=revision).sha, revision)
    except MetashiftError as exc:
        logger.warning(f"Hub dataset repo {repo_id}: its commit sha is not known ({exc.what})")
        return None


def refuse_planning_options(
    spec: ShiftSpec, where: str, seed: int | None, options: Mapping[str, Any] | None, images: Any
) -> None:
    """A dataset's rows are fixed: a seed, size option or image source that would change them is refused."""
    if options:
        raise InputFormatError(
            f"{where} is already planned (options {dict(spec.overrides) or 'default'} in its shift "
            f"spec); --set {', '.join(f'{k}={v}' for k, v in options.items())} cannot change it",
            "drop --set, or plan the task on an artifact with --artifact",
        )
    if seed is not None and seed != spec.seed:
        raise InputFormatError(
            f"{where} was sampled with seed {spec.seed}; --seed {seed} cannot change it",
            "drop --seed, or plan the task on an artifact with --artifact",
        )
    if images is not None:
        raise InputFormatError(
            f"{where} carries its own images; --images is only for a task id planned on --artifact", "drop --images"
        )


__all__ = [
    "TaskRef",
    "TaskData",
    "TaskForm",
    "task_ref",
    "open_task",
    "TaskOrigin",
    "shift_spec",
    "DEFAULT_SEED",
    "spec_less_dataset",
    "plan_of_dataset",
    "dataset_classes",
    "dataset_images",
    "in_export_order",
    "check_rows",
    "dataset_spec",
    "refuse_planning_options",
]
