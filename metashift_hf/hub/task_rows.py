"""The rows of a task read from a dataset, and the one check that they match its shift spec.

Every dataset-backed task (an exported folder, a Hub repo, a loaded or prepared dataset) goes through
:func:`check_rows` before its rows are used; :func:`plan_of_dataset` reads them back as a ``TaskPlan``,
:func:`in_export_order` puts any plan's rows in the order export writes them, :func:`dataset_images` gives
the pixels of a dataset (its own JPEG bytes) and :func:`dataset_spec` the one shift spec its features carry;
:func:`own_rows` reads the rows of a dataset that carries no spec (someone's own data, scored as ``custom``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Mapping, Sequence

import datasets
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from ..builders.images import DatasetImages, ImageSource
from ..core.errors import InputFormatError, MissingImagesError
from ..core.names import terminal_safe
from ..tasks.metashift import spec_of_features
from ..tasks.plan import Row, TaskPlan
from ..tasks.spec import ShiftSpec, SplitMembers, row_key
from .shards import SORT_KEYS, SPEC_FILE


ROW_COLUMNS = ("image_id", "label", "group", "context", "contexts", "community")


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
    a ``community`` of -1 or more, every row one of the split's rows the spec records (``spec.members``, since
    spec_version 4: a row of another split or a changed row is refused, and a whole split must be exactly its rows),
    and (``config`` given: a folder or repo) the spec's task id equal to the config name.

    ``whole=False`` (an object the user loaded, which may be one split or a ``select()``-ed part of one):
    every split must be one the spec records and hold at most its recorded rows; fewer rows and absent
    splits are the user's choice (the Evaluator warns about a partial split), more are refused.

    One place for every dataset-backed form (:func:`open_task`: every command, evaluate included); vectorised over the
    arrow columns, no image decoded. Raises one :class:`InputFormatError` naming the split and first bad rows.
    """
    classes, sizes, have = _check_splits(dd, spec, where, config, whole)
    spec_groups = spec.groups()
    seen: dict[tuple[str, str], str] = {}  # (image, class if a collection) -> the split it is in
    for split in sorted(have, key=list(sizes).index):
        ds = dd[split]
        if len(ds) != sizes[split] and (whole or len(ds) > sizes[split]):
            raise InputFormatError(
                f"{where}: split {split!r} has {len(ds)} rows, its shift spec records {sizes[split]}", ROWS_FIX
            )
        rows = _SplitRows.read(ds, split, where, classes, spec.collection)
        group_cls = {g.group: g.cls for g in spec_groups.get(split, ())}
        members = spec.members_of(split)  # the spec's record of the split's rows (spec_version 5)
        _refuse_bad_rows(rows, _row_checks(rows, split, group_cls, members, seen), where, split)
        if members is not None and len(ds) == members.n and not members.same_rows(rows.row_keys):
            raise InputFormatError(
                f"{terminal_safe(where)}: split {split!r} has the {members.n} rows its shift spec records, "
                "but not the same ones (their digest differs)",
                ROWS_FIX,
            )
        for k in rows.keys:
            seen[k] = split


def _check_splits(
    dd: "datasets.DatasetDict", spec: ShiftSpec, where: str, config: str | None, whole: bool
) -> tuple[list[str], dict[str, int], set[str]]:
    """The checks before any row is read: the config is the spec's task, the classes are the spec's, the splits
    the spec records (``whole``: all of them). Returns the classes, the spec's split sizes and the splits held."""
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
    return classes, sizes, have


