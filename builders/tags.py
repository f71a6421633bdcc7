"""MetaShift from any multi-label dataset: (image, tag) rows -> candidate subsets by co-occurrence.

An image with tags {cat, sofa, remote} is in ``cat(sofa)``, ``cat(remote)``, ``sofa(cat)``, ... —
every ordered pair of its distinct tags, the subject restricted to the tags allowed as subjects
(all by default). COCO (builders/coco.py), a tags table (``--tags FILE``) and a Hub dataset
(``--hf-dataset``) all come here, so they share one rule; the same rules and meta-graphs follow.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Collection, Iterable, Mapping

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pcsv
import pyarrow.parquet as pq

from metashift_hf.core.errors import EmptyResultError, InputFormatError
from metashift_hf.core.names import SubsetName, control_char, terminal_safe

from .images import DatasetImages
from .subsets import CandidateSubsets, _pairs_within_images


@dataclass
class TagTable:
    """Unique (image, tag) rows, integer-coded: ``image_ids[image_codes[i]]`` has ``tags[tag_codes[i]]``."""

    image_ids: list[str]  # sorted unique
    tags: list[str]  # sorted unique
    image_codes: np.ndarray  # int64
    tag_codes: np.ndarray  # int64
    categories: dict[str, str | None] = field(default_factory=dict)  # tag -> category (COCO super-category)

    @classmethod
    def from_columns(cls, image_ids: "pa.Array | Iterable[str]", tags: "pa.Array | Iterable[str]",
                     categories: Mapping[str, str | None] | None = None, *, what: str = "tags") -> "TagTable":
        """From two parallel columns (one row per image-tag pair; duplicates are dropped)."""
        img = pa.array(image_ids) if not isinstance(image_ids, (pa.Array, pa.ChunkedArray)) else image_ids
        tag = pa.array(tags) if not isinstance(tags, (pa.Array, pa.ChunkedArray)) else tags
        if len(img) != len(tag):
            raise InputFormatError(f"{what}: {len(img)} image ids but {len(tag)} tags", "give one tag per row")
        if img.null_count or tag.null_count:
            raise InputFormatError(f"{what}: empty image_id or tag values ({img.null_count} / {tag.null_count} rows)",
                                   "drop rows without an image id or a tag")
        img = pc.cast(img, pa.string())
        tag = pc.utf8_trim_whitespace(pc.cast(tag, pa.string()))
        if len(tag) and pc.min(pc.utf8_length(tag)).as_py() == 0:
            raise InputFormatError(f"{what}: some tags are empty", "drop rows whose tag is empty")
        bad = pc.filter(tag, pc.match_substring_regex(tag, r"[()]"))
        if len(bad):
            raise InputFormatError(f"{what}: tag {bad[0].as_py()!r} contains parentheses, which subset names "
                                   "'subject(context)' cannot hold", "rename such tags, e.g. replace '(' and ')' by '-'")
        image_vocab = pc.unique(img).sort()
        tag_vocab = pc.unique(tag).sort()
        for t in tag_vocab.to_pylist():  # names are listed on terminals and written into cards
            c = control_char(t)
            if c is not None:
                raise InputFormatError(f"{what}: tag '{terminal_safe(t)[:80]}' contains the control character "
                                       f"{terminal_safe(c)} (an escape sequence, newline, tab or text-direction mark)",
                                       "remove control characters from the tags (plain letters, digits, spaces and "
                                       "punctuation only)")
        ic = pc.index_in(img, value_set=image_vocab).to_numpy(zero_copy_only=False).astype(np.int64)
        tc = pc.index_in(tag, value_set=tag_vocab).to_numpy(zero_copy_only=False).astype(np.int64)
        key = np.unique(ic * max(len(tag_vocab), 1) + tc)
        tags_list = tag_vocab.to_pylist()
        cats = {t: (categories or {}).get(t) for t in tags_list}
        return cls(image_vocab.to_pylist(), tags_list, key // max(len(tag_vocab), 1), key % max(len(tag_vocab), 1),
                   cats)

    def __len__(self) -> int:
        return int(self.image_codes.size)


def allowed_subjects(table: TagTable, subjects: Collection[str] = (),
                     subject_categories: Collection[str] = ()) -> np.ndarray:
    """Per tag (bool): may it be a subject? In ``subjects`` or of a category in ``subject_categories``
    (both empty: every tag). Names that do not occur are an InputFormatError."""
    if not (subjects or subject_categories):
        return np.ones(len(table.tags), dtype=bool)
    known_cats = {c for c in table.categories.values() if c}
    for name, given, known in (("subject tag", subjects, set(table.tags)),
                               ("subject category", subject_categories, known_cats)):
        missing = sorted(set(given) - known)
        if missing:
            raise InputFormatError(f"{name}(s) {missing} do not occur in the input",
                                   f"use names that occur: {', '.join(sorted(known)[:12])} ...")
    return np.fromiter((t in set(subjects) or table.categories.get(t) in set(subject_categories)
                        for t in table.tags), dtype=bool, count=len(table.tags))


def candidates_from_tags(table: TagTable, *, subjects: Collection[str] = (),
                         subject_categories: Collection[str] = ()) -> CandidateSubsets:
    """``s(c)`` = the images tagged with both ``s`` and ``c`` (s != c), for every subject ``s``
    allowed: in ``subjects`` or whose category is in ``subject_categories`` (both empty: every tag).
    Every subset is of kind ``object``; its category is the context tag's category.

    In memory (every row as int64 arrays): the reference of ``tag_store.TagCandidates``, which the
    build uses (out of core); small inputs and tests."""
    allowed = allowed_subjects(table, subjects, subject_categories)
    if len(table) == 0:
        raise EmptyResultError("the multi-label input has no (image, tag) rows", "give a non-empty input")
    # rows are sorted by (image, tag) already (np.unique of image * T + tag)
    img = table.image_codes
    bounds = np.flatnonzero(np.diff(img)) + 1
    starts = np.concatenate([[0], bounds])
    stops = np.concatenate([bounds, [img.size]])
    per_row_start = np.repeat(starts, stops - starts)
    per_row_stop = np.repeat(stops, stops - starts)
    rows = np.flatnonzero(allowed[table.tag_codes])
    first, other = _pairs_within_images(rows, per_row_start[rows], per_row_stop[rows])
    keep = first != other
    first, other = first[keep], other[keep]
    n_tags = len(table.tags)
    code = table.tag_codes[first] * n_tags + table.tag_codes[other]
    uniq, subset_codes = np.unique(code, return_inverse=True)
    names = [str(SubsetName(table.tags[c // n_tags], table.tags[c % n_tags])) for c in uniq.tolist()]
    cats = [table.categories.get(table.tags[c % n_tags]) for c in uniq.tolist()]
    return CandidateSubsets.from_codes(names, ["object"] * len(names), cats, table.image_ids,
                                       subset_codes.astype(np.int64), img[first])


# ------------------------------------------------------------------------------------------------
# readers: a tags file, a Hub dataset
# ------------------------------------------------------------------------------------------------
TAG_FILE_COLUMNS = ("image_id", "tag")


def read_tags_file(path: str | os.PathLike) -> TagTable:
    """CSV or parquet with columns ``image_id`` and ``tag`` (one row per image-tag pair); an optional
    ``category`` column gives each tag's category."""
    path = Path(path)
    if not path.is_file():
        raise InputFormatError(f"tags file {path} does not exist", "pass a CSV or parquet file with image_id,tag rows")
    try:
        if path.suffix.lower() in (".parquet", ".pq"):
            t = pq.read_table(path)
        else:
            t = pcsv.read_csv(path, convert_options=pcsv.ConvertOptions(
                column_types={"image_id": pa.string(), "tag": pa.string(), "category": pa.string()}))
    except (pa.ArrowInvalid, OSError) as exc:
        raise InputFormatError(f"{path}: not a readable CSV/parquet table ({exc})",
                               "write the tags as CSV (header image_id,tag) or parquet") from None
    missing = [c for c in TAG_FILE_COLUMNS if c not in t.column_names]
    if missing:
        raise InputFormatError(f"{path}: missing column(s) {missing} (has {t.column_names})",
                               "name the columns image_id and tag (one row per image-tag pair)")
    cats = None
    if "category" in t.column_names:
        cats = dict(zip(t.column("tag").to_pylist(), t.column("category").to_pylist()))
    return TagTable.from_columns(t.column("image_id").combine_chunks(), t.column("tag").combine_chunks(), cats,
                                 what=str(path))


