"""Candidate subsets of a multi-label table counted out of core, in DuckDB under a memory limit.

The in-memory path (``tags.candidates_from_tags`` -> ``CandidateSubsets``) holds every (subset,
image) row as int64 arrays plus every subset name as a Python string: ~7.3 KB per image on
OpenImages-like tags (issue 28). Here the (subject, context, image) rows live in a DuckDB file in
a spill folder inside the build's own temporary folder; group-bys and sorts spill there past
``memory_limit``. A tags file is streamed into DuckDB batch by batch and coded there (ranks in
byte order, as ``TagTable.from_columns``); the members are stored sorted by subset and read back
by ranges. Python holds one batch, the tag names, the image ids (one Arrow string array, ~24 bytes
per image: membership.parquet's lookup), per-subset arrays and one class's members at a time;
nothing per (image, tag) row or per (subset, image) row. The tables it yields are equal to the
in-memory build's (tests/test_build_scale.py builds every multi-label fixture both ways).
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import shutil
import time
from pathlib import Path
from typing import Collection, Iterator, Mapping

import duckdb
import numpy as np
import pyarrow as pa

from metashift_hf.core.errors import EmptyResultError
from metashift_hf.core.fsutil import human_size, write_error
from metashift_hf.core.options import OptionError, byte_size, positive_int

from .subsets import KINDS, KeptSubsets
from .tags import TAG_FILE_COLUMNS, TagsFile, TagTable, allowed_subjects, check_tag_names


logger = logging.getLogger(__name__)

DEFAULT_MEMORY_FRACTION = 0.25  # of physical memory, the default --memory-limit
_BATCH_ROWS = 1 << 20  # rows fetched from DuckDB per record batch (membership ranges: about this many)
READ_MEMORY_LIMIT = 256 << 20  # DuckDB's limit after the counting (at most --memory-limit)


def _physical_memory() -> int:
    return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))


def default_memory_limit() -> int:
    """``DEFAULT_MEMORY_FRACTION`` of this machine's physical memory, in bytes."""
    return int(_physical_memory() * DEFAULT_MEMORY_FRACTION)


def check_memory_limit(value: object) -> int:
    """``--memory-limit`` checked: at least 64 MiB (``options.byte_size``) and at most this machine's memory (above
    it DuckDB would never spill to disk before the machine runs out)."""
    n = byte_size(value, "memory_limit")
    physical = _physical_memory()
    if n > physical:
        raise OptionError(
            f"memory_limit={n} bytes ({human_size(n)}) is more than this machine's memory ({human_size(physical)})",
            f"pass at most {human_size(physical)}, e.g. {human_size(default_memory_limit())} (the default: a quarter "
            "of it); past the limit the counts spill to disk",
        )
    return n


@contextlib.contextmanager
def _disk_errors(spill: Path | None) -> Iterator[None]:
    """DuckDB's failed writes of its database or spill files (a full disk, a quota, read-only) as the one-line write
    error every other output gets (``fsutil.write_error``), not a DuckDB traceback. DuckDB reports them as an
    IOException (a FatalException once a checkpoint failed) whose text holds the system's message."""
    try:
        yield
    except (duckdb.IOException, duckdb.FatalException) as exc:
        text = str(exc)
        known = next(
            (
                err
                for code in sorted(errno.errorcode)
                if os.strerror(code) in text
                and (err := write_error(OSError(code, os.strerror(code)), f"{spill} ({_SPILL_WHAT})")) is not None
            ),
            None,
        )
        if known is None:
            raise
        raise known from None


_SPILL_WHAT = "the --tags counts' DuckDB database and spill files, in the output's temporary folder"


def _create(con: "duckdb.DuckDBPyConnection", name: str, data: "pa.Table | pa.RecordBatchReader") -> None:
    """DuckDB table ``name`` (new or replaced) from Arrow data, read once (a batch reader: batch by batch)."""
    con.register("_arrow_in", data)
    try:
        con.execute(f"CREATE OR REPLACE TABLE {name} AS SELECT * FROM _arrow_in")
    finally:
        con.unregister("_arrow_in")