@dataclass
class _SplitRows:
    """One split's row columns as arrays (read once from arrow, no image decoded), in row order."""

    ids: np.ndarray  # image ids (object)
    label: np.ndarray  # class index, -1 where empty
    null: dict[str, np.ndarray]  # column -> which rows are empty
    in_range: np.ndarray  # label in 0..k-1
    cls_text: np.ndarray  # the label's class name (the first class where out of range)
    expected: np.ndarray  # class(context), the group each row should name
    group: np.ndarray
    gid: np.ndarray  # group_id, where the split has that ClassLabel
    gid_group: np.ndarray  # the group its group_id names (its own group where there is no group_id)
    community: np.ndarray  # -1 where empty
    row_keys: list[str]  # tasks.spec.row_key of each row
    keys: list[tuple[str, str]]  # (image, class if a collection): an image may appear once per key
    n_classes: int

    @classmethod
    def read(cls, ds: "datasets.Dataset", split: str, where: str, classes: list[str], per_class: bool) -> "_SplitRows":
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
        names = pa.array(classes, pa.string()).take(pa.array(np.where(in_range, label, 0)))
        expected = np.asarray(
            pc.binary_join_element_wise(names, "(", col["context"], ")", "").to_pylist(), dtype=object
        )
        group = np.asarray(col["group"].to_pylist(), dtype=object)
        if group_ids is not None:
            gid = np.asarray(col["group_id"].fill_null(-1).to_numpy(zero_copy_only=False), dtype=np.int64)
            gid_names = np.asarray([*group_ids.names, None], dtype=object)  # None: out of range or empty
            gid_group = gid_names[np.where((gid >= 0) & (gid < group_ids.num_classes), gid, group_ids.num_classes)]
        else:
            gid, gid_group = np.zeros(len(ds), np.int64), group
        cls_text = np.asarray(names.to_pylist(), dtype=object)
        row_keys = [row_key(*r) for r in zip(ids, cls_text, group, *(col[c].to_pylist() for c in ROW_COLUMNS[3:]))]
        return cls(
            ids=ids,
            label=label,
            null=null,
            in_range=in_range,
            cls_text=cls_text,
            expected=expected,
            group=group,
            gid=gid,
            gid_group=gid_group,
            community=np.asarray(col["community"].fill_null(-1).to_numpy(zero_copy_only=False), dtype=np.int64),
            row_keys=row_keys,
            keys=[(str(i), str(c) if per_class else "") for i, c in zip(ids, cls_text)],
            n_classes=len(classes),
        )


def _duplicates(keys: list[tuple[str, str]], seen: Mapping[tuple[str, str], str]) -> tuple[np.ndarray, np.ndarray]:
    """Rows whose key came earlier in this split, and rows whose key is in an earlier split (``seen``)."""
    first_at: dict[tuple[str, str], int] = {}
    dup_here, dup_other = np.zeros(len(keys), bool), np.zeros(len(keys), bool)
    for n, k in enumerate(keys):
        if k in first_at:
            dup_here[n] = True
        elif k in seen:
            dup_other[n] = True
        first_at.setdefault(k, n)
    return dup_here, dup_other


def _row_checks(
    r: _SplitRows,
    split: str,
    group_cls: Mapping[str, str],
    members: SplitMembers | None,
    seen: Mapping[tuple[str, str], str],
) -> list[tuple[np.ndarray, Callable[[int], str]]]:
    """Each row check as (the rows that fail it, what to say of row n)."""
    null, group, known = r.null, r.group, np.asarray([group_cls.get(g) for g in r.group], dtype=object)
    dup_here, dup_other = _duplicates(r.keys, seen)
    # a row of another split, or a changed one (the spec's record of the split's rows)
    foreign = np.zeros(len(r.ids), bool) if members is None else members.foreign(r.row_keys)
    return [
        (
            null["image_id"] | null["label"] | null["group"] | null["context"] | null["community"],
            lambda n: "empty " + "/".join(c for c in null if null[c][n]),
        ),
        (~null["label"] & ~r.in_range, lambda n: f"label {r.label[n]} outside 0..{r.n_classes - 1}"),
        (
            r.in_range & ~null["group"] & ~null["context"] & (group != r.expected),
            lambda n: f"group {group[n]!r} is not class(context) {r.expected[n]!r}",
        ),
        (
            ~null["group"] & (known == None) & r.in_range,  # noqa: E711 (elementwise)
            lambda n: f"group {group[n]!r} is not one of the spec's {split} groups",
        ),
        (
            r.in_range & (known != None) & (known != r.cls_text),  # noqa: E711 (elementwise)
            lambda n: f"group {group[n]!r} is of class {known[n]!r} in the spec, the label says {r.cls_text[n]!r}",
        ),
        (
            ~null["group"] & (r.gid_group != group),
            lambda n: f"group_id {r.gid[n]} names {r.gid_group[n]!r}, not its group {group[n]!r}",
        ),
        (dup_here, lambda n: f"image listed twice in {split!r}"),
        (dup_other, lambda n: f"image also in split {seen.get(r.keys[n])!r}"),
        (r.community < -1, lambda n: f"community {r.community[n]} is not a community id (-1 or more)"),
        (foreign, lambda n: f"not one of the {split} rows the spec records (another split's, or changed)"),
    ]