def tags_from_dataset(ds, *, tag_column: str, id_column: str | None = None, what: str = "dataset") -> TagTable:
    """A ``datasets.Dataset`` with a multi-label column (a list of strings, or of ClassLabel ids,
    or one string per row). Image ids from ``id_column`` (default ``image_id`` when present, else
    the row number)."""
    cols = ds.column_names
    if tag_column not in cols:
        raise InputFormatError(f"{what} has no column {tag_column!r} (columns: {cols})", "pass --tag-column COL")
    if id_column is None:
        id_column = "image_id" if "image_id" in cols else None
    elif id_column not in cols:
        raise InputFormatError(f"{what} has no column {id_column!r} (columns: {cols})", "pass --id-column COL")
    feature = ds.features[tag_column]
    inner = getattr(feature, "feature", None) if not hasattr(feature, "names") else feature
    label_names = getattr(inner, "names", None)  # ClassLabel: ints -> names
    table = ds.select_columns([c for c in (tag_column, id_column) if c]).with_format("arrow")[:]
    tag_col = table.column(tag_column).combine_chunks()
    ids = (pc.cast(table.column(id_column).combine_chunks(), pa.string()) if id_column
           else pa.array([str(i) for i in range(len(ds))], pa.string()))
    if pa.types.is_list(tag_col.type) or pa.types.is_large_list(tag_col.type):
        lengths = pc.fill_null(pc.list_value_length(tag_col), 0).to_numpy(zero_copy_only=False)
        ids = pc.take(ids, pa.array(np.repeat(np.arange(len(ids)), lengths)))
        tag_col = pc.list_flatten(tag_col)
    if label_names is not None:
        tag_col = pc.take(pa.array(label_names, pa.string()), tag_col)
    return TagTable.from_columns(ids, tag_col, what=what)