class TagCandidates:
    """Every ``s(c)`` of a :class:`TagTable` or a :class:`TagsFile` (as ``candidates_from_tags``), held in DuckDB.

    Use as a context manager around the build (``open(spill)`` ... ``close()``): the spill folder
    is created on open and removed on close, also after an error. A tags file is read into DuckDB
    batch by batch on open (its rows are checked then); a table's subject names are checked here.
    """

    def __init__(
        self,
        source: TagTable | TagsFile,
        *,
        subjects: Collection[str] = (),
        subject_categories: Collection[str] = (),
        memory_limit: int | None = None,
        threads: int = 1,
    ) -> None:
        if isinstance(source, TagTable):
            if len(source) == 0:
                raise EmptyResultError("the multi-label input has no (image, tag) rows", "give a non-empty input")
            allowed_subjects(source.tags, source.categories, subjects, subject_categories)  # before any work
        self.source = source
        self.subjects, self.subject_categories = tuple(subjects), tuple(subject_categories)
        self.memory_limit = default_memory_limit() if memory_limit is None else check_memory_limit(memory_limit)
        self.threads = positive_int(threads, "threads")
        self.kinds = ("object",)  # every tag subset is an object context (as candidates_from_tags)
        self.collisions = 0
        self.image_ids: "pa.Array | list[str]" = []  # sorted; image code = position (set on open)
        self._con: duckdb.DuckDBPyConnection | None = None
        self._spill: Path | None = None

    # -- lifetime -------------------------------------------------------------------------------
    def open(self, spill: Path) -> "TagCandidates":
        """Count the candidates, with DuckDB's database and spill files in the new folder ``spill``."""
        spill.mkdir()
        self._spill = spill
        with _disk_errors(spill):
            return self._count(spill)

    def _count(self, spill: Path) -> "TagCandidates":
        con = duckdb.connect(
            str(spill / "candidates.duckdb"),
            config={
                "memory_limit": f"{self.memory_limit}B",
                "temp_directory": str(spill / "tmp"),
                "threads": self.threads,
                "preserve_insertion_order": False,
            },
        )
        self._con = con
        clock = time.process_time()
        if isinstance(self.source, TagTable):
            tags, categories = self._load_table(con, self.source)
        else:
            tags, categories = self._load_file(con, self.source)
        rows, images = self._one("SELECT count(*), count(DISTINCT img) FROM tag_rows")
        logger.info(
            f"read: {rows} image-tag rows, {images} images, {len(tags)} tags (cpu {time.process_time() - clock:.2f} s)"
        )
        # every (subject, context) pair of one image's tags: counted first, then its rows stored
        # sorted by subset (no table of pairs: the join is cheaper to run twice than to keep)
        pairs = """FROM tag_rows a JOIN tag_names n ON n.tag = a.tag AND n.allowed
                   JOIN tag_rows b ON b.img = a.img AND b.tag <> a.tag"""
        # subset ranks in name order: bytewise (UTF-8 = code-point order, as Python sorts str)
        con.execute(f"""
            CREATE TABLE subsets AS
            SELECT (row_number() OVER (ORDER BY name) - 1)::BIGINT AS sid, *
            FROM (SELECT p.s, p.c, p.n, ns.name || '(' || nc.name || ')' AS name,
                         ns.name AS subject, nc.name AS context, nc.category AS category
                  FROM (SELECT a.tag AS s, b.tag AS c, count(*)::BIGINT AS n {pairs} GROUP BY a.tag, b.tag) p
                  JOIN tag_names ns ON ns.tag = p.s JOIN tag_names nc ON nc.tag = p.c)""")
        # stored in (sid, img) order, so a range of subsets is a few row groups (zone maps): the
        # membership blocks and each class are read by ranges, never sorted whole again
        con.execute("SET preserve_insertion_order = true")
        con.execute(f"""
            CREATE TABLE members AS
            SELECT x.sid::INTEGER AS sid, a.img {pairs} JOIN subsets x ON x.s = a.tag AND x.c = b.tag
            ORDER BY sid, a.img""")
        con.execute("SET preserve_insertion_order = false")
        con.execute("DROP TABLE tag_rows")
        # counted: what follows reads ranges and small tables, so DuckDB's cache of the tables is
        # written out and given back (while the classes are analysed and the workers run)
        con.execute("CHECKPOINT")
        con.execute(f"SET memory_limit = '{min(self.memory_limit, READ_MEMORY_LIMIT)}B'")
        return self

    def _tag_names(self, con: "duckdb.DuckDBPyConnection", tags: list[str], categories: Mapping) -> None:
        """Table tag_names: code, name, category, may it be a subject (checks the subject names)."""
        allowed = allowed_subjects(tags, categories, self.subjects, self.subject_categories)
        _create(
            con,
            "tag_names",
            pa.table(
                {
                    "tag": pa.array(np.arange(len(tags), dtype=np.int32)),
                    "name": pa.array(tags, pa.string()),
                    "category": pa.array([categories.get(x) for x in tags], pa.string()),
                    "allowed": pa.array(allowed),
                }
            ),
        )

    def _load_table(self, con: "duckdb.DuckDBPyConnection", t: TagTable) -> tuple[list[str], Mapping]:
        """tag_rows (img, tag codes) from a table in memory (COCO, a Hub dataset, tests)."""
        # codes fit int32 (tags, images < 2**31); DuckDB reads the Arrow arrays without a copy in Python
        _create(
            con,
            "tag_rows",
            pa.table({"img": pa.array(t.image_codes.astype(np.int32)), "tag": pa.array(t.tag_codes.astype(np.int32))}),
        )
        self._tag_names(con, t.tags, t.categories)
        self.image_ids = t.image_ids
        return t.tags, t.categories

    def _load_file(self, con: "duckdb.DuckDBPyConnection", f: TagsFile) -> tuple[list[str], Mapping]:
        """tag_rows from a tags file streamed into DuckDB: codes are ranks in byte order (as
        ``TagTable.from_columns``); Python holds one batch, the tag names and the image ids."""
        schema = pa.schema([(c, pa.string()) for c in TAG_FILE_COLUMNS])
        _create(con, "raw", pa.RecordBatchReader.from_batches(schema, f.batches()))
        f.check()
        if not self._one("SELECT count(*) FROM raw")[0]:
            raise EmptyResultError("the multi-label input has no (image, tag) rows", "give a non-empty input")
        tags = [r[0] for r in con.execute("SELECT DISTINCT tag FROM raw ORDER BY tag").fetchall()]
        check_tag_names(tags, f.what)
        categories = {t: f.categories.get(t) for t in tags}
        self._tag_names(con, tags, categories)
        con.execute("""CREATE TABLE images AS SELECT (row_number() OVER (ORDER BY image_id) - 1)::INTEGER AS img,
                       image_id FROM (SELECT DISTINCT image_id FROM raw)""")
        con.execute("""CREATE TABLE tag_rows AS SELECT DISTINCT i.img, n.tag
                       FROM raw r JOIN images i ON i.image_id = r.image_id JOIN tag_names n ON n.name = r.tag""")
        con.execute("DROP TABLE raw")
        # large_string: one array of every id may pass the 2 GiB of a plain string array
        ids = self._arrow("SELECT image_id FROM images ORDER BY img").column(0)
        self.image_ids = ids.cast(pa.large_string()).combine_chunks()
        con.execute("DROP TABLE images")
        return tags, categories

    def close(self) -> None:
        if self._con is not None:
            self._con.close()
            self._con = None
        if self._spill is not None:
            shutil.rmtree(self._spill, ignore_errors=True)
            self._spill = None

    def __enter__(self) -> "TagCandidates":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _sql(self, query: str, *params, con: "duckdb.DuckDBPyConnection | None" = None) -> "duckdb.DuckDBPyRelation":
        if self._con is None:
            raise RuntimeError("TagCandidates used before open()")  # a programming error, not user input
        return (con or self._con).sql(query, params=list(params))

    def _one(self, query: str, *params) -> tuple:
        """The one row of a query (figures)."""
        if self._con is None:
            raise RuntimeError("TagCandidates used before open()")
        with _disk_errors(self._spill):
            return self._con.execute(query, list(params)).fetchone()

    def _arrow(self, query: str, *params, con: "duckdb.DuckDBPyConnection | None" = None) -> pa.Table:
        rel = self._sql(query, *params, con=con)
        with _disk_errors(self._spill):  # duckdb 2 names it to_arrow_table; 1.x only fetch_arrow_table
            return rel.to_arrow_table() if hasattr(rel, "to_arrow_table") else rel.fetch_arrow_table()

    # -- figures --------------------------------------------------------------------------------
    def __len__(self) -> int:
        return int(self._one("SELECT count(*) FROM subsets")[0])

    def big(self, min_images: int) -> tuple[int, int]:
        """(subsets with at least ``min_images`` images, largest subset size)."""
        n, top = self._one("SELECT count(*) FILTER (WHERE n >= ?), coalesce(max(n), 0) FROM subsets", min_images)
        return int(n), int(top)

    def kind_counts(self) -> dict:
        kept = int(self._one("SELECT count(*) FROM kept")[0])
        return {
            k: {"candidates": len(self) if k == "object" else 0, "kept": kept if k == "object" else 0} for k in KINDS
        }

    def rules(self, min_images: int, min_subsets: int, max_subsets: int = 0) -> KeptSubsets:
        """The rules of ``subsets.apply_rules``, the kept subsets stored in DuckDB as table ``kept``."""
        with _disk_errors(self._spill):
            self._rule_tables(min_images, min_subsets, max_subsets)
        t = self._arrow("SELECT sid, name, subject, n FROM kept ORDER BY sid")
        classes = sorted(set(t.column("subject").to_pylist()))
        return KeptSubsets(
            classes,
            t.column("sid").to_numpy().astype(np.int64),
            t.column("name").to_pylist(),
            t.column("subject").to_pylist(),
            t.column("n").to_numpy().astype(np.int64),
        )

    def _rule_tables(self, min_images: int, min_subsets: int, max_subsets: int) -> None:
        self._con.execute(
            "CREATE OR REPLACE TABLE classes AS SELECT s FROM subsets WHERE n >= ? GROUP BY s HAVING count(*) > ?",
            [min_images, min_subsets],
        )
        self._con.execute(
            """CREATE OR REPLACE TABLE kept AS
                     SELECT sid, name, subject, n, dense_rank() OVER (ORDER BY subject) AS crank FROM (
                         SELECT x.sid, x.name, x.subject, x.n,
                                row_number() OVER (PARTITION BY x.s ORDER BY x.n DESC, x.sid) AS r
                         FROM subsets x JOIN classes k ON k.s = x.s WHERE x.n >= ?)
                     WHERE ? = 0 OR r <= ? ORDER BY sid""",
            [min_images, max_subsets, max_subsets],
        )

    def best_subject(self, min_images: int) -> tuple[str, int]:
        """The subject with the most subsets of at least ``min_images`` images (for the empty-rules message)."""
        row = self._one(
            "SELECT subject, count(*) FILTER (WHERE n >= ?) AS k FROM subsets GROUP BY subject "
            "ORDER BY k DESC, subject DESC LIMIT 1",
            min_images,
        )
        return str(row[0]), int(row[1])

    def distinct_images(self, kept_only: bool) -> int:
        q = (
            "SELECT count(DISTINCT m.img) FROM members m SEMI JOIN kept k ON k.sid = m.sid"
            if kept_only
            else "SELECT count(DISTINCT img) FROM members"
        )
        # a distinct count over every member row needs a hash of every image (~0.4 GiB at 9M images):
        # it runs under --memory-limit, not the read-back limit the range reads keep to
        self._one(f"SET memory_limit = '{self.memory_limit}B'")
        try:
            return int(self._one(q)[0])
        finally:
            self._one(f"SET memory_limit = '{min(self.memory_limit, READ_MEMORY_LIMIT)}B'")

    # -- rows, streamed in order ----------------------------------------------------------------
    def names_array(self) -> pa.Array:
        t = self._arrow("SELECT name FROM subsets ORDER BY sid")
        return t.column("name").combine_chunks().cast(pa.large_string())

    def _codes(self, query: str, con: "duckdb.DuckDBPyConnection") -> Iterator[tuple[np.ndarray, np.ndarray]]:
        rel = self._sql(query, con=con)
        reader = (
            rel.to_arrow_reader(_BATCH_ROWS)
            if hasattr(rel, "to_arrow_reader")
            else rel.fetch_arrow_reader(_BATCH_ROWS)
        )
        with _disk_errors(self._spill):  # a sorted read may spill
            for batch in reader:
                yield (batch.column(0).to_numpy().astype(np.int64), batch.column(1).to_numpy().astype(np.int64))

    def _range(self, lo: int, hi: int, con: "duckdb.DuckDBPyConnection", kept: bool = False):
        # literal bounds (our own integers): a constant filter is pushed into the scan's zone maps
        semi = "SEMI JOIN kept k ON k.sid = m.sid " if kept else ""
        return self._codes(
            f"SELECT m.sid, m.img FROM members m {semi}WHERE m.sid BETWEEN {int(lo)} AND {int(hi)} "
            "ORDER BY m.sid, m.img",
            con,
        )

    def membership_codes(self) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """(subset rank, image code) of every candidate row, sorted (membership.parquet's order), read
        in ranges of about ``_BATCH_ROWS`` rows (a larger subset alone)."""
        # a cursor of its own: membership.parquet is written from another thread than the analyses
        con = self._con.cursor()
        sizes = self._arrow("SELECT n FROM subsets ORDER BY sid", con=con).column(0).to_numpy()
        ends = np.cumsum(sizes)
        lo = 0
        while lo < sizes.size:
            hi = max(int(np.searchsorted(ends, ends[lo] - sizes[lo] + _BATCH_ROWS, side="right")) - 1, lo)
            yield from self._range(lo, hi, con)
            lo = hi + 1

    def class_members(self, kept: KeptSubsets) -> Iterator[tuple[str, dict[str, np.ndarray]]]:
        """(subject, {kept subset: sorted image codes}) per class, classes sorted; one class in memory.
        A class's subsets 'subject(...)' are one range of ranks (names with one prefix are contiguous
        in name order; a tag holds no parenthesis), so each class is one range read."""
        by_class: dict[str, list[int]] = {}
        for sid, subject in zip(kept.sid.tolist(), kept.subjects):
            by_class.setdefault(subject, []).append(sid)
        name_of = dict(zip(kept.sid.tolist(), kept.names))
        for subject in kept.classes:
            sids = by_class[subject]
            members: dict[str, list[np.ndarray]] = {name_of[s]: [] for s in sids}
            for sid, img in self._range(min(sids), max(sids), self._con, kept=True):
                cuts = np.flatnonzero(np.diff(sid)) + 1
                for lo, hi in zip(np.concatenate([[0], cuts]).tolist(), np.concatenate([cuts, [sid.size]]).tolist()):
                    members[name_of[int(sid[lo])]].append(img[lo:hi])
            yield subject, {n: np.concatenate(v) for n, v in members.items()}

    def subsets_pieces(self, communities: dict[str, int], schema: pa.Schema) -> Iterator[pa.Table]:
        """subsets.parquet (every candidate, name order) in pieces of at most ``_BATCH_ROWS`` rows:
        kept from the rules, community from the analyses (millions of candidates on LAION-like tags
        are never one Arrow table)."""
        with _disk_errors(self._spill):
            yield from self._subsets_pieces(communities, schema)

    def _subsets_pieces(self, communities: dict[str, int], schema: pa.Schema) -> Iterator[pa.Table]:
        con = self._con
        _create(
            con,
            "communities",
            pa.table(
                {
                    "name": pa.array(list(communities), pa.string()),
                    "community": pa.array(list(communities.values()), pa.int64()),
                }
            ),
        )
        rel = self._sql("""
            SELECT x.name AS subset, x.subject, x.context, 'object' AS kind, x.category, x.n AS n_images,
                   (k.sid IS NOT NULL) AS kept, coalesce(c.community, -1)::BIGINT AS community
            FROM subsets x LEFT JOIN kept k ON k.sid = x.sid LEFT JOIN communities c ON c.name = x.name
            ORDER BY x.sid""")
        reader = (
            rel.to_arrow_reader(_BATCH_ROWS)
            if hasattr(rel, "to_arrow_reader")
            else rel.fetch_arrow_reader(_BATCH_ROWS)
        )
        for batch in reader:
            yield pa.Table.from_batches([batch]).cast(schema)