def _refuse_bad_rows(
    r: _SplitRows, checks: list[tuple[np.ndarray, Callable[[int], str]]], where: str, split: str
) -> None:
    """One InputFormatError naming how many rows fail and what is wrong with the first :data:`_SHOWN`."""
    bad = np.zeros(len(r.ids), bool)
    for mask, _ in checks:
        bad |= mask
    if not bad.any():
        return
    rows = np.flatnonzero(bad)
    shown = "; ".join(
        f"row {n} image {terminal_safe(r.ids[n])}: " + ", ".join(why(n) for mask, why in checks if mask[n])
        for n in rows[:_SHOWN]
    )
    raise InputFormatError(
        f"{terminal_safe(where)}: split {split!r} does not match its shift spec, "
        f"{len(rows)} bad row(s): {terminal_safe(shown)}",
        ROWS_FIX,
    )


OWN_COLUMNS = ("image_id", "label", "contexts")  # what a dataset without a shift spec needs to be scored


def own_rows(dd: "datasets.DatasetDict", where: str) -> pd.DataFrame:
    """The rows of a dataset that carries no shift spec (someone's own data, scored as task ``custom``): one
    per-image table (split, image_id, label name, contexts as lists, group where given, community; -1 when not
    given), splits in name order. With no spec to check them against, only its columns, one ClassLabel and one
    rule are checked: an image appears at most once per class (collections list it once per class it shows)."""
    classes = dataset_classes(dd, where, OWN_COLUMNS)
    frames = []
    for split in sorted(dd):
        ds = dd[split]
        cols = [c for c in (*OWN_COLUMNS, "group", "community") if c in ds.column_names]
        df = ds.select_columns(cols).to_pandas()
        df["label"] = [classes[i] for i in df["label"]]
        df.insert(0, "split", split)
        frames.append(df)
    table = pd.concat(frames, ignore_index=True)
    table["contexts"] = [list(c) if c is not None else [] for c in table["contexts"]]
    if "community" not in table:
        table["community"] = -1
    dup = table.duplicated(["image_id", "label"], keep=False)
    if dup.any():
        ids = sorted(set(table.loc[dup, "image_id"]))[:5]
        raise InputFormatError(
            f"{where}: image(s) {ids} appear more than once for the same class",
            "a task lists each image at most once per class (no image in two splits)",
        )
    return table


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


def as_dataset_dict(ds: "datasets.Dataset | datasets.DatasetDict") -> "datasets.DatasetDict":
    if isinstance(ds, datasets.DatasetDict):
        return ds
    return datasets.DatasetDict({str(ds.split) if ds.split else "test": ds})


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


__all__ = [
    "ROW_COLUMNS",
    "ROWS_FIX",
    "dataset_images",
    "dataset_classes",
    "check_rows",
    "plan_of_dataset",
    "own_rows",
    "in_export_order",
    "as_dataset_dict",
    "dataset_spec",
]