@dataclass(frozen=True)
class MultiLabelDataset:
    """A Hub (or local) dataset with a multi-label column, read through ``datasets.load_dataset``."""

    name: str  # Hub id or local folder
    tag_column: str
    split: str = "train"
    id_column: str | None = None  # default: image_id when present, else the row number
    image_column: str | None = None  # where the images live (recorded for materialising tasks)

    def load(self):
        import datasets  # heavy; only this source needs it

        try:
            return datasets.load_dataset(self.name, split=self.split)
        except (FileNotFoundError, ValueError) as exc:
            raise InputFormatError(f"cannot load dataset {self.name!r} split {self.split!r} ({exc})",
                                   "pass a Hub dataset id or a local dataset folder, and --hf-split if it has no "
                                   "'train' split") from None

    def resolved(self, ds) -> "MultiLabelDataset":
        """With ``image_column`` set to the dataset's image column when none was given and exactly one
        column is an image feature (so its images are used without asking)."""
        if self.image_column:
            return self
        found = [c for c, f in ds.features.items() if type(f).__name__ == "Image"]
        return replace(self, image_column=found[0]) if len(found) == 1 else self

    def tag_table(self, ds=None) -> TagTable:
        ds = self.load() if ds is None else ds
        if self.image_column and self.image_column not in ds.column_names:
            raise InputFormatError(f"{self.name} has no column {self.image_column!r} (columns: {ds.column_names})",
                                   "pass --image-column COL naming the dataset's image column, or leave it out")
        return tags_from_dataset(ds, tag_column=self.tag_column, id_column=self.id_column, what=self.name)

    def image_ids(self, ds) -> list[str]:
        """One image id per row, as ``tag_table`` reads them."""
        id_column = self.id_column or ("image_id" if "image_id" in ds.column_names else None)
        if id_column is None:
            return [str(i) for i in range(len(ds))]
        return [str(x) for x in ds[id_column]]

    def images(self, ds=None) -> DatasetImages:
        """The dataset's own images (``image_column``) by image id."""
        if not self.image_column:
            raise InputFormatError(f"dataset {self.name}: no image column was given",
                                   "rebuild with --image-column COL, or pass --images")
        ds = self.load() if ds is None else ds
        return DatasetImages(ds, self.image_column, self.image_ids(ds), self.name, paths=True)  # the user's own input

    @classmethod
    def from_record(cls, record: Mapping) -> "MultiLabelDataset":
        """The input record an artifact's manifest holds (``input_record``)."""
        return cls(record["path"], record["tag_column"], split=record.get("split", "train"),
                   id_column=record.get("id_column"), image_column=record.get("image_column"))

    def input_record(self) -> dict:
        return {"path": self.name, "sha256": "", "role": "hf_dataset", "split": self.split,
                "tag_column": self.tag_column, "id_column": self.id_column, "image_column": self.image_column}
