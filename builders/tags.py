"""MetaShift from any multi-label dataset: (image, tag) rows -> candidate subsets by co-occurrence.

An image with tags {cat, sofa, remote} is in ``cat(sofa)``, ``cat(remote)``, ``sofa(cat)``, ... —
every ordered pair of its distinct tags, the subject restricted to the tags allowed as subjects
(all by default). COCO (builders/coco.py), a tags table (``--tags FILE``) and a Hub dataset
(``--hf-dataset``) all come here, so they share one rule; the same rules and meta-graphs follow.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Collection, Iterable, Iterator, Mapping, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pcsv
import pyarrow.parquet as pq

from metashift_hf.core.errors import EmptyResultError, InputFormatError
from metashift_hf.core.names import CONTROL_RE2, SubsetName, control_char, terminal_safe

from .images import DatasetImages
from .subsets import CandidateSubsets, _pairs_within_images


# A tag becomes a class or context name, a plot's file name ('<tag>.png') and part of task ids ('bin-<a>-<b>',
# '<config>/' folders): file names hold 255 bytes, so a tag is bounded in UTF-8 bytes (100 ASCII letters; the
# names of classes and contexts are a few words). A 300-character tag was a traceback when plots were written.
MAX_TAG_BYTES = 100
_INVISIBLE = "invisible or control character"  # what names.CONTROL_RANGES holds, in messages


class RowCheck:
    """The checks of (image, tag) rows, over one table or a stream of batches (``add`` each in file
    order); ``raise_first`` raises the first problem found, in the same order for both: missing
    values (counted over every row), blank image ids, image ids with control or invisible characters,
    empty tags, tags with parentheses."""

    def __init__(self, what: str) -> None:
        self.what = what
        self.null_ids = self.null_tags = self.blank_ids = 0
        self.empty = False
        self.bad_id: str | None = None  # the first image id with a control/invisible character, in row order
        self.parenthesised: str | None = None  # the first such tag, in row order

    def add(self, img: "pa.Array | pa.ChunkedArray", tag: "pa.Array | pa.ChunkedArray") -> tuple:
        """The rows as (image id, tag) strings, the tag trimmed of surrounding white space."""
        self.null_ids += img.null_count
        self.null_tags += tag.null_count
        img = pc.cast(img, pa.string())
        tag = pc.utf8_trim_whitespace(pc.cast(tag, pa.string()))
        # a CSV's empty cell is "" to pyarrow, not null: every such row would become one image named ''
        self.blank_ids += int(pc.sum(pc.equal(pc.utf8_length(pc.utf8_trim_whitespace(img)), 0)).as_py() or 0)
        if self.bad_id is None:
            bad = pc.filter(img, pc.match_substring_regex(img, CONTROL_RE2))
            if len(bad):
                self.bad_id = bad[0].as_py()
        if not self.empty and len(tag) and pc.min(pc.utf8_length(tag)).as_py() == 0:
            self.empty = True
        if self.parenthesised is None:
            bad = pc.filter(tag, pc.match_substring_regex(tag, r"[()]"))
            if len(bad):
                self.parenthesised = bad[0].as_py()
        return img, tag

    def raise_first(self) -> None:
        if self.null_ids or self.null_tags:
            raise InputFormatError(
                f"{self.what}: empty image_id or tag values ({self.null_ids} / {self.null_tags} rows)",
                "drop rows without an image id or a tag",
            )
        if self.blank_ids:
            raise InputFormatError(
                f"{self.what}: {self.blank_ids} rows have an empty or blank image_id ('' or only spaces: "
                "they would all be one image)",
                "give every row its image's id, or drop rows without one",
            )
        if self.bad_id is not None:
            c = control_char(self.bad_id) or ""
            raise InputFormatError(
                f"{self.what}: image_id '{terminal_safe(self.bad_id)[:80]}' contains the {_INVISIBLE} "
                f"{terminal_safe(c)}",
                "remove control and invisible characters (escapes, newlines, zero-width spaces) from the image ids",
            )
        if self.empty:
            raise InputFormatError(f"{self.what}: some tags are empty", "drop rows whose tag is empty")
        if self.parenthesised is not None:
            raise InputFormatError(
                f"{self.what}: tag {self.parenthesised!r} contains parentheses, which subset names "
                "'subject(context)' cannot hold",
                "rename such tags, e.g. replace '(' and ')' by '-'",
            )


def check_tag_names(tags: Iterable[str], what: str) -> None:
    """Refuse a tag vocabulary with control or invisible characters (names are listed on terminals and written into
    cards; 'cat' and 'cat' + a zero-width space would be two classes printed alike) or a tag longer than
    ``MAX_TAG_BYTES``."""
    for t in tags:
        c = control_char(t)
        if c is not None:
            raise InputFormatError(
                f"{what}: tag '{terminal_safe(t)[:80]}' contains the {_INVISIBLE} "
                f"{terminal_safe(c)} (an escape sequence, newline, tab, text-direction mark, zero-width character, or a "
                "space other than ' ', e.g. a no-break space: two such tags print alike)",
                "remove control and invisible characters from the tags and write every space as ' ' (plain letters, "
                "digits, spaces and punctuation only)",
            )
        size = len(t.encode("utf-8", "surrogatepass"))
        if size > MAX_TAG_BYTES:
            raise InputFormatError(
                f"{what}: tag '{terminal_safe(t)[:40]}...' is {size} bytes long in UTF-8, more than {MAX_TAG_BYTES} "
                "(tags become file names and task ids)",
                f"shorten such tags to at most {MAX_TAG_BYTES} bytes (a tag names an object or a context, "
                "e.g. 'traffic light')",
            )


@dataclass
class TagTable:
    """Unique (image, tag) rows, integer-coded: ``image_ids[image_codes[i]]`` has ``tags[tag_codes[i]]``."""

    image_ids: list[str]  # sorted unique
    tags: list[str]  # sorted unique
    image_codes: np.ndarray  # int64
    tag_codes: np.ndarray  # int64
    categories: dict[str, str | None] = field(default_factory=dict)  # tag -> category (COCO super-category)

    @classmethod
    def from_columns(
        cls,
        image_ids: "pa.Array | Iterable[str]",
        tags: "pa.Array | Iterable[str]",
        categories: Mapping[str, str | None] | None = None,
        *,
        what: str = "tags",
    ) -> "TagTable":
        """From two parallel columns (one row per image-tag pair; duplicates are dropped)."""
        img = pa.array(image_ids) if not isinstance(image_ids, (pa.Array, pa.ChunkedArray)) else image_ids
        tag = pa.array(tags) if not isinstance(tags, (pa.Array, pa.ChunkedArray)) else tags
        if len(img) != len(tag):
            raise InputFormatError(f"{what}: {len(img)} image ids but {len(tag)} tags", "give one tag per row")
        check = RowCheck(what)
        img, tag = check.add(img, tag)
        check.raise_first()
        image_vocab = pc.unique(img).sort()
        tag_vocab = pc.unique(tag).sort()
        tags_list = tag_vocab.to_pylist()
        check_tag_names(tags_list, what)
        ic = pc.index_in(img, value_set=image_vocab).to_numpy(zero_copy_only=False).astype(np.int64)
        tc = pc.index_in(tag, value_set=tag_vocab).to_numpy(zero_copy_only=False).astype(np.int64)
        key = np.unique(ic * max(len(tag_vocab), 1) + tc)
        cats = {t: (categories or {}).get(t) for t in tags_list}
        return cls(
            image_vocab.to_pylist(), tags_list, key // max(len(tag_vocab), 1), key % max(len(tag_vocab), 1), cats
        )

    def __len__(self) -> int:
        return int(self.image_codes.size)


def allowed_subjects(
    tags: Sequence[str],
    categories: Mapping[str, str | None],
    subjects: Collection[str] = (),
    subject_categories: Collection[str] = (),
) -> np.ndarray:
    """Per tag of ``tags`` (bool): may it be a subject? In ``subjects`` or of a category (``categories``:
    tag -> category) in ``subject_categories`` (both empty: every tag). Names that do not occur are an
    InputFormatError."""
    if not (subjects or subject_categories):
        return np.ones(len(tags), dtype=bool)
    known_cats = {c for c in categories.values() if c}
    for name, given, known in (
        ("subject tag", subjects, set(tags)),
        ("subject category", subject_categories, known_cats),
    ):
        missing = sorted(set(given) - known)
        if missing:
            raise InputFormatError(
                f"{name}(s) {missing} do not occur in the input",
                f"use names that occur: {', '.join(sorted(known)[:12])} ...",
            )
    return np.fromiter(
        (t in set(subjects) or categories.get(t) in set(subject_categories) for t in tags), dtype=bool, count=len(tags)
    )


def candidates_from_tags(
    table: TagTable, *, subjects: Collection[str] = (), subject_categories: Collection[str] = ()
) -> CandidateSubsets:
    """``s(c)`` = the images tagged with both ``s`` and ``c`` (s != c), for every subject ``s``
    allowed: in ``subjects`` or whose category is in ``subject_categories`` (both empty: every tag).
    Every subset is of kind ``object``; its category is the context tag's category.

    In memory (every row as int64 arrays): the reference of ``tag_store.TagCandidates``, which the
    build uses (out of core); small inputs and tests."""
    allowed = allowed_subjects(table.tags, table.categories, subjects, subject_categories)
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
    return CandidateSubsets.from_codes(
        names, ["object"] * len(names), cats, table.image_ids, subset_codes.astype(np.int64), img[first]
    )


# ------------------------------------------------------------------------------------------------
# readers: a tags file, a Hub dataset
# ------------------------------------------------------------------------------------------------
TAG_FILE_COLUMNS = ("image_id", "tag")


_FILE_BATCH_ROWS = 1 << 16  # parquet rows per batch of TagsFile.batches (CSV: pyarrow's block size)


def _check_regular(path: Path) -> None:
    """A tags file is a regular file (a symbolic link to one is fine): a missing path, a folder, a FIFO (which would
    block the build until something writes to it) or a device each get their own message."""
    fix = "pass a CSV or parquet file with image_id,tag rows"
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        raise InputFormatError(f"tags file {path} does not exist", fix) from None
    except OSError as exc:
        raise InputFormatError(f"tags file {path} cannot be read ({os.strerror(exc.errno or 0)})", fix) from None
    if stat.S_ISREG(mode):
        return
    kind = (
        "a folder"
        if stat.S_ISDIR(mode)
        else "a FIFO (named pipe)"
        if stat.S_ISFIFO(mode)
        else "a device"
        if stat.S_ISCHR(mode) or stat.S_ISBLK(mode)
        else "a socket"
        if stat.S_ISSOCK(mode)
        else "not a regular file"
    )
    raise InputFormatError(f"tags file {path} is {kind}, not a regular file", fix)


class TagsFile:
    """A tags file, CSV or parquet with columns ``image_id`` and ``tag`` (one row per image-tag pair;
    an optional ``category`` column gives each tag's category: its last row's), read in record batches,
    never whole: the build streams it into DuckDB (``tag_store.TagCandidates``), ``read_tags_file``
    into a :class:`TagTable`. The file and its columns are checked on creation; the rows while
    ``batches`` streams them, and ``check`` then raises what was found (``RowCheck``)."""

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = Path(path)
        self.what = str(self.path)
        _check_regular(self.path)
        self.parquet = self.path.suffix.lower() in (".parquet", ".pq")
        try:
            names = pq.ParquetFile(self.path).schema_arrow.names if self.parquet else self._csv().schema.names
        except (pa.ArrowException, OSError) as exc:
            raise self._unreadable(exc) from None
        missing = [c for c in TAG_FILE_COLUMNS if c not in names]
        if missing:
            raise InputFormatError(
                f"{self.path}: missing column(s) {missing} (has {names})",
                "name the columns image_id and tag (one row per image-tag pair)",
            )
        self.has_category = "category" in names
        self.categories: dict = {}  # raw tag value -> category of its last row (filled by batches)
        self._rows = RowCheck(self.what)
        self._error: InputFormatError | None = None

    def _unreadable(self, exc: Exception) -> InputFormatError:
        return InputFormatError(
            f"{self.path}: not a readable CSV/parquet table ({exc})",
            "write the tags as CSV (header image_id,tag) or parquet",
        )

    def _csv(self, columns: Sequence[str] | None = None):
        return pcsv.open_csv(
            self.path,
            convert_options=pcsv.ConvertOptions(
                column_types={"image_id": pa.string(), "tag": pa.string(), "category": pa.string()},
                include_columns=columns,
            ),
        )

    def batches(self) -> Iterator[pa.RecordBatch]:
        """The rows as (image_id, tag) string batches, tags trimmed, in file order (once per TagsFile).
        A read error ends the stream; ``check`` raises it."""
        columns = [*TAG_FILE_COLUMNS, *(["category"] if self.has_category else [])]
        try:
            reader = (
                pq.ParquetFile(self.path).iter_batches(batch_size=_FILE_BATCH_ROWS, columns=columns)
                if self.parquet
                else self._csv(columns)
            )
            for batch in reader:
                img, tag = batch.column("image_id"), batch.column("tag")
                if self.has_category:  # as a dict over the rows: the last row of a tag wins
                    self.categories.update(zip(tag.to_pylist(), batch.column("category").to_pylist()))
                img, tag = self._rows.add(img, tag)
                yield pa.RecordBatch.from_arrays([img, tag], names=list(TAG_FILE_COLUMNS))
        except (pa.ArrowException, OSError) as exc:
            self._error = self._unreadable(exc)

    def check(self) -> None:
        """After ``batches``: an InputFormatError for an unreadable file or bad rows."""
        if self._error is not None:
            raise self._error
        self._rows.raise_first()


def read_tags_file(path: str | os.PathLike) -> TagTable:
    """A :class:`TagsFile` read into memory (small inputs, tests; the build streams it into DuckDB)."""
    f = TagsFile(path)
    t = pa.Table.from_batches(list(f.batches()), schema=pa.schema([(c, pa.string()) for c in TAG_FILE_COLUMNS]))
    f.check()
    return TagTable.from_columns(
        t.column("image_id").combine_chunks(), t.column("tag").combine_chunks(), f.categories or None, what=f.what
    )


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
    ids = (
        pc.cast(table.column(id_column).combine_chunks(), pa.string())
        if id_column
        else pa.array([str(i) for i in range(len(ds))], pa.string())
    )
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
            raise InputFormatError(
                f"cannot load dataset {self.name!r} split {self.split!r} ({exc})",
                "pass a Hub dataset id or a local dataset folder, and --hf-split if it has no 'train' split",
            ) from None

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
            raise InputFormatError(
                f"{self.name} has no column {self.image_column!r} (columns: {ds.column_names})",
                "pass --image-column COL naming the dataset's image column, or leave it out",
            )
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
            raise InputFormatError(
                f"dataset {self.name}: no image column was given", "rebuild with --image-column COL, or pass --images"
            )
        ds = self.load() if ds is None else ds
        return DatasetImages(ds, self.image_column, self.image_ids(ds), self.name, paths=True)  # the user's own input

    @classmethod
    def from_record(cls, record: Mapping) -> "MultiLabelDataset":
        """The input record an artifact's manifest holds (``input_record``)."""
        return cls(
            record["path"],
            record["tag_column"],
            split=record.get("split", "train"),
            id_column=record.get("id_column"),
            image_column=record.get("image_column"),
        )

    def input_record(self) -> dict:
        return {
            "path": self.name,
            "sha256": "",
            "role": "hf_dataset",
            "split": self.split,
            "tag_column": self.tag_column,
            "id_column": self.id_column,
            "image_column": self.image_column,
        }
